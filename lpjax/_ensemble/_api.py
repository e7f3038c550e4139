"""``ensemble``: many members at once, in chunks, with observables, per-member results, sharding
over devices and a resumable zarr store.

One member is one :func:`lpjax.integrate` run (the same ``init/step`` and the same result codes
and statistics). :func:`ensemble` reads as its stages: the inputs checked
(:mod:`._validate`), the run laid out (:class:`._plan.Plan`), the results opened (a store or
arrays, :class:`_Results`), the chunks run (:func:`_run_chunks`), the solution collected.
Chunks are the unit of dispatch, storage, progress and resume; inside a chunk the members run
in blocks, with the member axis last, by one of the kernels of :mod:`._kernel` (``vmap``-ed
scan, entry by entry, a fused Pallas kernel, or native). With several devices, each chunk is
split over them with ``shard_map``.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import sys
from typing import Callable, Optional, Union

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from .._checks import cast_floats, eval_shape_cached, run_dtype
from .._integrator import AbstractIntegrator
from .._system import AbstractSystem
from ._kernel import EnsembleFunction, EnsembleOutput, _Member, platform_of, resolve_kernel
from ._plan import Plan, make_plan
from ._store import (
    RESULT_NAMES, STATS, EnsembleSolution, Store, array_digest, arrays_by_path, describe, fingerprint, open_ensemble,
    run_settings,
)
from ._validate import Inputs, check_members, check_schedule, first_member, observe_fn, validated

__all__ = ["ensemble", "ensemble_function", "EnsembleOutput", "EnsembleSolution", "open_ensemble"]


def _make_function(system, method, dt, n_steps: int, save_every: int, observe_fn, kernel: str, platform: str,
                   rdtype, batched: bool) -> EnsembleFunction:
    dyn, static = eqx.partition(system, eqx.is_array)
    member = _Member(static, method, jnp.asarray(dt, rdtype), n_steps, save_every, observe_fn)
    return EnsembleFunction(member, None if batched else dyn, batched, kernel, platform, type(system).__name__)


def ensemble_function(
    system: AbstractSystem,
    method: AbstractIntegrator,
    dt: float,
    n_steps: int,
    *,
    save_every: Optional[int] = None,
    observe: Union[None, str, Callable] = None,
    kernel: str = "auto",
    platform: Optional[str] = None,
    dtype=None,
    batched_system: bool = False,
) -> Callable[..., EnsembleOutput]:
    """The pure, jittable function of one chunk of :func:`ensemble`: ``f(y0s)`` (or
    ``f(y0s, systems)`` with ``batched_system=True``) runs every member of ``y0s`` (shape
    ``(N, d)``) for ``n_steps`` steps of ``dt`` and returns an :class:`EnsembleOutput`
    ``(final_state, observables, result, stats)``, members first, as :func:`ensemble` stores
    them. :func:`ensemble` is built on it (and adds chunks, the store, progress, threads and
    devices); use it directly inside your own ``jax.jit``: an outer optimisation over
    ensemble statistics, your own ``shard_map``, or to lower the GPU kernel for inspection.

    Args:
        save_every, observe, kernel, dtype: as for :func:`ensemble` (``dtype`` default:
            float64 with JAX's x64 on, else float32; ``y0s`` must have it).
        platform: the platform to build for: ``"cpu"``, ``"gpu"`` (``"cuda"``, ``"rocm"``) or
            ``"tpu"`` (default: that of JAX's default device). It picks the kernel for
            ``kernel="auto"`` (the fused Triton kernel on a GPU, the scan elsewhere: the
            native kernel is a host callback, which JAX cannot differentiate) and the
            block size. ``platform="cuda"`` on a machine without a GPU gives the GPU kernel,
            for lowering and inspection with ``jax.export`` (``platforms=("cuda",)``); on CPU
            ``kernel="fused"`` runs in Pallas' interpret mode (slow: for tests).
        batched_system: ``system`` is batched over parameters (every array has a leading axis
            N, as ``eqx.filter_vmap`` of a constructor makes it); the function then takes the
            batched system (or its arrays, ``eqx.filter(systems, eqx.is_array)``) as its second
            argument, with N members in both.

    The method is checked against one member's system here; ``y0s``' shape and dtype when the
    function is called (traced).
    """
    n_steps, save_every = check_schedule(n_steps, save_every, dt, "ensemble_function")
    rdtype = run_dtype(dtype, jnp.zeros((), float), "ensemble_function")
    system, method = cast_floats((system, method), rdtype)
    check_members(system, method, batched_system, "ensemble_function")
    plat = platform_of(platform)
    # "auto" stays differentiable here: the native kernel is a host callback, for ensemble()
    kernel = resolve_kernel("scan" if kernel == "auto" and plat == "cpu" else kernel, plat)
    fn = _make_function(system, method, dt, n_steps, save_every, observe_fn(observe)[1], kernel, plat, rdtype,
                        bool(batched_system))

    # a plain function (hashable, as jax.jit needs), over the module that holds the arrays
    def chunk(y0s, systems=None) -> EnsembleOutput:
        return fn(y0s, systems)

    chunk.__doc__ = EnsembleFunction.__doc__
    chunk.kernel, chunk.platform = fn.kernel, fn.platform
    return chunk


@eqx.filter_jit
def _run_chunk(fn: EnsembleFunction, y0s, dyn, devices: Optional[tuple]) -> EnsembleOutput:
    """One chunk; with ``devices``, split over them by ``shard_map`` on the member axis."""
    if devices is None:
        return fn(y0s, dyn)
    mesh = Mesh(np.array(devices), ("members",))
    members = PartitionSpec("members")
    dyn_spec = jax.tree.map(lambda _: members, dyn)
    return jax.shard_map(fn, mesh=mesh, in_specs=(members, dyn_spec), out_specs=members, check_vma=False)(y0s, dyn)


def ensemble(
    system: AbstractSystem,
    method: AbstractIntegrator,
    y0s,
    dt: float,
    n_steps: int,
    *,
    save_every: Optional[int] = None,
    observe: Union[None, str, Callable] = None,
    chunk_size: Optional[int] = None,
    out: Optional[str] = None,
    resume: bool = False,
    progress: Optional[bool] = None,
    throw: bool = False,
    dtype=None,
    devices: Optional[list] = None,
    metadata: Optional[dict] = None,
    batched_system: bool = False,
    kernel: str = "auto",
) -> EnsembleSolution:
    """Integrate many members: initial states ``y0s`` (shape ``(N, d)``), a system batched over
    parameters (``batched_system=True``: every array of the system has a leading axis N, as
    ``eqx.filter_vmap`` of a constructor makes it; ``y0s`` may then be one state ``(d,)``), or
    both. Each member is one :func:`lpjax.integrate` run.

    Args:
        save_every: steps between saves (default ``n_steps``: the start and the end only);
            must divide ``n_steps``.
        observe: what is kept at each save: ``None``/``"state"`` (the state), ``"casimirs"``,
            ``"energy"`` (of each member's own system), or a function ``y -> pytree`` of arrays
            (a Casimir drift, Γ₃, ...). Memory is N × saves × observable, never the trajectory.
        chunk_size: members per chunk, the unit of dispatch, storage, progress and resume
            (default 16384 on CPU, 2²⁰ native or on an accelerator; at most N). Within a chunk
            the members run in blocks of 2048 (CPU scan; time inside block, members last).
        out: a zarr v3 store (a directory) written chunk by chunk; its attributes hold the
            lpjax version, the system and method, dt, n_steps, ``metadata`` (e.g. seeds), the
            creation time and the settings' fingerprint. It is checked for writing before any work.
        resume: finish an existing store made with the same settings (only its missing chunks
            run; the arrays come out bit-identical to an uninterrupted run); another store's
            settings are refused.
        progress: a progress bar over chunks (tqdm); default on when stderr is a terminal.
        throw: raise ``RuntimeError`` naming the failed members at the end. Otherwise a failed
            member only has its own ``result`` code: it never stops or changes the others.
        dtype: float32 or float64 for the states and the system's arrays (default ``y0s``'s);
            float64 with JAX's x64 off is an error.
        devices: the devices to split each chunk over (``shard_map`` on the member axis;
            default all of them when there are several). Results match one device bit for bit.
            Several hosts: after ``jax.distributed.initialize()``, run each host's share of the
            members with ``devices=jax.local_devices()`` and its own ``out``; one run over
            every host's devices is not supported yet (the chunk is built on the host).
        kernel: how a block of members runs (the results agree to roundoff):

            - ``"scan"``: the member program under ``vmap``, a ``lax.scan`` over the steps;
            - ``"entries"``: the member program entry by entry over the block, in a scan
              (:mod:`lpjax._ensemble._soa`: every value a vector over the members);
            - ``"fused"``: one Triton kernel (Pallas) per block of members with the whole time
              loop inside (:mod:`lpjax._ensemble._fused`); on CPU it runs in Pallas' interpret mode
              (slow: for tests);
            - ``"native"`` (CPU, ``pip install 'lpjax[cpu]'``): the member program compiled
              by LLVM into one function (:mod:`lpjax._ensemble._native`): chunks over the cores, the
              time loop outside member loops that vectorize; cached on disk;
            - ``"auto"`` (default): ``"fused"`` on a GPU; on CPU ``"native"`` when llvmlite is
              installed (and one device is used), else ``"scan"``.

            A program the entrywise evaluator cannot run (an unsupported primitive) falls back
            to ``"scan"`` with a warning naming the primitive, once per method and system.

    Returns an :class:`EnsembleSolution`. Each chunk is one call of the pure function that
    :func:`ensemble_function` returns for the same arguments.
    """
    inp = validated(system, method, y0s, dt, n_steps, save_every, dtype, batched_system, metadata)
    plan = make_plan(*inp.y0s.shape, inp.n_steps, inp.save_every, inp.dtype, inp.batched, kernel, devices, chunk_size)
    observe_name, observe_f = observe_fn(observe)
    fn = _make_function(inp.system, inp.method, dt, plan.n_steps, plan.save_every, observe_f, plan.kernel,
                        plan.platform, plan.dtype, plan.batched)
    results = _Results(plan, inp, dt, observe_name, observe_f, out, resume, metadata)
    _run_chunks(plan, fn, inp, results, progress)
    return results.solution(throw)


class _Results:
    """Where a run's chunks go, a zarr store (``out``) or arrays in memory, and the solution
    made of them. The store's settings and fingerprint are fixed here, before any work."""

    def __init__(self, plan: Plan, inp: Inputs, dt, observe_name: str, observe, out, resume: bool, metadata):
        N, n_save, system = plan.members, plan.n_save, inp.system
        probe = eval_shape_cached(observe, first_member(system) if plan.batched else system, inp.y_one)
        shapes = {f"observables/{k}": ((N, n_save + 1, *v.shape), v.dtype) for k, v in probe.items()}
        shapes.update({"final_state": ((N, plan.state_size), plan.dtype), "result": ((N,), np.int32),
                       "ts": ((n_save + 1,), plan.dtype)})
        shapes.update({f"stats/{k}": ((N,), np.int32 if k in ("max_iterations", "num_failed_steps") else plan.dtype)
                       for k in STATS})
        self.plan, self.observables, self.y0s = plan, list(probe), inp.y0s
        self.ts = (np.arange(n_save + 1) * plan.save_every * float(dt)).astype(plan.dtype)
        self.settings = run_settings(system, inp.method, dt, plan.n_steps, plan.save_every, observe_name, N,
                                     plan.batched, plan.dtype, plan.kernel, plan.chunk, metadata)
        self.inputs = {"y0s": inp.y0s, **{f"system/{k}": a for k, a in arrays_by_path(system).items()}}
        self.store, self.arrays = None, None
        if out is not None:
            fp = {**self.settings, "system": describe(system), "method": describe(inp.method),
                  "y0s": array_digest(inp.y0s)}
            attrs = {**self.settings, "fingerprint": fingerprint(fp), "observables": self.observables,
                     "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                     "result_names": list(RESULT_NAMES)}
            self.store = Store(out, attrs, shapes, plan.n_chunks, plan.chunk, resume, self.inputs)
            self.store.write("ts", 0, self.ts)
        else:  # every chunk fills them
            self.arrays = {k: np.empty(shape, dtype) for k, (shape, dtype) in shapes.items() if k != "ts"}

    def todo(self) -> list:
        """The chunks not yet done (all of them, without a store)."""
        return [k for k in range(self.plan.n_chunks) if self.store is None or not self.store.done[k]]

    def into(self, idx) -> Optional[dict]:
        """The result arrays' rows ``idx``, for the native kernel to write into (None with a store)."""
        return self.arrays and {k: a[idx] for k, a in self.arrays.items()}

    def save(self, k: int, lo: int, outs) -> None:
        """Chunk ``k``'s outputs (members from ``lo``), then its flag in the store."""
        y_final, saved, result, stats = outs
        parts = {"final_state": y_final, "result": np.asarray(result, np.int32),
                 **{f"observables/{n}": v for n, v in saved.items()}, **{f"stats/{n}": v for n, v in stats.items()}}
        for name, a in parts.items():
            if self.store is not None:
                self.store.write(name, lo, a)
            elif not np.may_share_memory(dst := self.arrays[name][lo : lo + a.shape[0]], a):  # the native kernel wrote it
                dst[...] = a
        if self.store is not None:
            self.store.mark_done(k)

    def solution(self, throw: bool) -> EnsembleSolution:
        """The :class:`EnsembleSolution` (opened from the store, if any); ``throw``: raise
        ``RuntimeError`` naming the failed members."""
        if self.store is not None:
            sol = open_ensemble(self.store.path)
        else:
            a = self.arrays
            sol = EnsembleSolution(ts=self.ts, observables={k: a[f"observables/{k}"] for k in self.observables},
                                   final_state=a["final_state"], result=a["result"],
                                   stats={k: a[f"stats/{k}"] for k in STATS}, chunk_size=self.plan.chunk,
                                   y0s=self.y0s, settings=self.settings,
                                   system_arrays={k[len("system/"):]: v for k, v in self.inputs.items() if k != "y0s"})
        if throw and sol.failed.size:
            bad = sol.failed
            codes = np.asarray(sol.result[:])[bad]
            raise RuntimeError(f"ensemble: {bad.size} of {self.plan.members} members failed: indices {bad[:20].tolist()}"
                               f"{' ...' if bad.size > 20 else ''} ({', '.join(sorted({RESULT_NAMES[c] for c in codes}))})")
        return sol


def _run_chunks(plan: Plan, fn: EnsembleFunction, inp: Inputs, results: _Results, progress) -> None:
    """Every chunk not yet done: the first alone (it compiles), the rest on ``plan.workers``
    threads, each saving its own chunk (disjoint slices, so no finished chunk's output is held
    in a future: memory stays the output plus one chunk per worker), under a progress bar."""
    dyn = eqx.filter(inp.system, eqx.is_array)
    padded = plan.padded

    def compute(k: int) -> None:
        lo, hi = plan.span(k)
        idx = slice(lo, hi) if hi - lo == padded or plan.kernel == "native" else lo + np.arange(padded) % (hi - lo)  # pad: own members
        dyn_k = jax.tree.map(lambda a: a[idx], dyn) if plan.batched else None
        outs = (fn.host(inp.y0s[idx], dyn_k, results.into(idx)) if plan.kernel == "native"
                else _run_chunk(fn, jnp.asarray(inp.y0s[idx]), dyn_k, plan.devices))  # native: into the result's arrays
        results.save(k, lo, jax.tree.map(lambda a: np.asarray(a)[: hi - lo], outs))

    todo = results.todo()
    show = sys.stderr.isatty() if progress is None else bool(progress)
    from tqdm.auto import tqdm

    with tqdm(total=plan.n_chunks, initial=plan.n_chunks - len(todo), unit="chunk", disable=not show,
              desc="ensemble", postfix=f"{plan.members} members x {plan.n_steps} steps") as bar:
        if todo:  # the first chunk alone: it compiles
            compute(todo[0])
            bar.update()
        if todo[1:]:
            with concurrent.futures.ThreadPoolExecutor(plan.workers) as pool:
                for fut in concurrent.futures.as_completed([pool.submit(compute, k) for k in todo[1:]]):
                    fut.result()
                    bar.update()
