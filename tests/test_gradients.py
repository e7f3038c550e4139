"""Reverse mode through integrate is checkpointed: same gradients, memory growing as about √n."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.systems import heavy_top, lagrange_top

CASES = {
    "GL4 heavy top": (heavy_top(jnp.array([1.0, 1.0, 0.5]), jnp.array([0.1, 0.0, 1.0]), 1.0), lpjax.GaussLegendre(2),
                      jnp.array([0.3, 0.2, 2.0, 0.0, np.sin(0.4), np.cos(0.4)])),
    "Suris": (lagrange_top(3, frame="rest"), lpjax.SurisLagrangeTop(), jnp.array([0.3, -0.2, 0.5, 0.0, 0.6, 0.8])),
}


def _assert_discrete_equals_direct(loss, args, n_leaves: int, rtol: float):
    """``eqx.filter_grad(loss)(args, adjoint)`` with ``"discrete"`` equals ``"direct"`` leaf by
    leaf to ``rtol`` relative (absolute below magnitude 1); ``n_leaves`` arrays differentiated."""
    got, ref = (eqx.filter_grad(loss)(args, a) for a in ("discrete", "direct"))
    leaves = list(zip(jax.tree.leaves(got), jax.tree.leaves(ref)))
    assert len(leaves) == n_leaves
    for a, b in leaves:
        assert float(jnp.max(jnp.abs(a - b))) <= rtol * max(1.0, float(jnp.max(jnp.abs(b)))), (a, b)


def _loss(system, y0, method, n, save_every, plain=False):
    if plain:
        def step(state, _):
            return method.step(system, state, 0.01)[0], None

        return jnp.sum(method.observe(system, jax.lax.scan(step, method.init(system, y0, 0.01), None, length=n)[0]))
    return jnp.sum(lpjax.integrate(system, method, y0, 0.01, n, save_every=save_every).ys[-1])


@pytest.mark.parametrize("name, n, save_every", [("GL4 heavy top", 400, 20), ("Suris", 64, 64), ("Suris", 50, 1),
                                                 ("Suris", 37, 37)])
def test_checkpointed_gradient_equals_the_plain_scan_gradient(name, n, save_every):
    """Loops of 16 or more are checkpointed: both levels (400 = 20 saves × 20 steps), steps only,
    saves only, and a length (37) with a remainder group."""
    system, method, y0 = CASES[name]
    g = eqx.filter_grad(_loss)(system, y0, method, n, save_every)
    ref = eqx.filter_grad(_loss)(system, y0, method, n, save_every, plain=True)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def _temp_bytes(name, n, plain):
    system, method, y0 = CASES[name]
    grad = eqx.filter_jit(eqx.filter_grad(lambda s, y: _loss(s, y, method, n, n, plain)))
    return grad.lower(system, y0).compile().compiled.memory_analysis().temp_size_in_bytes


def test_gradient_memory_grows_sublinearly():
    """XLA's temporary buffers of the compiled gradient, 400 against 6400 steps (16×); the GL4
    heavy top is measured in ``benchmarks/gradients.py`` (exponent 0.48 there too)."""
    name = "Suris"
    growth = _temp_bytes(name, 6400, False) / _temp_bytes(name, 400, False)
    plain = _temp_bytes(name, 6400, True) / _temp_bytes(name, 400, True)
    assert growth <= 16**0.6  # measured about 16^0.45 (√n grouping); a plain scan grows 16×
    assert plain >= 16**0.95


def _all_saves_loss(params, system, method, y0, n, save_every, adjoint):
    """Every saved state enters (weighted), and ``dt`` and the system's arrays are inputs."""
    dt, scale = params
    system = eqx.tree_at(lambda s: s.hamiltonian, system,
                         jax.tree.map(lambda a: a * scale if eqx.is_inexact_array(a) else a, system.hamiltonian))
    ys = lpjax.integrate(system, method, y0, dt, n, save_every=save_every, adjoint=adjoint).ys
    w = jnp.cos(jnp.arange(ys.size, dtype=ys.dtype)).reshape(ys.shape)
    return jnp.sum(w * ys) + jnp.sum(ys[-1] ** 2)


@pytest.mark.parametrize("method, n, save_every", [
    *[(lpjax.SurisLagrangeTop(), n, k) for n, k in [(40, 1), (40, 4), (64, 32), (37, 37)]],
    (lpjax.RK4(), 40, 4), (lpjax.GaussLegendre(2), 64, 32)], ids=lambda p: type(p).__name__ if isinstance(p, eqx.Module) else str(p))
def test_discrete_adjoint_equals_jax_ad(method, n, save_every):
    """``adjoint="discrete"`` (the hand-written adjoint: over the saves when they are < 16 steps
    apart, over the steps of a save otherwise) gives JAX's own gradient, with respect to the
    initial state, ``dt`` and a parameter of the system, with every saved state in the loss."""
    system = lagrange_top(3, frame="rest")
    y0 = CASES["Suris"][2]
    params = (jnp.asarray(0.01), jnp.asarray(1.0))
    grads = {a: jax.grad(_all_saves_loss, argnums=(0, 3))(params, system, method, y0, n, save_every, a)
             for a in ("discrete", "direct")}
    for a, b in zip(jax.tree.leaves(grads["discrete"]), jax.tree.leaves(grads["direct"])):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)
    assert all(np.all(np.isfinite(a)) and np.any(a != 0) for a in jax.tree.leaves(grads["direct"]))


def test_adjoint_choices():
    """``"auto"`` is the written-out adjoint in reverse mode (the discrete one of an explicit map,
    GL4's own adjoint of a step) and JAX's loop otherwise: forward mode through ``"auto"`` and
    ``"discrete"`` works and equals ``"direct"``; an unknown choice is an error that names the
    choices."""
    system, method, y0 = CASES["Suris"]

    def final(y, adjoint):
        return lpjax.integrate(system, method, y, 0.01, 40, save_every=40, adjoint=adjoint).ys[-1]

    J_rev = jax.jacrev(final)(y0, "auto")  # y0 alone: no parameter cotangent is formed
    J_fwd = jax.jacfwd(final)(y0, "direct")
    np.testing.assert_allclose(J_rev, J_fwd, rtol=1e-12, atol=1e-12)
    for adjoint in ("auto", "discrete"):
        np.testing.assert_allclose(jax.jacfwd(final)(y0, adjoint), J_fwd, rtol=1e-12, atol=1e-12)
    by_dt = {a: jax.grad(lambda dt: jnp.sum(lpjax.integrate(system, method, y0, dt, 40, save_every=40, adjoint=a).ys[-1]))(0.01)
             for a in ("auto", "direct")}  # dt alone: the system's arrays are not differentiated
    np.testing.assert_allclose(by_dt["auto"], by_dt["direct"], rtol=1e-12)
    gl_system, gl, gl_y0 = CASES["GL4 heavy top"]

    def gl_final(y, adjoint):
        return lpjax.integrate(gl_system, gl, y, 0.01, 20, adjoint=adjoint).ys[-1]

    np.testing.assert_allclose(jax.jacfwd(gl_final)(gl_y0, "auto"), jax.jacrev(gl_final)(gl_y0, "auto"), rtol=1e-10,
                               atol=1e-12)
    with pytest.raises(ValueError, match='"auto", "discrete" or "direct"'):
        lpjax.integrate(system, method, y0, 0.01, 4, adjoint="backsolve")


@pytest.mark.parametrize("stages, solver, dt", [(2, "fixed_point", 0.02), (3, "fixed_point", 0.02), (2, "newton", 0.02),
                                               (2, "fixed_point", 0.1)])
def test_the_stepped_adjoint_of_gauss_legendre_equals_direct_ad(stages, solver, dt):
    """The discrete adjoint of a Gauss–Legendre step (the transposed stage equations by 8
    fixed-point updates; at dt = 0.1 these fail the test, measured, and the groups are redone by
    elimination) gives JAX's direct-AD gradient in the system's arrays, y0 and dt, with every
    save and the final state in the loss (60 steps, a save every 3), to 1e-10 relative."""
    system, _, y0 = CASES["GL4 heavy top"]
    method = lpjax.GaussLegendre(stages, solver=solver)

    def loss(args, adjoint):
        system, y0, dt = args
        sol = lpjax.integrate(system, method, y0, dt, 60, save_every=3, adjoint=adjoint)
        return jnp.sum(jnp.sin(sol.ys)) + jnp.sum(sol.state.y ** 2)

    args = (system, y0, jnp.asarray(dt))
    _assert_discrete_equals_direct(loss, args, 5, 1e-10)  # inertia, chi, mgl, y0, dt


class _Power(eqx.Module):
    """``h(μ) = Σ|μ_i|^{3/2}``: its Hessian is infinite where a component vanishes."""

    def __call__(self, mu):
        return jnp.sum(jnp.abs(mu) ** 1.5)


def test_a_failed_adjoint_solve_gives_nan_and_an_error():
    """At the equilibrium μ = (0, 0, 1) of h = Σ|μ_i|^{3/2} the forward steps are exact, but the
    Jacobian at the stages is infinite, so the adjoint equations have no finite solution: the
    gradient is NaN with throw=False and an error naming the adjoint under throw=True."""
    system = lpjax.LiePoissonSystem(lpjax.algebras.so3(), _Power(), -1)
    y0 = jnp.array([0.0, 0.0, 1.0])

    def loss(y, throw):
        sol = lpjax.integrate(system, lpjax.GaussLegendre(2), y, 0.01, 20, throw=throw)
        return jnp.sum(sol.ys[-1])

    assert bool(lpjax.integrate(system, lpjax.GaussLegendre(2), y0, 0.01, 20).result == lpjax.RESULTS.successful)
    assert bool(jnp.all(jnp.isnan(jax.grad(loss)(y0, False))))
    with pytest.raises(Exception, match="adjoint equations of a step did not converge"):
        jax.block_until_ready(jax.grad(loss)(y0, True))


def test_the_stepped_adjoint_of_dep_equals_direct_ad():
    """The discrete Euler–Poincaré map's adjoint of a step (the implicit function theorem on the
    Legendre equation, :class:`lpjax._integrator._implicit.AbstractRootStepAdjoint`) gives JAX's
    direct-AD gradient in the Lagrangian's arrays (the method's: inertia, χ, mgl of the heavy
    top's midpoint Lagrangian), y0 and dt, with every save and the attitudes in the loss, to
    1e-12 (measured ≤ 5e-15 relative)."""
    from lpjax import lagrangians
    from lpjax.systems import heavy_top

    system = heavy_top(jnp.array([1.0, 1.2, 0.5]), jnp.array([0.1, 0.0, 1.0]), 1.0)
    y0 = jnp.array([0.3, 0.2, 2.0, 0.0, np.sin(0.4), np.cos(0.4)])

    def loss(args, adjoint):
        method, y0, dt = args
        sol = lpjax.integrate(system, method, y0, dt, 30, save_every=3, adjoint=adjoint)
        return jnp.sum(jnp.sin(sol.ys)) + jnp.sum(sol.gs.as_matrix()[-1] * jnp.arange(3)[None, :])

    args = (lpjax.DiscreteEulerPoincare(lagrangians.midpoint(system), reconstruct=True), y0, jnp.asarray(0.05))
    _assert_discrete_equals_direct(loss, args, 5, 1e-12)


def test_collective_uses_its_inner_methods_adjoint_and_equals_direct_ad():
    """Collective (GL4 on the canonized heavy top) runs the inner method's adjoint of a step, with
    the system's cotangent pulled back through ``canonize``: JAX's direct-AD gradient in the
    system's arrays, y0 (through the lift) and dt, to 1e-12 (measured ≤ 1e-14 relative). With
    an inner method without one (RK4) integrate keeps JAX's adjoint."""
    from lpjax._integrate import _has_stepped_adjoint

    assert _has_stepped_adjoint(lpjax.Collective()) and not _has_stepped_adjoint(lpjax.Collective(lpjax.RK4()))
    system = heavy_top(jnp.array([1.0, 1.2, 0.5]), jnp.array([0.1, 0.0, 1.0]), 1.0)
    y0 = jnp.array([0.3, 0.2, 2.0, 0.0, np.sin(0.4), np.cos(0.4)])

    def loss(args, adjoint):
        system, y0, dt = args
        return jnp.sum(jnp.sin(lpjax.integrate(system, lpjax.Collective(), y0, dt, 30, save_every=3, adjoint=adjoint).ys))

    args = (system, y0, jnp.asarray(0.05))
    _assert_discrete_equals_direct(loss, args, 5, 1e-12)


@pytest.mark.parametrize("n, reconstruct", [(3, False), (4, True)])
def test_the_stepped_adjoint_of_moser_veselov_equals_direct_ad(n, reconstruct):
    """Moser–Veselov's adjoint of a step (the Legendre equation's d × d Jacobian, transposed)
    gives JAX's direct-AD gradient in the inertia, y0 and dt, with every save and, with
    ``reconstruct=True``, the attitudes in the loss, to 1e-12 (measured ≤ 4e-16)."""
    from lpjax.systems import rigid_body, rigid_body_n

    system, y0 = ((rigid_body(jnp.array([1.0, 2.0, 3.0])), jnp.array([1.0, 0.5, 0.8])) if n == 3 else
                  (rigid_body_n(jnp.array([1.0, 1.5, 2.2, 3.1])), jnp.array([0.7, -0.4, 1.1, 0.3, 0.9, -0.6])))
    method = lpjax.MoserVeselov(reconstruct=reconstruct)

    def loss(args, adjoint):
        system, y0, dt = args
        sol = lpjax.integrate(system, method, y0, dt, 60, save_every=3, adjoint=adjoint)
        attitude = jnp.sum(sol.gs.as_matrix()[-1] * jnp.arange(n)[None, :]) if reconstruct else 0.0
        return jnp.sum(jnp.sin(sol.ys)) + attitude

    args = (system, y0, jnp.asarray(0.05))
    _assert_discrete_equals_direct(loss, args, 3, 1e-12)


def _stepped_cases():
    from lpjax.systems import rigid_body

    rb, y0 = rigid_body(jnp.array([1.0, 2.0, 3.0])), jnp.array([0.4, -0.8, 1.5])
    split = lpjax.LiePoissonSplitting(("q0", "q1", "q2"))
    return {"splitting": (rb, split, y0), "Composition(splitting)": (rb, lpjax.Composition(split, "triple-jump"), y0),
            "GL4 heavy top": CASES["GL4 heavy top"]}


@pytest.mark.parametrize("name", ["splitting", "Composition(splitting)", "GL4 heavy top"])
def test_kept_and_recomputed_states_give_the_same_gradient(monkeypatch, name):
    """A loop whose states fit in ``KEEP_BYTES`` keeps them in its run; with the budget at 0 the
    backward pass recomputes them group by group: the same gradient in every system array and
    y0, to 1e-12, and JAX's (``adjoint="direct"``) to 1e-10."""
    import lpjax._adjoint as adjoint_module

    system, method, y0 = _stepped_cases()[name]

    def loss(args, adjoint="auto"):
        system, y0 = args
        ys = lpjax.integrate(system, method, y0, 0.01, 300, save_every=300, adjoint=adjoint).ys
        return jnp.sum(ys[-1] * jnp.arange(1.0, 1.0 + y0.size))

    kept = eqx.filter_grad(loss)((system, y0))
    monkeypatch.setattr(adjoint_module, "KEEP_BYTES", 0)
    recomputed = eqx.filter_grad(loss)((system, y0))
    direct = eqx.filter_grad(lambda a: loss(a, "direct"))((system, y0))
    for a, b, c in zip(jax.tree.leaves(kept), jax.tree.leaves(recomputed), jax.tree.leaves(direct)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(a, c, rtol=1e-10, atol=1e-13)


def test_a_stepped_adjoint_keeps_its_states_up_to_keep_bytes_then_checkpoints():
    """The splitting keeps 24 bytes a step (the rigid body's state): under ``KEEP_BYTES`` the
    compiled gradient's temporary memory holds every state; above, groups of about √n are
    recomputed and the memory grows as about √n (16× the steps: measured 16^0.5)."""
    from lpjax._adjoint import KEEP_BYTES

    system, method, y0 = _stepped_cases()["splitting"]

    def temp(n):
        grad = eqx.filter_jit(eqx.filter_grad(lambda y: _loss(system, y, method, n, n)))
        return grad.lower(y0).compile().compiled.memory_analysis().temp_size_in_bytes

    small, big = KEEP_BYTES // 24 // 2, 4 * KEEP_BYTES // 24
    assert temp(small) >= 24 * small
    assert temp(big) <= 24 * big / 10
    assert temp(16 * big) / temp(big) <= 16**0.6
