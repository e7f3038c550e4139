"""Statistics without paths (``ensemble(..., reduce="moments")``): the mean and variance across
the members of each observable at the saves, kept per chunk and combined at the end.

Each chunk keeps ``(n, mean, M₂)`` of its members that did not fail (``M₂`` the sum of squared
deviations from the chunk's mean, two passes over the chunk). The chunks are combined in their
order by Chan, Golub & LeVeque's pairwise update (1979): ``δ = mean_b − mean_a``,
``n = n_a + n_b``, ``mean = mean_a + δ n_b/n``, ``M₂ = M₂_a + M₂_b + δ² n_a n_b/n``. The per-chunk
triples are what a store keeps (a row per chunk, written with the chunk), so the result does not
depend on which process ran which chunk, nor on a resume.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Moments", "chunk_moments", "combined", "MOMENT_PARTS"]

MOMENT_PARTS = ("count", "mean", "m2")


class Moments(NamedTuple):
    """An observable's statistics across the members at the saves: ``count`` (the members that
    did not fail), ``mean`` and ``var`` (the sample variance, ``M₂/(n − 1)``), each ``(T, ...)``
    (``count``: a number)."""

    count: int
    mean: np.ndarray
    var: np.ndarray


def chunk_moments(values: np.ndarray, ok: np.ndarray) -> tuple:
    """``(n, mean, M₂)`` over the members ``ok`` of ``values`` (``(N, T, ...)``), in float64 at
    least; ``n = 0`` gives zeros."""
    v = np.asarray(values)[np.asarray(ok, bool)]
    v = v.astype(np.promote_types(v.dtype, np.float64))
    n = v.shape[0]
    if n == 0:
        zero = np.zeros(v.shape[1:], v.dtype)
        return 0, zero, zero
    mean = v.mean(axis=0)
    return n, mean, np.sum((v - mean) ** 2, axis=0)


def combined(counts, means, m2s) -> Moments:
    """The chunks' ``(n, mean, M₂)`` (leading axis: the chunks, in order) combined (see the
    module)."""
    n, mean, m2 = 0, np.zeros(np.shape(means)[1:]), np.zeros(np.shape(means)[1:])
    for nk, mk, m2k in zip(np.asarray(counts), np.asarray(means), np.asarray(m2s)):
        nk = int(nk)
        if nk == 0:
            continue
        total = n + nk
        delta = mk - mean
        mean = mean + delta * (nk / total)
        m2 = m2 + m2k + delta**2 * (n * nk / total)
        n = total
    var = m2 / (n - 1) if n > 1 else np.full_like(m2, np.nan)
    return Moments(n, mean, var)
