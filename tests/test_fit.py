"""Fitting (lpjax.fit): least squares through the integrator, standard errors, identifiability,
goodness of fit, several starting points, the initial state, observation times off the grid."""

import os
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
    for line in fixed:  # each printed combination w·θ is ⟂ the null direction θ² (4 printed digits)
        terms = re.findall(r"([−+]?) ?([\d.e-]+)·θ\[(\d)\]", line.split(" = ")[0])
        w = np.zeros(3)
        for sign, value, i in terms:
            w[int(i)] = (-1 if sign == "−" else 1) * float(value)
        assert abs(w @ expected) <= 1e-3 * np.linalg.norm(w)


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


def test_i2_i3_and_a_noisy_initial_state_are_recovered_within_three_standard_errors():
    """M(0) is measured with the rest (41 samples from t = 0, σ = 1e-3, the reference from scipy's
    DOP853): fitting it alongside (I₂, I₃) recovers all five within 3 standard errors, and the
    trajectory pins M(0) more tightly than its own sample does (standard error below σ/2)."""
    sigma, t = 1e-3, 0.25 * np.arange(41)
    y_obs = _euler_top(I_TRUE, M0, t) + sigma * np.random.default_rng(0).standard_normal((41, 3))
    fit = least_squares(_rigid_body_I1_fixed, jnp.array([1.7, 3.4]), jnp.asarray(y_obs[0]), t, y_obs, dt=0.05,
                        fit_y0=True)
    assert fit.converged and fit.consistent and fit.identifiable and fit.fit_y0 == (0, 1, 2)
    assert fit.singular_values.shape == (5,) and fit.gradient <= 1e-10
    assert np.all(np.abs(np.asarray(fit.theta) - I_TRUE[1:]) <= 3 * np.asarray(fit.stderr))
    assert np.all(np.abs(np.asarray(fit.y0) - np.asarray(M0)) <= 3 * np.asarray(fit.y0_stderr))
    assert np.all(np.asarray(fit.y0_stderr) < sigma / 2)
    assert fit.y_fit.shape == y_obs.shape and "y0[2] =" in str(fit)


def test_part_of_the_initial_state_by_a_mask():
    """M₂(0) known exactly, M₁(0) and M₃(0) noisy: a mask fits those two and leaves M₂(0) as given."""
    sigma, t = 1e-3, 0.25 * np.arange(41)
    y_obs = _euler_top(I_TRUE, M0, t) + sigma * np.random.default_rng(3).standard_normal((41, 3))
    start = np.asarray(y_obs[0]).copy()
    start[1] = M0[1]
    fit = least_squares(_rigid_body_I1_fixed, jnp.array([1.7, 3.4]), jnp.asarray(start), t, y_obs, dt=0.05,
                        fit_y0=np.array([True, False, True]))
    assert fit.fit_y0 == (0, 2) and fit.singular_values.shape == (4,) and fit.identifiable
    assert float(fit.y0[1]) == float(M0[1]) and float(fit.y0_stderr[1]) == 0.0
    z = np.concatenate([np.asarray(fit.theta) - I_TRUE[1:], np.asarray(fit.y0 - M0)[[0, 2]]])
    assert np.all(np.abs(z) <= 3 * np.concatenate([np.asarray(fit.stderr), np.asarray(fit.y0_stderr)[[0, 2]]]))


def test_irregular_sample_times():
    """30 times drawn at random and 20 on the grid (every 10th step of dt = 0.05), data from
    scipy's DOP853: the fit recovers (I₂, I₃); at the times on the grid its model is integrate's
    grid state itself (to 1e-12, as an on-grid fit has it); off the grid, one partial GL4 step from
    the last grid point adds only a local error O(h⁵) to the global one, so the model's error there
    stays within 1.5× the largest error on the grid."""
    rng = np.random.default_rng(0)
    t = np.sort(np.concatenate([rng.uniform(0, 10, 30), 0.5 * np.arange(1, 21)]))
    y_obs = _euler_top(I_TRUE, M0, t) + 1e-3 * rng.standard_normal((50, 3))
    fit = least_squares(_rigid_body_I1_fixed, jnp.array([1.7, 3.4]), M0, t, y_obs, dt=0.05)
    assert fit.converged and fit.consistent and fit.identifiable
    assert np.all(np.abs(np.asarray(fit.theta) - I_TRUE[1:]) <= 3 * np.asarray(fit.stderr))

    on = np.abs(t / 0.05 - np.rint(t / 0.05)) <= 1e-9
    assert on.sum() == 20
    grid = np.asarray(lpjax.integrate(_rigid_body_I1_fixed(fit.theta), lpjax.GaussLegendre(2), M0, 0.05, 200).ys)
    np.testing.assert_allclose(np.asarray(fit.y_fit)[on], grid[np.rint(t[on] / 0.05).astype(int)], rtol=0, atol=1e-12)

    inertia = np.concatenate([[1.0], np.asarray(fit.theta)])
    grid_error = np.max(np.abs(grid - _euler_top(inertia, M0, 0.05 * np.arange(201))))
    off_error = np.max(np.abs(np.asarray(fit.y_fit)[~on] - _euler_top(inertia, M0, t)[~on]))
    assert 0 < grid_error < 1e-6 and off_error <= 1.5 * grid_error


_X64_OFF = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    from lpjax.fit import least_squares
    from lpjax.systems import rigid_body
    assert not jax.config.jax_enable_x64
    build = lambda th: rigid_body(jnp.concatenate([jnp.ones(1), th]))
    t, y = np.arange(1, 11) * 0.1, np.ones((10, 3))
    for name, args in {"theta0": (np.array([2.0, 3.0]), jnp.ones(3, jnp.float32), y.astype(np.float32)),
                       "y0": (jnp.array([2.0, 3.0]), [1.0, 0.5, 0.8], y.astype(np.float32)),
                       "y_obs": (jnp.array([2.0, 3.0]), jnp.ones(3, jnp.float32), y)}.items():
        try:
            least_squares(build, args[0], args[1], t, args[2], dt=0.1)
            print(name, "ran")
        except ValueError as e:
            print(name, "refused:", e)
""")


def test_float64_numpy_input_with_x64_off_is_refused():
    """With x64 off, NumPy or Python float64 theta0, y0 or y_obs is an error saying how to turn x64
    on (JAX would fit in float32 without a word), before anything runs."""
    run = subprocess.run([sys.executable, "-c", _X64_OFF], capture_output=True, text=True, timeout=300,
                         env=os.environ | {"JAX_ENABLE_X64": "0"})
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout.splitlines()
    assert len(out) == 3
    for line, name in zip(out, ("theta0", "y0", "y_obs")):
        assert line.startswith(f"{name} refused: least_squares: {name} is float64") and "jax_enable_x64" in line
