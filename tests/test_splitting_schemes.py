"""Blanes & Moan's splitting schemes as compositions of a first-order method and its adjoint:
the published sequences, their orders on splittings, Suris maps and Gauss–Legendre (against the
exact Euler top and DOP853 at 1e-13), and the Runge–Kutta–Nyström schemes' structural
condition (a kick in an abelian ideal, a drift with an exact flow)."""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import lpjax
from lpjax._integrator.composition import SPLITTING_SCHEMES, splitting_alphas
from lpjax.algebras import euclidean
from lpjax.diagnostics import empirical_order
from lpjax.systems import heavy_top, lagrange_top, rigid_body

from .reference import euler_top_exact, states_at

RB = rigid_body(jnp.array([1.0, 2.0, 3.0]))
M0 = jnp.array([0.4, -0.8, 1.5])
TOP = lagrange_top(3, frame="rest")
TOP0 = jnp.array([0.3, -0.2, 0.5, 0.0, 0.6, 0.8])
# the planar pendulum on e(2)*: h = ½M² + 2P₁, |P| = 1 (a kick on the translations, a drift on so(2))
PEND = lpjax.LiePoissonSystem(euclidean(2), lambda mu: 0.5 * mu[0] ** 2 + 2.0 * mu[1], -1)
PEND0 = jnp.array([1.2, 0.6, 0.8])
split = lpjax.LiePoissonSplitting.for_system


def _dop853(system, y0, T):
    field = lambda t, y: np.asarray(system.vector_field(jnp.asarray(y)))  # noqa: E731
    return solve_ivp(field, (0, T), np.asarray(y0), method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1]


@pytest.mark.parametrize("scheme", list(SPLITTING_SCHEMES))
def test_the_alphas_give_back_the_published_sequence(scheme):
    """``f_1 = α_1``, ``s_i = α_{2i−1} + α_{2i}``, ``f_{i+1} = α_{2i} + α_{2i+1}``: the published
    coefficients, each operator's summing to 1."""
    a = np.concatenate([[0.0], splitting_alphas(scheme), [0.0]])
    firsts, seconds = a[0::2] + a[1::2], a[1:-1:2] + a[2:-1:2]
    s = SPLITTING_SCHEMES[scheme]
    np.testing.assert_allclose(firsts[: len(s.first)], s.first, rtol=0, atol=1e-15)
    np.testing.assert_allclose(seconds[: len(s.second)], s.second, rtol=0, atol=1e-15)
    assert abs(firsts.sum() - 1) <= 1e-15 and abs(seconds.sum() - 1) <= 1e-15
    assert np.array_equal(a, a[::-1])


_ORDERS = [  # measured 4.02, 5.96, 5.95, 5.98, 5.95
    ("S6 of the rigid body's splitting", RB, split(RB), M0, "blanes-moan-s6", 4, 0.4),
    ("S10 of the rigid body's splitting", RB, split(RB), M0, "blanes-moan-s10", 6, 0.8),
    ("S10 of the exact flows", RB, split(RB, "exact"), M0, "blanes-moan-s10", 6, 0.8),
    ("S10 of GL2", RB, lpjax.GaussLegendre(1), M0, "blanes-moan-s10", 6, 0.8),
    ("S10 of the Suris map", TOP, lpjax.SurisLagrangeTop(), TOP0, "blanes-moan-s10", 6, 0.4),
]


@pytest.mark.parametrize("name, system, inner, y0, scheme, order, dt_max", _ORDERS, ids=[c[0] for c in _ORDERS])
def test_orders(name, system, inner, y0, scheme, order, dt_max):
    T = 4.0
    ref = np.asarray(euler_top_exact(np.array([1.0, 2.0, 3.0]), np.asarray(M0), T)) if system is RB else _dop853(
        system, y0, T)
    method = lpjax.Composition(inner, scheme)
    assert method.order == order
    dts = [dt_max / k for k in (1, 2, 3, 4)]
    errs = [float(np.max(np.abs(y - ref))) for y in states_at(system, method, y0, dts, T)]
    p = empirical_order(dts, errs)
    assert abs(p - order) <= 0.2, (p, errs)


@pytest.mark.parametrize("scheme, order, steps", [("blanes-moan-srkn11", 6, (30, 36, 45, 60)),
                                                  ("blanes-moan-srkn6", 4, (60, 90, 120, 180))])
def test_the_runge_kutta_nystrom_schemes_orders_on_the_pendulum(scheme, order, steps):
    """Measured 5.96 and 4.04 (T = 6; errors 1e-9 … 2e-11 for SRKN11, whose error constant is
    small: below dt = 0.1 it meets roundoff)."""
    T = 6.0
    ref = _dop853(PEND, PEND0, T)
    method = lpjax.Composition(split(PEND), scheme)
    errs = [float(np.max(np.abs(lpjax.integrate(PEND, method, PEND0, T / n, n).ys[-1] - ref))) for n in steps]
    p = empirical_order([T / n for n in steps], errs)
    assert abs(p - order) <= 0.2, (p, errs)


def test_a_runge_kutta_nystrom_scheme_is_refused_where_its_order_does_not_hold():
    ht = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
    y0 = jnp.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386])
    with pytest.raises(ValueError, match="q0 and q1 do not commute on se\\(3\\)"):
        lpjax.integrate(ht, lpjax.Composition(split(ht), "blanes-moan-srkn11"), y0, 0.1, 10)
    with pytest.raises(ValueError, match="needs linear pieces"):
        lpjax.integrate(RB, lpjax.Composition(split(RB), "blanes-moan-srkn6"), M0, 0.1, 10)
    with pytest.raises(ValueError, match="Runge–Kutta–Nyström scheme"):
        lpjax.Composition(lpjax.GaussLegendre(1), "blanes-moan-srkn11")
    with pytest.raises(ValueError, match='flow="cayley" is not one'):
        lpjax.integrate(PEND, lpjax.Composition(split(PEND, "cayley"), "blanes-moan-srkn11"), PEND0, 0.1, 10)


def test_a_splitting_scheme_of_a_splitting_keeps_the_casimirs_and_is_symmetric():
    ht = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
    y0 = jnp.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386])
    method = lpjax.Composition(split(ht), "blanes-moan-s10")
    ys = lpjax.integrate(ht, method, y0, 0.2, 500).ys
    assert float(jnp.max(jnp.abs(jnp.sum(ys[:, 3:] ** 2, 1) - 1))) <= 1e-13
    back = method.step(ht, method.step(ht, y0, 0.2)[0], -0.2)[0]
    np.testing.assert_allclose(back, y0, rtol=0, atol=1e-14)
