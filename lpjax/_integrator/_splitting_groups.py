"""The two groups of a splitting that a Runge–Kutta–Nyström scheme needs (Blanes & Moan 2002):
a kick group ``B`` and a drift group ``A``, each with an exact flow, and ``[B, [B, [B, A]]] = 0``.

By structure: the kick group is the splitting's linear pieces ``b_k μ_k`` (the potential), the
drift group its quadratic pieces ``½ A_kk μ_k²`` (the kinetic energy). A group's flow is the
product of its pieces' exact flows when they commute, ``[e_i, e_j] = 0`` pairwise. The bracket
condition holds when the kick pieces lie in an abelian ideal ``𝔞`` of the algebra (the
translations of se(3) or e(n), where the potential lives): ``{B, A}`` is then linear on 𝔞*,
``{B, {B, A}}`` a function on 𝔞* alone, and its bracket with ``B`` vanishes."""

from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = ["rkn_mismatch"]


def _ideal(c: np.ndarray, indices) -> np.ndarray:
    """An orthonormal basis (rows) of the smallest ideal containing the basis elements ``indices``."""
    d = c.shape[0]
    span = np.eye(d)[list(indices)]
    while True:
        brackets = np.einsum("ai,ijk->ajk", span, c).reshape(-1, d)  # [v, e_j] for each v and j
        stacked = np.vstack([span, brackets])
        _, s, vt = np.linalg.svd(stacked, full_matrices=False)
        rank = int(np.sum(s > 1e-12 * max(1.0, s[0])))
        if rank == span.shape[0]:
            return vt[:rank]
        span = vt[:rank]


def _noncommuting(c: np.ndarray, indices) -> Optional[tuple]:
    for a in indices:
        for b in indices:
            if a < b and np.max(np.abs(c[a, b])) > 1e-12:
                return a, b
    return None


def rkn_mismatch(algebra, names: tuple) -> Optional[Exception]:
    """Why the pieces ``names`` (those present) do not form a kick group and a drift group fit for
    a Runge–Kutta–Nyström scheme (module docstring), or None."""
    c = np.asarray(algebra.structure_constants, np.float64)
    kicks = [int(n[1:]) for n in names if n[0] == "l"]
    drifts = [int(n[1:]) for n in names if n[0] == "q"]
    if not kicks or not drifts:
        return ValueError(f"a Runge–Kutta–Nyström scheme needs linear pieces (the kick, a potential) and quadratic "
                          f"ones (the drift, a kinetic energy); the pieces present are {', '.join(names)}")
    pair = _noncommuting(c, drifts)
    if pair is not None:
        return ValueError(f"the quadratic pieces q{pair[0]} and q{pair[1]} do not commute on {algebra.name}, so the "
                          "drift group has no exact flow of its own and a Runge–Kutta–Nyström scheme loses its "
                          "order; use a scheme for any splitting (blanes-moan-s10, kahan-li6)")
    ideal = _ideal(c, kicks)
    if np.max(np.abs(np.einsum("ai,bj,ijk->abk", ideal, ideal, c))) > 1e-12:
        return ValueError(f"the linear pieces {', '.join(f'l{k}' for k in kicks)} do not lie in an abelian ideal of "
                          f"{algebra.name}, so [B, [B, [B, A]]] need not vanish and a Runge–Kutta–Nyström scheme "
                          "loses its order; use a scheme for any splitting (blanes-moan-s10, kahan-li6)")
    return None
