"""The output of :func:`lpjax.ensemble`: :class:`EnsembleSolution`, its zarr store, and
:func:`open_ensemble`."""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import os
import re
from typing import Any, Optional, final

import equinox as eqx
import jax
import numpy as np

from .._algebra import LieAlgebra
from .._events import EventRecord, event_record
from .._integrator import RESULTS
from .._version import __version__
from .._memo import by_identity
from ._moments import MOMENT_PARTS, combined
from ._state_saves import with_state_ends

__all__ = ["EnsembleSolution", "open_ensemble"]


STATS = ("max_residual", "max_iterations", "mean_iterations", "num_failed_steps")  # the last always kept


class Statistics(dict):
    """An ensemble's statistics by name; one that was not collected says how to collect it."""

    def __missing__(self, name: str):
        if name in STATS:
            raise KeyError(f"{name!r} was not collected: run lpjax.ensemble(..., stats=True) for the solver "
                           "statistics (only num_failed_steps is kept by default)")
        raise KeyError(name)
RESULT_NAMES = tuple(RESULTS._name_to_item)
_EVENT = RESULT_NAMES.index("event_occurred")
FORMAT = "lpjax.ensemble/3"  # /3: the state observable's ends are y0s and final_state; /2 and /1 can still be read
_READABLE = (FORMAT, "lpjax.ensemble/2", "lpjax.ensemble/1")  # /2: the inputs (y0s, the system's arrays) stored


# -------------------------------------------------------------------------------- the solution


@final
class EnsembleSolution(eqx.Module):
    """Output of :func:`ensemble`: per-member arrays with the members on the first axis.

    Attributes:
        ts: save times, shape ``(T,)`` (``T = n_steps // save_every + 1``, the start included).
        observables: ``{name: array (N, T, ...)}``, what ``observe`` kept at each save. The
            state observable (the default) is a :class:`~._state_saves.StateSaves`: its first
            and last saves are ``y0s`` and ``final_state``, not stored twice.
        final_state: ``(N, d)``, each member's state after ``n_steps`` (None with ``reduce``).
        result: ``(N,)`` :class:`lpjax.RESULTS` indices; 0 is success, see :attr:`result_names`.
        stats: ``{name: (N,)}``: ``max_residual``, ``max_iterations``, ``mean_iterations``,
            ``num_failed_steps``, per member, as in :class:`lpjax.Solution` (with ``events``:
            also ``t_final`` and the record, :attr:`events`).
        store: the zarr store's path, or ``None``. With a store the arrays are zarr arrays,
            read from disk on indexing (``sol.observables["energy"][:100]``); without, NumPy arrays.
        y0s: the initial states ``(N, d)``.
        system_arrays: ``{path: array}``, the system's arrays by their path in the module
            (``"hamiltonian.inertia"``), with a leading axis N when the system was batched.
        first_member: the index in the whole ensemble of this solution's first member: nonzero
            only on the processes after the first of a multi-process run without a store, which
            each return their own members.
        moments: with ``reduce="moments"``, ``{name: Moments(count, mean, var)}`` across the
            members that did not fail, at each save (``observables`` is then empty).
        settings: the run's settings, as stored: ``system`` and ``method`` (one-line
            descriptions) with ``system_arrays``/``method_arrays`` (dtype, shape and SHA-256 of
            each array), ``dt`` (a number), ``n_steps``, ``save_every``, ``observe``,
            ``members``, ``batched_system``, ``dtype``, ``kernel``, ``chunk_size``, ``lpjax``
            (version), ``metadata``, and, in a store, ``created``, ``fingerprint``, ``processes``
            (the process count of the run that made it) and ``finished`` (``time`` and
            ``processes`` of the run that finished it).

    Reductions over the members (:meth:`mean`, :meth:`min`, :meth:`max`, :meth:`quantile`) read
    the members a chunk at a time (a block of saves at a time for quantiles) and by default
    skip failed members.
    """

    ts: np.ndarray
    observables: dict
    final_state: Any
    result: Any
    stats: dict
    store: Optional[str] = None
    chunk_size: int = 16384
    y0s: Any = None
    system_arrays: dict = dataclasses.field(default_factory=dict)
    settings: dict = dataclasses.field(default_factory=dict)
    first_member: int = 0
    moments: dict = dataclasses.field(default_factory=dict)

    result_names: tuple = RESULT_NAMES

    @property
    def n_members(self) -> int:
        return int(self.result.shape[0])

    @property
    def failed(self) -> np.ndarray:
        """Indices of the members whose integration failed (a result other than ``successful``
        and ``event_occurred``, a terminal event)."""
        result = np.asarray(self.result[:])
        return np.flatnonzero((result != 0) & (result != _EVENT))

    @property
    def events(self) -> Optional[EventRecord]:
        """The crossings of a run with ``events`` (:class:`lpjax.EventRecord`, members first),
        else None."""
        if "event_ts" not in self.stats:
            return None
        return event_record(self.stats)

    def _name(self, name: Optional[str]) -> str:
        if name is None:
            if len(self.observables) != 1:
                raise ValueError(f"several observables ({', '.join(self.observables)}): name one")
            return next(iter(self.observables))
        if name not in self.observables:
            raise KeyError(f"no observable {name!r}; there are {', '.join(self.observables)}")
        return name

    def _chunks(self, name, successful_only: bool):
        arr = self.observables[self._name(name)]
        for lo in range(0, self.n_members, self.chunk_size):
            a = np.asarray(arr[lo : lo + self.chunk_size])
            if successful_only:
                a = a[np.asarray(self.result[lo : lo + self.chunk_size]) == 0]
            yield a

    def mean(self, name: Optional[str] = None, *, successful_only: bool = True) -> np.ndarray:
        """Mean over the members, shape ``(T, ...)``."""
        total, count = None, 0
        for a in self._chunks(name, successful_only):
            s = a.sum(axis=0, dtype=np.float64)
            total, count = (s if total is None else total + s), count + a.shape[0]
        if not count:
            raise ValueError("no member to average (all failed)")
        return total / count

    def min(self, name: Optional[str] = None, *, successful_only: bool = True) -> np.ndarray:
        """Minimum over the members, shape ``(T, ...)``."""
        return self._reduce(np.min, name, successful_only)

    def max(self, name: Optional[str] = None, *, successful_only: bool = True) -> np.ndarray:
        """Maximum over the members, shape ``(T, ...)``."""
        return self._reduce(np.max, name, successful_only)

    def _reduce(self, f, name, successful_only):
        out = None
        for a in self._chunks(name, successful_only):
            if a.shape[0]:
                r = f(a, axis=0)
                out = r if out is None else f(np.stack([out, r]), axis=0)
        if out is None:
            raise ValueError("no member to reduce (all failed)")
        return out

    def quantile(self, q, name: Optional[str] = None, *, successful_only: bool = True, saves_per_read: int = 16) -> np.ndarray:
        """Quantiles ``q`` over the members, shape ``(len(q), T, ...)`` (``(T, ...)`` for a scalar
        ``q``); reads ``saves_per_read`` saves of all members at a time."""
        arr = self.observables[self._name(name)]
        ok = np.asarray(self.result[:]) == 0 if successful_only else slice(None)
        parts = [np.quantile(np.asarray(arr[:, t : t + saves_per_read])[ok], q, axis=0)
                 for t in range(0, arr.shape[1], saves_per_read)]
        return np.concatenate(parts, axis=0 if np.ndim(q) == 0 else 1)


# -------------------------------------------------------------------------------- the store


def describe(obj) -> str:
    """A full description of a module without memory addresses (stable across processes): part
    of a store's fingerprint."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", eqx.tree_pformat(obj, short_arrays=True, width=100))


@functools.lru_cache(maxsize=1024)
def _small_array(dtype: str, shape: tuple, data: bytes) -> str:  # array2string takes ~0.1 ms
    return np.array2string(np.frombuffer(data, dtype).reshape(shape), precision=6, separator=", ").replace("\n", "")


def _short(x) -> str:
    if isinstance(x, LieAlgebra):
        return x.name
    if eqx.is_array(x) or isinstance(x, np.ndarray):
        a = np.asarray(x)
        if a.size <= 9:
            return _small_array(a.dtype.str, a.shape, a.tobytes())
        return f"{a.dtype}{list(a.shape)}".replace(" ", "")
    if isinstance(x, eqx.Module):
        fields = [f.name for f in dataclasses.fields(x) if not f.name.startswith("_")]
        return f"{type(x).__name__}(" + ", ".join(f"{n}={_short(getattr(x, n))}" for n in fields) + ")"
    if isinstance(x, (tuple, list)):
        inner = ", ".join(_short(v) for v in x)
        return f"({inner},)" if isinstance(x, tuple) and len(x) == 1 else (f"({inner})" if isinstance(x, tuple) else f"[{inner}]")
    if isinstance(x, float):
        return f"{x:.6g}"
    if callable(x) and hasattr(x, "__name__"):
        return x.__name__
    return repr(x)


def summary(obj) -> str:
    """A one-line, readable description of a system or method: its public fields, an algebra by
    its name, small arrays by their values (6 digits), larger ones by dtype and shape. The
    arrays' exact contents are in :func:`array_digest`."""
    return _short(obj)


def array_digest(tree) -> list:
    """``[dtype, shape, SHA-256 of the bytes]`` of every array of ``tree``."""
    def digest(a):  # of the array's own buffer (a copy of 10 MB costs ~2 ms)
        return hashlib.sha256(np.ascontiguousarray(a).reshape(-1).view(np.uint8)).hexdigest()

    return [[str(a.dtype), list(a.shape), digest(np.asarray(a))] for a in jax.tree.leaves(eqx.filter(tree, eqx.is_array))]


def arrays_by_path(tree) -> dict:
    """``{path: numpy array}`` for every array of ``tree`` (path ``"hamiltonian.inertia"``)."""
    leaves = jax.tree_util.tree_flatten_with_path(eqx.filter(tree, eqx.is_array))[0]
    return {re.sub(r"[^\w.\[\]-]", "_", jax.tree_util.keystr(k).lstrip(".")): np.asarray(a) for k, a in leaves}


@by_identity
def _described(system, method) -> dict:
    return {"system": summary(system), "system_arrays": array_digest(system),
            "system_array_paths": list(arrays_by_path(system)), "method": summary(method),
            "method_arrays": array_digest(method)}


def run_settings(system, method, dt, n_steps: int, save_every: int, observe: str, members: int, batched: bool,
                 dtype, kernel: str, chunk: int, metadata: Optional[dict], stats: bool, state_ends=(False, False)) -> dict:
    """The settings an :class:`EnsembleSolution` and its store carry: JSON, numbers as numbers.
    ``state_ends``: whether the state observable's first and last saves are ``y0s`` and
    ``final_state`` (not stored twice)."""
    return {"format": FORMAT, "lpjax": __version__, **copy.deepcopy(_described(system, method)), "dt": None if dt is None else float(dt),
            "n_steps": n_steps, "save_every": save_every,
            "observe": observe, "members": members, "batched_system": batched, "dtype": str(np.dtype(dtype)),
            "kernel": kernel, "chunk_size": chunk, "stats": bool(stats), "state_ends": [bool(e) for e in state_ends],
            "metadata": metadata or {}}


def fingerprint(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()


def _compressors(dtype):
    """Floating arrays uncompressed: states and observables of an ensemble are random-looking
    doubles, which zarr's default (Zstandard) shrinks by about 8% at about 6x the write time
    (measured: 19 MB of states written at 210 MB/s compressed, 1.4 GB/s not); integers with
    zarr's default."""
    return None if np.issubdtype(dtype, np.floating) else "auto"


class Store:
    """A zarr v3 group: the arrays of :class:`EnsembleSolution` plus ``chunk_done`` (one flag per
    chunk, written after the chunk's arrays; zarr writes each file through a temporary file and
    a rename, so a killed run leaves whole files, and a chunk without its flag is recomputed).
    Each chunk is one zarr chunk of every per-member array, so processes writing different
    chunks never write the same file. ``Store(path)`` opens an existing store for writing;
    :meth:`make` makes or resumes one."""

    def __init__(self, path: str):
        import zarr

        self.path = os.fspath(path)
        self.group = zarr.open_group(self.path, mode="r+")
        self._arrays = {}

    def array(self, name: str):
        """The zarr array ``name``, opened once (each opening reads its metadata from disk)."""
        if name not in self._arrays:
            self._arrays[name] = self.group[name]
        return self._arrays[name]

    @property
    def done(self) -> np.ndarray:
        """The flags of the chunks done, as booleans."""
        return np.asarray(self.array("chunk_done")[:]).astype(bool)

    @classmethod
    def make(cls, path: str, attrs: dict, shapes: dict, n_chunks: int, chunk: int, resume: bool, fixed: dict) -> "Store":
        """A new store at ``path``, or with ``resume`` the one there if it has the same
        ``attrs["fingerprint"]``. ``shapes``: ``{name: (shape, dtype)}`` of the arrays over the
        members (one zarr chunk per ``chunk`` members), written chunk by chunk; ``fixed``:
        ``{name: array}`` written once, when the store is made (the save times, the system's
        arrays unless batched)."""
        import zarr

        path = os.fspath(path)
        exists = os.path.exists(os.path.join(path, "zarr.json"))
        if exists and not resume:
            raise FileExistsError(f"ensemble: {path} already holds a store; pass resume=True to finish it, "
                                  "or remove it to start again")
        if exists:
            old = zarr.open_group(path, mode="r").attrs.get("fingerprint")
            if old != attrs["fingerprint"]:
                raise ValueError(f"ensemble: the store {path} was made with other settings (fingerprint {old}, "
                                 f"this run {attrs['fingerprint']}: system, method, dt, n_steps, save_every, observe, "
                                 "initial states, chunk size or dtype differ); write to another path, or remove it")
            return cls(path)
        try:
            os.makedirs(path, exist_ok=True)
            probe = os.path.join(path, ".lpjax-write-test")
            with open(probe, "w") as f:
                f.write("")
            os.remove(probe)
        except OSError as e:
            raise PermissionError(f"ensemble: cannot write the store at {path}: {e}") from None
        group = zarr.open_group(path, mode="w", attributes=attrs)
        for name, (shape, dtype, *more) in shapes.items():  # (rows of a zarr chunk, if not a chunk's members; packed)
            rows, packed = (*more, None, False)[:2]
            group.create_array(name, shape=shape, dtype=dtype, chunks=(rows or chunk, *(max(1, s) for s in shape[1:])),
                               fill_value=0, compressors="auto" if packed else _compressors(dtype))
        for name, a in fixed.items():
            group.create_array(name, shape=a.shape, dtype=a.dtype, chunks=a.shape, fill_value=0,
                               compressors=_compressors(a.dtype))[...] = a
        group.create_array("chunk_done", shape=(n_chunks,), dtype="uint8", chunks=(1,), fill_value=0)
        return cls(path)

    def write(self, name: str, lo: int, a: np.ndarray) -> None:
        self.array(name)[lo : lo + a.shape[0]] = a

    def mark_done(self, k: int) -> None:
        self.array("chunk_done")[k : k + 1] = np.ones(1, np.uint8)

    def solution(self) -> "EnsembleSolution":
        """The finished store's :class:`EnsembleSolution`, from the arrays opened here (the
        attributes read again)."""
        return _solution(self.path, self.array)


def stored_chunk_size(path) -> Optional[int]:
    """The chunk size of the store at ``path``, if there is one (a resumed run keeps it)."""
    try:
        with open(os.path.join(os.fspath(path), "zarr.json")) as f:
            return int(json.load(f)["attributes"]["chunk_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def open_ensemble(path: str) -> EnsembleSolution:
    """The :class:`EnsembleSolution` of a finished store (arrays read from disk on indexing),
    with its inputs (``y0s``, ``system_arrays``) and settings (``settings``)."""
    import zarr

    path = os.fspath(path)
    what = ("an lpjax ensemble store: a directory holding zarr.json, written by lpjax.ensemble(..., out=...) "
            "or `lpjax ensemble --out`")
    if not os.path.isfile(os.path.join(path, "zarr.json")):
        kind = "a file" if os.path.isfile(path) else ("a directory without zarr.json" if os.path.isdir(path) else "missing")
        raise ValueError(f"{path} is {kind}; expected {what}")
    group = zarr.open_group(path, mode="r")
    if group.attrs.get("format") not in _READABLE:
        raise ValueError(f"{path} is a zarr store but not an lpjax ensemble store (format {group.attrs.get('format')!r}); "
                         f"expected {what}")
    return _solution(path, group.__getitem__)


def _solution(path: str, array) -> EnsembleSolution:
    """The :class:`EnsembleSolution` of the finished store at ``path``, with ``array(name)`` its
    arrays."""
    import zarr

    attrs = dict(zarr.open_group(path, mode="r").attrs)
    done = np.asarray(array("chunk_done")[:])
    if not done.all():
        raise ValueError(f"{path} is unfinished: {int((~done.astype(bool)).sum())} of {done.size} chunks missing "
                         "(run the same ensemble again with resume=True, or --resume from the command line)")
    y0s = array("y0s") if attrs.get("format") != "lpjax.ensemble/1" else None
    observables = {k: array(f"observables/{k}") for k in attrs["observables"]}
    final_state = None if attrs.get("reduce") else array("final_state")  # (a reduced run keeps no state)
    observables = with_state_ends(observables, attrs.get("state_ends"), y0s, final_state)
    return EnsembleSolution(
        ts=np.asarray(array("ts")[:]),
        observables=observables,
        final_state=final_state, result=array("result"),
        stats=Statistics({k: array(f"stats/{k}") for k in
                          attrs.get("stat_names") or (STATS if attrs.get("stats", True) else STATS[-1:])}),
        store=path, chunk_size=int(attrs["chunk_size"]),
        y0s=y0s,
        system_arrays={k: array(f"system/{k}") for k in attrs.get("system_array_paths", [])},
        settings=attrs, moments={k: combined(*(array(f"moments/{k}/{p}")[:] for p in MOMENT_PARTS))
                                 for k in attrs.get("moments", [])},
    )
