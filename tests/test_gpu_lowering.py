"""The fused GPU kernel, proven on CPU: ``ensemble_function(..., platform="cuda")`` lowered for
CUDA with ``jax.export`` runs the whole Pallas-to-Triton lowering without a GPU. For every
method family, in float64 and float32, the lowered module holds a Triton kernel (not a silent
fallback to the scan), and its Triton IR keeps the state in registers: no global load inside
any loop, and no global store inside the step loop (only at the saves, in the loop over
saves). Each case is traced and lowered once and all its checks read that one IR."""

import contextlib
import io
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax import lagrangians
from lpjax._ensemble._kernels._fused import printing_triton_ir
from lpjax.systems import (
    clebsch_case, lagrange_top, rigid_body, rigid_body_n, rubber_chaplygin_sphere, veselova,
)

pytestmark = pytest.mark.skipif(
    jax.__version_info__ >= (0, 11) and not any(d.platform == "gpu" for d in jax.devices()),
    reason="JAX >= 0.11 lowers Pallas Triton kernels only with a GPU or an abstract GPU mesh, under which the "
           "entrywise evaluator's trace-time constants cannot run; the pinned JAX (0.10) lowers without one",
)

I3 = jnp.array([1.0, 2.0, 3.0])
RB = rigid_body(I3)
CLEBSCH = clebsch_case(jnp.array([0.5, 1.2, 2.0]))
N, N_STEPS, SAVE_EVERY = 512, 100, 25  # 2 programs of 256 members, 4 saves of 25 steps


def _cases():
    ves, rubber = veselova(I3), rubber_chaplygin_sphere(I3, 0.5)
    out = [
        ("Suris rest n=3", lagrange_top(3, frame="rest"), lpjax.SurisLagrangeTop(), [0.3, -0.2, 0.5, 0.0, 0.6, 0.8]),
        ("Suris moving n=4", lagrange_top(4, frame="moving"), lpjax.SurisLagrangeTop(), np.linspace(0.1, 1.0, 10)),
        ("Suris-Clebsch", CLEBSCH, lpjax.SurisClebsch(), np.linspace(0.1, 0.6, 6)),
        ("Moser-Veselov so(3)", RB, lpjax.MoserVeselov(), [1.0, 0.5, 0.8]),
        ("Moser-Veselov so(4)", rigid_body_n(jnp.array([0.5, 1.0, 1.5, 2.0])), lpjax.MoserVeselov(),
         [1.0, 0.3, -0.5, 0.2, 0.8, -0.4]),
    ]
    for s in (1, 2, 3):
        out.append((f"GL{2 * s} early exit", RB, lpjax.GaussLegendre(s), [1.0, 0.5, 0.8]))
        out.append((f"GL{2 * s} fixed count", RB, lpjax.GaussLegendre(s, early_exit=False), [1.0, 0.5, 0.8]))
    out += [
        ("RK4", RB, lpjax.RK4(), [1.0, 0.5, 0.8]),
        ("DEP", RB, lpjax.DiscreteEulerPoincare(lagrangians.moser_veselov(RB)), [1.0, 0.5, 0.8]),
        ("DEP Suris-Clebsch", CLEBSCH, lpjax.DiscreteEulerPoincare(lagrangians.suris_clebsch(CLEBSCH)),
         np.linspace(0.1, 0.6, 6)),
        ("Collective(GL4)", RB, lpjax.Collective(lpjax.GaussLegendre(2)), [1.0, 0.5, 0.8]),
        ("Composition(Moser-Veselov)", RB, lpjax.Composition(lpjax.MoserVeselov(), "kahan-li6"), [1.0, 0.5, 0.8]),
        ("Composition(splitting)", RB, lpjax.Composition(lpjax.LiePoissonSplitting(("q0", "q1", "q2")), "kahan-li6"),
         [1.0, 0.5, 0.8]),
        ("splitting, exact flow", RB, lpjax.LiePoissonSplitting(("q0", "q1", "q2"), "exact"), [1.0, 0.5, 0.8]),
        ("S10(splitting)", RB, lpjax.Composition(lpjax.LiePoissonSplitting(("q0", "q1", "q2")), "blanes-moan-s10"),
         [1.0, 0.5, 0.8]),
        ("Processed(splitting)", RB, lpjax.Processed(lpjax.LiePoissonSplitting(("q0", "q1", "q2")), "blanes6"),
         [1.0, 0.5, 0.8]),
        ("Composition(Suris)", lagrange_top(3, frame="rest"), lpjax.Composition(lpjax.SurisLagrangeTop(), "kahan-li6"),
         [0.3, -0.2, 0.5, 0.0, 0.6, 0.8]),
        ("Veselova GL4", ves, lpjax.GaussLegendre(2), np.asarray(ves.default_state())),
        ("Projected(GL4)", rubber, lpjax.Projected(lpjax.GaussLegendre(2)), np.asarray(rubber.default_state())),
    ]
    return out


CASES = _cases()


# ------------------------------------------------------------------------------ reading Triton IR


def _is_loop(line: str) -> bool:
    return re.search(r"\bscf\.(for|while)\b", line) is not None


def _used_later(lines: list, at: int, name: str) -> bool:
    """Whether SSA value ``name`` defined on line ``at`` is used before its region closes (MLIR
    reuses names in sibling regions, so the search stops there)."""
    pattern = re.compile(re.escape(name) + r"(?![\w#])")
    depth = 0
    for line in lines[at + 1:]:
        s = line.strip()
        if s.startswith("}"):
            depth -= 1
            if depth < 0:
                return False
        if pattern.search(s):
            return True
        if s.endswith("{"):
            depth += 1
    return False


def loop_profile(ir: str) -> dict:
    """Global loads and stores of a Triton module by loop depth: depth 1 is the loop over saves,
    depth 2 and more the step loop and the solver iterations inside it. A Pallas store lowers
    to a swap, whose load of the old value is dead: only loads whose value is used count."""
    lines = ir.splitlines()
    stack: list = []
    prof = {"live_loads_in_loops": 0, "stores_in_save_loop": 0, "stores_in_step_loop": 0, "max_loop_depth": 0}
    for n, line in enumerate(lines):
        s = line.strip()
        if s.startswith("}"):
            kind = stack.pop()
            if s.endswith("{"):  # "} do {", "} else {": the same op's next region
                stack.append(kind)
            continue
        depth = stack.count("loop")
        load = re.match(r"(%[\w]+) = tt\.load\b", s)
        if load and depth and _used_later(lines, n, load.group(1)):
            prof["live_loads_in_loops"] += 1
        if s.startswith("tt.store"):
            if depth == 1:
                prof["stores_in_save_loop"] += 1
            elif depth >= 2:
                prof["stores_in_step_loop"] += 1
        if s.endswith("{"):
            stack.append("loop" if _is_loop(s) else "other")
            prof["max_loop_depth"] = max(prof["max_loop_depth"], stack.count("loop"))
    assert not stack, "unbalanced regions in the Triton IR"
    return prof


def lower_for_cuda(f, y0s) -> tuple[str, str]:
    """``(StableHLO of the exported module, the Triton IR that Pallas printed)``."""
    out = io.StringIO()
    with printing_triton_ir(), contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback to the scan warns: here it fails
        exported = jax.export.export(
            jax.jit(f), platforms=("cuda",),
            disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")],
        )(y0s)
    text = out.getvalue()
    marker = "The Triton module for pallas_call"
    return exported.mlir_module(), (text[text.index(marker):] if marker in text else "")


def test_the_reader_sees_loads_and_stores_in_loops():
    """The IR reader itself, on a hand-written module: a live load in a loop, a dead (swap)
    load, a store in the save loop and one in the step loop, and a name reused in a sibling
    region, which is not a use."""
    ir = """The Triton module for pallas_call
    module {
      tt.func public @k(%arg0: !tt.ptr<f64>) {
        %0 = scf.for %i = %c0 to %c4 step %c1 iter_args(%a = %x) -> (f64) : i32 {
          %5 = tt.load %p : !tt.ptr<f64>
          tt.store %p, %a : !tt.ptr<f64>
          %6 = scf.for %j = %c0 to %c4 step %c1 iter_args(%b = %a) -> (f64) : i32 {
            %7 = tt.load %q : !tt.ptr<f64>
            %8 = arith.addf %7, %b : f64
            tt.store %q, %8 : !tt.ptr<f64>
            scf.yield %8 : f64
          }
          scf.yield %6 : f64
        }
        %1 = scf.while (%w = %0) : (f64) -> f64 {
          scf.condition(%c) %w : f64
        } do {
        ^bb0(%w2: f64):
          %5 = arith.addf %w2, %w2 : f64
          scf.yield %5 : f64
        }
        tt.return
      }
    }"""
    assert loop_profile(ir) == {"live_loads_in_loops": 1, "stores_in_save_loop": 1, "stores_in_step_loop": 1,
                                "max_loop_depth": 2}


# every case in float64; float32 for all but the two largest kernels (about 11 s each to lower
# here), whose float32 programs are the same ops on the same nonholonomic fields
_LARGE = ("Veselova GL4", "Projected(GL4)")
_LOWERING = [pytest.param(*c, dt, id=f"{c[0]}-{dt.__name__}") for c in CASES for dt in (np.float64, np.float32)
             if dt == np.float64 or c[0] not in _LARGE]


@pytest.mark.parametrize("name, system, method, y0, dtype", _LOWERING)
def test_the_fused_kernel_lowers_for_cuda_with_the_state_in_registers(name, system, method, y0, dtype):
    f = lpjax.ensemble_function(system, method, 0.01, N_STEPS, save_every=SAVE_EVERY, observe="casimirs",
                                platform="cuda", dtype=dtype)
    assert f.kernel == lpjax.kernels.Fused() and f.platform == "gpu"  # chosen for the platform, on this CPU-only machine
    y0s = jnp.asarray(np.tile(np.asarray(y0, dtype), (N, 1)))
    hlo, ir = lower_for_cuda(f, y0s)
    # one Triton kernel (not the scan); for a method whose non-finite entries last, a second one,
    # the steps as written, behind a lax.cond that runs it only if a member is not finite
    assert hlo.count("__gpu$xla.gpu.triton") == (2 if method.nonfinite_lasts else 1)
    assert re.search(r"tt\.func public @\w+", ir)
    assert ("f64" in ir) == (dtype == np.float64)
    prof = loop_profile(ir)
    assert prof["max_loop_depth"] >= 2, prof  # the step loop inside the loop over saves
    assert prof["live_loads_in_loops"] == 0, prof
    assert prof["stores_in_step_loop"] == 0, prof
    assert prof["stores_in_save_loop"] >= 1, prof  # the observables at each save


@pytest.mark.parametrize("name, d, d_written", [("Suris rest n=3", 6, 6 + 2), ("Moser-Veselov so(3)", 3 + 2, 3 + 2)])
def test_the_kernel_that_runs_carries_the_state_alone(name, d, d_written):
    """The kernel that runs holds no replay: its loops (over the saves, over the steps) carry
    the state alone, as a hand-written kernel's do (Moser–Veselov also its result code and
    failed-step count: whether a solve converged is judged at every step), and it has no
    ``while``. The steps as written are the second kernel's, run only if a member is not
    finite at the end."""
    _, system, method, y0 = next(c for c in CASES if c[0] == name)
    f = lpjax.ensemble_function(system, method, 0.01, N_STEPS, save_every=SAVE_EVERY, platform="cuda")
    _, ir = lower_for_cuda(f, jnp.asarray(np.tile(np.asarray(y0, np.float64), (N, 1))))
    fast, written = ir.split("The Triton module for pallas_call")[1:3]

    def carried(module):  # values carried by each scf.for, outermost first
        return [m.group(1).count("tensor<") for m in re.finditer(r"scf\.for .*?-> \((.*?)\)", module)]

    assert "scf.while" not in fast
    assert carried(fast)[:2] == [d, d]
    assert carried(written)[:2] == [d_written, d_written]  # Suris: the result code and failed-step count too


# ------------------------------------------------------------------------------ the map's own arithmetic


def _kernel_ops():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_ops.py"
    spec = importlib.util.spec_from_file_location("kernel_ops", path)
    module = importlib.util.module_from_spec(spec)
    import sys

    sys.path.insert(0, str(path.parent))  # its _harness
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def _ratio(name: str, dtype) -> float:
    """Operations per step of the fused kernel's Triton IR over the hand-written Pallas kernel's
    (``benchmarks/kernel_ops.py``)."""
    ko = _kernel_ops()
    _, system, method, y0s, step, params, iters = next(c for c in ko._cases() if c[0].startswith(name))
    y = jnp.asarray(y0s, dtype)
    f = lpjax.ensemble_function(system, method, ko.DT, ko.N_STEPS, save_every=ko.SAVE_EVERY, platform="cuda",
                                dtype=dtype)
    ours = ko.step_counts(ko._export(f, y), 2, iters)["per_step"]
    hand = ko.step_counts(ko._export(ko.hand_kernel(step, y.shape[1], len(params), ko.N_STEPS, dtype), y,
                                     jnp.asarray(params, dtype)), 1, iters)["per_step"]
    return ours / hand


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_suris_step_does_the_maps_own_arithmetic(dtype):
    """No per-step finiteness test or result code: within 1.25× the hand kernel's operations
    (measured 85 against 75, 1.13×; 154 before the member program tested once per save)."""
    assert _ratio("Suris", dtype) <= 1.25


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_moser_veselov_step_does_the_maps_own_arithmetic(dtype):
    """The so(3) Legendre equation in its closed vector form, no per-step finiteness test,
    statistics only when asked: within 1.25× the hand kernel's operations per step, its 20
    iterations and the rest (measured 1204 against 1215, 0.99×: 48 an iteration against 57,
    244 in the rest against 75; 3174 at first, 2175 through the matrices)."""
    assert _ratio("Moser-Veselov", dtype) <= 1.25


@pytest.mark.parametrize("stages", [2, 3])
def test_the_adaptive_kernel_lowers_for_cuda_with_a_while_per_lane(stages):
    """An adaptive ensemble (GL under a per-member PID controller, saves stepped onto): one
    Triton kernel, the attempts a ``while`` inside the loop over saves (the stage solves a third
    level), the save times held in registers (selected, not loaded): no global load inside any
    loop, no store but at the saves."""
    system = lpjax.systems.heavy_top(np.array([1.0, 1.3, 0.7]), np.array([0.0, 0.0, 1.0]), 2.0)
    f = lpjax.ensemble_function(system, lpjax.GaussLegendre(stages), None, platform="cuda", observe="casimirs",
                                controller=lpjax.PIDController(rtol=1e-8, atol=1e-8), ts=[0.5, 1.0, 2.0])
    prof = _one_kernel_loading_nothing_in_loops(f)
    assert prof["max_loop_depth"] == 3, prof


def _one_kernel_loading_nothing_in_loops(f) -> dict:
    """``f`` (on 6-entry states) lowers for CUDA as one fused Triton kernel with no global load
    inside any loop and no store but at the saves; its loop profile."""
    assert f.kernel == lpjax.kernels.Fused()
    hlo, ir = lower_for_cuda(f, jnp.ones((N, 6)))
    assert hlo.count("__gpu$xla.gpu.triton") == 1
    prof = loop_profile(ir)
    assert prof["live_loads_in_loops"] == 0, prof
    assert prof["stores_in_step_loop"] == 0, prof
    assert prof["stores_in_save_loop"] >= 1, prof
    return prof


def test_the_tangent_program_lowers_for_cuda_with_the_tangents_in_registers():
    """A MEGNO ensemble (GL4 heavy tops, one tangent vector propagated by the step's JVP, its
    implicit solve's tangent by the preconditioned iteration): one Triton kernel, no global load
    inside any loop, no store but at the saves."""
    system = lpjax.systems.heavy_top(np.array([1.0, 1.3, 0.7]), np.array([0.0, 0.0, 1.0]), 2.0)
    f = lpjax.ensemble_function(system, lpjax.GaussLegendre(2), 0.01, N_STEPS, save_every=SAVE_EVERY,
                                observe=lpjax.MEGNO(), platform="cuda")
    _one_kernel_loading_nothing_in_loops(f)


def test_the_stochastic_program_lowers_for_cuda_with_its_random_numbers_in_registers():
    """A stochastic ensemble (heavy tops, the stochastic midpoint, each member's increments drawn
    in the kernel by Threefry and Box–Muller from its key and the step): one Triton kernel, no
    global load inside any loop, no store but at the saves."""
    system = lpjax.systems.stochastic_heavy_top(np.array([1.0, 1.3, 0.7]), np.array([0.0, 0.0, 1.0]), 2.0,
                                                0.3 * np.eye(3))
    f = lpjax.ensemble_function(system, lpjax.StochasticMidpoint(max_iters=10, early_exit=False), 0.01, N_STEPS,
                                save_every=SAVE_EVERY, key=jax.random.key(0), platform="cuda")
    _one_kernel_loading_nothing_in_loops(f)
