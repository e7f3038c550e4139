"""The layout of an ensemble run (lpjax._ensemble._plan), fixed from its inputs before any work:
chunks, devices, worker threads and the kernel, printable."""

import dataclasses
import os

import jax
import numpy as np
import pytest

from lpjax._ensemble._kernels._kinds import CPU_BLOCK, CPU_CHUNK
from lpjax._ensemble._plan import make_plan
from lpjax.kernels import Native, Scan


def test_the_native_kernel_runs_an_ensemble_as_one_chunk_on_its_own_threads():
    pytest.importorskip("llvmlite")
    plan = make_plan(100_000, 6, 200, 200, np.float64, False, "native")
    assert (plan.kernel, plan.platform, plan.devices, plan.workers) == (Native(), "cpu", None, 1)
    assert (plan.chunk, plan.n_chunks, plan.padded, plan.n_save, plan.span(0)) == (100_000, 1, 100_000, 1, (0, 100_000))
    assert str(plan) == ("100000 members of size 6, 200 steps saved every 200, float64: kernel 'native' on one cpu "
                         "device, 1 chunk(s) of 100000 over 1 worker thread(s)")


def test_the_scan_splits_an_ensemble_over_worker_threads_in_chunks():
    plan = make_plan(100_000, 3, 40, 10, np.float32, True, "scan")
    workers = max(1, min(os.cpu_count() or 1, 4))
    chunk = min(CPU_CHUNK, max(CPU_BLOCK, -(-100_000 // workers)))
    assert (plan.workers, plan.chunk, plan.n_save, plan.dtype) == (workers, chunk, 4, np.float32)
    assert plan.n_chunks == -(-100_000 // chunk) and plan.span(plan.n_chunks - 1)[1] == 100_000
    assert "batched system" in str(plan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.chunk = 1


def test_a_given_chunk_size_and_several_devices():
    plan = make_plan(2500, 3, 4, 2, np.float64, False, "auto", chunk_size=1000)
    assert (plan.chunk, plan.n_chunks, plan.span(2)) == (1000, 3, (2000, 2500))
    with pytest.raises(ValueError, match="chunk_size"):
        make_plan(2500, 3, 4, 2, np.float64, False, "auto", chunk_size=0)
    two = [jax.devices()[0]] * 2  # several devices: each chunk split over them
    plan = make_plan(10, 3, 4, 2, np.float64, False, "scan", two, 3)
    assert (plan.kernel, plan.workers, plan.chunk, plan.padded, plan.n_chunks) == (Scan(), 1, 3, 4, 4)
    assert "2 cpu devices" in str(plan)
    # "auto" is the kernel of one device (here the native one, which takes whole chunks on the host's cores)
    auto = make_plan(10, 3, 4, 2, np.float64, False, "auto", two, 3)
    assert auto.kernel == make_plan(10, 3, 4, 2, np.float64, False, "auto", None, 3).kernel
    if auto.kernel.on_host:
        assert auto.devices is None


def test_each_process_has_a_contiguous_share_of_the_chunks():
    pytest.importorskip("llvmlite")
    plans = [make_plan(100_000, 6, 200, 200, np.float64, False, "native", processes=3, process=p) for p in range(3)]
    assert {(p.chunk, p.n_chunks) for p in plans} == {(33_334, 3)}  # by default a chunk per process at least
    assert [p.mine(range(3)) for p in plans] == [[0], [1], [2]]
    assert [p.mine([1, 4, 5, 6, 9]) for p in plans] == [[1], [4, 5], [6, 9]]  # the chunks left to do, on resume
    assert str(plans[2]).endswith(", process 2 of 3")
    given = make_plan(100_000, 6, 200, 200, np.float64, False, "native", chunk_size=10_000, processes=2, process=1)
    assert (given.chunk, given.mine(range(given.n_chunks))) == (10_000, [5, 6, 7, 8, 9])


def test_another_process_devices_are_refused():
    with pytest.raises(ValueError, match=r"this process's own \(jax.local_devices\(\)\)"):
        make_plan(10, 3, 4, 2, np.float64, False, "scan", jax.devices()[:1], processes=2, process=1)


@pytest.mark.parametrize("kernel", ["native", "scan"])
def test_a_store_gets_chunks_that_an_interrupted_run_keeps(kernel):
    """4096 heavy tops into a store had one chunk per worker (the native kernel: one chunk),
    so a killed run kept nothing: now at least 8 per process and worker, of 64 members at least."""
    if kernel == "native":
        pytest.importorskip("llvmlite")
    for processes in (1, 2):
        plans = [make_plan(4096, 6, 4000, 4000, np.float64, False, kernel, processes=processes, process=p, store=True)
                 for p in range(processes)]
        assert plans[0].n_chunks >= 8 * plans[0].workers * processes
        assert sum(len(p.mine(range(p.n_chunks))) for p in plans) == plans[0].n_chunks
    assert make_plan(100, 6, 10, 10, np.float64, False, kernel, store=True).chunk == 64
    assert make_plan(4096, 6, 10, 10, np.float64, False, kernel, store=True, chunk_size=4096).n_chunks == 1
