"""``ensemble``: many members at once, in chunks, with observables, per-member results, sharding
over devices and a resumable zarr store.

One member is one :func:`lpjax.integrate` run (the same ``init/step`` and the same result codes
and statistics). Chunks are the unit of dispatch, storage, progress and resume; inside a chunk
the members run in blocks, with the member axis last, by one of the kernels of
:mod:`lpjax._ensemble._kernel` (``vmap``-ed scan, entry by entry, or a fused Pallas kernel).
With several devices, each chunk is split over them with ``shard_map``.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import os
import re
import sys
from typing import Callable, Optional, Union, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from .._checks import cast_floats, eval_shape_cached, positive_int, run_dtype
from ._store import (
    RESULT_NAMES, STATS, EnsembleSolution, Store, array_digest, arrays_by_path, describe, fingerprint, open_ensemble,
    run_settings,
)
from ._kernel import (
    CPU_BLOCK, EnsembleFunction, EnsembleOutput, _Member, platform_of, resolve_kernel,
)
from .._integrator import AbstractIntegrator
from .._system import AbstractSystem

__all__ = ["ensemble", "ensemble_function", "EnsembleOutput", "EnsembleSolution", "open_ensemble"]

_CPU_CHUNK = 16384
_ACCEL_CHUNK = 1 << 20


# -------------------------------------------------------------------------------- observables


def _observe_state(system, y):
    return {"state": y}


def _observe_casimirs(system, y):
    return {"casimirs": system.casimirs(y)}


def _observe_energy(system, y):
    return {"energy": system.energy(y)}


_BUILTIN = {None: _observe_state, "state": _observe_state, "casimirs": _observe_casimirs, "energy": _observe_energy}


@final
class _UserObserve(eqx.Module):
    """``observe(y)`` as ``(system, y) -> {name: array}``; hashable by the function, so that the
    same function reuses the compiled chunk."""

    fn: Callable = eqx.field(static=True)

    def __call__(self, system, y):
        leaves = jax.tree_util.tree_leaves_with_path(self.fn(y))
        if not leaves:
            raise ValueError("observe(y) returned no arrays")
        if len(leaves) == 1 and not leaves[0][0]:
            return {"observed": jnp.asarray(leaves[0][1])}
        return {_leaf_name(path): jnp.asarray(a) for path, a in leaves}


def _observe_fn(observe) -> tuple[str, Callable]:
    """``(name, fn(system, y) -> dict of arrays)`` for ``observe``."""
    if isinstance(observe, str) or observe is None:
        if observe not in _BUILTIN:
            raise ValueError(f'observe must be None, "state", "casimirs", "energy" or a function y -> pytree, got {observe!r}')
        return observe or "state", _BUILTIN[observe]
    if not callable(observe):
        raise TypeError(f"observe must be a function y -> pytree of arrays, got {type(observe).__name__}")
    return f"{getattr(observe, '__module__', '')}.{getattr(observe, '__qualname__', type(observe).__name__)}", _UserObserve(observe)


def _leaf_name(path) -> str:
    name = re.sub(r"[^0-9A-Za-z_]+", "_", jax.tree_util.keystr(path)).strip("_")
    return name or "observed"


# -------------------------------------------------------------------------------- ensemble()


def _leading_sizes(system) -> dict:
    return {jax.tree_util.keystr(p): (a.shape[0] if a.ndim else None)
            for p, a in jax.tree_util.tree_leaves_with_path(eqx.filter(system, eqx.is_array))}


def _first_member(system):
    dyn, static = eqx.partition(system, eqx.is_array)
    return eqx.combine(jax.tree.map(lambda a: a[0], dyn), static)


def _one_step(system, method, y, dt):  # traced once per system structure, method and state shape (eval_shape_cached)
    state = method.init(system, y, dt)
    return method.observe(system, method.step(system, state, dt)[0])


def _check_members(system, method, batched: bool, who: str, y_one=None, dt=None) -> Optional[int]:
    """Check that ``method`` can run ``system`` (with ``batched``: one member's system, and
    return the common leading size N of its arrays), stepping ``y_one`` abstractly if given. A
    system that fails unbatched but whose first member runs is named as batched."""
    if not isinstance(method, AbstractIntegrator):
        raise TypeError(f"{who}: method must be an lpjax integrator (e.g. lpjax.RK4()), got {type(method).__name__}")
    sizes = _leading_sizes(system)
    common = next(iter(set(sizes.values()))) if len(set(sizes.values())) == 1 else None

    def check(s):
        method.check_system(s)
        if y_one is not None:
            out = eval_shape_cached(_one_step, s, method, y_one, dt)
            if out.shape != y_one.shape:
                raise ValueError(f"{who}: one step of {type(method).__name__} maps a state of shape {y_one.shape} to "
                                 f"{out.shape}")

    if batched:
        if common is None:
            raise ValueError(f"{who}: with batched_system=True every array of the system needs the same leading axis N "
                             f"(leading sizes: {sizes})")
        check(_first_member(system))
        return common
    try:
        check(system)
    except Exception as e:
        if common is not None:
            try:
                check(_first_member(system))
            except Exception:
                raise e from None
            raise ValueError(f"{who}: the system looks batched over parameters (every array has a leading axis of "
                             f"{common}, and its first member runs); pass batched_system=True") from e
        raise
    return None


def _check_schedule(n_steps, save_every, dt, who: str) -> tuple[int, int]:
    n_steps = positive_int(n_steps, "n_steps")
    save_every = n_steps if save_every is None else positive_int(save_every, "save_every")
    if n_steps % save_every:
        raise ValueError(f"{who}: n_steps ({n_steps}) must be divisible by save_every ({save_every})")
    if isinstance(dt, (jax.Array, np.ndarray)) and np.ndim(dt) != 0 or not np.isfinite(float(dt)) or float(dt) <= 0:
        raise ValueError(f"{who}: dt must be a finite scalar > 0, got {dt!r}")
    return n_steps, save_every


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
    n_steps, save_every = _check_schedule(n_steps, save_every, dt, "ensemble_function")
    rdtype = run_dtype(dtype, jnp.zeros((), float), "ensemble_function")
    system, method = cast_floats((system, method), rdtype)
    _check_members(system, method, batched_system, "ensemble_function")
    plat = platform_of(platform)
    # "auto" stays differentiable here: the native kernel is a host callback, for ensemble()
    kernel = resolve_kernel("scan" if kernel == "auto" and plat == "cpu" else kernel, plat)
    fn = _make_function(system, method, dt, n_steps, save_every, _observe_fn(observe)[1], kernel, plat, rdtype,
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
    n_steps, save_every = _check_schedule(n_steps, save_every, dt, "ensemble")
    if chunk_size is not None:
        chunk_size = positive_int(chunk_size, "chunk_size")
    if metadata is not None:
        json.dumps(metadata)  # must be JSON (it goes into the store's attributes)
    rdtype = run_dtype(dtype, np.asarray(y0s), "ensemble")
    rdtype = rdtype if rdtype.kind == "f" else np.dtype(jnp.result_type(float))
    y0s = np.asarray(y0s, dtype=rdtype)
    if y0s.ndim not in (1, 2):
        raise ValueError(f"ensemble: y0s must have shape (N, d) (or (d,) with a batched system), got {y0s.shape}")
    system, method = cast_floats((system, method), rdtype)
    y_one = jnp.asarray(y0s if y0s.ndim == 1 else y0s[0])
    system_n = _check_members(system, method, batched_system, "ensemble", y_one, np.asarray(dt, rdtype))
    if system_n is None and y0s.ndim == 1:
        raise ValueError(f"ensemble: y0s must have shape (N, d); got one state {y0s.shape} (for a system batched over "
                         "parameters pass batched_system=True)")
    if system_n is not None and y0s.ndim == 2 and y0s.shape[0] != system_n:
        raise ValueError(f"ensemble: the leading axes differ: y0s has N = {y0s.shape[0]} members, the batched "
                         f"system's arrays have {system_n}")
    if y0s.ndim == 1:
        y0s = np.broadcast_to(y0s, (system_n, y0s.shape[0]))
    if system_n is None:
        system.check_state(y_one)
    N, d = y0s.shape
    batched = system_n is not None
    dyn = eqx.filter(system, eqx.is_array)
    observe_name, observe_fn = _observe_fn(observe)

    if devices is None:
        devices = jax.devices() if len(jax.devices()) > 1 else None
    devices = tuple(devices) if devices is not None and len(devices) > 1 else None
    ndev = len(devices) if devices else 1
    platform = platform_of(None, devices)
    kernel = resolve_kernel("scan" if devices and kernel == "auto" else kernel, platform)  # several: shard_map
    workers = 1 if devices or kernel == "native" else max(1, min(os.cpu_count() or 1, 4))  # native: its own threads
    chunk = min(chunk_size or (_CPU_CHUNK if platform == "cpu" and kernel != "native" else _ACCEL_CHUNK), N)
    if chunk_size is None and platform == "cpu":  # at least one chunk per worker thread
        chunk = min(chunk, max(CPU_BLOCK, -(-N // workers)))
    padded = -(-chunk // ndev) * ndev  # members the compiled chunk runs (the rest are copies)
    n_chunks = -(-N // chunk)
    fn = _make_function(system, method, dt, n_steps, save_every, observe_fn, kernel, platform, rdtype, batched)
    n_save = n_steps // save_every

    def compute(k: int):
        lo, hi = k * chunk, min(N, (k + 1) * chunk)
        idx = slice(lo, hi) if hi - lo == padded or kernel == "native" else lo + np.arange(padded) % (hi - lo)  # pad: own members
        dyn_k = jax.tree.map(lambda a: a[idx], dyn) if batched else None
        outs = (fn.host(y0s[idx], dyn_k, arrays and {k: a[idx] for k, a in arrays.items()}) if kernel == "native"
                else _run_chunk(fn, jnp.asarray(y0s[idx]), dyn_k, devices))  # native: into the result's arrays
        return lo, jax.tree.map(lambda a: np.asarray(a)[: hi - lo], outs)

    shapes_probe = eval_shape_cached(observe_fn, _first_member(system) if batched else system, y_one)
    shapes = {f"observables/{k}": ((N, n_save + 1, *v.shape), v.dtype) for k, v in shapes_probe.items()}
    shapes.update({"final_state": ((N, d), rdtype), "result": ((N,), np.int32), "ts": ((n_save + 1,), rdtype)})
    shapes.update({f"stats/{k}": ((N,), np.int32 if k in ("max_iterations", "num_failed_steps") else rdtype) for k in STATS})
    ts = (np.arange(n_save + 1) * save_every * float(dt)).astype(rdtype)

    settings = run_settings(system, method, dt, n_steps, save_every, observe_name, N, batched, rdtype, kernel,
                            chunk, metadata)
    inputs = {"y0s": y0s, **{f"system/{k}": a for k, a in arrays_by_path(system).items()}}
    store = None
    if out is not None:
        fp = {**settings, "system": describe(system), "method": describe(method), "y0s": array_digest(y0s)}
        attrs = {**settings, "fingerprint": fingerprint(fp), "observables": list(shapes_probe),
                 "created": datetime.datetime.now(datetime.timezone.utc).isoformat(), "result_names": list(RESULT_NAMES)}
        store = Store(out, attrs, shapes, n_chunks, chunk, resume, inputs)
        store.write("ts", 0, ts)
        arrays = None
    else:
        arrays = {k: np.empty(shape, dtype) for k, (shape, dtype) in shapes.items() if k != "ts"}  # every chunk fills

    def save(lo, outs, k):
        y_final, saved, result, stats = outs
        parts = {"final_state": y_final, "result": np.asarray(result, np.int32),
                 **{f"observables/{n}": v for n, v in saved.items()}, **{f"stats/{n}": v for n, v in stats.items()}}
        for name, a in parts.items():
            if store is not None:
                store.write(name, lo, a)
            elif not np.may_share_memory(dst := arrays[name][lo : lo + a.shape[0]], a):  # the native kernel wrote it
                dst[...] = a
        if store is not None:
            store.mark_done(k)

    todo = [k for k in range(n_chunks) if store is None or not store.done[k]]
    show = sys.stderr.isatty() if progress is None else bool(progress)
    from tqdm.auto import tqdm

    with tqdm(total=n_chunks, initial=n_chunks - len(todo), unit="chunk", disable=not show, desc="ensemble",
              postfix=f"{N} members x {n_steps} steps") as bar:
        if todo:  # the first chunk alone: it compiles
            save(*compute(todo[0]), todo[0])
            bar.update()
        if todo[1:]:
            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                # each worker saves its own chunk (disjoint slices), so no finished chunk's output
                # is held in a future: memory stays the output plus one chunk per worker
                futures = [pool.submit(lambda k: save(*compute(k), k), k) for k in todo[1:]]
                for fut in concurrent.futures.as_completed(futures):
                    fut.result()
                    bar.update()

    if store is not None:
        sol = open_ensemble(store.path)
    else:
        sol = EnsembleSolution(ts=ts, observables={k: arrays[f"observables/{k}"] for k in shapes_probe},
                               final_state=arrays["final_state"], result=arrays["result"],
                               stats={k: arrays[f"stats/{k}"] for k in STATS}, chunk_size=chunk, y0s=y0s,
                               system_arrays={k[len("system/"):]: a for k, a in inputs.items() if k != "y0s"},
                               settings=settings)
    if throw and sol.failed.size:
        bad = sol.failed
        codes = np.asarray(sol.result[:])[bad]
        raise RuntimeError(f"ensemble: {bad.size} of {N} members failed: indices {bad[:20].tolist()}"
                           f"{' ...' if bad.size > 20 else ''} ({', '.join(sorted({RESULT_NAMES[c] for c in codes}))})")
    return sol
