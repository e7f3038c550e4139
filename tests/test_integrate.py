"""integrate(): gradients (implicit vs unrolled vs finite differences), vmap, jit, bad input."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.systems import heavy_top, rigid_body

INERTIA = jnp.array([1.0, 2.0, 3.0])
M0 = jnp.array([1.0, 0.5, 0.8])


@eqx.filter_jit
def _loss(inertia, method, dt=0.1, n=50):
    sol = lpjax.integrate(rigid_body(inertia), method, M0, dt, n, save_every=n)
    target = jnp.array([0.3, -0.2, 1.1])
    return jnp.sum((sol.ys[-1] - target) ** 2)


def test_gradient_wrt_inertia_matches_central_differences():
    method = lpjax.GaussLegendre(2)
    g = jax.grad(_loss)(INERTIA, method)
    h = 1e-5
    fd = np.array(
        [
            (_loss(INERTIA.at[i].add(h), method) - _loss(INERTIA.at[i].add(-h), method)) / (2 * h)
            for i in range(3)
        ]
    )
    np.testing.assert_allclose(g, fd, rtol=1e-6)
    assert np.all(np.abs(fd) > 1e-3)  # a non-trivial gradient


def test_implicit_gradient_equals_unrolled_gradient():
    """The implicit-function gradient (fixed point, the default) equals the gradient through
    16 unrolled fixed-point updates (contraction ~0.1 per update at dt = 0.1: converged) and
    the implicit gradient of the Newton solve."""
    g_ift = jax.grad(_loss)(INERTIA, lpjax.GaussLegendre(2))
    g_unr = jax.grad(_loss)(INERTIA, lpjax.GaussLegendre(2, implicit_diff=False, max_iters=16))
    np.testing.assert_allclose(g_ift, g_unr, rtol=1e-10)
    g_newton = jax.grad(_loss)(INERTIA, lpjax.GaussLegendre(2, solver="newton"))
    np.testing.assert_allclose(g_ift, g_newton, rtol=1e-10)


def test_gradient_wrt_initial_state_and_dt():
    @jax.jit
    def loss(y0, dt):
        sol = lpjax.integrate(rigid_body(INERTIA), lpjax.GaussLegendre(3), y0, dt, 20, save_every=20)
        return sol.ys[-1, 0]

    gy, gdt = jax.grad(loss, argnums=(0, 1))(M0, 0.05)
    h = 1e-6
    fd_dt = (loss(M0, 0.05 + h) - loss(M0, 0.05 - h)) / (2 * h)
    fd_y = np.array([(loss(M0.at[i].add(h), 0.05) - loss(M0.at[i].add(-h), 0.05)) / (2 * h) for i in range(3)])
    np.testing.assert_allclose(gdt, fd_dt, rtol=1e-6)
    np.testing.assert_allclose(gy, fd_y, rtol=1e-6, atol=1e-9)


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    return jnp.asarray(rng.standard_normal((256, 3)))


def test_vmap_over_initial_conditions_equals_loop(batch):
    method = lpjax.GaussLegendre(2)
    run = jax.jit(lambda y0: lpjax.integrate(rigid_body(INERTIA), method, y0, 0.1, 100, save_every=10).ys)
    batched = jax.vmap(run)(batch)
    looped = jnp.stack([run(y0) for y0 in batch])
    assert batched.shape == (256, 11, 3)
    # Batched and scalar code may round differently (vectorised reductions); measured
    # differences are ~5e-15 of each trajectory's magnitude after 100 steps.
    scale = jnp.max(jnp.abs(looped), axis=(1, 2), keepdims=True)
    assert float(jnp.max(jnp.abs(batched - looped) / scale)) <= 1e-14


def test_vmap_over_system_parameters_equals_loop():
    rng = np.random.default_rng(1)
    inertias = jnp.asarray(rng.uniform(0.5, 3.0, (16, 3)))
    run = jax.jit(lambda I: lpjax.integrate(rigid_body(I), lpjax.GaussLegendre(2), M0, 0.1, 50).ys[-1])
    batched = jax.vmap(run)(inertias)
    looped = jnp.stack([run(I) for I in inertias])
    np.testing.assert_allclose(batched, looped, rtol=0, atol=1e-14)


@pytest.mark.parametrize("method", [lpjax.RK4(), lpjax.GaussLegendre(2)], ids=["RK4", "GL2"])
def test_jit_equals_eager(method):
    sys_ = heavy_top(INERTIA, jnp.array([0.0, 0.0, 1.0]), 1.5)
    y0 = jnp.array([0.1, 0.2, 0.9, 0.0, 0.6, 0.8])
    eager = lpjax.integrate(sys_, method, y0, 0.05, 40, save_every=4)
    jitted = jax.jit(lambda y: lpjax.integrate(sys_, method, y, 0.05, 40, save_every=4))(y0)
    np.testing.assert_allclose(eager.ys, jitted.ys, rtol=0, atol=1e-14)
    np.testing.assert_allclose(eager.ts, jitted.ts, rtol=0, atol=1e-15)


def test_solution_layout():
    sol = lpjax.integrate(rigid_body(INERTIA), lpjax.RK4(), M0, 0.25, 12, save_every=3, t0=1.0)
    np.testing.assert_allclose(sol.ts, 1.0 + 0.75 * np.arange(5))
    assert sol.ys.shape == (5, 3)
    np.testing.assert_array_equal(sol.ys[0], M0)
    assert int(sol.stats["num_steps"]) == 12


BAD = [
    (dict(y0=jnp.ones(4)), ValueError, r"state must have shape \(3,\)"),
    (dict(y0=jnp.ones((1, 3))), ValueError, r"state must have shape \(3,\)"),
    (dict(y0=jnp.array([1, 2, 3])), ValueError, "floating dtype"),
    (dict(y0=jnp.array([1.0, jnp.nan, 0.0])), ValueError, "y0 must be finite"),
    (dict(dt=0.0), ValueError, "dt must be finite and > 0"),
    (dict(dt=-0.1), ValueError, "dt must be finite and > 0"),
    (dict(dt=float("inf")), ValueError, "dt must be finite and > 0"),
    (dict(dt=jnp.ones(2)), ValueError, "dt must be a scalar"),
    (dict(n_steps=10, save_every=3), ValueError, r"n_steps \(10\) must be divisible by save_every \(3\)"),
    (dict(n_steps=0), ValueError, "n_steps must be a positive"),
    (dict(n_steps=2.5), ValueError, "n_steps must be a positive"),
    (dict(method="RK4"), TypeError, "method must be an lpjax integrator"),
    (dict(system=lambda y: y), TypeError, "is not an lpjax system"),
]


@pytest.mark.parametrize("override, exc, match", BAD)
def test_bad_input_raises_clear_error(override, exc, match):
    kw = dict(system=rigid_body(INERTIA), method=lpjax.RK4(), y0=M0, dt=0.1, n_steps=10, save_every=1)
    kw.update(override)
    with pytest.raises(exc, match=match):
        lpjax.integrate(**kw)


def test_traced_bad_input_raises_at_runtime():
    run = jax.jit(lambda y0, dt: lpjax.integrate(rigid_body(INERTIA), lpjax.RK4(), y0, dt, 5).ys)
    assert np.all(np.isfinite(run(M0, 0.1)))
    with pytest.raises(Exception, match="dt must be finite and > 0"):
        jax.block_until_ready(run(M0, -0.1))
    with pytest.raises(Exception, match="y0 must be finite"):
        jax.block_until_ready(run(M0.at[0].set(jnp.inf), 0.1))


def test_gauss_legendre_rejects_bad_settings():
    with pytest.raises(ValueError, match="integer number of stages >= 1"):
        lpjax.GaussLegendre(0)
    with pytest.raises(ValueError, match="solver must be 'auto', 'newton' or 'fixed_point'"):
        lpjax.GaussLegendre(2, solver="broyden")
    with pytest.raises(ValueError, match="max_iters must be a positive integer"):
        lpjax.GaussLegendre(2, max_iters=0)
    with pytest.raises(ValueError, match="tol must be a positive finite"):
        lpjax.GaussLegendre(2, tol=-1.0)


class _Quartic(eqx.Module):
    """A user Hamiltonian with a trainable parameter: h = ½ M·I⁻¹M + k (M_1 M_2)²."""

    inertia: jax.Array
    k: jax.Array

    def __call__(self, M):
        return 0.5 * jnp.sum(M * M / self.inertia) + self.k * (M[0] * M[1]) ** 2


def test_gradient_through_user_hamiltonian_module():
    from lpjax.algebras import so3

    @eqx.filter_jit
    def loss(h):
        system = lpjax.LiePoissonSystem(so3(), h, -1)
        return lpjax.integrate(system, lpjax.GaussLegendre(2), M0, 0.05, 40).ys[-1, 2]

    h = _Quartic(INERTIA, jnp.array(0.3))
    g = eqx.filter_grad(loss)(h)
    eps = 1e-6
    fd_k = (loss(_Quartic(INERTIA, h.k + eps)) - loss(_Quartic(INERTIA, h.k - eps))) / (2 * eps)
    assert abs(fd_k) > 1e-3
    np.testing.assert_allclose(g.k, fd_k, rtol=1e-6)


def test_integrate_and_the_ensembles_share_one_schedule_check():
    """One check and one set of messages for a fixed-step schedule (``lpjax._schedule.fixed_schedule``),
    each naming the entry point (before: three checks, three wordings)."""
    from lpjax.systems import rigid_body

    rb, mv, y0 = rigid_body(jnp.array([1.0, 2.0, 3.0])), lpjax.MoserVeselov(), jnp.array([1.0, 0.5, 0.8])
    calls = {"integrate": lambda dt, n, k: lpjax.integrate(rb, mv, y0, dt, n, save_every=k),
             "ensemble": lambda dt, n, k: lpjax.ensemble(rb, mv, y0[None], dt, n, save_every=k),
             "ensemble_function": lambda dt, n, k: lpjax.ensemble_function(rb, mv, dt, n, save_every=k)}
    for who, call in calls.items():
        with pytest.raises(ValueError, match=f"{who}: dt must be finite and > 0, got -0.1"):
            call(-0.1, 10, 5)
        with pytest.raises(ValueError, match=rf"{who}: n_steps \(10\) must be divisible by save_every \(3\)"):
            call(0.1, 10, 3)
        with pytest.raises(ValueError, match=f"{who}: n_steps must be a positive integer"):
            call(0.1, 0, 1)
        with pytest.raises(TypeError, match=f"{who}: dt must be a real number"):
            call("0.1", 10, 5)


def test_integrate_and_the_ensembles_share_one_adaptive_schedule_check():
    """The adaptive schedule (``lpjax._schedule.adaptive_schedule``): the same checks and
    messages from integrate, ensemble and ensemble_function."""
    from lpjax.systems import rigid_body

    rb, gl, y0 = rigid_body(jnp.array([1.0, 2.0, 3.0])), lpjax.GaussLegendre(2), jnp.array([1.0, 0.5, 0.8])
    pid = lpjax.PIDController(1e-8, 1e-8)
    calls = {"integrate": lambda **kw: lpjax.integrate(rb, gl, y0, None, **kw),
             "ensemble": lambda **kw: lpjax.ensemble(rb, gl, y0[None], None, **kw),
             "ensemble_function": lambda **kw: lpjax.ensemble_function(rb, gl, None, **kw)}
    for who, call in calls.items():
        with pytest.raises(ValueError, match=f"{who}: ts must be finite, strictly increasing save times > 0"):
            call(controller=pid, ts=[1.0, 0.5])
        with pytest.raises(ValueError, match=rf"{who}: the last save time ts\[-1\] = 2.0 is the final time, but t1 = 1.0"):
            call(controller=pid, ts=[1.0, 2.0], t1=1.0)
        with pytest.raises(ValueError, match=f"{who}: an adaptive run needs its final time"):
            call(controller=pid)
        with pytest.raises(ValueError, match=f"{who}: error_estimate must be one of 'doubling', 'defect', got 'x'"):
            call(controller=pid, t1=1.0, error_estimate="x")
        with pytest.raises(TypeError, match=f"{who}: controller must be an lpjax.PIDController, got str"):
            call(controller="pid", t1=1.0)
