"""Stochastic ensembles (``ensemble(..., key=)``): member j is ``integrate`` with
``fold_in(key, j)``, in every kernel, for any chunking, and a store resumed after lost chunks is
bit-identical; another key is refused on resume."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.systems import stochastic_heavy_top

TOP = stochastic_heavy_top(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 0.0, 1.0]), 1.0, 0.3 * np.eye(3))
Y0S = np.tile([0.3, -1.0, 0.7, 0.1, 0.2, 0.9], (10, 1)) + 0.01 * np.random.default_rng(0).normal(size=(10, 6))
KEY = jax.random.key(9)
MID = lpjax.StochasticMidpoint()


def _run(**kw):
    return lpjax.ensemble(TOP, MID, Y0S, 0.01, 100, save_every=50, key=KEY, progress=False, **kw)


def test_member_j_is_integrate_with_fold_in_of_the_key_in_every_kernel():
    """scan, entries, native and fused (interpret mode) equal ``integrate(key=fold_in(key, j))``
    to 1e-14 (the same increments: the programs differ by XLA's and LLVM's vectorization, by an
    ulp or two); every path keeps |Γ|² to 1e-15."""
    ref = np.stack([lpjax.integrate(TOP, MID, jnp.asarray(y), 0.01, 100, save_every=50,
                                    key=jax.random.fold_in(KEY, j)).ys for j, y in enumerate(Y0S)])
    for kernel in ("scan", "entries", "native", "fused"):
        states = _run(kernel=kernel).observables["state"]
        np.testing.assert_allclose(states, ref, rtol=0, atol=1e-14, err_msg=kernel)
    assert np.max(np.abs(ref[:, 0] - ref[:, -1])) > 0.05  # (the paths went somewhere)
    np.testing.assert_allclose(np.sum(ref[..., 3:] ** 2, -1), np.broadcast_to(np.sum(Y0S[:, None, 3:] ** 2, -1), (10, 3)),
                               rtol=1e-15)


def test_chunks_and_a_resumed_store_give_the_same_paths(tmp_path):
    import zarr

    whole = _run(kernel="native")
    np.testing.assert_array_equal(_run(kernel="native", chunk_size=3).final_state, whole.final_state)
    path = str(tmp_path / "s.zarr")
    _run(kernel="native", chunk_size=3, out=path)
    group = zarr.open_group(path, mode="r+")
    group["chunk_done"][1:3] = 0  # chunks 1 and 2 lost: their rows overwritten
    group["final_state"][3:9] = 0.0
    resumed = _run(kernel="native", chunk_size=3, out=path, resume=True)
    np.testing.assert_array_equal(np.asarray(resumed.final_state[:]), whole.final_state)
    with pytest.raises(ValueError, match="fingerprint|settings"):
        lpjax.ensemble(TOP, MID, Y0S, 0.01, 100, save_every=50, key=jax.random.key(10), progress=False,
                       kernel="native", chunk_size=3, out=path, resume=True)


def test_ensemble_function_takes_the_members_indices():
    """``ensemble_function(..., key=)``: rows 0 … N − 1 by default, or the indices given as a
    last column (as ``ensemble`` passes a chunk)."""
    f = lpjax.ensemble_function(TOP, MID, 0.01, 100, key=KEY, kernel="scan")
    whole = f(jnp.asarray(Y0S)).final_state
    tail = f(jnp.concatenate([jnp.asarray(Y0S[4:]), jnp.arange(4.0, 10.0)[:, None]], axis=1)).final_state
    np.testing.assert_array_equal(tail, whole[4:])
    assert not np.array_equal(f(jnp.asarray(Y0S[4:])).final_state, whole[4:])


def test_stochastic_ensembles_refuse_what_they_do_not_run():
    with pytest.raises(ValueError, match="exactly one"):
        lpjax.ensemble(TOP, MID, Y0S, 0.01, 10, progress=False)
    with pytest.raises(TypeError, match="stochastic method"):
        lpjax.ensemble(TOP, lpjax.GaussLegendre(2), Y0S, 0.01, 10, key=KEY, progress=False)
    with pytest.raises(ValueError, match="no events or chaos indicators"):
        lpjax.ensemble(TOP, MID, Y0S, 0.01, 10, key=KEY, progress=False, observe=lpjax.MEGNO())


def test_moments_are_those_of_the_paths_for_any_chunks_and_a_resume(tmp_path):
    """``reduce="moments"`` over 10 members in 3 chunks (native kernel), in memory and in a store
    resumed after a lost chunk: the mean and sample variance of each save are those of the
    stored paths to 1e-12, and the store keeps no path."""
    import zarr

    paths = np.asarray(_run(kernel="native").observables["state"])
    mean, var = paths.mean(axis=0), paths.var(axis=0, ddof=1)
    mem = _run(kernel="native", chunk_size=4, reduce="moments")
    path = str(tmp_path / "m.zarr")
    _run(kernel="native", chunk_size=4, reduce="moments", out=path)
    group = zarr.open_group(path, mode="r+")
    group["chunk_done"][1:2] = 0
    group["moments/state/mean"][1:2] = 0.0
    stored = _run(kernel="native", chunk_size=4, reduce="moments", out=path, resume=True)
    assert "observables" not in dict(zarr.open_group(path, mode="r").members())
    for sol in (mem, stored, lpjax.open_ensemble(path)):
        m = sol.moments["state"]
        assert m.count == 10 and not sol.observables
        np.testing.assert_allclose(m.mean, mean, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(m.var, var, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="reduce must be None or 'moments'"):
        _run(kernel="native", reduce="mean")


def test_a_batched_system_and_the_gradient_of_an_expectation():
    """Six members with their own noise amplitudes (a batched system): member j is ``integrate``
    of its own system with ``fold_in(key, j)`` (scan and native, 1e-15); d/d(mgl) of the mean of
    M₁(2)² over 16 members, by ``jax.grad`` through ``ensemble_function`` (scan kernel, the
    increments fixed by the key): within 1e-8 of central differences (measured 2.5e-11)."""
    import equinox as eqx

    def make(amp, mgl=1.0):
        return stochastic_heavy_top(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 0.0, 1.0]), mgl, amp * jnp.eye(3))

    amps, y0 = jnp.linspace(0.1, 0.5, 6), jnp.asarray(Y0S[0])
    ref = np.stack([lpjax.integrate(make(a), MID, y0, 0.01, 100, key=jax.random.fold_in(KEY, j)).ys[-1]
                    for j, a in enumerate(amps)])
    for kernel in ("scan", "native"):
        sol = lpjax.ensemble(eqx.filter_vmap(make)(amps), MID, y0, 0.01, 100, key=KEY, batched_system=True,
                             kernel=kernel, progress=False)
        np.testing.assert_allclose(sol.final_state, ref, rtol=0, atol=1e-15, err_msg=kernel)
    tops = eqx.filter_vmap(lambda _: make(0.3))(jnp.arange(16))
    f = lpjax.ensemble_function(tops, MID, 0.01, 200, key=KEY, kernel="scan", batched_system=True)

    def loss(mgl):
        systems = eqx.filter_vmap(lambda _: make(0.3, mgl))(jnp.arange(16))
        return jnp.mean(f(jnp.tile(y0, (16, 1)), eqx.filter(systems, eqx.is_array)).final_state[:, 0] ** 2)

    fd = (loss(1.0 + 1e-5) - loss(1.0 - 1e-5)) / 2e-5
    np.testing.assert_allclose(jax.grad(loss)(1.0), fd, rtol=1e-8)


def test_a_reduced_store_holds_kilobytes(tmp_path):
    """16384 heavy tops from one state, 10 saves of the energy, ``reduce="moments"``: the store
    (the moments a row per chunk, the result codes, the inputs compressed, no state) is under 32
    KB on disk (measured: 11 KB, for 4096 as for 65536 members; 762 KB for 4096 unreduced)."""
    import os

    y0s = np.tile(Y0S[0], (16384, 1))
    path = tmp_path / "r.zarr"
    sol = lpjax.ensemble(TOP, MID, y0s, 0.01, 100, save_every=10, key=KEY, observe="energy", reduce="moments",
                         out=str(path), progress=False, kernel="native")
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    assert sol.moments["energy"].count == 16384 and sol.final_state is None
    assert size < 32_000, size


def test_ten_thousand_paths_of_ten_thousand_steps_keep_the_casimirs():
    """The acceptance's run: 10⁴ stochastic heavy tops (noise 0.5 eᵢ in M, three fields) × 10⁴
    midpoint steps of 10⁻³, native kernel: |Γ|² and M·Γ within 1e-13 relative on every path
    (measured 3.5e-14 and 6.0e-14, in 6 s), while M wanders by O(1)."""
    top = stochastic_heavy_top(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 0.0, 1.0]), 1.0, 0.5 * np.eye(3))
    y0 = np.array([0.3, -1.0, 0.7, 0.1, 0.2, 0.9])
    y = lpjax.ensemble(top, MID, np.tile(y0, (10_000, 1)), 1e-3, 10_000, key=jax.random.key(3), kernel="native",
                       progress=False).final_state
    assert np.max(np.abs(y[:, :3] - y0[:3])) > 1.0
    np.testing.assert_allclose(np.sum(y[:, 3:] ** 2, 1), y0[3:] @ y0[3:], rtol=1e-13, atol=0)
    np.testing.assert_allclose(np.sum(y[:, :3] * y[:, 3:], 1), y0[:3] @ y0[3:], rtol=1e-13, atol=0)


def test_an_index_a_float32_column_cannot_hold_is_refused():
    from lpjax._stochastic_member import indexed_states

    np.testing.assert_array_equal(indexed_states(np.zeros((2, 3), np.float32), np.array([0, 2**24 - 1]))[:, -1],
                                  [0.0, 2.0**24 - 1])
    with pytest.raises(ValueError, match="not be exact in a float32 column"):
        indexed_states(np.zeros((1, 3), np.float32), np.array([2**24]))
