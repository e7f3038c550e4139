"""lpjax.Composition: the schemes' coefficients, the symmetry every method claims (measured), and
the orders 4, 6 and 8 of compositions of Moser–Veselov and implicit midpoint against the exact
Euler top, and of implicit midpoint on the heavy top against scipy's DOP853."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import lpjax
from lpjax import lagrangians
from lpjax._integrator.composition import ORDER_RAISING, composition_coefficients
from lpjax.diagnostics import empirical_order
from lpjax.systems import clebsch_case, heavy_top, lagrange_top, rigid_body

from .reference import euler_top_exact, states_at

I = np.array([1.0, 2.0, 3.0])
RB = rigid_body(jnp.asarray(I))
M0 = np.array([0.4, -0.8, 1.5])
HT = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
HT0 = np.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386])


@pytest.mark.parametrize("scheme", list(lpjax.COMPOSITION_SCHEMES))
def test_the_coefficients_are_the_published_ones_and_meet_the_odd_moment_conditions(scheme):
    """The steps add up to dt, the published middle coefficient is 1 − 2 Σ of the others, and
    Σ γ^k = 0 for the odd k below the order (the conditions of the single-bracket terms of a
    symmetric base method's error, HLW V.3.2): a mistyped digit shows here."""
    g = composition_coefficients(scheme)
    s = lpjax.COMPOSITION_SCHEMES[scheme]
    assert np.array_equal(g, g[::-1]) and len(g) == 2 * len(s.outer) + 1
    assert abs(g.sum() - 1) <= 1e-15
    assert abs(g[len(s.outer)] - s.middle) <= 2e-15
    for k in range(3, s.order, 2):
        assert abs(np.sum(g ** k)) <= 1e-13 * np.sum(np.abs(g) ** k), (k, np.sum(g ** k))


@pytest.mark.parametrize("scheme", list(ORDER_RAISING))
@pytest.mark.parametrize("p", [2, 4, 6, 8])
def test_the_order_raising_coefficients_cancel_the_next_error_term(scheme, p):
    """For an inner method of order p the triple jump and Suzuki's five sum to 1 and meet
    Σ γ^{p+1} = 0; at p = 2 they are the order-2 tables (``"triple-jump-2"``, ``"suzuki-2"``)."""
    g = composition_coefficients(scheme, p)
    assert np.array_equal(g, g[::-1]) and abs(g.sum() - 1) <= 1e-15
    assert abs(np.sum(g ** (p + 1))) <= 1e-14 * np.sum(np.abs(g) ** (p + 1))
    if p == 2:
        np.testing.assert_allclose(g, composition_coefficients(f"{scheme}-2"), rtol=0, atol=1e-15)


_TOP = lagrange_top(3, frame="rest")
_TOP0 = jnp.array([0.3, -0.2, 0.5, 0.0, 0.6, 0.8])
_CL = clebsch_case(jnp.array([0.5, 1.2, 2.0]))
_CL0 = jnp.array([0.2, -0.4, 0.3, 0.5, 0.1, -0.6])
_CLAIMS = [
    ("GL2", RB, lpjax.GaussLegendre(1), M0),
    ("GL4", HT, lpjax.GaussLegendre(2), HT0),
    ("MoserVeselov", RB, lpjax.MoserVeselov(), M0),
    ("Collective(GL4)", RB, lpjax.Collective(lpjax.GaussLegendre(2)), M0),
    ("DEP moser_veselov", RB, lpjax.DiscreteEulerPoincare(lagrangians.moser_veselov(RB)), M0),
    ("DEP heavy_top", HT, lpjax.DiscreteEulerPoincare(lagrangians.heavy_top(HT)), HT0),
    ("DEP midpoint", HT, lpjax.DiscreteEulerPoincare(lagrangians.midpoint(HT)), HT0),
    ("Composition", RB, lpjax.Composition(lpjax.MoserVeselov(early_exit=True), "triple-jump"), M0),
    ("LiePoissonSplitting", HT, lpjax.LiePoissonSplitting(), HT0),
    ("RK4", RB, lpjax.RK4(), M0),
    ("SurisLagrangeTop", _TOP, lpjax.SurisLagrangeTop(), _TOP0),
    ("SurisClebsch", _CL, lpjax.SurisClebsch(), _CL0),
    ("DEP suris_clebsch", _CL, lpjax.DiscreteEulerPoincare(lagrangians.suris_clebsch(_CL)), _CL0),
    ("DEP suris_lagrange_top", _TOP, lpjax.DiscreteEulerPoincare(lagrangians.suris_lagrange_top(_TOP)), _TOP0),
    ("Composition(SurisLagrangeTop)", _TOP, lpjax.Composition(lpjax.SurisLagrangeTop(), "kahan-li6"), _TOP0),
    ("Composition(RK4)", RB, lpjax.Composition(lpjax.RK4(), "triple-jump"), M0),
    ("S10(SurisClebsch)", _CL, lpjax.Composition(lpjax.SurisClebsch(), "blanes-moan-s10"), _CL0),
]


@pytest.mark.parametrize("name, system, method, y0", _CLAIMS, ids=[c[0] for c in _CLAIMS])
def test_each_method_is_symmetric_exactly_when_it_says_so(name, system, method, y0):
    """A step of dt = 0.2 then one of −dt: back to roundoff for a symmetric method, and visibly
    not for the others (RK4 about 1e-11: its odd error terms cancel; the Suris maps and their
    DEP forms about 1e-2: explicit in one half, their adjoint is the other order). A composition
    is symmetric to its solves' accuracy: iterated to roundoff here."""
    y0 = jnp.asarray(y0)
    state = method.init(system, y0, 0.2)
    state, _, _ = method.step(system, state, 0.2)
    state, _, _ = method.step(system, state, -0.2)
    back = float(jnp.max(jnp.abs(method.observe(system, state) - y0)))
    if method.symmetric:
        assert back <= 1e-14, back
    else:
        assert back >= 1e-12, back


def test_composing_a_method_that_is_not_symmetric_and_has_no_adjoint_is_refused():
    dep = lpjax.DiscreteEulerPoincare(lagrangians.suris_clebsch(_CL))
    with pytest.raises(ValueError, match="DiscreteEulerPoincare is not symmetric .* has no adjoint") as e:
        lpjax.Composition(dep, "triple-jump")
    assert all(name in str(e.value) for name in ("GaussLegendre", "SurisLagrangeTop", "RK4"))
    with pytest.raises(ValueError, match="unknown scheme 'yoshida4'.*'triple-jump'"):
        lpjax.Composition(lpjax.MoserVeselov(), "yoshida4")
    with pytest.raises(TypeError, match="inner must be an lpjax integrator"):
        lpjax.Composition(lambda y: y, "triple-jump")


def _order(system, method, y0, ref, T, dt_max):
    dts = [dt_max / k for k in (1, 2, 3, 4)]
    errs = [float(np.max(np.abs(y - ref))) for y in states_at(system, method, jnp.asarray(y0), dts, T)]
    return empirical_order(dts, errs), errs


_ORDERS = [  # (inner, scheme, order, T, largest dt): errors between about 1e-5 and 1e-12
    ("MV", "triple-jump", 4, 2.0, 0.25), ("MV", "kahan-li6", 6, 4.0, 0.5), ("MV", "kahan-li8", 8, 8.0, 0.8),
    ("GL2", "suzuki", 4, 2.0, 0.5), ("GL2", "yoshida6", 6, 4.0, 0.5), ("GL2", "mclachlan8", 8, 8.0, 1.0),
    # the triple jump and Suzuki's five of the inner method's order gain two orders (measured 5.98, 6.01, 7.95);
    # the order-2 table on GL4 stays at 4 (3.97)
    ("GL4", "triple-jump", 6, 4.0, 0.5), ("GL4", "suzuki", 6, 4.0, 1.0), ("GL6", "triple-jump", 8, 4.0, 1.0),
    ("GL4", "triple-jump-2", 4, 4.0, 0.5),
]
_INNER = {"MV": lpjax.MoserVeselov(early_exit=True), "GL2": lpjax.GaussLegendre(1), "GL4": lpjax.GaussLegendre(2),
          "GL6": lpjax.GaussLegendre(3)}


@pytest.mark.parametrize("inner, scheme, order, T, dt_max", _ORDERS, ids=[f"{a}-{b}" for a, b, *_ in _ORDERS])
def test_orders_on_the_rigid_body_against_the_exact_euler_top(inner, scheme, order, T, dt_max):
    ref = np.asarray(euler_top_exact(I, M0, T))
    p, errs = _order(RB, lpjax.Composition(_INNER[inner], scheme), M0, ref, T, dt_max)
    assert abs(p - order) <= 0.2, (p, errs)


def _heavy_top_field(t, y):
    return np.asarray(HT.vector_field(jnp.asarray(y)))


@pytest.mark.parametrize("scheme, order, dt_max", [("triple-jump", 4, 0.05), ("kahan-li6", 6, 0.1),
                                                   ("kahan-li8", 8, 0.2)])
def test_orders_on_the_heavy_top_against_dop853(scheme, order, dt_max):
    """Measured 3.98, 5.98 and 7.96 (the reference agrees with 2000 GL6 steps to 6e-14)."""
    T = 2.0
    ref = solve_ivp(_heavy_top_field, (0, T), HT0, method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1]
    p, errs = _order(HT, lpjax.Composition(lpjax.GaussLegendre(1), scheme), HT0, ref, T, dt_max)
    assert abs(p - order) <= 0.2, (p, errs)


@pytest.mark.parametrize("inner", [lpjax.MoserVeselov(), lpjax.GaussLegendre(1)], ids=["MV", "GL2"])
def test_the_gradient_through_the_stages_adjoints_equals_direct_ad(inner):
    """The chained adjoints of the stages (the default for a composition of methods with their
    own adjoint of a step) against JAX's AD through the solves: measured 7e-15 relative at 100
    steps, 3e-13 at 10⁴."""
    method = lpjax.Composition(inner, "triple-jump")
    assert lpjax._integrate._has_stepped_adjoint(method)

    def loss(inertia, adjoint):
        ys = lpjax.integrate(rigid_body(inertia), method, jnp.asarray(M0), 0.05, 60, save_every=20, adjoint=adjoint).ys
        return jnp.sum(ys ** 2 * jnp.arange(1.0, 4.0)[None, :])

    inertia = jnp.asarray(I)
    got, want = (jax.grad(loss)(inertia, a) for a in ("auto", "direct"))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=0)


def test_a_composition_continues_a_solution_bit_for_bit():
    method = lpjax.Composition(lpjax.GaussLegendre(2), "suzuki")  # its state carries GL's predictor
    whole = lpjax.integrate(RB, method, jnp.asarray(M0), 0.1, 40)
    first = lpjax.integrate(RB, method, jnp.asarray(M0), 0.1, 20)
    again = lpjax.integrate(RB, method, first, 0.1, 20)
    assert np.array_equal(again.ys[-1], whole.ys[-1])


def test_the_stage_predictor_follows_the_stages_inside_a_composition():
    """Kahan–Li 6 on the rigid body (dt = 0.05, 400 steps): with GL2 (one stage) the default
    makes no more fixed-point updates per stage than the predictor turned off (before: 6.80
    against 5.90; now the same guess, 5.09); with GL4 the predictor rescaled to each stage's
    size makes fewer (measured 3.89 against 4.28)."""
    def per_stage(inner):
        method = lpjax.Composition(inner, "kahan-li6")
        sol = lpjax.integrate(RB, method, jnp.asarray(M0), 0.05, 400)
        return float(sol.stats["mean_iterations"]) / len(method.coefficients)

    for s in (1, 2):
        default, off = per_stage(lpjax.GaussLegendre(s)), per_stage(lpjax.GaussLegendre(s, predictor=False))
        assert default <= off, (s, default, off)
        if s == 2:
            assert default <= 0.95 * off, (default, off)


_PAIRS = [("SurisLagrangeTop rest", _TOP, lpjax.SurisLagrangeTop, _TOP0),
          ("SurisLagrangeTop moving", lagrange_top(3, frame="moving"), lpjax.SurisLagrangeTop, _TOP0),
          ("SurisClebsch", _CL, lpjax.SurisClebsch, _CL0)]


@pytest.mark.parametrize("name, system, cls, y0", _PAIRS, ids=[p[0] for p in _PAIRS])
@pytest.mark.parametrize("reconstruct", [False, True])
def test_the_declared_adjoint_inverts_the_step_of_minus_dt(name, system, cls, y0, reconstruct):
    """``Φ_{−dt} ∘ Φ*_dt = id`` (and ``Φ*_{−dt} ∘ Φ_dt``), the attitude included, at dt = 0.2:
    measured within 2.3e-16; the adjoint of the adjoint is the method."""
    method = cls(reconstruct=reconstruct)
    assert method.adjoint.adjoint == method and method.adjoint != method
    for first, second in ((method.adjoint, method), (method, method.adjoint)):
        state = first.init(system, y0, 0.2)
        back = second.step(system, first.step(system, state, 0.2)[0], -0.2)[0]
        for got, want in zip(jax.tree.leaves(back), jax.tree.leaves(state)):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    assert float(jnp.max(jnp.abs(method.adjoint.observe(system, method.adjoint.step(system, state, 0.2)[0])
                                 - method.observe(system, method.step(system, state, 0.2)[0])))) > 1e-3


def test_rk4s_adjoint_is_the_implicit_inverse_of_its_step_of_minus_dt():
    method = lpjax.RK4()
    y1, result, info = method.adjoint.step(RB, jnp.asarray(M0), 0.2)
    assert result == lpjax.RESULTS.successful and int(info.iterations) >= 1
    np.testing.assert_allclose(method.step(RB, y1, -0.2)[0], M0, rtol=0, atol=1e-15)
    assert method.adjoint.adjoint == method
    with pytest.raises(TypeError, match="symmetric method is its own adjoint"):
        lpjax.Adjoint(lpjax.GaussLegendre(1))


def _dop853(system, y0, T):
    field = lambda t, y: np.asarray(system.vector_field(jnp.asarray(y)))  # noqa: E731
    return solve_ivp(field, (0, T), np.asarray(y0), method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1]


_ADJOINT_ORDERS = [  # measured 5.95, 5.99, 5.97, 6.00
    ("SurisLagrangeTop rest", _TOP, lpjax.SurisLagrangeTop(), _TOP0, "kahan-li6", 6, 0.4),
    ("SurisLagrangeTop moving", lagrange_top(3, frame="moving"), lpjax.SurisLagrangeTop(), _TOP0, "kahan-li6", 6, 0.4),
    ("SurisClebsch", _CL, lpjax.SurisClebsch(), _CL0, "kahan-li6", 6, 0.4),
    ("RK4", RB, lpjax.RK4(), M0, "triple-jump", 6, 0.4),
]


@pytest.mark.parametrize("name, system, inner, y0, scheme, order, dt_max", _ADJOINT_ORDERS,
                         ids=[c[0] for c in _ADJOINT_ORDERS])
def test_a_method_composed_with_its_adjoint_has_the_schemes_order(name, system, inner, y0, scheme, order, dt_max):
    """Each stage ``Φ*_{γdt/2} ∘ Φ_{γdt/2}``: Kahan–Li 6 of the explicit Suris maps (order 1)
    is of order 6, the triple jump of RK4 (symmetrized: order 4) of order 6, against DOP853 at
    1e-13 (T = 4)."""
    method = lpjax.Composition(inner, scheme)
    assert method.order == order
    dts = [dt_max / k for k in (1, 2, 3, 4)]
    ref = _dop853(system, y0, 4.0)
    errs = [float(np.max(np.abs(y - ref))) for y in states_at(system, method, jnp.asarray(y0), dts, 4.0)]
    p = empirical_order(dts, errs)
    assert abs(p - order) <= 0.2, (p, errs)


def test_gradients_through_a_method_composed_with_its_implicit_adjoint():
    """Reverse mode through the triple jump of RK4 (its adjoint's solve differentiated by the
    implicit function theorem) against central differences in the inertia: measured 3e-10."""
    method = lpjax.Composition(lpjax.RK4(), "triple-jump")

    def loss(inertia):
        ys = lpjax.integrate(rigid_body(inertia), method, jnp.asarray(M0), 0.1, 40, save_every=20).ys
        return jnp.sum(ys ** 2 * jnp.arange(1.0, 4.0)[None, :])

    g = jax.grad(loss)(jnp.asarray(I))
    h, e = 1e-5, np.eye(3)
    fd = [(loss(jnp.asarray(I + h * e[i])) - loss(jnp.asarray(I - h * e[i]))) / (2 * h) for i in range(3)]
    np.testing.assert_allclose(g, fd, rtol=1e-7, atol=0)
