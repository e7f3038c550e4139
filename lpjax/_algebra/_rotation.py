"""The coordinates SO(n)-based closed formulas are written in, and the change to them from any skew basis."""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _small as sm
from ._base import LieAlgebra
from ._constructors import so

__all__ = ["RotationFrame", "rotation_frame"]


def _elementary_pairs(basis: np.ndarray) -> Optional[tuple[tuple[int, int], ...]]:
    """``(i, j)`` of each ``E_a = ±(e_i e_jᵀ − e_j e_iᵀ)``, i < j, all pairs distinct; else ``None``."""
    pairs = []
    for E in basis:
        nz = np.argwhere(E != 0)
        if len(nz) != 2 or abs(E[tuple(nz[0])]) != 1.0:
            return None
        i, j = sorted(nz[0])
        pairs.append((int(i), int(j)))
    return tuple(pairs) if len(set(pairs)) == len(pairs) else None


@dataclasses.dataclass(frozen=True, eq=False)
class RotationFrame:
    r"""Where the closed SO(n) formulas (Moser–Veselov, Suris' maps, their Lax matrices) apply.

    Those formulas are written for momenta whose matrix is ``M = Σ_a μ_a E_a`` and whose
    pairing with the algebra is ``<M, Ω> = −½ tr(MΩ) = Σ_a μ_a Ω^a``: they hold in a basis of
    elementary skew matrices ``E_a = ±(e_i e_jᵀ − e_j e_iᵀ)``, one per pair i < j (so(n) of
    :func:`lpjax.algebras.so`, :func:`lpjax.algebras.so3`, and any permutation or sign change of
    them), and nowhere else. Any other skew basis ``B`` (scaled, rotated, self-dual/anti-self-dual)
    goes through the standard so(n): ``hat_B(x) = hat_std(T x)``, so algebra elements change by
    ``T`` and momenta (the dual coordinates) by ``T⁻ᵀ``; for an orthogonal ``B`` that is the
    inverse of its Gram matrix ``−½ tr(B_a B_b)`` (``T⁻ᵀ = T G⁻¹``). The advected vectors of
    so(n) ⋉ (Rⁿ)^k are in the defining representation, the same in both.

    Attributes:
        algebra: the elementary so(n) the formulas use (the algebra's own so(n) where its basis is
            elementary, else :func:`lpjax.algebras.so` (n)).
        T: the (d, d) change ``x_int = T x`` of algebra coordinates, ``None`` where the basis is
            elementary (no conversion, no arithmetic).
        pairs: ``(i, j)`` of each basis matrix of ``algebra``.
    """

    algebra: LieAlgebra
    T: Optional[np.ndarray]
    pairs: tuple[tuple[int, int], ...]
    _dual_in: Optional[np.ndarray] = None  # T⁻ᵀ
    _dual_out: Optional[np.ndarray] = None  # Tᵀ

    def _apply(self, C: Optional[np.ndarray], y: Float[Array, "... D"]) -> Float[Array, "... D"]:
        if C is None:
            return y
        d = self.algebra.dim
        v = sm.unstack(y)
        return sm.stack(sm.const_mv(C, v[:d]) + v[d:])

    def momentum_in(self, y: Float[Array, "... D"]) -> Float[Array, "... D"]:
        """The user's state ``(μ, u_1, …, u_k)`` in the formulas' coordinates: ``μ_int = T⁻ᵀ μ``."""
        return self._apply(self._dual_in, y)

    def momentum_out(self, y: Float[Array, "... D"]) -> Float[Array, "... D"]:
        """The inverse of :meth:`momentum_in`: ``μ = Tᵀ μ_int``."""
        return self._apply(self._dual_out, y)

    def pair_sums(self, J: Float[Array, " n"]) -> Float[Array, " d"]:
        """``J_i + J_j`` for each basis matrix ``E_a`` of :attr:`algebra` (pair (i, j))."""
        i, j = (np.array(p) for p in zip(*self.pairs))
        return jnp.asarray(J)[i] + jnp.asarray(J)[j]


@functools.lru_cache(maxsize=64)
def rotation_frame(algebra: LieAlgebra) -> Optional[RotationFrame]:
    """The :class:`RotationFrame` of an algebra with a :attr:`LieAlgebra.rotation_structure`, else ``None``."""
    rs = algebra.rotation_structure
    if rs is None:
        return None
    rot = rs[0]
    pairs = _elementary_pairs(rot.matrix_basis)
    if pairs is not None:
        return RotationFrame(rot, None, pairs)
    std = so(rot.so_n)
    d = rot.dim
    T = _clean(rot.matrix_basis.reshape(d, -1) @ std.vee_matrix).T  # column a: standard coordinates of B_a
    return RotationFrame(std, T, _elementary_pairs(std.matrix_basis), _clean(np.linalg.inv(T).T), T.T.copy())


def _clean(A: np.ndarray) -> np.ndarray:
    """``A`` with the entries below roundoff of its largest set to zero (constant matrices are
    applied over their nonzeros only)."""
    A = np.array(A, dtype=np.float64)
    A[np.abs(A) < 1e-14 * np.max(np.abs(A))] = 0.0
    A.setflags(write=False)
    return A
