"""Events beside a chaos indicator: a Poincaré section leaves the indicator as it was and the
indicator leaves the section's crossings as they were (bit for bit); a terminal event keeps the
indicator at its last orthonormalisation before the stop; in the scan and native kernels, with
fixed and adaptive steps, and in ``integrate``."""

import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.systems import heavy_top

HT = heavy_top(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 0.0, 1.0]), 1.0)
GL4 = lpjax.GaussLegendre(2)
RNG = np.random.default_rng(64)
_m, _g = RNG.normal(size=(5, 3)), RNG.normal(size=(5, 3))
Y0S = np.concatenate([_m, _g / np.linalg.norm(_g, axis=1, keepdims=True)], axis=1)
SECTION = lpjax.Event(lambda t, y: y[3], direction=1, terminal=False, max_crossings=30)
MEGNO = lpjax.MEGNO()


def _run(kernel, **kw):
    return lpjax.ensemble(HT, GL4, Y0S, 0.01, 2000, save_every=500, kernel=kernel, progress=False, **kw)


def _assert_same_record(a, b):
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("kernel", ["scan", "native"])
def test_a_section_beside_megno_changes_neither(kernel):
    both = _run(kernel, observe=MEGNO, events=SECTION)
    alone, section = _run(kernel, observe=MEGNO), _run(kernel, events=SECTION)
    assert np.all(np.asarray(both.events.count) >= 1)
    _assert_same_record(both.events, section.events)
    for name in ("megno", "megno_y"):
        np.testing.assert_array_equal(both.observables[name], alone.observables[name])
    np.testing.assert_array_equal(both.final_state, alone.final_state)


@pytest.mark.parametrize("kernel", ["scan", "native"])
def test_a_terminal_event_keeps_the_exponent_of_its_last_orthonormalisation(kernel):
    """A stop at t = 7.234 (in step 724): the exponents there are those of the run without the
    event at step 720, their last QR (every 10 steps), through the later saves too; bit for bit
    in the native kernel (XLA compiles the scan's two programs apart: 3e-13 relative)."""
    lyap = lpjax.Lyapunov(k=2, every=10)
    stop = lpjax.Event(lambda t, y: t - 7.234, direction=1)
    run = lpjax.ensemble(HT, GL4, Y0S, 0.01, 1000, save_every=10, kernel=kernel, progress=False, observe=lyap,
                         events=stop)
    free = lpjax.ensemble(HT, GL4, Y0S, 0.01, 1000, save_every=10, kernel=kernel, progress=False, observe=lyap)
    assert np.all(np.asarray(run.result) == int(lpjax.RESULTS.event_occurred._value))
    np.testing.assert_allclose(np.asarray(run.events.ts)[:, 0], 7.234, rtol=1e-12)
    lam = np.asarray(run.observables["lyapunov"])
    rtol = 0 if kernel == "native" else 1e-12
    np.testing.assert_allclose(lam[:, :73], np.asarray(free.observables["lyapunov"])[:, :73], rtol=rtol, atol=0)
    np.testing.assert_array_equal(lam[:, 73:], np.broadcast_to(lam[:, 72:73], lam[:, 73:].shape))


def test_adaptive_steps_a_section_beside_megno_changes_neither():
    pid = lpjax.PIDController(1e-9, 1e-9)

    def run(**kw):
        return lpjax.ensemble(HT, lpjax.GaussLegendre(3), Y0S, None, t1=20.0, controller=pid, kernel="native",
                              progress=False, **kw)

    both, alone, section = run(observe=MEGNO, events=SECTION), run(observe=MEGNO), run(events=SECTION)
    assert np.all(np.asarray(both.events.count) >= 1)
    _assert_same_record(both.events, section.events)
    np.testing.assert_array_equal(both.observables["megno"], alone.observables["megno"])


def test_integrate_returns_the_indicator_and_the_crossings():
    one = lpjax.integrate(HT, GL4, jnp.asarray(Y0S[0]), 0.01, 2000, save_every=500, observe=MEGNO, events=SECTION)
    ens = _run("scan", observe=MEGNO, events=SECTION)
    np.testing.assert_allclose(np.asarray(one.observables["megno"]), ens.observables["megno"][0], rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.asarray(one.events.ts), np.asarray(ens.events.ts)[0], rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.asarray(one.ys)[-1], ens.final_state[0], rtol=1e-12, atol=0)
