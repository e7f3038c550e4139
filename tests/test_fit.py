"""Fitting (lpjax.fit): least squares through the integrator, standard errors, identifiability,
goodness of fit, several starting points, the initial state, observation times off the grid."""

import re
import subprocess
import sys
import textwrap
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import lpjax
from lpjax.fit import FitWarning, least_squares
from lpjax.systems import heavy_top, rigid_body

pytestmark = pytest.mark.filterwarnings("error::lpjax.fit.FitWarning")  # a good fit must not warn

I_TRUE = np.array([1.0, 2.0, 3.0])
M0 = jnp.array([1.0, 0.5, 0.8])
T_OBS = np.arange(1, 41) * 0.25  # every 5th step of dt = 0.05


def _data(system, y0, sigma, seed, observe=None):
    sol = lpjax.integrate(system, lpjax.GaussLegendre(2), y0, 0.05, 200)
    ys = np.asarray(sol.ys[5::5])
    ys = ys if observe is None else ys[:, list(observe)]
    return ys + sigma * np.random.default_rng(seed).standard_normal(ys.shape)


def _rigid_body_I1_fixed(theta):
    return rigid_body(jnp.concatenate([jnp.ones(1), theta]))


def test_rigid_body_with_I1_fixed_is_recovered_within_standard_errors():
    sigma = 1e-3
    y_obs = _data(rigid_body(jnp.asarray(I_TRUE)), M0, sigma, 0)
    fit = least_squares(_rigid_body_I1_fixed, jnp.array([1.7, 3.4]), M0, T_OBS, y_obs, dt=0.05)
    assert fit.identifiable and fit.null_direction is None
    assert fit.converged and fit.consistent and fit.reduced_chi2 is None and (fit.starts, fit.starts_at_best) == (1, 1)
    assert fit.max_standardized_residual < 4 and abs(fit.residual_correlation) < 0.3
    assert fit.gradient <= 1e-10
    assert np.all(np.abs(np.asarray(fit.theta) - I_TRUE[1:]) <= 3 * np.asarray(fit.stderr))
    assert fit.cost <= _residual_cost(_rigid_body_I1_fixed, I_TRUE[1:], y_obs)
    assert fit.sigma == pytest.approx(sigma, rel=0.3)  # estimated from 120 residuals


def _residual_cost(build, theta, y_obs, y0=M0, observe=None):
    sol = lpjax.integrate(build(jnp.asarray(theta)), lpjax.GaussLegendre(2), y0, 0.05, 200)
    ys = np.asarray(sol.ys[5::5])
    ys = ys if observe is None else ys[:, list(observe)]
    return 0.5 * float(np.sum((ys - y_obs) ** 2))


def _euler_top(inertia, m0, t):
    """M(t) of M' = M × I⁻¹M from scipy's DOP853 at rtol 1e-13 (the reference from outside lpjax)."""
    inertia = np.asarray(inertia, float)
    sol = solve_ivp(lambda _, m: np.cross(m, m / inertia), (0.0, float(t[-1])), np.asarray(m0, float),
                    method="DOP853", rtol=1e-13, atol=1e-14, t_eval=t)
    return sol.y.T


def _fit_warnings(fn):
    """``fn()`` and the messages of the FitWarnings it emitted."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in record if issubclass(w.category, FitWarning)]


def test_all_three_inertias_of_a_free_rigid_body_warn_naming_the_null_direction():
    """M' = M × I⁻¹M is unchanged when I⁻¹ gains a multiple of the identity (M × M = 0): the data
    fix I⁻¹ only up to λ(1, 1, 1), so dI ∝ (I₁², I₂², I₃²) is a null direction, and what the data
    fix are 1/I₁ − 1/I₂ and 1/I₁ − 1/I₃. True I = (1.5, 2.5, 4.0), 50 samples, σ = 2e-3: the fit
    converges and is consistent with the noise, so only the warning tells that θ is not fitted."""
    true, sigma = np.array([1.5, 2.5, 4.0]), 2e-3
    t = 0.2 * np.arange(1, 51)
    y_obs = _euler_top(true, M0, t) + sigma * np.random.default_rng(1).standard_normal((50, 3))
    fit, messages = _fit_warnings(
        lambda: least_squares(lambda th: rigid_body(th), jnp.array([1.4, 2.6, 3.9]), M0, t, y_obs, dt=0.05))
    assert fit.converged and fit.consistent and not fit.identifiable
    assert float(fit.singular_values[-1]) <= 1e-8 * float(fit.singular_values[0])
    theta = np.asarray(fit.theta)
    expected = theta**2 / np.linalg.norm(theta**2)
    np.testing.assert_allclose(np.asarray(fit.null_direction), expected, atol=1e-6)
    assert np.all(np.isinf(np.asarray(fit.stderr)))
    (message,) = messages
    named = re.search(r"do not identify .* null direction \(θ\[0\]: (\S+), θ\[1\]: (\S+), θ\[2\]: (\S+)\)", message)
    np.testing.assert_allclose([float(x) for x in named.groups()], expected, atol=1e-4)  # printed to 4 digits

    # the combinations the data fix are recovered: 1/I₁ − 1/I_j within 3 standard errors of the
    # truth, by the delta method over the directions the data fix (the gradient is ⟂ the null one)
    s, V = np.asarray(fit.singular_values), np.asarray(fit.singular_vectors)
    for j in (1, 2):
        grad = np.zeros(3)
        grad[0], grad[j] = -1 / theta[0] ** 2, 1 / theta[j] ** 2
        assert abs(grad @ V[-1]) <= 1e-6 * np.linalg.norm(grad)
        se = fit.sigma * np.sqrt(np.sum((V[:2] @ grad / s[:2]) ** 2))
        assert abs((1 / theta[0] - 1 / theta[j]) - (1 / true[0] - 1 / true[j])) <= 3 * se
    text = str(fit)
    assert "NOT IDENTIFIABLE" in text and text.count("(not fixed by the data)") == 3
    fixed = text.split("The data fix these combinations")[1].splitlines()[1:]
    assert len(fixed) == 2 and all(re.search(r"= \S+ ± \S+$", line) for line in fixed)


def _heavy_top(theta):
    return heavy_top(theta[:3], theta[3:], 1.0)


def test_heavy_top_inertia_and_centre_of_mass_are_recovered():
    true = np.array([1.0, 1.3, 0.6, 0.1, -0.2, 0.9])
    y0 = jnp.array([0.3, 0.2, 1.5, 0.0, np.sin(0.4), np.cos(0.4)])
    sigma = 1e-3
    y_obs = _data(_heavy_top(jnp.asarray(true)), y0, sigma, 2)
    start = jnp.asarray(true * np.array([1.1, 0.9, 1.1, 0.8, 1.2, 1.05]))
    fit = least_squares(_heavy_top, start, y0, T_OBS, y_obs, dt=0.05)
    assert fit.identifiable and fit.gradient <= 1e-10
    assert np.all(np.abs(np.asarray(fit.theta) - true) <= 3 * np.asarray(fit.stderr))
    assert fit.cost <= _residual_cost(_heavy_top, true, y_obs, y0=y0)


def test_partial_observation():
    observe = (0, 2)
    y_obs = _data(rigid_body(jnp.asarray(I_TRUE)), M0, 1e-4, 3, observe)
    fit = least_squares(_rigid_body_I1_fixed, jnp.array([1.8, 3.2]), M0, T_OBS, y_obs, observe=observe, dt=0.05)
    assert fit.identifiable and np.all(np.abs(np.asarray(fit.theta) - I_TRUE[1:]) <= 3 * np.asarray(fit.stderr))


@pytest.mark.parametrize("change, match", [
    (dict(t_obs=np.concatenate([[-0.25], T_OBS[1:]])), "increasing and >= 0"),
    (dict(fit_y0=(0, 3)), "fit_y0"),
    (dict(fit_y0=np.array([True, False])), "fit_y0"),
    (dict(y_obs=np.zeros((40, 2))), "shape"),
    (dict(y_obs=np.full((40, 3), np.nan)), "finite"),
    (dict(t_obs=T_OBS[::-1]), "increasing"),
    (dict(observe=(0, 5)), "observe"),
    (dict(theta0=jnp.array([np.nan, 3.0])), "theta0"),
])
def test_bad_input_is_rejected(change, match):
    args = dict(theta0=jnp.array([2.0, 3.0]), t_obs=T_OBS, y_obs=np.zeros((40, 3)), observe=None, fit_y0=False) | change
    with pytest.raises(ValueError, match=match):
        least_squares(_rigid_body_I1_fixed, args["theta0"], M0, args["t_obs"], args["y_obs"], observe=args["observe"],
                      dt=0.05, fit_y0=args["fit_y0"])


_BUILDS = [0]


def _counting_build(theta):
    _BUILDS[0] += 1  # Python runs this only while tracing (and once before, to check the system)
    return rigid_body(jnp.concatenate([jnp.ones(1), theta]))


def test_a_second_fit_with_new_data_does_not_retrace():
    y_a = _data(rigid_body(jnp.asarray(I_TRUE)), M0, 1e-4, 4)
    least_squares(_counting_build, jnp.array([1.8, 3.2]), M0, T_OBS, y_a, dt=0.05)
    traced = _BUILDS[0]
    y_b = _data(rigid_body(jnp.array([1.0, 2.2, 2.9])), 1.1 * M0, 1e-4, 5)
    fit = least_squares(_counting_build, jnp.array([2.0, 3.0]), 1.1 * M0, T_OBS, y_b, dt=0.05)
    assert _BUILDS[0] == traced + 1  # only the eager check of build(theta0)
    np.testing.assert_allclose(fit.theta, [2.2, 2.9], atol=3 * float(jnp.max(fit.stderr)))


def _three_inertia_data():
    """The newcomer's case: 40 samples of M(t), noise 1e-3; from (1.2, 1.7, 3.4), plain
    Levenberg–Marquardt stops at a local minimum with cost 17.4 (θ ≈ (0.945, 4.175, 0.7245))."""
    return _data(rigid_body(jnp.asarray(I_TRUE)), M0, 1e-3, 0)


def test_a_fit_that_misses_the_data_is_flagged_then_fixed_by_several_starts():
    y_obs = _three_inertia_data()
    start = jnp.array([1.2, 1.7, 3.4])
    bad, messages = _fit_warnings(
        lambda: least_squares(lambda th: rigid_body(th), start, M0, T_OBS, y_obs, dt=0.05, sigma=1e-3))
    assert any(re.search(r"inconsistent with the noise: reduced chi2 .*try starts=", m) for m in messages)
    assert bad.converged and not bad.consistent  # a true local minimum, not an unfinished run
    assert bad.cost > 10 and bad.reduced_chi2 > 1e5 and bad.max_standardized_residual > 500
    assert bad.residual_correlation > 0.9
    _, messages = _fit_warnings(lambda: least_squares(lambda th: rigid_body(th), start, M0, T_OBS, y_obs, dt=0.05))
    assert any("residuals correlated in time" in m for m in messages)  # flagged without sigma too

    two = least_squares(_rigid_body_I1_fixed, jnp.array([1.7, 3.4]), M0, T_OBS, y_obs, dt=0.05, sigma=1e-3)
    fit, messages = _fit_warnings(
        lambda: least_squares(lambda th: rigid_body(th), start, M0, T_OBS, y_obs, dt=0.05, sigma=1e-3, starts=8))
    assert len(messages) == 1 and "do not identify" in messages[0]  # the best start: consistent, not identified
    assert fit.consistent and fit.starts == 8 and 1 <= fit.starts_at_best < 8
    assert abs(fit.cost - two.cost) <= 1e-6 * two.cost
    assert two.reduced_chi2 == pytest.approx(1, abs=5 * np.sqrt(2 / 118))
    # on the null family: 1/θ − 1/(1, θ₂, θ₃) of the two-parameter fit is a multiple of (1, 1, 1)
    shift = 1 / np.asarray(fit.theta) - 1 / np.concatenate([[1.0], np.asarray(two.theta)])
    assert np.ptp(shift) <= 1e-6 and abs(shift[0]) > 1e-3


def test_starts_as_an_array_and_a_start_whose_integration_fails():
    """A start at I₂ = 1e-4 makes GL4's fixed-point iteration fail (and its trial steps reach
    negative inertias): that start is dropped, the others go on. With no usable start, the error
    says so."""
    y_obs = _data(rigid_body(jnp.asarray(I_TRUE)), M0, 1e-4, 6)
    starts = np.array([[1.7, 3.4], [1e-4, 3.0], [2.3, 2.6]])
    fit = least_squares(_rigid_body_I1_fixed, jnp.array([1.7, 3.4]), M0, T_OBS, y_obs, dt=0.05, starts=starts)
    assert (fit.starts, fit.starts_at_best) == (3, 2) and fit.consistent
    np.testing.assert_allclose(fit.theta, I_TRUE[1:], atol=3 * float(jnp.max(fit.stderr)))
    with pytest.raises(ValueError, match="integration failed from every starting point"):
        least_squares(_rigid_body_I1_fixed, jnp.array([1e-4, 3.0]), M0, T_OBS, y_obs, dt=0.05)
    for bad in (0, np.ones((2, 3)), np.array([[np.nan, 1.0]])):
        with pytest.raises(ValueError, match="starts must be"):
            least_squares(_rigid_body_I1_fixed, jnp.array([1.7, 3.4]), M0, T_OBS, y_obs, dt=0.05, starts=bad)


def test_an_unfinished_minimisation_warns():
    y_obs = _data(rigid_body(jnp.asarray(I_TRUE)), M0, 1e-4, 7)
    with pytest.warns(FitWarning) as record:
        fit = least_squares(_rigid_body_I1_fixed, jnp.array([1.5, 3.9]), M0, T_OBS, y_obs, dt=0.05, max_steps=2)
    assert not fit.converged
    assert any("did not converge within max_steps=2" in str(w.message) for w in record)
