"""How lpjax.ensemble feeds a device: chunk k + 1 is started before chunk k is fetched, results
are written by another thread, and the state observable's ends are not stored twice (they are
``y0s`` and ``final_state``)."""

import logging
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax._ensemble._state_saves import StateSaves
from lpjax.systems import rigid_body

RB = rigid_body(jnp.array([1.0, 2.0, 3.0]))
M0 = np.random.default_rng(11).normal(size=(400, 3))


def test_chunk_k_plus_1_is_dispatched_before_chunk_k_is_fetched(caplog):
    """One worker (as on a GPU): the main thread dispatches, a writer thread collects. Chunk
    k + 1 is dispatched before chunk k is collected, chunk k is collected (started) before
    chunk k + 3 is dispatched; the collects run on another thread; the results equal those of the threaded CPU run bit for
    bit."""
    threaded = lpjax.ensemble(RB, lpjax.MoserVeselov(), M0, 0.05, 40, save_every=10, chunk_size=100, kernel="scan")
    with caplog.at_level(logging.DEBUG, logger="lpjax.ensemble"):  # one worker thread: the pipeline
        sol = lpjax.ensemble(RB, lpjax.MoserVeselov(), M0, 0.05, 40, save_every=10, chunk_size=100,
                             kernel=lpjax.kernels.Scan(threads=1))
    events = [(r.getMessage().split()[0], int(r.getMessage().split()[-1]), r.thread) for r in caplog.records
              if r.name == "lpjax.ensemble"]
    at = {(what, k): i for i, (what, k, _) in enumerate(events)}
    assert sorted(at) == sorted((what, k) for what in ("dispatch", "collect") for k in range(4))
    for k in range(3):  # the next chunk is on the device before this one is fetched
        assert at["dispatch", k + 1] < at["collect", k]
    for k in range(1):  # and at most three chunks are in flight
        assert at["collect", k] < at["dispatch", k + 3]
    main = threading.get_ident()
    assert {t for what, _, t in events if what == "dispatch"} == {main}
    assert main not in {t for what, _, t in events if what == "collect"}
    for a, b in [(sol.final_state, threaded.final_state), (sol.observables["state"], threaded.observables["state"]),
                 (sol.result, threaded.result)]:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("save_every", [40, 10])
def test_state_ends_are_the_inputs_and_final_states(tmp_path, save_every):
    """The default observable's first save is y0s and its last final_state, bit for bit, and
    only the saves between are stored (in memory and in the store); the whole array equals
    integrate's states."""
    y0s = M0[:50]
    sol = lpjax.ensemble(RB, lpjax.GaussLegendre(2), y0s, 0.05, 40, save_every=save_every, kernel="scan")
    stored = lpjax.ensemble(RB, lpjax.GaussLegendre(2), y0s, 0.05, 40, save_every=save_every, kernel="scan",
                            out=str(tmp_path / "s"))
    ref = jax.vmap(lambda y: lpjax.integrate(RB, lpjax.GaussLegendre(2), y, 0.05, 40, save_every=save_every))(
        jnp.asarray(y0s))
    n_save = 40 // save_every
    for s in (sol, stored, lpjax.open_ensemble(str(tmp_path / "s"))):
        states = s.observables["state"]
        assert isinstance(states, StateSaves) and states.shape == (50, n_save + 1, 3)
        assert s.settings["state_ends"] == [True, True]
        np.testing.assert_array_equal(states[:, 0], y0s)
        np.testing.assert_array_equal(states[:, -1], np.asarray(s.final_state))
        np.testing.assert_allclose(np.asarray(states), ref.ys, rtol=0, atol=1e-13)
    assert stored_shape(tmp_path / "s") == (50, n_save - 1, 3)


def stored_shape(path):
    import zarr

    return zarr.open_group(str(path), mode="r")["observables/state"].shape


def test_a_start_observed_to_roundoff_is_stored():
    """A collective method observes its initial state through the momentum map of the lifted
    state (y0 to roundoff, not bit for bit): its first save is stored, its last is final_state."""
    sol = lpjax.ensemble(RB, lpjax.Collective(), M0[:20], 0.05, 20, kernel="scan")
    ref = jax.vmap(lambda y: lpjax.integrate(RB, lpjax.Collective(), y, 0.05, 20))(jnp.asarray(M0[:20]))
    assert sol.settings["state_ends"] == [False, True]
    np.testing.assert_array_equal(sol.observables["state"][:, 0], ref.ys[:, 0])
    np.testing.assert_array_equal(sol.observables["state"][:, 1], sol.final_state)
    other = lpjax.ensemble(RB, lpjax.Collective(), M0[:20], 0.05, 20, observe="energy", kernel="scan")
    assert other.settings["state_ends"] == [False, False]


def test_state_saves_index_like_the_array():
    y0, inner, last = (np.random.default_rng(1).normal(size=s) for s in [(6, 2), (6, 3, 2), (6, 2)])
    whole = np.concatenate([y0[:, None], inner, last[:, None]], axis=1)
    saves = StateSaves(y0, inner, last)
    assert saves.shape == whole.shape and len(saves) == 6 and saves.dtype == whole.dtype
    for key in [3, -1, slice(2, 5), (slice(None), 1), (Ellipsis, 0), np.array([1, 4]), (2, slice(1, 3), 1), (-6, -1)]:
        np.testing.assert_array_equal(saves[key], whole[key])
    np.testing.assert_array_equal(saves - 1.0, whole - 1.0)
    np.testing.assert_array_equal(np.mean(saves, axis=0), whole.mean(axis=0))
    with pytest.raises(IndexError):
        saves[6]
    no_first = StateSaves(None, whole[:, :-1], last)
    np.testing.assert_array_equal(np.asarray(no_first), whole)
