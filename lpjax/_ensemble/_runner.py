"""Running a plan's chunks (:func:`lpjax.ensemble`): on worker threads or through a device
pipeline, each chunk written into the results as it ends, under a progress bar; Ctrl-C lets
the chunks running finish and be written, and starts no other."""

from __future__ import annotations

import concurrent.futures
import logging
import sys
import time
from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from .._stochastic_member import indexed_states, is_indexed
from ._kernel import EnsembleFunction, EnsembleOutput
from ._plan import Plan
from ._results import Results
from ._validate import Inputs

__all__ = ["run_chunks"]

_log = logging.getLogger("lpjax.ensemble")  # at DEBUG: each chunk's dispatch and collection, with its thread


def _kept(outs: EnsembleOutput, keep: Optional[tuple]) -> EnsembleOutput:
    """``outs`` with only the saves ``keep[0] … keep[1] − 1`` of the state observable (its ends,
    where they are ``y0s`` and ``final_state``, are not returned twice)."""
    if keep is None:
        return outs
    return outs._replace(observables={**outs.observables, "state": outs.observables["state"][:, keep[0]:keep[1]]})


@eqx.filter_jit
def _run_chunk(fn: EnsembleFunction, y0s, dyn, devices: Optional[tuple], keep: Optional[tuple]) -> EnsembleOutput:
    """One chunk; with ``devices``, split over them by ``shard_map`` on the member axis."""
    if devices is None:
        return _kept(fn(y0s, dyn), keep)
    mesh = Mesh(np.array(devices), ("members",))
    members = PartitionSpec("members")
    dyn_spec = jax.tree.map(lambda _: members, dyn)
    outs = jax.shard_map(fn, mesh=mesh, in_specs=(members, dyn_spec), out_specs=members, check_vma=False)(y0s, dyn)
    return _kept(outs, keep)


def _inputs(plan: Plan, inp: Inputs, dyn, k: int, indexed: bool = False):
    """Chunk ``k``'s members ``lo … hi − 1``: their rows (padded to the compiled chunk with copies
    of its own members, except for a kernel that runs on the host), initial states (``indexed``:
    with the members' indices as a last column, :mod:`lpjax._stochastic_member`) and batched arrays."""
    lo, hi = plan.span(k)
    idx = slice(lo, hi) if hi - lo == plan.padded or plan.kernel.on_host else lo + np.arange(plan.padded) % (hi - lo)
    y0s = inp.y0s[idx]
    if indexed:
        y0s = indexed_states(y0s, np.arange(lo, hi) if isinstance(idx, slice) else idx)
    return lo, hi, idx, y0s, jax.tree.map(lambda a: a[idx], dyn) if plan.batched else None


def _dispatch(plan: Plan, fn: EnsembleFunction, inp: Inputs, dyn, k: int, keep) -> tuple:
    """Chunk ``k`` started on the device, without waiting: its inputs copied there, its kernel
    queued and its outputs' copies back to the host begun."""
    _log.debug("dispatch chunk %d", k)
    lo, hi, _, y0s, dyn_k = _inputs(plan, inp, dyn, k, is_indexed(fn.member))
    outs = _run_chunk(fn, jax.device_put(y0s), dyn_k, plan.devices, keep)
    for a in jax.tree.leaves(outs):
        a.copy_to_host_async()
    return k, lo, hi, outs


def _collect(results: Results, k: int, lo: int, hi: int, outs) -> None:
    """Chunk ``k``'s outputs, once on the host, written into the results (its own rows)."""
    _log.debug("collect chunk %d", k)
    results.save(k, lo, jax.tree.map(lambda a: np.asarray(a)[: hi - lo], outs))


def run_chunks(plan: Plan, fn: EnsembleFunction, inp: Inputs, results: Results, progress, keep) -> None:
    """This process's chunks not yet done, under a progress bar.

    On CPU with several worker threads, or with a kernel on the host (native): the first chunk alone (it
    compiles), the rest on ``plan.workers`` threads, each computing and saving its own chunk
    (disjoint slices: memory stays the output plus one chunk per worker).

    Otherwise (a device, or several): a pipeline. This thread starts chunk k + 1 on the device
    (:func:`_dispatch`: inputs copied, kernel queued, copies back begun) before it hands chunk
    k to a writer thread (:func:`_collect`), which waits for its outputs and writes them into
    the results (host arrays allocated once, or the store). At most three chunks are in flight."""
    dyn = eqx.filter(inp.system, eqx.is_array)
    todo = results.chunks
    show = sys.stderr.isatty() and plan.process == 0 if progress is None else bool(progress)
    from tqdm.auto import tqdm

    bar = tqdm(total=len(todo), unit="chunk", disable=not show,
               desc="ensemble", postfix=f"{plan.members} members x {plan.n_steps} steps")
    start = time.perf_counter()

    def finished() -> None:  # a chunk more, and the members a second so far
        bar.update()
        rate = min(bar.n * plan.chunk, plan.members) / max(time.perf_counter() - start, 1e-9)
        bar.set_postfix_str(f"{plan.members} members x {plan.n_steps} steps, {rate:.3g} members/s")
    with bar:
        if not plan.kernel.on_host and plan.workers == 1:
            with concurrent.futures.ThreadPoolExecutor(1) as writer:
                written, started = [], None
                for k in todo:
                    now = _dispatch(plan, fn, inp, dyn, k, keep)
                    if started is not None:
                        written.append(writer.submit(_collect, results, *started))
                    started = now
                    while len(written) > 1:  # the device holds at most two chunks' outputs
                        written.pop(0).result()
                        finished()
                if started is not None:
                    written.append(writer.submit(_collect, results, *started))
                for w in written:
                    w.result()
                    finished()
            return

        def compute(k: int) -> None:
            lo, hi, idx, y0s, dyn_k = _inputs(plan, inp, dyn, k, is_indexed(fn.member))
            outs = (_kept(fn.host(y0s, dyn_k, results.into(idx)), keep) if plan.kernel.on_host
                    else _run_chunk(fn, jnp.asarray(y0s), dyn_k, plan.devices, keep))  # native: into the result's arrays
            _collect(results, k, lo, hi, outs)

        if todo:  # the first chunk alone: it compiles
            compute(todo[0])
            finished()
        if todo[1:]:
            pool = concurrent.futures.ThreadPoolExecutor(plan.workers)
            try:
                for fut in concurrent.futures.as_completed([pool.submit(compute, k) for k in todo[1:]]):
                    fut.result()
                    finished()
            except BaseException:  # Ctrl-C, or a chunk's error: the chunks running finish and are written (a
                pool.shutdown(wait=True, cancel_futures=True)  # store stays resumable), the others never start
                raise
            pool.shutdown()
