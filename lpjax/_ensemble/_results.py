"""Where an :func:`lpjax.ensemble` run's chunks go (:class:`Results`): a zarr store or arrays in
memory, this process's share of the chunks, and the :class:`EnsembleSolution` made of them.

Over several processes (``jax.distributed``): the processes first agree on the settings'
fingerprint (with a store, of the full descriptions of the system and method and of the initial
states' contents too; without one, of the settings alone: each process keeps its own members,
run from the states it was given); process 0 makes (or checks, to resume) the store and tells the others which chunks
are done, or its error; each process runs its share of the chunks still to do and writes them
into the one store; after a barrier process 0 writes the final attribute (``finished``: the
time and the process count). Without a store each process keeps its own members.
"""

from __future__ import annotations

import datetime
from typing import Optional

import numpy as np

from .._checks import eval_shape_cached
from ._plan import Plan
from ._processes import Group
from ._store import (
    RESULT_NAMES, STATS, EnsembleSolution, Statistics, Store, array_digest, arrays_by_path, describe, fingerprint, run_settings,
)
from ._moments import MOMENT_PARTS, chunk_moments, combined
from ._state_saves import with_state_ends
from .._events import describe_event, event_stat_names
from .._schedule import ADAPTIVE_STATS
from ._validate import Inputs, first_member

_COUNTS = ("max_iterations", "num_failed_steps", "num_accepted_steps", "num_rejected_steps")

__all__ = ["Results"]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class Results:
    """The results of a run: the store's settings and fingerprint are fixed here, before any
    work; :attr:`chunks` are this process's chunks to run."""

    def __init__(self, plan: Plan, inp: Inputs, dt, observe_name: str, observe, out, resume: bool, metadata,
                 stats: bool, state_ends=(False, False), adaptive=None, events: tuple = (), noise_key=None,
                 reduce: Optional[str] = None):
        N, n_save, system = plan.members, plan.n_save, inp.system
        probe = eval_shape_cached(observe, first_member(system) if plan.batched else system, inp.y_one)
        self.reduced = list(probe) if reduce == "moments" else []  # (observables kept as their moments, per chunk)
        shapes = {f"observables/{k}": ((N, n_save + 1 - (k == "state") * sum(state_ends), *v.shape), v.dtype)
                  for k, v in probe.items() if not self.reduced}  # the state's ends, where they are y0s and final_state
        for k, v in probe.items() if self.reduced else ():  # a row per chunk (a zarr chunk each)
            wide = np.promote_types(v.dtype, np.float64)
            shapes.update({f"moments/{k}/count": ((plan.n_chunks,), np.int64, 1),
                           f"moments/{k}/mean": ((plan.n_chunks, n_save + 1, *v.shape), wide, 1),
                           f"moments/{k}/m2": ((plan.n_chunks, n_save + 1, *v.shape), wide, 1)})
        shapes.update({"result": ((N,), np.int32), **({} if self.reduced else {"final_state": ((N, plan.state_size), plan.dtype)})})
        self.stat_names = STATS if stats else STATS[-1:]  # ("num_failed_steps",)
        if adaptive is not None:
            self.stat_names = ADAPTIVE_STATS
        shapes.update({f"stats/{k}": ((N,), np.int32 if k in _COUNTS else plan.dtype) for k in self.stat_names})
        if events:  # the time reached (fixed steps) and the record of the crossings
            K, d = sum(e.max_crossings for e in events), plan.state_size
            self.stat_names = (*self.stat_names, *event_stat_names(adaptive is not None))
            shapes.update({"stats/event_count": ((N,), np.int32), "stats/event_ts": ((N, K), plan.dtype),
                           "stats/event_ys": ((N, K, d), plan.dtype), "stats/event_which": ((N, K), np.int32),
                           **({"stats/t_final": ((N,), plan.dtype)} if adaptive is None else {})})
        self.plan, self.group = plan, Group(plan.processes, plan.process)
        self.observables = [] if self.reduced else list(probe)
        if adaptive is None:
            self.ts = (np.arange(n_save + 1) * plan.save_every * float(dt)).astype(plan.dtype)
        else:
            self.ts = np.asarray((0.0, *adaptive.ts), plan.dtype)
        self.settings = run_settings(system, inp.method, dt, plan.n_steps, plan.save_every, observe_name, N,
                                     plan.batched, plan.dtype, plan.kernel.name, plan.chunk, metadata, stats, state_ends)
        if adaptive is not None:
            self.settings.update(adaptive.settings(dt))
        if events:
            self.settings.update(events=[describe_event(e) for e in events], stat_names=list(self.stat_names))
        if noise_key is not None:  # (a stochastic ensemble's paths: resumed only with the same key)
            self.settings.update(noise_key=noise_key)
        if self.reduced:
            self.settings.update(reduce=reduce, moments=self.reduced)
        system_arrays = {f"system/{k}": a for k, a in arrays_by_path(system).items()}
        # the inputs over the members are written with each chunk; the others once, with ts
        self.inputs = {"y0s": inp.y0s, **(system_arrays if plan.batched else {})}
        self.fixed = {"ts": self.ts, **({} if plan.batched else system_arrays)}
        self.store, self.arrays, todo = None, None, list(range(plan.n_chunks))
        if out is not None or plan.processes > 1:  # a store's: with the full descriptions and the initial states
            fp = fingerprint({**self.settings, **({"system": describe(system), "method": describe(inp.method),
                                                   "y0s": array_digest(inp.y0s)} if out is not None else {})})
            self.group.agree(fp)
        if out is not None:
            attrs = {**self.settings, "fingerprint": fp, "observables": self.observables, "created": _now(),
                     "result_names": list(RESULT_NAMES), "processes": plan.processes}
            # (reduced: the inputs compressed, as the rest is small: the same start for every member stores in kilobytes)
            inputs = {k: (a.shape, a.dtype, None, bool(self.reduced)) for k, a in self.inputs.items()}
            done = self._open(out, attrs, {**shapes, **inputs}, resume)
            todo = [k for k in todo if not done[k]]
        self.chunks = plan.mine(todo)
        if out is None:  # every chunk of this process fills them: members lo ... hi - 1
            self.lo = plan.span(self.chunks[0])[0] if self.chunks else 0
            hi = plan.span(self.chunks[-1])[1] if self.chunks else 0
            self.arrays = {k: np.empty((hi - self.lo, *shape[1:]) if not rows else shape, dtype)
                           for k, (shape, dtype, *rows) in shapes.items()}

    def _open(self, out, attrs: dict, shapes: dict, resume: bool) -> np.ndarray:
        """Process 0 makes or checks the store and tells every process which chunks are done (or
        its error); the others open it after."""
        error = None
        if self.group.index == 0:
            try:
                self.store = Store.make(out, attrs, shapes, self.plan.n_chunks, self.plan.chunk, resume, self.fixed)
            except (OSError, ValueError) as e:
                error = e
        done = self.group.from_first(self.store and self.store.done.astype(np.uint8), error, self.plan.n_chunks)
        self.store = self.store or Store(out)
        return done.astype(bool)

    def into(self, idx) -> Optional[dict]:
        """The result arrays' rows for the members ``idx`` (a slice), for the native kernel to
        write into (None with a store)."""
        if self.arrays is None:
            return None
        rows = slice(idx.start - self.lo, idx.stop - self.lo)  # (saves of nothing: not the kernel's)
        return {k: a[rows] for k, a in self.arrays.items() if np.prod(a.shape[1:]) > 0 and not k.startswith("moments/")}

    def save(self, k: int, lo: int, outs) -> None:
        """Chunk ``k``'s outputs (members from ``lo``), in a store with its inputs, then its flag."""
        y_final, saved, result, stats = outs
        parts = {**({} if self.reduced else {"final_state": y_final}), "result": np.asarray(result, np.int32),
                 **{f"observables/{n}": v for n, v in saved.items() if not self.reduced},
                 **{f"stats/{n}": v for n, v in stats.items()}}
        if self.store is not None:
            parts.update({name: a[lo : lo + y_final.shape[0]] for name, a in self.inputs.items()})
        for name, a in parts.items():
            if self.store is not None:
                self.store.write(name, lo, a)
            elif not np.may_share_memory(dst := self.arrays[name][lo - self.lo : lo - self.lo + a.shape[0]], a):
                dst[...] = a  # (unless the native kernel wrote it)
        ok = (np.asarray(result) == 0) | (np.asarray(result) == RESULT_NAMES.index("event_occurred"))  # (not failed)
        for name in self.reduced:
            for part, a in zip(MOMENT_PARTS, chunk_moments(saved[name], ok)):
                if self.store is not None:
                    self.store.write(f"moments/{name}/{part}", k, np.asarray(a)[None])
                else:
                    self.arrays[f"moments/{name}/{part}"][k] = a
        if self.store is not None:
            self.store.mark_done(k)

    def solution(self, throw: bool) -> EnsembleSolution:
        """The :class:`EnsembleSolution` (opened from the store, if any, once every process is
        done; else this process's members); ``throw``: raise ``RuntimeError`` naming the failed
        members."""
        if self.store is not None:
            self.group.barrier("chunks written")
            if self.group.index == 0:
                self.store.group.attrs["finished"] = {"time": _now(), "processes": self.plan.processes}
            self.group.barrier("store finished")
            sol = self.store.solution()
        else:
            a, own = self.arrays, slice(self.lo, self.lo + self.arrays["result"].shape[0])
            observables = with_state_ends({k: a[f"observables/{k}"] for k in self.observables},
                                          self.settings["state_ends"], self.inputs["y0s"][own], a.get("final_state"))
            moments = {k: combined(*(a[f"moments/{k}/{p}"][self.chunks] for p in MOMENT_PARTS)) for k in self.reduced}
            sol = EnsembleSolution(ts=self.ts, observables=observables, final_state=a.get("final_state"), result=a["result"],
                                   moments=moments,
                                   stats=Statistics({k: a[f"stats/{k}"] for k in self.stat_names}),
                                   chunk_size=self.plan.chunk,
                                   y0s=self.inputs["y0s"][own], settings=self.settings, first_member=self.lo,
                                   system_arrays={k[len("system/"):]: v[own] if k in self.inputs else v
                                                  for k, v in {**self.fixed, **self.inputs}.items() if k != "ts"
                                                  and k != "y0s"})
        if throw and sol.failed.size:
            bad = sol.failed + sol.first_member
            codes = np.asarray(sol.result[:])[sol.failed]
            raise RuntimeError(f"ensemble: {bad.size} of {self.plan.members} members failed: indices {bad[:20].tolist()}"
                               f"{' ...' if bad.size > 20 else ''} ({', '.join(sorted({RESULT_NAMES[c] for c in codes}))})")
        return sol
