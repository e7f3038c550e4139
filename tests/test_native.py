"""kernel="native": the member program compiled into one CPU loop (lpjax._ensemble._kernels._native,
LLVM through llvmlite) gives the scan kernel's states, observables, result codes and statistics for every
method family, does not depend on the thread count, the chunk size or how loops are laid out,
falls back to the scan once for what it cannot compile, loads a second process's kernel from
the disk cache without compiling, and lpjax works as before without llvmlite."""

import os
import subprocess
import sys
import textwrap
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax._ensemble._kernels._native import _run as _native
from lpjax.kernels import Native
from lpjax.systems import (
    clebsch_case, lagrange_top, rigid_body, rigid_body_n, rubber_chaplygin_sphere, veselova,
)

pytest.importorskip("llvmlite")

RNG = np.random.default_rng(5)
RB = rigid_body(jnp.array([1.0, 2.0, 3.0]))
M0 = RNG.normal(size=(40, 3))
_m, _a = RNG.normal(size=(40, 3)) * 0.3, RNG.normal(size=(40, 3))
TOP0 = np.concatenate([_m, _a / np.linalg.norm(_a, axis=1, keepdims=True)], axis=1)
CLEBSCH = clebsch_case(jnp.array([1.0, 2.0, 3.5]))
VES = veselova(jnp.array([1.0, 2.0, 3.0]))
RUBBER = rubber_chaplygin_sphere(jnp.array([1.0, 2.0, 3.0]), 0.5)
KW = dict(save_every=4, observe="casimirs", stats=True)

CASES = [
    ("Suris rest", lagrange_top(3, frame="rest"), lpjax.SurisLagrangeTop(), TOP0),
    ("Suris moving n=4", lagrange_top(4, frame="moving"), lpjax.SurisLagrangeTop(), 0.5 * RNG.normal(size=(40, 10))),
    ("Suris-Clebsch", CLEBSCH, lpjax.SurisClebsch(), 0.5 * RNG.normal(size=(40, 6))),
    ("Moser-Veselov so(3)", RB, lpjax.MoserVeselov(), M0),
    ("Moser-Veselov so(4)", rigid_body_n(jnp.array([0.5, 1.0, 1.5, 2.0])), lpjax.MoserVeselov(),
     RNG.normal(size=(40, 6))),
    ("GL2 early exit", RB, lpjax.GaussLegendre(1), M0),
    ("GL4 early exit", RB, lpjax.GaussLegendre(2), M0),
    ("GL4 fixed iterations", RB, lpjax.GaussLegendre(2, early_exit=False), M0),
    ("RK4", RB, lpjax.RK4(), M0),
    ("DEP Suris-Clebsch", CLEBSCH, lpjax.DiscreteEulerPoincare(lpjax.lagrangians.suris_clebsch(CLEBSCH)),
     0.5 * RNG.normal(size=(40, 6))),
    ("Collective(GL4)", RB, lpjax.Collective(lpjax.GaussLegendre(2)), M0),
    ("Composition(Moser-Veselov)", RB, lpjax.Composition(lpjax.MoserVeselov(), "triple-jump"), M0),
    ("Composition(splitting)", RB, lpjax.Composition(lpjax.LiePoissonSplitting(("q0", "q1", "q2")), "triple-jump"), M0),
    ("splitting, exact flow, Clebsch", CLEBSCH, lpjax.LiePoissonSplitting.for_system(CLEBSCH, "exact"),
     0.5 * RNG.normal(size=(40, 6))),
    ("Veselova GL4", VES, lpjax.GaussLegendre(2), np.tile(VES.default, (40, 1))),
    ("Projected(GL4) rubber sphere", RUBBER, lpjax.Projected(lpjax.GaussLegendre(2)), np.tile(RUBBER.default, (40, 1))),
]


def _assert_equal_runs(got, ref):
    """States and observables to 1e-13 scaled by the size of their finite entries, NaNs and
    infs in the same places, result codes and iteration statistics equal."""
    for a, b in ((got.final_state, ref.final_state), (got.observables["casimirs"], ref.observables["casimirs"])):
        scale = float(np.max(np.abs(b[np.isfinite(b)]), initial=1.0))
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-13 * scale)
        assert np.array_equal(np.isnan(a), np.isnan(b))
    np.testing.assert_array_equal(got.result, ref.result)
    for k in ("max_iterations", "num_failed_steps"):
        np.testing.assert_array_equal(got.stats[k], ref.stats[k])
    np.testing.assert_allclose(got.stats["mean_iterations"], ref.stats["mean_iterations"], rtol=0, atol=1e-15)
    np.testing.assert_allclose(got.stats["max_residual"], ref.stats["max_residual"], rtol=0, atol=1e-15)


@pytest.mark.parametrize("name, system, method, y0s", CASES, ids=[c[0] for c in CASES])
def test_native_kernel_equals_the_scan(name, system, method, y0s):
    """Every method family, with a NaN member among the others; no fallback."""
    y0s = np.array(y0s, dtype=float)
    y0s[9] = np.nan
    ref = lpjax.ensemble(system, method, y0s, 0.02, 12, kernel="scan", **KW)
    assert ref.failed.tolist() == [9]
    assert RESULT(ref, 9) == "invalid_initial_state"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = lpjax.ensemble(system, method, y0s, 0.02, 12, kernel="native", **KW)
    _assert_equal_runs(got, ref)


def RESULT(sol, k):
    return sol.result_names[int(sol.result[k])]


@pytest.mark.parametrize("name, system, method, y0s", [CASES[0], CASES[8]], ids=["Suris rest", "RK4"])
def test_a_member_that_overflows_mid_run(name, system, method, y0s):
    """A member whose state overflows to inf (then NaN) during the run fails with
    nonfinite_state after the same number of failed steps as under the scan: the native
    kernel's finiteness test (a sum of x − x) sees inf as well as NaN."""
    y0s = np.array(y0s, dtype=float)
    y0s[3, :3] = 1e200 if name == "Suris rest" else 1e160
    ref = lpjax.ensemble(system, method, y0s, 0.02, 12, kernel="scan", **KW)
    assert ref.failed.tolist() == [3] and RESULT(ref, 3) == "nonfinite_state"
    assert 0 < ref.stats["num_failed_steps"][3] <= 12
    _assert_equal_runs(lpjax.ensemble(system, method, y0s, 0.02, 12, kernel="native", **KW), ref)


def test_speculative_steps_give_the_steps_as_written():
    """An explicit step runs with its finiteness tests taken as passed, and a chunk whose tested
    values were not all finite runs the same steps again as written: the same bits as without
    speculation, and the scan's codes and counts. RK4 on rigid bodies spun so fast that the
    map is unstable: one member overflows at the last step of the second save block (5 failed
    steps), one in the first (10), among healthy members, in chunks of 3."""
    y0s = np.tile([0.3, 1.0, -0.5], (9, 1))
    y0s[4] *= 300
    y0s[7] *= 1000
    ref = lpjax.ensemble(RB, lpjax.RK4(), y0s, 0.02, 12, kernel="scan", **KW)
    assert ref.failed.tolist() == [4, 7] and ref.stats["num_failed_steps"][[4, 7]].tolist() == [5, 10]
    runs = {}
    for every in (4, 10**9):  # speculating, and not
        runs[every] = lpjax.ensemble(RB, lpjax.RK4(), y0s, 0.02, 12, kernel=Native(chunk=3, speculate_every=every), **KW)
    _assert_equal_runs(runs[4], ref)
    for k in ("final_state", "result"):
        assert np.array_equal(getattr(runs[4], k), getattr(runs[10**9], k), equal_nan=k == "final_state")
    assert np.array_equal(runs[4].observables["casimirs"], runs[10**9].observables["casimirs"], equal_nan=True)
    assert np.array_equal(runs[4].stats["num_failed_steps"], runs[10**9].stats["num_failed_steps"])


@pytest.mark.parametrize("last", [True, False])
def test_a_tested_value_is_left_to_the_end_only_when_its_inf_or_nan_lasts(last):
    """While speculating, a member loop skips the per-step test of a value whose inf or NaN
    reaches what the loop stores (through +, −, ×, ÷ by the numerator), provided every float
    it loaded reaches it too, so that an inf or NaN lasts to the end of the steps. ``3 / x₂``
    does not keep x₂'s inf (3 / inf = 0): then every tested value is summed at each step."""
    from jax import lax

    from lpjax._ensemble._kernels._native._context import IR

    ctx = IR(4)
    ctx.speculate = (ctx.slot(np.float64), np.dtype(np.float64))
    avals = [jax.ShapeDtypeStruct((3,), np.float64)]
    regions = ctx.new_regions(avals)
    ctx.open()
    (x,) = ctx.get(regions, avals)
    third = ctx.bind(lax.div_p, [x[2], 3.0], {}) if last else ctx.bind(lax.div_p, [3.0, x[2]], {})
    y = np.array([ctx.bind(lax.mul_p, [x[0], x[1]], {}), ctx.bind(lax.sub_p, [x[1], x[0]], {}), third], object)
    ctx.put(regions, [y], avals)
    lasting = ctx._lasting()
    assert {v.name for v in (*x, *y)} <= lasting if last else lasting == set()


def test_systems_batched_over_parameters():
    """Members-first system arrays (one rest-frame top per member, its own gravity vector)."""
    p = jnp.asarray(0.5 + RNG.random(size=(40, 3)))
    tops = eqx.filter_vmap(lambda q: lagrange_top(3, frame="rest", p=q))(p)
    kw = dict(KW, batched_system=True)
    ref = lpjax.ensemble(tops, lpjax.SurisLagrangeTop(), TOP0, 0.02, 12, kernel="scan", **kw)
    _assert_equal_runs(lpjax.ensemble(tops, lpjax.SurisLagrangeTop(), TOP0, 0.02, 12, kernel="native", **kw), ref)


INDEPENDENCE = [CASES[0], CASES[3], CASES[6]]  # straight-line code, a fixed loop, a while loop


def test_results_do_not_depend_on_threads_chunks_or_loop_layout():
    """Suris (straight-line), Moser–Veselov (a fixed loop) and GL4 (a while loop with early
    exit): bit-identical over 1, 2 and 4 threads, chunks of 256, 7 and 64 members, and with
    the loops per member instead of as passes over the chunk (``split=False``)."""
    outs = []
    for threads, chunk, split in ((1, 256, True), (2, 7, True), (4, 64, True), (4, 7, False), (1, 256, False)):
        kernel = Native(threads=threads, chunk=chunk, split=split)
        outs.append([lpjax.ensemble(system, method, y0s, 0.02, 12, kernel=kernel, **KW)
                     for _, system, method, y0s in INDEPENDENCE])
    for other in outs[1:]:
        for a, b in zip(outs[0], other):
            assert np.array_equal(a.observables["casimirs"], b.observables["casimirs"])
            assert np.array_equal(a.stats["mean_iterations"], b.stats["mean_iterations"])


def test_auto_is_native_on_cpu_unless_opted_out(monkeypatch):
    assert lpjax.ensemble(RB, lpjax.RK4(), M0[:8], 0.02, 4).settings["kernel"] == "native"
    monkeypatch.setenv("LPJAX_CPU_KERNEL", "scan")
    assert lpjax.ensemble(RB, lpjax.RK4(), M0[:8], 0.02, 4).settings["kernel"] == "scan"
    monkeypatch.setenv("LPJAX_CPU_KERNEL", "nativ")
    with pytest.raises(ValueError, match="LPJAX_CPU_KERNEL must be 'native' or 'scan', got 'nativ'"):
        lpjax.ensemble(RB, lpjax.RK4(), M0[:8], 0.02, 4)


def _spectrum(y):  # an observable with an eigensolver, which the entrywise evaluator does not run
    return jnp.linalg.eigvalsh(jnp.outer(y, y))


def test_what_cannot_be_compiled_falls_back_to_the_scan_once():
    method = lpjax.GaussLegendre(2)
    ref = lpjax.ensemble(RB, method, M0[:20], 0.02, 4, kernel="scan", observe=_spectrum)
    with pytest.warns(UserWarning, match=r"cannot run natively \(kernel='native'\) \(primitive 'eigh'\); "
                                         r"using kernel='scan'"):
        got = lpjax.ensemble(RB, method, M0[:20], 0.02, 4, kernel="native", observe=_spectrum)
    assert np.array_equal(got.observables["observed"], ref.observables["observed"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lpjax.ensemble(RB, method, M0[:20], 0.02, 4, kernel="native", observe=_spectrum)  # said once


class _Kirchhoff(eqx.Module):
    """``h = ½ μᵀ K⁻¹ μ`` on se(3)* through ``jnp.linalg.solve`` (primitive 'lu', which the native
    kernel does not compile)."""

    K: jax.Array

    def __call__(self, mu):
        return 0.5 * jnp.dot(mu, jnp.linalg.solve(self.K, mu))


def test_a_fallback_is_recorded_as_the_kernel_that_ran_and_warned_at_the_callers_line(tmp_path):
    kernel = Native(chunk=13)  # said once per method, system and kernel: not said before here
    A = RNG.normal(size=(6, 6))
    system = lpjax.LiePoissonSystem(lpjax.algebras.se3(), _Kirchhoff(jnp.asarray(A @ A.T + 6 * np.eye(6))), -1)
    y0s = RNG.normal(size=(8, 6))
    with pytest.warns(UserWarning, match=r"cannot run natively \(kernel='native'\) \(primitive 'lu'\)") as caught:
        got = lpjax.ensemble(system, lpjax.GaussLegendre(2), y0s, 0.05, 6, kernel=kernel, out=str(tmp_path / "k"))
    assert [w.filename for w in caught] == [__file__]
    assert got.settings["kernel"] == "scan"
    assert lpjax.open_ensemble(str(tmp_path / "k")).settings["kernel"] == "scan"
    ref = lpjax.ensemble(system, lpjax.GaussLegendre(2), y0s, 0.05, 6, kernel="scan")
    assert np.array_equal(got.final_state[:], ref.final_state)


@pytest.mark.skipif(not _native._target()[1].triple.startswith("x86_64"), reason="the flush is x86's control register")
def test_denormals_flush_to_zero_as_in_xla():
    """XLA:CPU flushes denormal inputs and results to zero; so does the native kernel (a state
    of denormals stays put under the scan, and would drift without the flush)."""
    y0s = np.array([[3e-308, 2e-308, 1e-308], [1.0, 0.5, 0.2]])
    ref = lpjax.ensemble(RB, lpjax.RK4(), y0s, 0.5, 4, kernel="scan")
    got = lpjax.ensemble(RB, lpjax.RK4(), y0s, 0.5, 4, kernel="native")
    assert ref.final_state[0].tolist() == [3e-308, 0.0, 0.0]
    assert np.array_equal(got.final_state, ref.final_state)


def test_programs_too_large_run_on_the_scan():
    ref = lpjax.ensemble(RB, lpjax.RK4(), M0[:8], 0.02, 4, kernel="scan")
    with pytest.warns(UserWarning, match=r"cannot run natively .* instructions, over the 50 that LLVM compiles "
                                         r"in seconds\); using kernel='scan'"):
        got = lpjax.ensemble(RB, lpjax.RK4(), M0[:8], 0.02, 4, kernel=Native(max_lines=50))
    assert np.array_equal(got.final_state, ref.final_state)


def test_native_inside_jit_through_ensemble_function():
    """ensemble_function(kernel="native") under jax.jit (a pure callback) equals ensemble."""
    import jax

    f = jax.jit(lpjax.ensemble_function(RB, lpjax.MoserVeselov(), 0.02, 12, kernel="native", **KW))
    out = f(jnp.asarray(M0))
    ref = lpjax.ensemble(RB, lpjax.MoserVeselov(), M0, 0.02, 12, kernel="native", **KW)
    assert np.array_equal(np.asarray(out.observables["casimirs"]), ref.observables["casimirs"])
    assert np.array_equal(np.asarray(out.result), ref.result)


_SECOND = """
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
import lpjax
from lpjax._ensemble._kernels._native import _run as _native
from lpjax.systems import rigid_body
rb = rigid_body(np.array([1.0, 2.0, 3.0]))
sol = lpjax.ensemble(rb, lpjax.GaussLegendre(2), np.eye(3), 0.02, 8, kernel="native")
print(_native.compiled[0])
print(repr(sol.final_state.tolist()))
"""


def _child(code: str, cache, extra_env=None, lines: int = 1) -> list:
    env = {**os.environ, "LPJAX_CACHE_DIR": str(cache), **(extra_env or {})}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-lines:]


def test_a_second_process_loads_the_kernel_from_disk(tmp_path):
    compiled, first = _child(_SECOND, tmp_path, lines=2)
    assert compiled == "1" and len(list((tmp_path / "native").glob("kernel_*.o"))) == 1
    assert _child(_SECOND, tmp_path, lines=2) == ["0", first]  # loaded, not compiled, the same states


def test_without_llvmlite_everything_works_as_before(tmp_path):
    """llvmlite hidden: kernel="auto" runs the scan, kernel="native" says what to install."""
    code = textwrap.dedent("""
        import sys
        class Hide:
            def find_spec(self, name, path=None, target=None):
                if name == "llvmlite" or name.startswith("llvmlite."):
                    raise ImportError("hidden")
        sys.meta_path.insert(0, Hide())
        import jax, numpy as np
        jax.config.update("jax_enable_x64", True)
        import lpjax
        from lpjax.systems import rigid_body
        rb = rigid_body(np.array([1.0, 2.0, 3.0]))
        sol = lpjax.ensemble(rb, lpjax.MoserVeselov(), np.eye(3), 0.02, 8)
        assert sol.failed.size == 0 and sol.settings["kernel"] == "scan", sol.settings
        try:
            lpjax.ensemble(rb, lpjax.MoserVeselov(), np.eye(3), 0.02, 8, kernel="native")
        except ValueError as e:
            print(e)
    """)
    assert _child(code, tmp_path) == ["kernel='native' needs llvmlite: pip install 'lpjax[cpu]'"]
