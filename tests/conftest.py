"""Suite-wide settings.

Compiler settings. XLA compiles every distinct program a test builds, and those compiles were
two thirds of the suite's time. Unless ``LPJAX_TEST_XLA=default`` is set, the suite asks XLA:CPU
for its fast-compile settings (``XLA_FAST_COMPILE``: LLVM at -O0, the legacy elemental emitters
instead of the MLIR fusion emitters). The programs are the same HLO with the same IEEE
semantics; what changes is that LLVM does not contract a*b + c into a fused multiply-add, so
results differ from a default build at roundoff (measured: <= 6e-15 after 1000 steps of
GL4, Moser-Veselov, RK4 and a gradient). The suite's time halves (1243 s -> 644 s on 2 cores).
A test that pins a roundoff floor set with XLA's default settings carries the marker
``xla_default``: under the fast settings it runs in a child pytest with XLA's defaults.
``LPJAX_TEST_XLA=default make test`` runs everything with the defaults. The settings are asked
for only of the pinned jaxlib (0.10.x): later XLAs abort at start on the emitter flag.

A deadlock of jaxlib 0.10.x. Its LAPACK kernels (LU, triangular solve, Cholesky, ...) split a
large batch into tasks on XLA:CPU's intra-op thread pool and block until they finish. When the
program runs as many such kernels at once as the pool has threads, every thread of the pool
waits for tasks that no thread is left to run, and the program never finishes (seen on CI in a
vmapped ``divergence_defect`` of Veselova n = 5, and reproduced here with gdb: both pool threads
in ``ParallelBatchMap`` -> ``BlockingCounter::Wait``). The kernels run a batch inline when the
pool has fewer than two threads, so under jaxlib 0.10.x the suite sets ``PJRT_NPROC=1`` (one
intra-op thread per process; the suite runs two processes on two cores) unless it is set.
jaxlib 0.11 builds these kernels without the thread pool.

Hangs. A test that runs past ``LPJAX_TEST_HANG_S`` seconds (300; the slowest takes about 40 s)
is taken to have hung: faulthandler writes the Python stack of every thread of its process to a
file and ends the process, pytest-xdist reports the test as crashed and goes on, and the
session's summary prints the stacks.
"""

import faulthandler
import gc
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile
from typing import Optional

XLA_FAST_COMPILE = "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=0"
_JAXLIB_0_10 = importlib.metadata.version("jaxlib").startswith("0.10.")  # the pinned jaxlib
FAST = os.environ.get("LPJAX_TEST_XLA", "fast") != "default" and _JAXLIB_0_10
# the XLA_FLAGS the suite was started with (kept for the xla_default children: pytest-xdist's
# workers inherit the controller's flags, which already have the fast settings)
_USER_XLA_FLAGS = os.environ.setdefault("LPJAX_TEST_USER_XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
if FAST and XLA_FAST_COMPILE not in os.environ.get("XLA_FLAGS", ""):  # before JAX starts its backend
    os.environ["XLA_FLAGS"] = f"{_USER_XLA_FLAGS} {XLA_FAST_COMPILE}".strip()  # the tests' subprocesses inherit it

if _JAXLIB_0_10:  # the deadlock above; before JAX starts
    os.environ.setdefault("PJRT_NPROC", "1")

HANG_S = float(os.environ.get("LPJAX_TEST_HANG_S", "300"))
_OWN_HANG_DIR = "LPJAX_TEST_HANG_DIR" not in os.environ  # this process starts the session (workers inherit it)
if _OWN_HANG_DIR:
    os.environ["LPJAX_TEST_HANG_DIR"] = tempfile.mkdtemp(prefix="lpjax-test-hangs-")
_HANG_DIR = os.environ["LPJAX_TEST_HANG_DIR"]

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Drop JAX's compiled programs after each test module. Every XLA:CPU executable keeps its own
    memory mappings; a worker that keeps a whole suite's programs passes the kernel's limit
    (vm.max_map_count, 65530) and XLA aborts in the middle of a compile."""
    yield
    jax.clear_caches()


@pytest.fixture
def key():
    return jax.random.PRNGKey(0)


# hypothesis profiles (tests/test_fuzz.py): "ci", the default, fixed seed; "long" for a deeper search
try:
    from hypothesis import settings as _hyp_settings

    _hyp_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
    _hyp_settings.register_profile("long", deadline=None, print_blob=True)  # test_fuzz.py: 10x the examples
    import os as _os

    _hyp_settings.load_profile(_os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    pass


def pytest_configure(config):
    config.addinivalue_line("markers", "xla_default: pins a roundoff floor measured with XLA's default compiler "
                                       "settings; runs in a child pytest with them (see conftest.py)")


def _child_run(nodeid: str, rootpath) -> Optional[str]:
    """One test in a child pytest with XLA's default settings: None if it passed, else its report."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.update(XLA_FLAGS=_USER_XLA_FLAGS, LPJAX_TEST_XLA="default")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", nodeid], cwd=rootpath,
                         env=env, capture_output=True, text=True, timeout=HANG_S / 2)
    if run.returncode == 0 and re.search(r"^1 passed", run.stdout, re.M):
        return None
    return f"rc {run.returncode}\n{run.stdout[-4000:]}{run.stderr[-2000:]}"


def pytest_pyfunc_call(pyfuncitem):
    """An ``xla_default`` test under the fast settings runs in a child pytest with XLA's default
    settings; this item passes or fails as it did there."""
    if not (FAST and pyfuncitem.get_closest_marker("xla_default")):
        return None
    failure = _child_run(pyfuncitem.nodeid, pyfuncitem.config.rootpath)
    if failure is not None:
        pytest.fail(f"under XLA's default compiler settings (child pytest): {failure}", pytrace=False)
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Arm the hang watchdog (module docstring) for the test's setup, call and teardown."""
    path = os.path.join(_HANG_DIR, f"{os.getpid()}.txt")
    with open(path, "w") as f:
        f.write(f"{item.nodeid} ran past {HANG_S:g} s (or its process died); the stacks of its threads:\n")
        f.flush()
        faulthandler.dump_traceback_later(HANG_S, exit=True, file=f)
        try:
            return (yield)
        finally:
            faulthandler.cancel_dump_traceback_later()
            os.remove(path)


_RUNNER_FRAME = re.compile(r"site-packages/(_pytest|pluggy|xdist|execnet)/|File \"<string>\"")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def pytest_terminal_summary(terminalreporter):
    """The watchdog's reports of processes that hung or died in a test."""
    if not _OWN_HANG_DIR:
        return
    for name in sorted(os.listdir(_HANG_DIR)):
        if not _alive(int(name[:-4])):
            terminalreporter.write_sep("=", f"hung test (process {name[:-4]})")
            with open(os.path.join(_HANG_DIR, name)) as f:  # without pytest's own frames
                terminalreporter.write("".join(line for line in f if not _RUNNER_FRAME.search(line)))


def pytest_unconfigure(config):
    if _OWN_HANG_DIR and not os.listdir(_HANG_DIR):
        os.rmdir(_HANG_DIR)


# What `make test` leaves to `make test-slow` (pytest -m slow), with the seconds each took on 2
# cores (pytest --durations, fresh clone): runs of several processes, signals and devices, each
# in child Pythons, and the dearest instances of parametrized properties whose other instances
# stay in the fast suite (the property is then tested by both, on more cases by the slow one),
# and edge cases and whole-pipeline checks of 3-9 s (float32 with x64 off, a seed's figure, the
# diffrax wrapper's complex, empty and diffrax-less states).
SLOW = {
    "tests/test_ensemble.py::test_four_devices_match_one_bit_for_bit": 18.2,
    "tests/test_processes.py::test_the_command_line_starts_two_processes": 12.1,
    "tests/test_processes.py::test_a_process_killed_mid_run_resumes_on_one_or_two_processes": 11.7,
    "tests/test_processes.py::test_two_processes_write_the_store_of_one_bit_for_bit": 7.3,
    "tests/test_interrupt.py::test_ctrl_c_to_two_processes_stops_both_at_chunk_boundaries_and_one_process_resumes"
    "[launcher]": 8.2,
    "tests/test_interrupt.py::test_ctrl_c_to_two_processes_stops_both_at_chunk_boundaries_and_one_process_resumes"
    "[one process]": 8.3,
    "tests/test_interrupt.py::test_ctrl_c_from_python_raises_keyboard_interrupt_with_the_store_resumable": 9.1,
    "tests/test_interrupt.py::test_a_second_ctrl_c_stops_at_once": 6.0,
    "tests/test_native.py::test_a_second_process_loads_the_kernel_from_disk": 7.7,
    "tests/test_native.py::test_without_llvmlite_everything_works_as_before": 4.2,
    "tests/test_fuzz.py::test_the_cli_prints_no_traceback_and_exits_nonzero_as_a_process": 5.6,
    "tests/test_dep.py::test_attitude_stays_in_so_n_and_noether_momentum_is_kept[moser_veselov_so3]": 10.5,
    "tests/test_dep.py::test_the_midpoint_lagrangian_is_second_order_and_keeps_the_casimirs_on_any_matrix_group"
    "[movable_base_top]": 9.1,
    "tests/test_dep.py::test_the_midpoint_lagrangian_is_second_order_and_keeps_the_casimirs_on_any_matrix_group"
    "[kirchhoff_se3]": 6.3,
    "tests/test_dep.py::test_the_ready_made_split_lagrangians_are_second_order_and_keep_the_casimirs[heavy_top_n4]": 5.5,
    "tests/test_dep.py::test_the_ready_made_split_lagrangians_are_second_order_and_keep_the_casimirs"
    "[kirchhoff_flow_n4]": 4.9,
    "tests/test_coupled_lr.py::test_the_coupled_lr_system_reduces_to_the_lplusr_system[so3_rubber_and_marble]": 9.0,
    "tests/test_coupled_lr.py::test_the_coupled_lr_system_reduces_to_the_lplusr_system[so4_rubber]": 6.7,
    "tests/test_ensemble.py::test_entrywise_and_fused_kernels_equal_the_scan[DEP Suris-Clebsch-system9-method9-y0s9]": 8.6,
    "tests/test_ensemble.py::test_entrywise_and_fused_kernels_equal_the_scan[MoserVeselov so(4)-system4-method4-y0s4]": 6.1,
    "tests/test_ensemble.py::test_entrywise_and_fused_kernels_equal_the_scan[GL6-system7-method7-y0s7]": 3.2,
    "tests/test_reliability.py::test_a_run_split_in_pieces_is_the_whole_run[MV, reconstructed]": 8.6,
    "tests/test_splitting.py::test_the_gradient_equals_direct_ad[Composition(splitting)-cayley]": 7.7,
    "tests/test_cli.py::test_every_supported_pair_runs[veselova_n]": 5.0,
    "tests/test_cli.py::test_every_supported_pair_runs[heavy_top_n]": 4.6,
    "tests/test_gpu_lowering.py::test_the_fused_kernel_lowers_for_cuda_with_the_state_in_registers"
    "[Projected(GL4)-float64]": 3.3,
    "tests/test_nonholonomic_integrators.py::test_rubber_sphere_is_veselova_with_inertia_plus_D[4]": 5.8,
    "tests/test_adaptive.py::test_each_member_is_diffrax_with_step_ts[3-False]": 3.6,
    "tests/test_composition.py::test_each_method_is_symmetric_exactly_when_it_says_so[DEP midpoint]": 3.6,
    "tests/test_float32.py::test_float32_with_x64_off": 8.5,
    "tests/test_ensemble.py::test_float32_error_floor": 7.1,
    "tests/test_reproduce.py::test_seed001_target": 6.8,
    "tests/test_splitting.py::test_the_gradient_equals_direct_ad[Composition(splitting)-exact]": 6.0,
    "tests/test_dep.py::test_the_midpoint_lagrangian_is_second_order_and_keeps_the_casimirs_on_any_matrix_group"
    "[so21]": 5.8,
    "tests/test_diffrax.py::test_complex_state_under_strict_dtype_promotion": 4.9,
    "tests/test_diffrax.py::test_empty_and_scalar_states": 4.3,
    "tests/test_diffrax.py::test_without_diffrax": 3.2,
    "tests/test_ensemble.py::test_entrywise_and_fused_kernels_equal_the_scan[Collective(GL4)-system10-method10-y0s10]": 4.7,
    "tests/test_ensemble.py::test_entrywise_and_fused_kernels_equal_the_scan[GL4 fixed iterations-system6-method6-y0s6]": 3.9,
    "tests/test_gpu_lowering.py::test_the_fused_kernel_lowers_for_cuda_with_the_state_in_registers"
    "[Veselova GL4-float64]": 4.5,
    "tests/test_cli.py::test_every_supported_pair_runs[movable_base_top]": 4.4,
    "tests/test_cli.py::test_every_supported_pair_runs[rubber_chaplygin_sphere]": 3.0,
    "tests/test_cli.py::test_every_supported_pair_runs[veselova]": 2.7,
    "tests/test_dep.py::test_the_ready_made_split_lagrangians_are_second_order_and_keep_the_casimirs"
    "[kirchhoff_general_C]": 4.1,
    "tests/test_reliability.py::test_a_run_split_in_pieces_is_the_whole_run[Projected]": 4.2,
    "tests/test_adaptive.py::test_each_member_is_diffrax_with_step_ts[2-False]": 3.2,
    "tests/test_gradients.py::test_the_stepped_adjoint_of_moser_veselov_equals_direct_ad[4-True]": 10.3,
    "tests/test_composition.py::test_the_gradient_through_the_stages_adjoints_equals_direct_ad[MV]": 4.5,
    "tests/test_gradients.py::test_the_stepped_adjoint_of_gauss_legendre_equals_direct_ad[3-fixed_point-0.02]": 3.0,
    "tests/test_bases.py::test_moser_veselov_in_every_accepted_basis_is_the_standard_map[permuted]": 3.4,
    "tests/test_ensemble.py::test_entrywise_and_fused_kernels_equal_the_scan[Suris moving n=4-system1-method1-y0s1]": 3.1,
}


def pytest_collection_modifyitems(config, items):
    ids = {item.nodeid for item in items}
    bases = {nodeid.split("[")[0] for nodeid in ids}
    stale = [k for k in SLOW if k.split("[")[0] in bases and k not in ids]  # a case renamed or removed
    if stale and not any("::" in str(a) for a in config.args):  # (not when cases were picked by node id)
        raise pytest.UsageError(f"tests/conftest.py SLOW names cases that were not collected: {stale}")
    for item in items:
        if item.nodeid in SLOW:
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session):
    """Tracing makes many short-lived cyclic objects; with Python's default thresholds the
    collector ran 2300 times in tests/test_nonholonomic_integrators.py (3.2 s of 68 s), each
    full pass over jax's and the tests' long-lived objects. Frozen after collection, and with
    a larger first generation: 430 collections, 1.0 s."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
