"""``ensemble``: many members at once, in chunks, with observables, per-member results, sharding
over devices and a resumable zarr store.

One member is one :func:`lpjax.integrate` run (the same ``init/step`` and the same result codes
and statistics). Chunks are the unit of dispatch, storage, progress and resume; inside a chunk
the members run in blocks, with the member axis last, by one of the kernels of
:mod:`lpjax._ensemble_kernel` (``vmap``-ed scan, entry by entry, or a fused Pallas kernel).
With several devices, each chunk is split over them with ``shard_map``.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import os
import re
import sys
import warnings
from typing import Callable, Optional, Union, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._checks import cast_floats, positive_int, run_dtype
from ._ensemble_store import (
    FORMAT, RESULT_NAMES, STATS, EnsembleSolution, Store, array_digest, describe, fingerprint, open_ensemble,
)
from ._ensemble_kernel import run_chunk
from ._integrator import AbstractIntegrator
from ._soa import Unfusable
from ._system import AbstractSystem
from ._version import __version__

__all__ = ["ensemble", "EnsembleSolution", "open_ensemble"]

_CPU_BLOCK = 2048  # members per block on CPU: 6 float64 components of 2048 members fit in L2
_CPU_CHUNK = 16384
_ACCEL_CHUNK = 1 << 20
_FUSED_BLOCK = 256  # members per program of the fused kernel on a GPU
_KERNELS = ("auto", "scan", "entries", "fused")
_warned: set = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


def _resolve_kernel(kernel: str, on_cpu: bool) -> str:
    if kernel not in _KERNELS:
        raise ValueError(f"ensemble: kernel must be one of {', '.join(map(repr, _KERNELS))}, got {kernel!r}")
    if kernel == "auto":
        return "scan" if on_cpu else "fused"
    return kernel


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


def _batched_size(system, method, y_one, dt) -> int:
    """The common leading size N of the system's arrays (a system batched over parameters, e.g.
    by ``eqx.filter_vmap``), checked by stepping one state with them mapped over."""
    dyn, static = eqx.partition(system, eqx.is_array)
    sizes = {jax.tree_util.keystr(p): (a.shape[0] if a.ndim else None) for p, a in jax.tree_util.tree_leaves_with_path(dyn)}
    if not sizes or len(set(sizes.values())) != 1 or None in sizes.values():
        raise ValueError("ensemble: with batched_system=True every array of the system needs the same leading axis N "
                         f"(leading sizes: {sizes})")

    def one(dyn, y):
        s = eqx.combine(dyn, static)
        return method.observe(s, method.step(s, method.init(s, y, dt), dt)[0])

    jax.eval_shape(jax.vmap(one, in_axes=(0, None)), dyn, y_one)  # the method's own error if it cannot
    return next(iter(sizes.values()))


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
            (default 16384 on CPU, 2²⁰ on an accelerator, at most N). Within a chunk the
            members run in blocks of 2048 (CPU; time inside block, members on the last axis).
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

            - ``"scan"``: the member program under ``vmap`` (member axis last), a ``lax.scan``
              over the steps;
            - ``"entries"``: the member program entry by entry over the block
              (:mod:`lpjax._soa`: every value a vector over the members), in ``lax.scan``;
            - ``"fused"``: one Pallas kernel per block of members with the whole time loop
              inside (:mod:`lpjax._fused`); on CPU it runs in Pallas' interpret mode (slow: for
              tests);
            - ``"auto"`` (default): ``"fused"`` on a GPU, ``"scan"`` otherwise.

            A program the entrywise evaluator cannot run (an unsupported primitive) falls back
            to ``"scan"`` with a warning, once per method and system.

    Returns an :class:`EnsembleSolution`.
    """
    if not isinstance(method, AbstractIntegrator):
        raise TypeError(f"ensemble: method must be an lpjax integrator (e.g. lpjax.RK4()), got {type(method).__name__}")
    method.check_system(system)
    n_steps = positive_int(n_steps, "n_steps")
    save_every = n_steps if save_every is None else positive_int(save_every, "save_every")
    if n_steps % save_every:
        raise ValueError(f"ensemble: n_steps ({n_steps}) must be divisible by save_every ({save_every})")
    if isinstance(dt, (jax.Array, np.ndarray)) and np.ndim(dt) != 0 or not np.isfinite(float(dt)) or float(dt) <= 0:
        raise ValueError(f"ensemble: dt must be a finite scalar > 0, got {dt!r}")
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
    y_one = y0s if y0s.ndim == 1 else y0s[0]
    system_n = _batched_size(system, method, jnp.asarray(y_one), jnp.asarray(dt, rdtype)) if batched_system else None
    if system_n is None and y0s.ndim == 1:
        raise ValueError(f"ensemble: y0s must have shape (N, d); got one state {y0s.shape} (for a system batched over "
                         "parameters pass batched_system=True)")
    if system_n is not None and y0s.ndim == 2 and y0s.shape[0] != system_n:
        raise ValueError(f"ensemble: the leading axes differ: y0s has N = {y0s.shape[0]} members, the batched "
                         f"system's arrays have {system_n}")
    if y0s.ndim == 1:
        y0s = np.broadcast_to(y0s, (system_n, y0s.shape[0]))
    if system_n is None:
        system.check_state(jnp.asarray(y_one))
    N, d = y0s.shape
    batched = system_n is not None
    dyn, static = eqx.partition(system, eqx.is_array)
    observe_name, observe_fn = _observe_fn(observe)

    if devices is None:
        devices = jax.devices() if len(jax.devices()) > 1 else None
    devices = tuple(devices) if devices is not None and len(devices) > 1 else None
    ndev = len(devices) if devices else 1
    on_cpu = (devices[0] if devices else jax.devices()[0]).platform == "cpu"
    workers = 1 if devices else max(1, min(os.cpu_count() or 1, 4))
    chunk = min(chunk_size or (_CPU_CHUNK if on_cpu else _ACCEL_CHUNK), N)
    if chunk_size is None and on_cpu:  # at least one chunk per worker thread
        chunk = min(chunk, max(_CPU_BLOCK, -(-N // workers)))
    per_dev = -(-chunk // ndev)
    kernel = _resolve_kernel(kernel, on_cpu)
    if kernel == "fused" and not on_cpu:  # a power of two (Triton's block shapes)
        block = min(_FUSED_BLOCK, 1 << max(0, (per_dev - 1).bit_length()))
    else:
        # CPU: a power of two (≥ 64) so that every member is computed by the same vector code,
        # never by a loop's scalar remainder: results then do not depend on the block size
        block = max(64, 1 << (min(per_dev, _CPU_BLOCK).bit_length() - 1)) if on_cpu else per_dev
    padded = -(-per_dev // block) * block * ndev  # members the compiled chunk runs (the rest are copies)
    n_chunks = -(-N // chunk)

    dt_arr = jnp.asarray(dt, rdtype)
    n_save = n_steps // save_every

    def compute(k: int):
        lo, hi = k * chunk, min(N, (k + 1) * chunk)
        idx = lo + np.arange(padded) % (hi - lo)  # pad with the chunk's own members
        dyn_k = jax.tree.map(lambda a: a[idx], dyn) if batched else dyn
        outs = run_chunk(dyn_k, static, method, jnp.asarray(y0s[idx]), dt_arr, n_steps, save_every, observe_fn,
                          batched, block, devices, kernel, on_cpu)
        return lo, jax.tree.map(lambda a: np.asarray(a)[: hi - lo], outs)

    member0 = eqx.combine(jax.tree.map(lambda a: a[0], dyn), static) if batched else system
    shapes_probe = jax.eval_shape(lambda y: observe_fn(member0, y), jnp.asarray(y_one))
    shapes = {f"observables/{k}": ((N, n_save + 1, *v.shape), v.dtype) for k, v in shapes_probe.items()}
    shapes.update({"final_state": ((N, d), rdtype), "result": ((N,), np.int32), "ts": ((n_save + 1,), rdtype)})
    shapes.update({f"stats/{k}": ((N,), np.int32 if k in ("max_iterations", "num_failed_steps") else rdtype) for k in STATS})
    ts = (np.arange(n_save + 1) * save_every * float(dt)).astype(rdtype)

    store = None
    if out is not None:
        settings = {
            "format": FORMAT, "lpjax": __version__, "system": describe(system), "system_arrays": array_digest(system),
            "method": describe(method), "dt": repr(float(dt)), "n_steps": n_steps, "save_every": save_every,
            "observe": observe_name, "y0s": array_digest(y0s), "members": N, "chunk_size": chunk, "dtype": str(rdtype),
            "kernel": kernel,
        }
        attrs = {**{k: v for k, v in settings.items() if k not in ("system_arrays", "y0s")},
                 "fingerprint": fingerprint(settings), "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                 "observables": list(shapes_probe), "result_names": list(RESULT_NAMES), "metadata": metadata or {}}
        store = Store(out, attrs, shapes, n_chunks, chunk, resume)
        store.write("ts", 0, ts)
        arrays = None
    else:
        arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in shapes.items() if k != "ts"}

    def save(lo, outs, k):
        y_final, saved, result, stats = outs
        parts = {"final_state": y_final, "result": result.astype(np.int32),
                 **{f"observables/{n}": v for n, v in saved.items()}, **{f"stats/{n}": v for n, v in stats.items()}}
        for name, a in parts.items():
            if store is not None:
                store.write(name, lo, a)
            else:
                arrays[name][lo : lo + a.shape[0]] = a
        if store is not None:
            store.mark_done(k)

    todo = [k for k in range(n_chunks) if store is None or not store.done[k]]
    show = sys.stderr.isatty() if progress is None else bool(progress)
    from tqdm.auto import tqdm

    with tqdm(total=n_chunks, initial=n_chunks - len(todo), unit="chunk", disable=not show, desc="ensemble",
              postfix=f"{N} members x {n_steps} steps") as bar:
        if todo:  # the first chunk alone: it compiles
            try:
                first = compute(todo[0])
            except Unfusable as e:
                _warn_once(f"lpjax.ensemble: {type(method).__name__} on {type(system).__name__} cannot run entry by "
                           f"entry ({e}); using kernel='scan'")
                kernel = "scan"
                first = compute(todo[0])
            save(*first, todo[0])
            bar.update()
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            # each worker saves its own chunk (disjoint slices), so no finished chunk's output is
            # held in a future: memory stays the output plus one chunk per worker
            futures = [pool.submit(lambda k: save(*compute(k), k), k) for k in todo[1:]]
            for fut in concurrent.futures.as_completed(futures):
                fut.result()
                bar.update()

    if store is not None:
        sol = open_ensemble(store.path)
    else:
        sol = EnsembleSolution(ts=ts, observables={k: arrays[f"observables/{k}"] for k in shapes_probe},
                               final_state=arrays["final_state"], result=arrays["result"],
                               stats={k: arrays[f"stats/{k}"] for k in STATS}, chunk_size=chunk)
    if throw and sol.failed.size:
        bad = sol.failed
        codes = np.asarray(sol.result[:])[bad]
        raise RuntimeError(f"ensemble: {bad.size} of {N} members failed: indices {bad[:20].tolist()}"
                           f"{' ...' if bad.size > 20 else ''} ({', '.join(sorted({RESULT_NAMES[c] for c in codes}))})")
    return sol
