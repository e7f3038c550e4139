"""``integrate(..., controller=...)``: one trajectory with adaptive steps, run by the ensembles'
adaptive member (equal to an adaptive ensemble's members, step for step), with gradients by
the discrete adjoint over the accepted steps (equal to central differences), and clear
refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.systems import heavy_top

RNG = np.random.default_rng(61)
_m, _a = 0.5 * RNG.normal(size=(16, 3)), RNG.normal(size=(16, 3))
Y0S = np.concatenate([_m, _a / np.linalg.norm(_a, axis=1, keepdims=True)], axis=1)
CONTROL = lpjax.PIDController(1e-10, 1e-10)
TS = [1.0, 2.5, 5.0]


def _top(mgl=2.0):
    return heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), mgl)


def test_integrate_adapts_as_the_ensemble_members_do():
    """16 heavy tops: the states at the saves to 1e-12 and the accepted and rejected step counts
    equal to those of an adaptive ensemble (its default kernel) of the same members."""
    sol = lpjax.ensemble(_top(), lpjax.GaussLegendre(2), Y0S, None, controller=CONTROL, t1=5.0, ts=TS)
    one = jax.vmap(lambda y: lpjax.integrate(_top(), lpjax.GaussLegendre(2), y, None, controller=CONTROL, t1=5.0,
                                             ts=TS))(jnp.asarray(Y0S))
    np.testing.assert_allclose(np.asarray(one.ys), np.asarray(sol.observables["state"]), rtol=0, atol=1e-12)
    for k in ("num_accepted_steps", "num_rejected_steps"):
        np.testing.assert_array_equal(np.asarray(one.stats[k]), np.asarray(sol.stats[k]))
    assert np.all(np.asarray(one.stats["num_accepted_steps"]) > 100)
    np.testing.assert_array_equal(np.asarray(one.ts[0]), [0.0, *TS])
    assert bool(jnp.all(one.result._value == lpjax.RESULTS.successful._value))


def test_the_gradient_is_the_discrete_adjoint_over_the_accepted_steps():
    """d/d(y0, mgl) of a weighted sum of the saved states equals central differences to 1e-7
    relative (the step sizes held fixed differ from the whole run's by about the tolerance)."""
    w = jnp.arange(1.0, 7.0)

    def loss(y0, mgl):
        sol = lpjax.integrate(_top(mgl), lpjax.GaussLegendre(2), y0, None, controller=CONTROL, t1=5.0, ts=TS)
        return jnp.sum(sol.ys[1:] * w[None])

    y0, mgl = jnp.asarray(Y0S[3]), jnp.asarray(2.0)
    g_y0, g_mgl = jax.grad(loss, argnums=(0, 1))(y0, mgl)
    eps = 1e-6
    fd_y0 = np.array([(loss(y0.at[k].add(eps), mgl) - loss(y0.at[k].add(-eps), mgl)) / (2 * eps) for k in range(6)])
    fd_mgl = (loss(y0, mgl + eps) - loss(y0, mgl - eps)) / (2 * eps)
    assert np.max(np.abs(np.asarray(g_y0) - fd_y0)) <= 1e-7 * np.max(np.abs(fd_y0))
    assert abs(float(g_mgl) - float(fd_mgl)) <= 1e-7 * abs(float(fd_mgl))


def test_refusals_and_failures():
    top, gl = _top(), lpjax.GaussLegendre(2)
    with pytest.raises(ValueError, match="integrate: an adaptive run .* takes t1=... and save times ts=..., not n_steps"):
        lpjax.integrate(top, gl, Y0S[0], 0.1, 10, controller=CONTROL, t1=1.0)
    with pytest.raises(ValueError, match="starts at t = 0 from a state: it takes no Solution to continue, no t0"):
        lpjax.integrate(top, gl, Y0S[0], None, controller=CONTROL, t1=1.0, t0=0.5)
    with pytest.raises(TypeError, match="integrate: adaptive steps need a local error estimate.*RK4 has none"):
        lpjax.integrate(top, lpjax.RK4(), Y0S[0], None, controller=CONTROL, t1=1.0)
    with pytest.raises(ValueError, match=r"integrate: t1 belong to adaptive runs: pass controller=lpjax.PIDController"):
        lpjax.integrate(top, gl, Y0S[0], 0.1, 10, t1=1.0)
    with pytest.raises(ValueError, match="integrate: ts must be finite, strictly increasing"):
        lpjax.integrate(top, gl, Y0S[0], None, controller=CONTROL, ts=[1.0, 0.5])
    with pytest.raises(RuntimeError, match=r"integrate: .*max_steps.* \(after 5 accepted and 0 rejected steps"):
        lpjax.integrate(top, gl, Y0S[0], 0.01, controller=CONTROL, t1=1.0, max_steps=5)
    sol = lpjax.integrate(top, gl, Y0S[0], 0.01, controller=CONTROL, t1=1.0, max_steps=5, throw=False)
    assert lpjax.RESULTS[sol.result] == lpjax.RESULTS[lpjax.RESULTS.max_steps_reached]
    assert float(sol.stats["t_reached"]) < 1.0
