"""lpjax.PIDController makes diffrax's PIDController's decisions: the same acceptance, next step
and controller state, for the integral, PI and PID settings, with dtmin and dtmax."""

import diffrax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax

SETTINGS = [
    dict(rtol=1e-6, atol=1e-8),
    dict(rtol=1e-9, atol=1e-9, pcoeff=0.4, icoeff=0.3),
    dict(rtol=1e-5, atol=1e-7, pcoeff=0.2, icoeff=0.4, dcoeff=0.1, dtmax=0.3),
    dict(rtol=1e-4, atol=1e-6, dtmin=1e-3, force_dtmin=True, factormin=0.3, factormax=5.0, safety=0.8),
    dict(rtol=1e-4, atol=1e-6, dtmin=1e-3, force_dtmin=False),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=range(len(SETTINGS)))
def test_decisions_equal_diffrax(settings):
    ours, theirs = lpjax.PIDController(**settings), diffrax.PIDController(**settings)
    rng = np.random.default_rng(0)
    dt, state = ours.init(0.05, jnp.float64)
    d_state = (jnp.asarray(1.0), jnp.asarray(1.0), False)
    accepted = rejected = 0
    for _ in range(200):  # a random walk of errors around the tolerance, states carried along both
        y0 = jnp.asarray(rng.normal(size=6))
        y1 = y0 + 0.01 * jnp.asarray(rng.normal(size=6))
        err = jnp.asarray(rng.normal(size=6)) * settings["rtol"] * 10.0 ** rng.uniform(-3, 1.5)
        keep, t0n, t1n, _, d_state, d_result = theirs.adapt_step_size(0.0, dt, y0, y1, None, err, 5, d_state)
        accept, new_dt, state, too_small = ours.adapt(y0, y1, err, dt, 5, state)
        assert bool(accept) == bool(keep)
        np.testing.assert_allclose(new_dt, t1n - t0n, rtol=1e-14)
        np.testing.assert_allclose(state.inv_error, d_state[0], rtol=1e-14)
        np.testing.assert_allclose(state.inv_error_prev, d_state[1], rtol=1e-14)
        assert bool(state.at_dtmin) == bool(d_state[2])
        assert bool(too_small) == (d_result != diffrax.RESULTS.successful)
        accepted, rejected = accepted + bool(accept), rejected + (not bool(accept))
        dt = new_dt
    assert accepted > 20 and rejected > 20  # both branches were exercised


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="rtol must be a finite float > 0"):
        lpjax.PIDController(rtol=0.0, atol=1e-6)
    with pytest.raises(ValueError, match="dtmin = 1.0 exceeds dtmax = 0.1"):
        lpjax.PIDController(rtol=1e-6, atol=1e-6, dtmin=1.0, dtmax=0.1)
    with pytest.raises(ValueError, match="factormin must lie in"):
        lpjax.PIDController(rtol=1e-6, atol=1e-6, factormin=2.0)
