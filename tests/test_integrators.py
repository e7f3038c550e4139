"""RK4 and Gauss–Legendre: tableaus, orders against the exact Euler top, invariants, energy."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import ellipk

import lpjax
from lpjax.diagnostics import empirical_order, relative_invariant_error
from lpjax.systems import heavy_top, rigid_body

from .reference import euler_top_exact, euler_top_period, states_at

INERTIA = np.array([1.0, 2.0, 3.0])
M0 = np.array([1.0, 0.5, 0.8])
HT = dict(inertia=np.array([1.0, 1.3, 0.7]), chi=np.array([0.1, -0.2, 1.0]), mgl=2.0)
Y0_HT = np.array([0.4, -0.8, 1.5, 0.3, 0.4, np.sqrt(1 - 0.25)])


@pytest.mark.parametrize("s", [1, 2, 3, 4, 5, 8])
def test_gauss_legendre_tableau(s):
    A, b, c = lpjax._integrator.gauss_legendre_tableau(s)
    assert abs(b.sum() - 1) < 1e-14
    np.testing.assert_allclose(A.sum(1), c, atol=1e-13)
    # symplecticity condition b_i a_ij + b_j a_ji = b_i b_j (Hairer–Lubich–Wanner VI.4)
    np.testing.assert_allclose(b[:, None] * A + (b[:, None] * A).T, np.outer(b, b), atol=1e-13)
    # quadrature order exactly 2s: exact for c^(2s-1); the error for c^(2s) is the Gauss
    # remainder (s!)^4 / ((2s + 1) ((2s)!)^2)
    assert abs(b @ c ** (2 * s - 1) - 1 / (2 * s)) < 1e-13
    remainder = math.factorial(s) ** 4 / ((2 * s + 1) * math.factorial(2 * s) ** 2)
    assert 1 / (2 * s + 1) - b @ c ** (2 * s) == pytest.approx(remainder, rel=1e-3)


def test_gauss_legendre_tableau_known_values():
    A, b, c = lpjax._integrator.gauss_legendre_tableau(2)
    r = np.sqrt(3) / 6
    np.testing.assert_allclose(A, [[0.25, 0.25 - r], [0.25 + r, 0.25]], atol=1e-15)
    np.testing.assert_allclose(c, [0.5 - r, 0.5 + r], atol=1e-15)
    A1, _, _ = lpjax._integrator.gauss_legendre_tableau(1)
    assert A1[0, 0] == pytest.approx(0.5, abs=1e-15)


@pytest.mark.parametrize(
    "method, dts",
    [
        (lpjax.RK4(), [0.2, 0.1, 0.05, 0.025]),
        (lpjax.GaussLegendre(1), [0.2, 0.1, 0.05, 0.025]),
        (lpjax.GaussLegendre(2), [0.2, 0.1, 0.05, 0.025]),
        (lpjax.GaussLegendre(3), [0.4, 0.2, 0.1, 0.05]),
        (lpjax.GaussLegendre(2, solver="fixed_point"), [0.2, 0.1, 0.05, 0.025]),
    ],
    ids=["RK4", "GL1", "GL2", "GL3", "GL2-fixed-point"],
)
def test_order_against_exact_euler_top(method, dts):
    t1 = 10.0
    exact = euler_top_exact(INERTIA, M0, np.array([t1]))[0]
    errs = [np.max(np.abs(y - exact)) for y in states_at(rigid_body(INERTIA), method, M0, dts, t1)]
    p = empirical_order(dts, errs)
    assert abs(p - method.order) <= 0.2, (p, errs)


def _casimir_drift(method, system, y0, dt, n):
    sol = lpjax.integrate(system, method, y0, dt, n, save_every=100)
    return np.max(np.asarray(relative_invariant_error(system.casimirs, sol.ys)))


@pytest.mark.parametrize("s", [1, 2, 3])
def test_casimir_rigid_body_to_roundoff_and_rk4_drifts(s):
    sys_ = rigid_body(INERTIA)
    gl = _casimir_drift(lpjax.GaussLegendre(s), sys_, M0, 0.1, 10_000)
    rk = _casimir_drift(lpjax.RK4(), sys_, M0, 0.1, 10_000)
    assert gl <= 1e-12
    assert rk > 1e-8 and rk > 1e3 * gl


@pytest.mark.parametrize("s", [1, 2, 3])
def test_casimirs_heavy_top_to_roundoff_and_rk4_drifts(s):
    sys_ = heavy_top(**HT)
    gl = _casimir_drift(lpjax.GaussLegendre(s), sys_, Y0_HT, 0.05, 10_000)
    rk = _casimir_drift(lpjax.RK4(), sys_, Y0_HT, 0.05, 10_000)
    assert gl <= 1e-12
    assert rk > 1e-8 and rk > 1e3 * gl


def test_quadratic_energy_of_rigid_body_kept_by_gauss_legendre():
    sys_ = rigid_body(INERTIA)
    sol = lpjax.integrate(sys_, lpjax.GaussLegendre(2), M0, 0.1, 10_000, save_every=100)
    assert np.max(np.asarray(relative_invariant_error(sys_.energy, sol.ys))) <= 1e-12


def _energy_growth(method, dt, periods=10):
    """Max energy error over [0, 10T] / max over [0, T] for the pendulum H = p²/2 − cos q."""
    q0 = 2.0
    T = 4 * ellipk(np.sin(q0 / 2) ** 2)
    n_per = int(round(T / dt))
    sys_ = lpjax.CanonicalSystem(lambda y: 0.5 * y[1] ** 2 - jnp.cos(y[0]), n=1)
    sol = lpjax.integrate(sys_, method, jnp.array([q0, 0.0]), T / n_per, n_per * periods)
    err = np.asarray(relative_invariant_error(sys_.energy, sol.ys))
    return err[: n_per + 1].max(), err.max()


@pytest.mark.parametrize("s", [1, 2])
def test_energy_error_bounded_for_symplectic_gauss_legendre(s):
    first, whole = _energy_growth(lpjax.GaussLegendre(s), 0.1)
    assert whole < 3 * first
    rk_first, rk_whole = _energy_growth(lpjax.RK4(), 0.1)
    assert rk_whole > 5 * rk_first  # RK4 drifts secularly, so the same check fails for it


def test_energy_bounded_on_rigid_body_over_ten_periods():
    """Rigid body, t in [0, 10T] with T the period of the exact solution."""
    sys_ = rigid_body(INERTIA)
    T = euler_top_period(INERTIA, M0)
    n_per = 100
    sol = lpjax.integrate(sys_, lpjax.GaussLegendre(2), M0, T / n_per, 10 * n_per)
    err = np.asarray(relative_invariant_error(sys_.energy, sol.ys))
    assert err.max() < max(3 * err[: n_per + 1].max(), 1e-13)
    ex = euler_top_exact(INERTIA, M0, np.asarray(sol.ts))
    assert np.max(np.abs(np.asarray(sol.ys) - ex)) < 1e-4


def test_float32_invariants_to_float32_roundoff():
    sys_ = rigid_body(jnp.asarray(INERTIA, jnp.float32))
    sol = lpjax.integrate(sys_, lpjax.GaussLegendre(2), jnp.asarray(M0, jnp.float32), 0.1, 1000, dtype=jnp.float32)
    assert sol.ys.dtype == jnp.float32
    assert np.max(np.asarray(relative_invariant_error(sys_.casimirs, sol.ys))) < 1e-5


def test_nonconvergence_is_reported_in_result_code():
    sys_ = rigid_body(INERTIA)
    bad = lpjax.GaussLegendre(2, solver="fixed_point", max_iters=1)
    sol = lpjax.integrate(sys_, bad, M0, 0.5, 10, throw=False)
    assert sol.result == lpjax.RESULTS.implicit_solve_failed
    assert int(sol.stats["num_failed_steps"]) == 10
    with pytest.raises(RuntimeError, match=r"^integrate: The implicit equations of a step did not converge.* "
                                           r"\(10 of 10 steps failed; throw=False returns"):
        lpjax.integrate(sys_, bad, M0, 0.5, 10)
    with pytest.raises(Exception, match="did not converge"):  # under an outer jit: equinox's error, same words
        jax.block_until_ready(jax.jit(lambda y: lpjax.integrate(sys_, bad, y, 0.5, 10).ys)(M0))
    for good_method in (lpjax.GaussLegendre(2), lpjax.GaussLegendre(2, solver="newton")):
        good = lpjax.integrate(sys_, good_method, M0, 0.5, 10, throw=False)
        assert good.result == lpjax.RESULTS.successful
        assert float(good.stats["max_residual"]) < 1e-13
        assert 1 <= int(good.stats["max_iterations"]) <= good_method.max_iters


def test_nonfinite_state_is_reported():
    sys_ = lpjax.CanonicalSystem(lambda y: 0.5 * y[1] ** 2 - y[0] ** 4, n=1)  # blows up
    sol = lpjax.integrate(sys_, lpjax.RK4(), jnp.array([1.0, 1.0]), 0.1, 200, throw=False)
    assert sol.result == lpjax.RESULTS.nonfinite_state


def test_y0_as_a_list_or_tuple_and_the_success_code_by_name():
    sys_ = rigid_body(INERTIA)
    ref = lpjax.integrate(sys_, lpjax.GaussLegendre(2), jnp.array([1.0, 0.0, 2.0]), 0.1, 10)
    for y0 in ([1, 0, 2], (1.0, 0.0, 2.0)):
        sol = lpjax.integrate(sys_, lpjax.GaussLegendre(2), y0, 0.1, 10)
        np.testing.assert_array_equal(sol.ys, ref.ys)
    assert repr(lpjax.RESULTS.successful).endswith("RESULTS<successful>")
