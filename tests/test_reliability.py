"""No silent wrong answer: domain violations, bad arguments, overflow, continuation of a run
(each test names the defect it pins)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax import groups
from lpjax.systems import (
    clebsch_case, heavy_top, kida_initial_state, kida_vortex, lagrange_top, rigid_body, rubber_chaplygin_sphere,
)

RB = rigid_body(jnp.array([1.0, 2.0, 3.0]))
M0 = jnp.array([1.0, 0.5, 0.8])
HT = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
KIDA = kida_vortex(eps=0.5, omega=-1.0)


def test_kida_outside_its_domain_is_refused_or_flagged():
    """h (22) needs mu_3 < π/8: a state beyond is refused, and a run that crosses the pole
    (mu_3' = ε mu_1 > 0) ends with a failure code instead of finite garbage and 'successful'."""
    with pytest.raises(ValueError, match="needs mu_3 < π/8"):
        lpjax.integrate(KIDA, lpjax.RK4(), jnp.array([0.1, 0.1, 0.5]), 0.1, 10)
    assert np.isnan(float(KIDA.energy(jnp.array([0.1, 0.1, 0.5]))))
    assert np.all(np.isnan(np.asarray(KIDA.vector_field(jnp.array([0.1, 0.1, 0.5])))))
    for method in (lpjax.RK4(), lpjax.GaussLegendre(2)):
        sol = lpjax.integrate(KIDA, method, jnp.array([2.0, 0.0, 0.38]), 0.05, 40, throw=False)
        assert sol.result != lpjax.RESULTS.successful, type(method).__name__
    ok = lpjax.integrate(KIDA, lpjax.RK4(), jnp.asarray(kida_initial_state(0.5, -1.0)), 0.1, 100, throw=False)
    assert ok.result == lpjax.RESULTS.successful


@pytest.mark.parametrize("group", ["SO3", "SE3", "SOn"])
def test_inverse_cayley_near_a_half_turn_raises(group):
    """Cayley coordinates tan(θ/2) do not exist at θ = π; within 1e-4 rad of it they were garbage
    (at θ = π exactly SO3 gave (0, 0, −0.28)). Now: an error, eagerly and under jit; 1e-3 rad
    away they are tan(θ/2) to 1e-9 relative."""
    def element(theta):
        if group == "SO3":
            return groups.SO3.exp(jnp.array([0.0, 0.0, theta]))
        if group == "SE3":
            return groups.SE3.exp(jnp.array([0.0, 0.0, theta, 0.1, 0.2, 0.3]))
        return groups.SOn.exp(jnp.array([0.0, 0.0, 0.0, 0.0, 0.0, theta]))

    for theta in (np.pi, np.pi - 1e-7, -np.pi + 1e-6):
        with pytest.raises(Exception, match="within about 1e-4 rad of a rotation by π"):
            jax.block_until_ready(element(theta).inverse_cayley())
    with pytest.raises(Exception, match="within about 1e-4 rad of a rotation by π"):
        jax.block_until_ready(jax.jit(lambda g: g.inverse_cayley())(element(np.pi)))
    x = element(np.pi - 1e-3).inverse_cayley()
    assert float(jnp.max(jnp.abs(x))) == pytest.approx(np.tan((np.pi - 1e-3) / 2), rel=1e-9)


def test_collective_gradient_at_zero_raises_and_matches_differences_elsewhere():
    """At mu0 = 0 every lift of the momentum map is singular (rank DM < n), so no derivative with
    respect to mu0 comes through the lift: it was NaN, then (with the scale fixed) a finite wrong
    number; now an error. Elsewhere the lift's minimum-norm tangent gives central differences."""
    method = lpjax.Collective(lpjax.GaussLegendre(2))

    def loss(y0):
        return lpjax.integrate(HT, method, y0, 0.1, 5).ys[-1].sum()

    with pytest.raises(Exception, match="derivative with respect to the initial state is undefined"):
        jax.block_until_ready(jax.grad(loss)(jnp.zeros(6)))
    y0 = jnp.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386])
    g = np.asarray(jax.grad(loss)(y0))
    eps = 1e-6
    fd = [(float(loss(y0 + eps * e)) - float(loss(y0 - eps * e))) / (2 * eps) for e in np.eye(6)]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(t0=float("nan")), ValueError, "t0 must be finite"),
    (dict(t0="0"), TypeError, "t0 must be a real number"),
    (dict(dt="0.1"), TypeError, "dt must be a real number, got str"),
    (dict(dt=True), TypeError, "dt must be a real number, got bool"),
    (dict(y0=jnp.ones(3, jnp.float16)), ValueError, "float16 states are not supported"),
    (dict(dtype=jnp.bfloat16), ValueError, "dtype must be float32 or float64"),
])
def test_bad_arguments_to_integrate(kwargs, error, match):
    args = dict(y0=M0, dt=0.1)
    args.update(kwargs)
    y0, dt = args.pop("y0"), args.pop("dt")
    with pytest.raises(error, match=match):
        lpjax.integrate(RB, lpjax.RK4(), y0, dt, 4, **args)


def test_step_counters_do_not_overflow():
    """n_steps ≥ 2³¹ ran and then failed with an OverflowError (int32 counters). With x64 on the
    counters are int64: 2³² steps trace (no run: jax.eval_shape). With x64 off the run is refused
    before any work (test_float32.py, in a subprocess)."""
    out = jax.eval_shape(lambda: lpjax.integrate(RB, lpjax.RK4(), M0, 1e-6, 2**32, save_every=2**32))
    assert out.stats["num_steps"].dtype == jnp.int64 and out.ts.shape == (2,)
    sol = lpjax.integrate(RB, lpjax.RK4(), M0, 0.1, 4)
    assert all(sol.stats[k].dtype == jnp.int64 for k in ("num_steps", "max_iterations", "num_failed_steps"))


CONTINUED = [
    ("RK4", RB, lpjax.RK4(), M0),
    ("GL4", HT, lpjax.GaussLegendre(2), jnp.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386])),
    # under the suite's fast compile settings (LLVM -O0, legacy emitters) the 17-step piece's last loop (5 steps)
    # differs from the whole run by 1 ulp (2.2e-16) from step 56; bit for bit under XLA's defaults, as users run
    pytest.param("MV, reconstructed", RB, lpjax.MoserVeselov(reconstruct=True), M0, marks=pytest.mark.xla_default),
    ("Suris", lagrange_top(3, frame="rest"), lpjax.SurisLagrangeTop(), jnp.array([0.3, -0.2, 0.5, 0.0, 0.6, 0.8])),
    ("SurisClebsch", clebsch_case(jnp.array([1.0, 2.0, 3.0])), lpjax.SurisClebsch(),
     jnp.array([0.3, -0.2, 0.5, 0.0, 0.6, 0.8])),
    ("DEP", RB, lpjax.DiscreteEulerPoincare(lpjax.lagrangians.moser_veselov(RB)), M0),
    ("Collective", KIDA, lpjax.Collective(lpjax.GaussLegendre(2)), jnp.asarray(kida_initial_state(0.5, -1.0))),
    ("Projected", rubber_chaplygin_sphere([1.0, 2.0, 3.0], 0.5), lpjax.Projected(lpjax.GaussLegendre(2)), None),
]


@pytest.mark.parametrize("name, system, method, y0", CONTINUED,
                         ids=[c.values[0] if hasattr(c, "values") else c[0] for c in CONTINUED])
def test_a_run_split_in_pieces_is_the_whole_run(name, system, method, y0):
    """integrate(..., y0=solution) continues from the method's own state (GL's predictor,
    Collective's lifted point: it re-lifted before, 8e-12 off; the attitude): 60 steps as
    13 + 30 + 17 equal one run of 60 bit for bit, the times to rounding."""
    y0 = system.default_state() if y0 is None else y0
    whole = lpjax.integrate(system, method, y0, 0.05, 60)
    parts = [lpjax.integrate(system, method, y0, 0.05, 13)]
    for n in (30, 17):
        parts.append(lpjax.integrate(system, method, parts[-1], 0.05, n))
    ys = jnp.concatenate([parts[0].ys] + [p.ys[1:] for p in parts[1:]])
    assert bool(jnp.all(ys == whole.ys))
    ts = jnp.concatenate([parts[0].ts] + [p.ts[1:] for p in parts[1:]])
    np.testing.assert_allclose(ts, whole.ts, rtol=1e-15, atol=1e-15)
    if whole.gs is not None:
        gs = jnp.concatenate([parts[0].gs.R] + [p.gs.R[1:] for p in parts[1:]])
        assert bool(jnp.all(gs == whole.gs.R))


def test_continuing_with_another_method_is_refused():
    sol = lpjax.integrate(RB, lpjax.GaussLegendre(2), M0, 0.1, 3)
    with pytest.raises(ValueError, match="not a state of RK4"):
        lpjax.integrate(RB, lpjax.RK4(), sol, 0.1, 3)
    assert float(lpjax.integrate(RB, lpjax.GaussLegendre(2), sol, 0.1, 3, t0=10.0).ts[0]) == 10.0


_LASTING = [  # every method that says its non-finite entries last, on the systems it steps
    (lpjax.RK4(), RB, M0),
    (lpjax.GaussLegendre(2), HT, jnp.array([0.3, -0.2, 0.5, 0.0, 0.6, 0.8])),
    (lpjax.MoserVeselov(), RB, M0),
    (lpjax.SurisLagrangeTop(), lagrange_top(3, frame="rest"), jnp.array([0.3, -0.2, 0.5, 0.0, 0.6, 0.8])),
    (lpjax.SurisLagrangeTop(), lagrange_top(3, frame="moving"), jnp.array([0.3, -0.2, 0.5, 0.0, 0.6, 0.8])),
    (lpjax.SurisClebsch(), clebsch_case(jnp.array([0.5, 1.2, 2.0])), jnp.array([0.3, -0.2, 0.5, 0.1, 0.6, 0.8])),
    (lpjax.Composition(lpjax.MoserVeselov(), "triple-jump"), RB, M0),  # its inner method's claim
    (lpjax.Processed(lpjax.MoserVeselov()), RB, M0),  # likewise
    (lpjax.SurisLagrangeTop(reverse=True), lagrange_top(3, frame="moving"), jnp.array([0.3, -0.2, 0.5, 0.0, 0.6, 0.8])),
    (lpjax.SurisClebsch(reverse=True), clebsch_case(jnp.array([0.5, 1.2, 2.0])), jnp.array([0.3, -0.2, 0.5, 0.1, 0.6, 0.8])),
]


def test_the_methods_whose_nonfinite_entries_last_are_all_checked():
    claims = {cls.__name__ for cls in vars(lpjax).values()
              if isinstance(cls, type) and issubclass(cls, lpjax.AbstractIntegrator) and cls.nonfinite_lasts}
    assert claims == {type(m).__name__ for m, _, _ in _LASTING}


@pytest.mark.parametrize("method, system, y", _LASTING,
                         ids=["RK4", "GL4 heavy top", "MoserVeselov", "Suris rest", "Suris moving", "SurisClebsch",
                              "Composition(MoserVeselov)", "Processed(MoserVeselov)", "Suris moving adjoint",
                              "SurisClebsch adjoint"])
def test_nonfinite_entries_last(method, system, y):
    """``nonfinite_lasts`` (the ensemble's member program tests finiteness once per save on it):
    from a state with one entry inf, −inf or NaN, in every position, each of 8 steps leaves a
    non-finite entry in the state."""
    step = jax.jit(lambda s: method.step(system, s, 0.05)[0])
    for i in range(y.shape[0]):
        for bad in (np.inf, -np.inf, np.nan):
            state = method.init(system, y.at[i].set(bad), 0.05)
            for k in range(8):
                state = step(state)
                leaves = [np.asarray(a) for a in jax.tree.leaves(state) if jnp.issubdtype(a.dtype, jnp.inexact)]
                assert not all(np.all(np.isfinite(a)) for a in leaves), (i, bad, k)
