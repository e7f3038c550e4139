"""lpjax.ensemble: members equal integrate's runs, chunks and devices do not change a bit,
failed members are isolated, the zarr store resumes bit-identically after SIGKILL."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr

import lpjax
from lpjax.systems import clebsch_case, lagrange_top, rigid_body, rigid_body_n

RB = rigid_body(jnp.array([1.0, 2.0, 3.0]))
RNG = np.random.default_rng(7)
M0 = RNG.normal(size=(600, 3))
_m, _a = RNG.normal(size=(600, 3)) * 0.3, RNG.normal(size=(600, 3))
TOP0 = np.concatenate([_m, _a / np.linalg.norm(_a, axis=1, keepdims=True)], axis=1)
TOP = lagrange_top(3, frame="rest")


def _same(a, b) -> bool:
    return np.array_equal(np.asarray(a[:]), np.asarray(b[:]), equal_nan=True)


@pytest.mark.parametrize("name, system, method, y0s", [
    ("Suris", TOP, lpjax.SurisLagrangeTop(), TOP0[:300]),
    ("GL4", RB, lpjax.GaussLegendre(2), M0[:300]),
    ("MoserVeselov", RB, lpjax.MoserVeselov(), M0[:300]),
])
def test_members_are_integrate_runs(name, system, method, y0s):
    """Each member's saved states, result and iteration statistics are those of integrate (to
    roundoff: the member-vectorized program is compiled differently), and the chunk size does
    not change a bit."""
    sol = lpjax.ensemble(system, method, y0s, 0.02, 60, save_every=20, chunk_size=128, stats=True)
    ref = jax.vmap(lambda y: lpjax.integrate(system, method, y, 0.02, 60, save_every=20))(jnp.asarray(y0s))
    np.testing.assert_allclose(sol.observables["state"], ref.ys, rtol=0, atol=1e-13)
    np.testing.assert_allclose(sol.final_state, ref.ys[:, -1], rtol=0, atol=1e-13)
    np.testing.assert_array_equal(sol.result, 0)
    np.testing.assert_array_equal(sol.stats["max_iterations"], ref.stats["max_iterations"])
    np.testing.assert_allclose(sol.ts, ref.ts[0])
    other = lpjax.ensemble(system, method, y0s, 0.02, 60, save_every=20, chunk_size=77)
    assert _same(sol.observables["state"], other.observables["state"]) and _same(sol.final_state, other.final_state)


def test_batched_parameters_and_states():
    """A system batched over parameters (eqx.filter_vmap of the constructor), with one initial
    state or one per member; leading axes that differ are an error naming both."""
    inertias = jnp.asarray(1.0 + RNG.random(size=(40, 3)))
    systems = eqx.filter_vmap(rigid_body)(inertias)
    y0 = np.array([1.0, 0.5, -0.2])
    one = lpjax.ensemble(systems, lpjax.RK4(), y0, 0.01, 50, observe="energy", batched_system=True)
    both = lpjax.ensemble(systems, lpjax.RK4(), M0[:40], 0.01, 50, observe="energy", batched_system=True)
    for k in (0, 17, 39):
        r1 = lpjax.integrate(rigid_body(inertias[k]), lpjax.RK4(), y0, 0.01, 50, save_every=50)
        r2 = lpjax.integrate(rigid_body(inertias[k]), lpjax.RK4(), M0[k], 0.01, 50, save_every=50)
        np.testing.assert_allclose(one.final_state[k], r1.ys[-1], rtol=0, atol=1e-14)
        np.testing.assert_allclose(both.final_state[k], r2.ys[-1], rtol=0, atol=1e-14)
        np.testing.assert_allclose(one.observables["energy"][k, -1], rigid_body(inertias[k]).energy(r1.ys[-1]), rtol=1e-14)
    with pytest.raises(ValueError, match="leading axes differ: y0s has N = 30 members, the batched system's arrays have 40"):
        lpjax.ensemble(systems, lpjax.RK4(), M0[:30], 0.01, 10, batched_system=True)
    with pytest.raises(ValueError, match="batched_system=True"):
        lpjax.ensemble(RB, lpjax.RK4(), y0, 0.01, 10)


@pytest.mark.parametrize("method", [lpjax.MoserVeselov(), lpjax.GaussLegendre(2), lpjax.RK4(), lpjax.Collective()],
                         ids=lambda m: type(m).__name__)
def test_a_failing_member_is_isolated(method):
    """A NaN initial state and one that overflows (1e200) among 1000 members: those members
    alone are flagged, every other member's arrays are bit-identical to the run without them;
    throw=True names them. The codes say what happened, whatever the method:
    ``invalid_initial_state`` for the NaN input, ``nonfinite_state`` for the overflow (an
    implicit solve on a non-finite iterate is not a solver failure)."""
    y0s = RNG.normal(size=(1000, 3))
    bad = y0s.copy()
    bad[617] = np.nan
    bad[300] = 1e200
    a = lpjax.ensemble(RB, method, y0s, 0.05, 40, save_every=10, observe="casimirs", chunk_size=256, stats=True)
    b = lpjax.ensemble(RB, method, bad, 0.05, 40, save_every=10, observe="casimirs", chunk_size=256, stats=True)
    assert a.failed.size == 0 and b.failed.tolist() == [300, 617]
    keep = ~np.isin(np.arange(1000), [300, 617])
    for x, y in [(a.observables["casimirs"], b.observables["casimirs"]), (a.final_state, b.final_state),
                 (a.stats["max_iterations"], b.stats["max_iterations"])]:
        assert np.array_equal(x[keep], y[keep])
    assert [b.result_names[c] for c in b.result[[300, 617]]] == ["nonfinite_state", "invalid_initial_state"]
    with pytest.raises(RuntimeError, match=r"2 of 1000 members failed: indices \[300, 617\] "
                                           r"\(invalid_initial_state, nonfinite_state\)"):
        lpjax.ensemble(RB, method, bad, 0.05, 40, chunk_size=256, throw=True)


def _special_members(y0s, overflow, unsolvable=None):
    """``y0s`` with member 3 NaN, member 10 overflowing (``overflow``; for RK4 in the run's second
    save), and member 17 whose implicit solve fails at every step with a finite state (``unsolvable``)."""
    y0s = np.array(y0s)
    y0s[3] = np.nan
    y0s[10] = overflow
    if unsolvable is not None:
        y0s[17] = unsolvable
    return y0s


_AS_WRITTEN = [  # method, system, states (scaled to overflow or to fail the solve)
    ("RK4", lpjax.RK4(), RB, _special_members(M0[:64], 100 * np.array([1.0, 0.5, 0.8]))),
    ("GL4", lpjax.GaussLegendre(2), RB, _special_members(M0[:64], 1e150)),
    ("MoserVeselov", lpjax.MoserVeselov(), RB,
     _special_members(M0[:64], 1e200, 20 * np.array([1.0, 0.5, 0.8]))),
    ("Suris", lpjax.SurisLagrangeTop(), TOP, _special_members(TOP0[:64], np.r_[1e200, 0, 0, 0.6, 0, 0.8])),
]


@pytest.mark.parametrize("name, method, system, y0s", _AS_WRITTEN, ids=[c[0] for c in _AS_WRITTEN])
def test_result_codes_are_those_of_the_steps_as_written(name, method, system, y0s):
    """The member program tests a state's finiteness once per save, not after every step (methods
    whose non-finite entries last), and runs a save's steps again as written for a member whose
    state is not finite. The result codes, failed-step counts and final states are those of
    integrate (which tests every step), under every kernel: a NaN member, a member that
    overflows (RK4: at its 6th step, in the second save), a member whose solve fails."""
    runs = [lpjax.integrate(system, method, jnp.asarray(y), 0.05, 24, save_every=4, throw=False) if k != 3 else None
            for k, y in enumerate(y0s)]  # the NaN member cannot start: invalid_initial_state, every step failed
    codes = np.array([int(r.result._value) if r else int(lpjax.RESULTS.invalid_initial_state._value) for r in runs])
    failed = np.array([int(r.stats["num_failed_steps"]) if r else 24 for r in runs])
    final = np.array([np.asarray(r.ys[-1]) if r else np.full(y0s.shape[1], np.nan) for r in runs])
    assert codes[10] != 0 and (name != "RK4" or failed[10] == 19)  # RK4: its 6th step overflows, in the second save
    assert int(np.count_nonzero(codes)) == (3 if name == "MoserVeselov" else 2)
    for kernel in ("scan", "entries", "fused", "native"):
        got = lpjax.ensemble(system, method, y0s, 0.05, 24, save_every=4, kernel=kernel)
        assert got.settings["kernel"] == kernel
        np.testing.assert_array_equal(got.result, codes, err_msg=kernel)
        np.testing.assert_array_equal(got.stats["num_failed_steps"], failed, err_msg=kernel)
        np.testing.assert_allclose(got.final_state, final, rtol=0, atol=1e-12, err_msg=kernel)


def test_observables_and_reductions():
    """observe as a function (a pytree of arrays, named by path) or a built-in; mean, min, max
    and quantiles over the members, read a chunk at a time, skip failed members."""
    y0s = M0.copy()
    y0s[3] = np.nan
    sol = lpjax.ensemble(RB, lpjax.RK4(), y0s, 0.02, 40, save_every=10, chunk_size=100,
                         observe=lambda y: {"m1": y[0], "norm": jnp.sum(y**2)})
    assert set(sol.observables) == {"m1", "norm"} and sol.observables["m1"].shape == (600, 5)
    ok = np.arange(600) != 3
    norm = sol.observables["norm"][ok]
    np.testing.assert_allclose(sol.mean("norm"), norm.mean(axis=0), rtol=1e-14)
    np.testing.assert_array_equal(sol.max("norm"), norm.max(axis=0))
    np.testing.assert_array_equal(sol.min("m1"), sol.observables["m1"][ok].min(axis=0))
    np.testing.assert_allclose(sol.quantile([0.1, 0.5], "norm", saves_per_read=2), np.quantile(norm, [0.1, 0.5], axis=0))
    assert np.isnan(sol.mean("norm", successful_only=False)).all()
    with pytest.raises(ValueError, match="several observables"):
        sol.mean()


@pytest.mark.xla_default  # floors measured with FMA contraction; without, Suris' (6.6) drifts 6.6e-6
def test_float32_error_floor():
    """Measured float32 floor of the relative Casimir and energy drift, 256 members, 1000 steps
    of dt 0.01 (float64 gives ~1e-14 for the structure-preserving methods). Measured:
    GL4 1.2e-7 / 2.3e-7 (compensated updates, solved to roundoff), RK4 2.9e-6 / 2.8e-6,
    Moser–Veselov 5.3e-5 / 5.7e-5 (grows linearly: 3.9e-4 after 10⁴ steps), Suris |a|² 5.4e-6
    and its modified energy (6.6) 1.1e-6. The bounds are those figures rounded up by 2–4×."""
    M = M0[:256] / np.linalg.norm(M0[:256], axis=1, keepdims=True)
    bounds = {"GaussLegendre": (5e-7, 1e-6), "RK4": (1e-5, 1e-5), "MoserVeselov": (2e-4, 2e-4)}
    for method in (lpjax.GaussLegendre(2), lpjax.RK4(), lpjax.MoserVeselov()):
        sol = lpjax.ensemble(RB, method, M, 0.01, 1000, observe=lambda y: {"c": RB.casimirs(y)[0], "h": RB.energy(y)},
                             dtype=np.float32)
        assert sol.final_state.dtype == np.float32 and sol.failed.size == 0
        c, h = sol.observables["c"], sol.observables["h"]
        drift = [np.max(np.abs(x[:, -1] - x[:, 0]) / np.abs(x[:, 0])) for x in (c, h)]
        assert drift[0] <= bounds[type(method).__name__][0] and drift[1] <= bounds[type(method).__name__][1], drift
        assert max(drift) > 1e-8  # float32, not float64
    suris = lpjax.SurisLagrangeTop()
    top32 = jax.tree.map(lambda a: a.astype(jnp.float32) if eqx.is_inexact_array(a) else a, TOP)
    sol = lpjax.ensemble(TOP, suris, TOP0[:256], 0.01, 1000, dtype=np.float32,
                         observe=lambda y: {"a2": jnp.sum(y[3:] ** 2), "H": suris.integral(top32, y, jnp.float32(0.01))})
    for name, bound in (("a2", 2e-5), ("H", 5e-6)):
        x = sol.observables[name]
        assert np.max(np.abs(x[:, -1] - x[:, 0]) / np.max(np.abs(x[:, 0]))) <= bound


def _store_run(path, n_steps=60, chunk_size=100, **kw):
    return lpjax.ensemble(RB, lpjax.MoserVeselov(), M0, 0.05, n_steps, save_every=20, observe="energy",
                          chunk_size=chunk_size, out=path, metadata={"seed": 7}, stats=True, **kw)


_LONG = dict(n_steps=400, chunk_size=50)  # 12 chunks


_CHILD = textwrap.dedent("""
    import itertools, os, signal, sys, jax
    jax.config.update("jax_enable_x64", True)
    sys.path.insert(0, {tests!r})
    import test_ensemble as T
    from lpjax._ensemble._store import Store

    marked, mark_done = itertools.count(1), Store.mark_done

    def kill_at_the_third(self, k):  # SIGKILL at the third mark: its chunk written, not marked
        if next(marked) >= 3:
            os.kill(os.getpid(), signal.SIGKILL)
        mark_done(self, k)

    Store.mark_done = kill_at_the_third
    T._store_run(sys.argv[1], **T._LONG)
""")


def test_kill_and_resume(tmp_path):
    """SIGKILL in the middle of a run, then resume=True: only the missing chunks run, and the
    arrays equal an uninterrupted run's bit for bit. The fingerprint is the same in two processes.
    The child kills itself when its third chunk is written but not yet marked done (its other
    chunks in flight), so the kill lands mid-run on any machine."""
    path = str(tmp_path / "run.zarr")
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(tests=os.path.dirname(__file__)), path],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    done = np.asarray(zarr.open_group(path, mode="r")["chunk_done"][:]).astype(bool)
    assert 1 <= done.sum() < done.size, done  # killed mid-run (the second mark may race the kill)
    fingerprint = zarr.open_group(path, mode="r").attrs["fingerprint"]
    resumed = _store_run(path, resume=True, **_LONG)
    whole = _store_run(str(tmp_path / "whole.zarr"), **_LONG)
    assert zarr.open_group(path, mode="r").attrs["fingerprint"] == fingerprint
    for name in ("final_state", "result"):
        assert _same(getattr(resumed, name), getattr(whole, name))
    assert _same(resumed.observables["energy"], whole.observables["energy"])
    assert _same(resumed.stats["max_iterations"], whole.stats["max_iterations"])


_SHARDED = textwrap.dedent("""
    import json, jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_enable_x64", True)
    import lpjax
    from lpjax.systems import rigid_body
    y0s = np.random.default_rng(2).normal(size=(1000, 3)); y0s[5] = np.nan
    out = {"devices": len(jax.devices())}
    for method in (lpjax.MoserVeselov(), lpjax.GaussLegendre(2)):
        for kernel, n in (("auto", 1000), ("fused", 96), ("scan", 1000)):
            kw = dict(save_every=10, observe="casimirs", chunk_size=400, kernel=kernel, stats=True)
            multi = lpjax.ensemble(rigid_body(jnp.array([1.0, 2.0, 3.0])), method, y0s[:n], 0.05, 40, **kw)
            one = lpjax.ensemble(rigid_body(jnp.array([1.0, 2.0, 3.0])), method, y0s[:n], 0.05, 40,
                                 devices=jax.devices()[:1], **kw)
            pairs = [(multi.observables["casimirs"], one.observables["casimirs"]), (multi.final_state, one.final_state),
                     (multi.result, one.result), (multi.stats["max_iterations"], one.stats["max_iterations"])]
            ok = np.isfinite(one.final_state)
            out[f"{type(method).__name__} {kernel}"] = [
                multi.settings["kernel"], all(np.array_equal(a, b, equal_nan=True) for a, b in pairs),
                float(np.max(np.abs(multi.final_state[ok] - one.final_state[ok]))), multi.failed.tolist()]
    print(json.dumps(out))
""")


def test_four_devices_match_one_bit_for_bit():
    """Four forced host devices against one device: the default kernel is the same whatever the
    device count (on CPU the native one, on the host's cores), and the fused kernel runs on each
    device's share (shard_map over the member axis; interpret mode here): both bit for bit. The
    scan kernel under shard_map is compiled by XLA for each shard's shape, which may contract
    a*b + c into fused multiply-adds differently: it agrees to roundoff."""
    # XLA's default codegen (the suite's fast-compile settings, conftest.py, are not bit-identical
    # across batch shapes)
    flags = os.environ.get("LPJAX_TEST_USER_XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    env = {**os.environ, "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count=4".strip()}
    run = subprocess.run([sys.executable, "-c", _SHARDED], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out.pop("devices") == 4
    for key, (kernel, exact, diff, failed) in out.items():
        assert failed == [5], key
        if key.endswith("scan"):
            assert kernel == "scan" and diff <= 1e-13, key
        else:
            assert kernel in ("native", "fused") and exact and diff == 0.0, (key, kernel)


_CLEBSCH = clebsch_case(jnp.array([0.5, 1.2, 2.0]))


@pytest.mark.parametrize("name, system, method, y0s", [
    ("Suris", TOP, lpjax.SurisLagrangeTop(), TOP0[:96]),
    ("Suris moving n=4", lagrange_top(4, frame="moving"), lpjax.SurisLagrangeTop(), 0.5 * RNG.normal(size=(96, 10))),
    ("Suris-Clebsch", _CLEBSCH, lpjax.SurisClebsch(), 0.5 * RNG.normal(size=(96, 6))),
    ("MoserVeselov", RB, lpjax.MoserVeselov(), M0[:96]),
    ("MoserVeselov so(4)", rigid_body_n(jnp.array([0.5, 1.0, 1.5, 2.0])), lpjax.MoserVeselov(), RNG.normal(size=(96, 6))),
    ("GL4", RB, lpjax.GaussLegendre(2), M0[:96]),
    ("GL4 fixed iterations", RB, lpjax.GaussLegendre(2, early_exit=False), M0[:96]),
    ("GL6", RB, lpjax.GaussLegendre(3), M0[:96]),
    ("RK4", RB, lpjax.RK4(), M0[:96]),
    ("DEP Suris-Clebsch", _CLEBSCH, lpjax.DiscreteEulerPoincare(lpjax.lagrangians.suris_clebsch(_CLEBSCH)),
     0.5 * RNG.normal(size=(96, 6))),
    ("Collective(GL4)", RB, lpjax.Collective(lpjax.GaussLegendre(2)), M0[:96]),
    ("Composition(GL2)", RB, lpjax.Composition(lpjax.GaussLegendre(1), "triple-jump"), M0[:96]),
    ("Composition(splitting)", RB, lpjax.Composition(lpjax.LiePoissonSplitting(), "triple-jump"), M0[:96]),
    ("S10(splitting)", RB, lpjax.Composition(lpjax.LiePoissonSplitting(("q0", "q1", "q2")), "blanes-moan-s10"), M0[:96]),
])
def test_entrywise_and_fused_kernels_equal_the_scan(name, system, method, y0s):
    """kernel="entries" (the member program entry by entry) and kernel="fused" (one Pallas
    kernel per block with the time loop inside, here in interpret mode) give the scan path's
    states, observables, result codes and statistics, with a failing member among them. (The
    nonholonomic systems' programs are ~30 000 operations a step, which XLA:CPU takes 20 s
    to compile in interpret mode: they are checked by lowering, tests/test_gpu_lowering.py,
    and step by step entry by entry, tests/test_soa.py.)"""
    y0s = y0s.copy()
    y0s[9] = np.nan
    kw = dict(save_every=4, observe="casimirs", chunk_size=64, stats=True)
    ref = lpjax.ensemble(system, method, y0s, 0.02, 12, kernel="scan", **kw)
    assert ref.failed.tolist() == [9]
    for kernel in ("entries", "fused"):
        got = lpjax.ensemble(system, method, y0s, 0.02, 12, kernel=kernel, **kw)
        for a, b in ((got.final_state, ref.final_state), (got.observables["casimirs"], ref.observables["casimirs"])):
            # roundoff of reordered sums: 1e-13 at unit scale, scaled with the size of the entries
            # (so(4)'s quartic Casimir reaches 1e2, where two CPUs differed by 1.5e-15 relative)
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-13 * max(1.0, float(np.nanmax(np.abs(b)))))
        assert np.array_equal(np.isnan(got.final_state), np.isnan(ref.final_state))
        np.testing.assert_array_equal(got.result, ref.result)
        for k in ("max_iterations", "num_failed_steps"):
            np.testing.assert_array_equal(got.stats[k], ref.stats[k])
        np.testing.assert_allclose(got.stats["max_residual"], ref.stats["max_residual"], rtol=0, atol=1e-15)


def _spectrum(y):  # an observable with an eigensolver, which the entrywise evaluator does not run
    return jnp.linalg.eigvalsh(jnp.outer(y, y))


def test_what_cannot_be_fused_falls_back_to_the_scan_once():
    """An observable with a dense eigensolver (primitive 'eigh') cannot run entry by entry: the
    ensemble says so once, naming the primitive, and runs the scan path (bit-identical)."""
    method = lpjax.GaussLegendre(2)
    ref = lpjax.ensemble(RB, method, M0[:20], 0.02, 4, kernel="scan", observe=_spectrum)
    with pytest.warns(UserWarning, match=r"cannot run entry by entry \(primitive 'eigh'\); using kernel='scan'"):
        got = lpjax.ensemble(RB, method, M0[:20], 0.02, 4, kernel="fused", observe=_spectrum)
    assert _same(got.final_state, ref.final_state) and _same(got.observables["observed"], ref.observables["observed"])
    assert got.settings["kernel"] == "scan"  # the kernel that ran
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lpjax.ensemble(RB, method, M0[:20], 0.02, 4, kernel="fused", observe=_spectrum)  # said once


def test_a_state_of_the_wrong_shape_or_not_numbers_is_refused_before_tracing():
    """``ensemble`` names a member's expected shape as ``integrate`` does (not a broadcasting
    error from inside the step), and a string state says it must be numbers; so does
    ``integrate``."""
    with pytest.raises(ValueError, match=r"state must have shape \(3,\), got \(2,\)"):
        lpjax.ensemble(RB, lpjax.GaussLegendre(2), jnp.ones((10, 2)), 0.01, 10)
    with pytest.raises(ValueError, match="ensemble: y0s must be numbers"):
        lpjax.ensemble(RB, lpjax.GaussLegendre(2), "1 .5 .8", 0.01, 10)
    with pytest.raises(ValueError, match="integrate: y0 expects numbers"):
        lpjax.integrate(RB, lpjax.GaussLegendre(2), "1 .5 .8", 0.01, 10)
    f = lpjax.ensemble_function(RB, lpjax.GaussLegendre(2), 0.01, 10)  # called, and under jit: before the step is traced
    for call in (f, jax.jit(f)):
        with pytest.raises(ValueError, match=r"state must have shape \(3,\), got \(2,\)"):
            call(jnp.ones((10, 2)))
        with pytest.raises(ValueError, match=r"y0s must be an array of shape \(N, d\) and dtype float64 .* float32"):
            call(jnp.ones((10, 3), jnp.float32))
    with pytest.raises(ValueError, match="ensemble function: y0s expects numbers"):
        f("1 .5 .8")
    np.testing.assert_array_equal(f([[1.0, 0.5, 0.8]]).final_state, f(jnp.array([[1.0, 0.5, 0.8]])).final_state)


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"kernel must be one of 'auto', 'scan', 'entries', 'fused', 'native' or a kernel "
                                         r"of lpjax.kernels \(Scan\(\), .*got 'pallas'"):
        lpjax.ensemble(RB, lpjax.RK4(), M0, 0.01, 10, kernel="pallas")
    with pytest.raises(ValueError, match="Native: threads must be a positive int or None, got 0"):
        lpjax.kernels.Native(threads=0)
    with pytest.raises(ValueError, match="Fused: block must be a power of two or None, got 96"):
        lpjax.kernels.Fused(block=96)
    with pytest.raises(ValueError, match="kernel='native' compiles for the CPU, not 'gpu'"):
        lpjax.ensemble_function(RB, lpjax.RK4(), 0.01, 10, kernel=lpjax.kernels.Native(), platform="gpu")
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        lpjax.ensemble(RB, lpjax.RK4(), M0, 0.01, 10, chunk_size=0)
    with pytest.raises(ValueError, match="n_steps .* divisible by save_every"):
        lpjax.ensemble(RB, lpjax.RK4(), M0, 0.01, 10, save_every=3)
    with pytest.raises(ValueError, match="dt must be finite and > 0"):
        lpjax.ensemble(RB, lpjax.RK4(), M0, -0.01, 10)
    with pytest.raises(ValueError, match=r"shape \(N, d\)"):
        lpjax.ensemble(RB, lpjax.RK4(), M0[None], 0.01, 10)
    with pytest.raises(ValueError, match="observe must be"):
        lpjax.ensemble(RB, lpjax.RK4(), M0, 0.01, 10, observe="angular momentum")
    with pytest.raises(ValueError, match="dtype must be float32 or float64"):
        lpjax.ensemble(RB, lpjax.RK4(), M0, 0.01, 10, dtype=np.int32)
    code = "import lpjax, numpy as np; from lpjax.systems import rigid_body; lpjax.ensemble(rigid_body((1.0, 2.0, 3.0)), " \
           "lpjax.RK4(), np.ones((4, 3)), 0.01, 10, dtype=np.float64)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "float64 needs x64" in run.stderr
