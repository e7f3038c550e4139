"""Standard Lie algebras: so(3), so(n), se(3), e(n) = so(n) ⋉ Rⁿ, so(2,1), semidirect products."""

from __future__ import annotations

import functools
from typing import Optional

import numpy as np
from jaxtyping import ArrayLike

from ._base import LieAlgebra, defining_blocks, semidirect_constants

__all__ = ["so3", "so", "se3", "se3_x_r3", "se3_x_r4", "euclidean", "so21", "semidirect", "from_matrix_basis"]


def from_matrix_basis(basis: ArrayLike, *, name: str = "LieAlgebra") -> LieAlgebra:
    """Lie algebra spanned by matrices ``E_i``; ``c_ij^k`` from ``[E_i, E_j] = c_ij^k E_k``.

    Raises ``ValueError`` if the span is not closed under the commutator.
    """
    basis = np.asarray(basis, dtype=np.float64)
    if basis.ndim != 3 or basis.shape[1] != basis.shape[2]:
        raise ValueError(f"{name}: matrix basis must have shape (n, m, m), got {basis.shape}")
    n = basis.shape[0]
    flat = basis.reshape(n, -1)
    comm = np.einsum("iab,jbc->ijac", basis, basis)
    comm = (comm - np.swapaxes(comm, 0, 1)).reshape(n * n, -1)
    coeffs, *_ = np.linalg.lstsq(flat.T, comm.T, rcond=None)  # (n, n*n)
    resid = np.max(np.abs(coeffs.T @ flat - comm)) if n else 0.0
    if resid > 1e-10 * max(1.0, np.max(np.abs(comm))):
        raise ValueError(f"{name}: the span of the matrices is not closed under [A, B] = AB - BA")
    c = coeffs.T.reshape(n, n, n)
    c[np.abs(c) < 1e-14] = 0.0
    return LieAlgebra(c, name=name, matrix_basis=basis)


def _levi_civita() -> np.ndarray:
    eps = np.zeros((3, 3, 3))
    for i, j, k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
        eps[i, j, k], eps[j, i, k] = 1.0, -1.0
    return eps


@functools.lru_cache(maxsize=None)
def so3() -> LieAlgebra:
    """so(3) ≅ (R³, ×): ``c_ij^k = ε_ijk`` and ``hat(x) y = x × y``."""
    eps = _levi_civita()
    basis = -eps  # hat(e_i)[a, b] = -ε_iab, so hat(x) @ y = x × y
    return LieAlgebra(eps, name="so(3)", matrix_basis=basis)


@functools.lru_cache(maxsize=32)
def so(n: int) -> LieAlgebra:
    """so(n), n ≥ 2, in the basis ``E_(ij) = e_i e_jᵀ − e_j e_iᵀ`` (i < j, lexicographic).

    These coordinates are the upper-triangle entries of a skew matrix and are orthonormal
    for ``<ξ, η> = −½ tr(ξη)`` (seed 000, sec. 4). For n = 3 the ordering is
    ``(ξ_12, ξ_13, ξ_23)``, which differs from :func:`so3`'s cross-product coordinates.
    """
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 2:
        raise ValueError(f"so(n) needs an integer n >= 2, got {n!r}")
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    basis = np.zeros((len(pairs), n, n))
    for a, (i, j) in enumerate(pairs):
        basis[a, i, j], basis[a, j, i] = 1.0, -1.0
    return from_matrix_basis(basis, name=f"so({n})")


@functools.lru_cache(maxsize=None)
def so21() -> LieAlgebra:
    """so(2,1) with the basis of seed 002, sec. 5.2 (Bianchi type VIII).

    ``E1 = [[0,0,0],[0,0,1],[0,1,0]]``, ``E2 = [[0,0,1],[0,0,0],[1,0,0]]``,
    ``E3 = [[0,-1,0],[1,0,0],[0,0,0]]``; then ``mu_k c_ij^k`` is the matrix printed there.
    """
    E1 = [[0, 0, 0], [0, 0, 1], [0, 1, 0]]
    E2 = [[0, 0, 1], [0, 0, 0], [1, 0, 0]]
    E3 = [[0, -1, 0], [1, 0, 0], [0, 0, 0]]
    return from_matrix_basis(np.array([E1, E2, E3], dtype=np.float64), name="so(2,1)")


def semidirect(
    algebra: LieAlgebra, representation: Optional[ArrayLike] = None, *, name: Optional[str] = None
) -> LieAlgebra:
    r"""Semidirect product 𝔤 ⋉ V for a representation ρ: 𝔤 → gl(V).

    Coordinates ``(ξ, u)`` with ξ first. The bracket is
    ``[(ξ, u), (η, v)] = ([ξ, η], ρ(ξ) v − ρ(η) u)`` (seed 000, sec. 2).
    ``representation`` holds the matrices ``ρ(E_i)``, shape ``(dim 𝔤, m, m)``; ``None`` takes
    the defining representation ``algebra.matrix_basis``, and then the product also gets the
    affine matrix basis ``[[ξ̂, u], [0, 0]]``. The Jacobi check rejects a ρ that is not a
    representation.
    """
    n = algebra.dim
    if representation is None:
        if algebra.matrix_basis is None:
            raise ValueError(f"semidirect: {algebra.name} has no matrix basis; pass a representation")
        rho = algebra.matrix_basis
    else:
        rho = np.asarray(representation, dtype=np.float64)
    if rho.ndim != 3 or rho.shape[0] != n or rho.shape[1] != rho.shape[2]:
        raise ValueError(f"semidirect: representation must have shape ({n}, m, m), got {rho.shape}")
    m = rho.shape[1]
    d = n + m
    c = semidirect_constants(algebra.structure_constants, rho)
    name = name or f"{algebra.name} ⋉ R^{m}"
    structure = None
    so_n = algebra.so_n
    if so_n is not None and m % so_n == 0 and np.array_equal(rho, defining_blocks(algebra, m // so_n)):
        structure = (algebra, m // so_n)
    basis = None
    if representation is None:
        basis = np.zeros((d, m + 1, m + 1))
        basis[:n, :m, :m] = rho
        for a in range(m):
            basis[n + a, a, m] = 1.0
    return LieAlgebra(c, name=name, matrix_basis=basis, semidirect_of=structure)


@functools.lru_cache(maxsize=None)
def se3() -> LieAlgebra:
    """se(3) = so(3) ⋉ R³ with coordinates (ω, v): ``[(ξ,u),(η,v)] = (ξ×η, ξ×v − η×u)``."""
    return semidirect(so3(), name="se(3)")


@functools.lru_cache(maxsize=32)
def euclidean(n: int) -> LieAlgebra:
    """e(n) = so(n) ⋉ Rⁿ (seed 000, sec. 4), coordinates (upper triangle of M, P)."""
    return semidirect(so(n), name=f"e({n})")


@functools.lru_cache(maxsize=None)
def se3_x_r4() -> LieAlgebra:
    """(se(3) × R⁴) of seed 002, sec. 5.3, eq. (26): coordinates ``(ξ, u, w, t)`` dual to
    ``mu = (Π, P, Γ, x₃)``, the base's height x₃ added to :func:`se3_x_r3`.

    Defined by its (−) Lie–Poisson bracket, ``mu_k c_ij^k = −B(mu)``, with ``mu' = B(mu) ∇h``
    the equations (26): ``Π' = Π×h_Π + P×h_P + Γ×h_Γ``, ``P' = P×h_Π − h_{x₃} Γ``,
    ``Γ' = Γ×h_Π``, ``x₃' = Γ·h_P``; Jacobi's identity is checked on construction.
    """
    E = so3().matrix_basis  # hat(v) = v_a E_a: hat(v) x = v × x

    def tensor(mu):
        Pi, P, G = (np.tensordot(mu[a : a + 3], E, 1) for a in (0, 3, 6))
        B = np.zeros((10, 10))
        B[:3, :3], B[:3, 3:6], B[:3, 6:9] = Pi, P, G
        B[3:6, :3], B[6:9, :3] = P, G
        B[3:6, 9], B[9, 3:6] = -mu[6:9], mu[6:9]
        return B

    c = -np.stack([tensor(e) for e in np.eye(10)], axis=-1)
    return LieAlgebra(c, name="se(3) x R^4")


def se3_x_r3() -> LieAlgebra:
    """(se(3) × R³) of seed 002, sec. 5.3: so(3) ⋉ (R³ ⊕ R³), coordinates (ξ, u, w).

    ``[(ξ,u,w), (η,v,s)] = (ξ×η, ξ×v − η×u, ξ×s − η×w)``; its (−) Lie–Poisson bracket is
    eq. (29), and ``mu_k c_ij^k = −[[Π̂, P̂, Γ̂], [P̂, 0, 0], [Γ̂, 0, 0]]`` for
    ``mu = (Π, P, Γ)`` as printed there.
    """
    E = so3().matrix_basis
    rho = np.zeros((3, 6, 6))
    rho[:, :3, :3] = E
    rho[:, 3:, 3:] = E
    return semidirect(so3(), rho, name="se(3) x R^3")
