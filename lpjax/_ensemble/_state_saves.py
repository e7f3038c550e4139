"""The state observable of an :func:`lpjax.ensemble` run, stored once: its first and last saves
are the run's ``y0s`` and ``final_state`` (:class:`StateSaves`, :func:`with_state_ends`)."""

from __future__ import annotations

from typing import final

import numpy as np

__all__ = ["StateSaves", "with_state_ends"]


@final
class StateSaves(np.lib.mixins.NDArrayOperatorsMixin):
    """The state observable ``(N, T, d)`` of a run, stored once: its first save is ``y0s``
    (where the method's observed initial state is its input, bit for bit) and its last is
    ``final_state``; only the saves in between are stored as such (``inner``, ``(N, T', d)``).
    Read on indexing, like a store's arrays (``sol.observables["state"][:100]``, rows first);
    ``np.asarray`` and arithmetic take the whole array."""

    def __init__(self, first, inner, last):
        self._parts = (first, inner, last)  # first or last None: it is in inner
        self.shape = (inner.shape[0], inner.shape[1] + sum(p is not None for p in (first, last)), *inner.shape[2:])
        self.dtype = np.dtype(inner.dtype)
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"StateSaves(shape={self.shape}, dtype={self.dtype})"

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if not key or not isinstance(key[0], (slice, int, np.integer)):  # Ellipsis first, an index array
            return self._rows(slice(None))[key]
        if isinstance(key[0], slice):
            return self._rows(key[0])[(slice(None), *key[1:])]
        i = range(self.shape[0])[key[0]]  # (IndexError out of range, as NumPy's)
        return self._rows(slice(i, i + 1))[0][key[1:]]

    def _rows(self, rows: slice) -> np.ndarray:
        first, inner, last = self._parts
        parts = ([np.asarray(first[rows])[:, None]] if first is not None else []) + [np.asarray(inner[rows])] + \
                ([np.asarray(last[rows])[:, None]] if last is not None else [])
        return np.concatenate(parts, axis=1)

    def __array__(self, dtype=None, copy=None):
        a = self[:]
        return a if dtype is None else a.astype(dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(np.asarray(x) if isinstance(x, StateSaves) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)


def with_state_ends(observables: dict, ends, y0s, final_state) -> dict:
    """``observables`` with the state observable made whole (a :class:`StateSaves`) where its
    first and/or last saves (``ends``: two flags, as a run's settings ``state_ends`` say) are
    ``y0s`` and ``final_state``."""
    if not ends or not any(ends):
        return observables
    return {**observables, "state": StateSaves(y0s if ends[0] else None, observables["state"],
                                               final_state if ends[1] else None)}
