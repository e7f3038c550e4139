"""A Lie–Poisson algebra as 𝔤 ⋉ (Rʳ)^k for a matrix Lie algebra 𝔤: the structure a discrete
Euler–Poincaré map on the matrix group G needs (seed 000, sec. 3; seed 003)."""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._base import LieAlgebra, semidirect_constants

__all__ = ["GroupSplit", "group_split"]


class GroupSplit(NamedTuple):
    """``algebra = group ⋉ (Rʳ)^k`` in coordinates ``(ξ, a_1, …, a_k)``, ``ξ`` in ``group``'s
    basis ``E_i`` (``(d, m, m)`` matrices) and each ``a_j`` acted on by the top-left ``r × r``
    block of ``E_i`` (``r = m``: the defining representation; ``r = m − 1``: the linear part of
    an affine group such as SE(3), whose first ``m − 1`` coordinates are invariant)."""

    group: LieAlgebra
    basis: np.ndarray
    k: int
    r: int
    skew: bool  # a basis of so(m): orthogonal W, closed-form Cayley maps

    def advect(self, W: Float[Array, "m m"], a: Float[Array, " kr"], left: bool) -> Float[Array, " kr"]:
        """The advected vectors after a step ``W``, by the dual action of its top-left block
        ``W_r``: ``W⁻¹·a = W_rᵀ a`` (``left``, body frame) or ``W·a = W_r⁻ᵀ a`` (``W_r a`` on SO(n))."""
        r = self.r
        A, Wr = a.reshape(self.k, r), W[:r, :r]
        if left:
            out = A @ Wr
        elif self.skew:
            out = A @ Wr.T
        else:
            out = jnp.linalg.solve(Wr.T, A.T).T
        return out.reshape(a.shape)


def _odd_powers_stay(basis: np.ndarray) -> float:
    """The largest relative distance of ``X³`` and ``X⁵`` from span(E) for two random ``X``: 0 when
    ``cay(tX) = (I − tX)⁻¹(I + tX)`` stays in the group (``d/dt cay(tX) · cay(tX)⁻¹ = 2X(I − t²X²)⁻¹``
    is a series in the odd powers of X), as for quadratic groups and their affine extensions."""
    d = basis.shape[0]
    flat = basis.reshape(d, -1)
    pinv = np.linalg.pinv(flat)
    worst = 0.0
    for x in np.random.default_rng(0).normal(size=(2, d)):
        X = np.tensordot(x, basis, axes=1)
        for p in (3, 5):
            Y = np.linalg.matrix_power(X, p).ravel()
            worst = max(worst, float(np.linalg.norm(Y - (Y @ pinv) @ flat) / np.linalg.norm(Y)))
    return worst


@functools.lru_cache(maxsize=64)
def _split(algebra: LieAlgebra, group: LieAlgebra) -> GroupSplit:
    E = group.matrix_basis
    d, m = E.shape[0], E.shape[-1]
    extra = algebra.dim - d
    c = algebra.structure_constants
    for r in (m, m - 1):
        if r < 1 or extra < 0 or extra % r or (extra and np.any(E[:, r:, :r])):
            continue
        k = extra // r
        rho = np.zeros((d, k * r, k * r))
        for j in range(k):
            rho[:, j * r : (j + 1) * r, j * r : (j + 1) * r] = E[:, :r, :r]
        expect = semidirect_constants(group.structure_constants, rho) if k else group.structure_constants
        if expect.shape == c.shape and np.allclose(expect, c, rtol=0.0, atol=1e-12):
            return GroupSplit(group, E, k, r, group.so_n is not None)
    raise TypeError(f"its algebra {algebra.name} is not {group.name} ⋉ (Rʳ)^k in {group.name}'s coordinates "
                    f"(r = {m} or {m - 1}, the vectors after the {d} coordinates of {group.name})")


def group_split(algebra: LieAlgebra, group: Optional[LieAlgebra] = None, chart: str = "cayley") -> GroupSplit:
    """How ``algebra`` is ``group ⋉ (Rʳ)^k``; ``TypeError`` if it is not.

    ``group=None``: the rotations of ``algebra.rotation_structure`` (so(n) with its advected
    vectors) where it has one, else ``algebra`` itself, which then needs a matrix basis.
    ``chart="cayley"`` also needs the Cayley map to take ``group`` into its group (odd powers of
    its matrices stay in it: so(n), so(p, q), sp(2n) and their affine extensions such as se(3));
    ``ValueError`` otherwise, naming ``chart="exp"``.
    """
    if group is None:
        rs = algebra.rotation_structure
        group = rs[0] if rs is not None else algebra
    if not isinstance(group, LieAlgebra) or group.matrix_basis is None:
        name = group.name if isinstance(group, LieAlgebra) else type(group).__name__
        raise TypeError(f"the group's algebra {name} has no matrix basis (pass group=, a LieAlgebra with one)")
    split = _split(algebra, group)
    if chart == "cayley" and not split.skew:
        off = _odd_powers_stay(split.basis)
        if off > 1e-10:
            raise ValueError(f"the Cayley map does not take {group.name} into its group (X³ or X⁵ leaves the algebra "
                             f"by {off:.2g} relative); use chart='exp'")
    return split
