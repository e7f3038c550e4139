"""Fitting (lpjax.fit): least squares through the integrator, standard errors, identifiability."""

import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.fit import least_squares
from lpjax.systems import heavy_top, rigid_body

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
    assert fit.gradient <= 1e-10
    assert np.all(np.abs(np.asarray(fit.theta) - I_TRUE[1:]) <= 3 * np.asarray(fit.stderr))
    assert fit.cost <= _residual_cost(_rigid_body_I1_fixed, I_TRUE[1:], y_obs)
    assert fit.sigma == pytest.approx(sigma, rel=0.3)  # estimated from 120 residuals


def _residual_cost(build, theta, y_obs, y0=M0, observe=None):
    sol = lpjax.integrate(build(jnp.asarray(theta)), lpjax.GaussLegendre(2), y0, 0.05, 200)
    ys = np.asarray(sol.ys[5::5])
    ys = ys if observe is None else ys[:, list(observe)]
    return 0.5 * float(np.sum((ys - y_obs) ** 2))


def test_all_three_inertias_of_a_free_rigid_body_are_not_identifiable():
    """M' = M × I⁻¹M is unchanged when I⁻¹ gains a multiple of the identity (M × M = 0): the data
    fix I⁻¹ only up to λ(1, 1, 1), so dI ∝ (I₁², I₂², I₃²) is a null direction."""
    y_obs = _data(rigid_body(jnp.asarray(I_TRUE)), M0, 1e-4, 1)
    fit = least_squares(lambda th: rigid_body(th), jnp.array([1.1, 2.1, 2.9]), M0, T_OBS, y_obs, dt=0.05)
    assert not fit.identifiable
    assert float(fit.singular_values[-1]) <= 1e-8 * float(fit.singular_values[0])
    theta = np.asarray(fit.theta)
    expected = theta**2 / np.linalg.norm(theta**2)
    np.testing.assert_allclose(np.asarray(fit.null_direction), expected, atol=1e-6)
    assert np.all(np.isinf(np.asarray(fit.stderr)))


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
    (dict(t_obs=T_OBS + 0.01), "grid"),
    (dict(y_obs=np.zeros((40, 2))), "shape"),
    (dict(y_obs=np.full((40, 3), np.nan)), "finite"),
    (dict(t_obs=T_OBS[::-1]), "increasing"),
    (dict(observe=(0, 5)), "observe"),
    (dict(theta0=jnp.array([np.nan, 3.0])), "theta0"),
])
def test_bad_input_is_rejected(change, match):
    args = dict(theta0=jnp.array([2.0, 3.0]), t_obs=T_OBS, y_obs=np.zeros((40, 3)), observe=None) | change
    with pytest.raises(ValueError, match=match):
        least_squares(_rigid_body_I1_fixed, args["theta0"], M0, args["t_obs"], args["y_obs"], observe=args["observe"],
                      dt=0.05)


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
