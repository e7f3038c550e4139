"""kernel="native": the member program compiled into one CPU loop (lpjax._native) gives the scan
kernel's states, observables, result codes and statistics, does not depend on the thread count
or the chunk size, falls back to the scan once for what it cannot compile, loads a second
process's kernel from the disk cache, and lpjax works as before without numba."""

import json
import os
import subprocess
import sys
import textwrap
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax import _native
from lpjax.systems import lagrange_top, rigid_body

pytest.importorskip("numba")

RNG = np.random.default_rng(5)
RB = rigid_body(jnp.array([1.0, 2.0, 3.0]))
M0 = RNG.normal(size=(40, 3))
_m, _a = RNG.normal(size=(40, 3)) * 0.3, RNG.normal(size=(40, 3))
TOP0 = np.concatenate([_m, _a / np.linalg.norm(_a, axis=1, keepdims=True)], axis=1)
# numba compiles each kernel in 5-110 s here (scalar code of a few hundred to 3000 lines), so the
# suite checks the quickest program of each kind of code: an elementwise map and a per-member
# while loop (an implicit solve with early exit).
CASES = [
    ("Suris rest", lagrange_top(3, frame="rest"), lpjax.SurisLagrangeTop(), TOP0),
    ("GL2 early exit", RB, lpjax.GaussLegendre(1), M0),
]
KW = dict(save_every=4, observe="casimirs")


@pytest.mark.parametrize("name, system, method, y0s", CASES, ids=[c[0] for c in CASES])
def test_native_kernel_equals_the_scan(name, system, method, y0s):
    """States, observables (Casimirs at every save) to 1e-13 scaled by their size, result codes
    and iteration statistics equal, with a NaN member among them; no fallback."""
    y0s = y0s.copy()
    y0s[9] = np.nan
    kw = dict(KW, chunk_size=len(y0s))
    ref = lpjax.ensemble(system, method, y0s, 0.02, 12, kernel="scan", **kw)
    assert ref.failed.tolist() == [9]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = lpjax.ensemble(system, method, y0s, 0.02, 12, kernel="native", **kw)
    for a, b in ((got.final_state, ref.final_state), (got.observables["casimirs"], ref.observables["casimirs"])):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-13 * max(1.0, float(np.nanmax(np.abs(b)))))
        assert np.array_equal(np.isnan(a), np.isnan(b))
    np.testing.assert_array_equal(got.result, ref.result)
    for k in ("max_iterations", "num_failed_steps"):
        np.testing.assert_array_equal(got.stats[k], ref.stats[k])
    np.testing.assert_allclose(got.stats["mean_iterations"], ref.stats["mean_iterations"], rtol=0, atol=1e-15)
    np.testing.assert_allclose(got.stats["max_residual"], ref.stats["max_residual"], rtol=0, atol=1e-15)


def test_programs_too_large_for_numba_run_on_the_scan(monkeypatch):
    monkeypatch.setattr(_native, "MAX_LINES", 50)
    ref = lpjax.ensemble(RB, lpjax.RK4(), M0[:8], 0.02, 4, kernel="scan")
    with pytest.warns(UserWarning, match=r"cannot run natively .* lines of scalar code, over the 50 that numba compiles "
                                         r"in seconds\); using kernel='scan'"):
        got = lpjax.ensemble(RB, lpjax.RK4(), M0[:8], 0.02, 4, kernel="native")
    assert np.array_equal(got.final_state, ref.final_state)


def test_results_do_not_depend_on_threads_or_chunks(monkeypatch):
    """Suris (straight-line code) and GL2 (a while loop per member): bit-identical over 1, 2 and
    4 threads and chunks of 512, 7 and 64 members (the kernels of the test above, reused)."""
    outs = []
    for threads, chunk in ((1, 512), (2, 7), (4, 64), (4, 7)):
        monkeypatch.setattr(_native, "THREADS", threads)
        monkeypatch.setattr(_native, "CHUNK", chunk)
        outs.append([lpjax.ensemble(system, method, y0s, 0.02, 12, kernel="native", **KW).observables["casimirs"]
                     for _, system, method, y0s in CASES])
    for other in outs[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(outs[0], other))


def _spectrum(y):  # an observable with an eigensolver, which the generator does not compile
    return jnp.linalg.eigvalsh(jnp.outer(y, y))


def test_what_cannot_be_compiled_falls_back_to_the_scan_once():
    ref = lpjax.ensemble(RB, lpjax.RK4(), M0[:20], 0.02, 4, kernel="scan", observe=_spectrum)
    with pytest.warns(UserWarning, match=r"cannot run natively \(kernel='native'\) \(primitive 'eigh'\); using kernel='scan'"):
        got = lpjax.ensemble(RB, lpjax.RK4(), M0[:20], 0.02, 4, kernel="native", observe=_spectrum)
    assert np.array_equal(got.observables["observed"], ref.observables["observed"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lpjax.ensemble(RB, lpjax.RK4(), M0[:20], 0.02, 4, kernel="native", observe=_spectrum)  # said once


_SECOND_PROCESS = textwrap.dedent("""
    import json, jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    import lpjax
    from lpjax import _native
    from lpjax.systems import rigid_body
    sol = lpjax.ensemble(rigid_body((1.0, 2.0, 3.0)), lpjax.RK4(), np.ones((8, 3)), 0.01, 10, kernel="native")
    (kernel,) = _native._compiled.values()
    print(json.dumps({"hits": sum(kernel.stats.cache_hits.values()), "misses": sum(kernel.stats.cache_misses.values()),
                      "y": sol.final_state[0].tolist()}))
""")


def test_a_second_process_loads_the_kernel_from_the_disk_cache(tmp_path):
    """numba's cache (beside the generated source, in $LPJAX_CACHE_DIR): the first process
    compiles the kernel, the second loads it."""
    env = {**os.environ, "LPJAX_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", _SECOND_PROCESS], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[-1].stderr[-2000:]
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert (first["hits"], first["misses"]) == (0, 1) and (second["hits"], second["misses"]) == (1, 0)
    assert first["y"] == second["y"]


_WITHOUT_NUMBA = textwrap.dedent("""
    import sys
    sys.modules["numba"] = None  # import numba fails
    import jax, numpy as np
    import lpjax
    from lpjax._ensemble_kernel import resolve_kernel
    from lpjax.systems import rigid_body
    assert resolve_kernel("auto", "cpu") == "scan"
    sol = lpjax.ensemble(rigid_body((1.0, 2.0, 3.0)), lpjax.RK4(), np.ones((8, 3), np.float32), 0.01, 10)
    assert sol.failed.size == 0
    try:
        lpjax.ensemble(rigid_body((1.0, 2.0, 3.0)), lpjax.RK4(), np.ones((8, 3), np.float32), 0.01, 10, kernel="native")
    except ValueError as e:
        print(e)
""")


def test_without_numba_everything_runs_on_the_scan():
    run = subprocess.run([sys.executable, "-c", _WITHOUT_NUMBA], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "kernel='native' needs numba: pip install 'lpjax[cpu]'" in run.stdout
