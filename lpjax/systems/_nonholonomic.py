"""Nonholonomic rigid bodies of seed 001 (Jovanović, *LR and L+R systems*): Veselova's
problem, the Chaplygin and rubber Chaplygin spheres, L+R systems and the spherical support.
Equations, densities and integrals: ``docs/seeds/seed001-equations.md`` (the seed's copy lost its
formulas) and :class:`lpjax.NonholonomicSystem`."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from .._algebra import LieAlgebra, so, so3
from .._checks import as_float, is_traced, positive_vector
from .._system import NonholonomicSystem

__all__ = ["veselova", "veselova_n", "chaplygin_sphere", "rubber_chaplygin_sphere", "lplusr", "spherical_support"]

_LR = ("energy", "gamma_norms", "constraint", "k_gamma")
_LPLUSR = ("energy", "k_norm", "k_gamma", "gamma_gram")


def _operator(algebra: LieAlgebra, op: Callable[[Array], Array]) -> Array:
    """The matrix of a linear map of so(n) in the algebra's coordinates."""
    basis = jnp.asarray(algebra.matrix_basis)
    return jnp.stack([algebra.vee(op(basis[a]), check=False) for a in range(algebra.dim)], axis=1)


def _spd(M: Array, name: str) -> Array:
    M = 0.5 * (M + M.T)
    if not is_traced(M):
        lam = np.linalg.eigvalsh(np.asarray(M))
        if not (np.all(np.isfinite(lam)) and lam[0] > 0):
            raise ValueError(f"{name} must be symmetric positive definite; its eigenvalues are {np.round(lam, 6).tolist()}")
    return M


def _check_n(n) -> int:
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 3:
        raise ValueError(f"n must be an integer >= 3, got {n!r}")
    return int(n)


def _inertia(inertia: ArrayLike, n: int, what: str = "inertia") -> tuple[LieAlgebra, Array]:
    """``(algebra, I)``: n = 3, principal moments ``(3,)`` in so(3)'s vector form; n ≥ 4, a
    vector J ``(n,)`` (the rigid body I(Ω) = JΩ + ΩJ) or an SPD ``(d, d)`` matrix in so(n)'s
    coordinates."""
    x = as_float(inertia, what)
    if n == 3:
        return so3(), jnp.diag(positive_vector(x, 3, what))
    g = so(n)
    if x.ndim == 2:
        if x.shape != (g.dim, g.dim):
            raise ValueError(f"{what} as a matrix must be ({g.dim}, {g.dim}) for so({n}), got {x.shape}")
        return g, _spd(x, what)
    J = positive_vector(x, n, what)
    return g, _spd(_operator(g, lambda X: J[:, None] * X + X * J[None, :]), f"{what} (JΩ + ΩJ)")


def _unit_vectors(r: int, n: int) -> Array:
    i, j = np.arange(r)[:, None], np.arange(n)[None, :]
    rows = np.cos(1.0 + 2.1 * i + 0.7 * j) + (j == n - 1)
    return jnp.asarray(rows / np.linalg.norm(rows, axis=1, keepdims=True))


def _build(algebra, I, D, T, constrained: bool, integrals, name: str, R=None, xis=None) -> NonholonomicSystem:
    D = jnp.atleast_1d(as_float(D, "D"))
    T = jnp.zeros_like(D) if T is None else jnp.atleast_1d(as_float(T, "T"))
    if not is_traced(D) and (np.any(np.asarray(D) < 0) or np.any(np.asarray(T) < 0)):
        raise ValueError(f"{name}: the couplings D and T must be >= 0, got D = {np.asarray(D)}, T = {np.asarray(T)}")
    system = NonholonomicSystem(algebra, I, D, T, constrained, tuple(integrals), None, name, R)
    Om = jnp.asarray(np.cos(0.3 + 1.7 * np.arange(algebra.dim)))
    x = system.from_velocity(Om, _unit_vectors(system.r, system.n), xis)
    return NonholonomicSystem(algebra, I, D, T, constrained, tuple(integrals), x, name, R)


def _decompose(R: ArrayLike, d: int) -> tuple[Array, Array]:
    """``R = Σ_a R_a ξ_a ⊗ ξ_a``: the nonzero eigenvalues and orthonormal eigenvectors (rows) of a
    symmetric ``(d, d)`` matrix (all d pairs when R is traced)."""
    R = as_float(R, "R")
    if R.shape != (d, d):
        raise ValueError(f"R must be a symmetric ({d}, {d}) matrix in the algebra's coordinates, got shape {R.shape}")
    if not is_traced(R) and not np.allclose(np.asarray(R), np.asarray(R).T, rtol=1e-12, atol=1e-12):
        raise ValueError("R must be symmetric")
    lam, vecs = jnp.linalg.eigh(0.5 * (R + R.T))
    if not is_traced(R):
        keep = np.abs(np.asarray(lam)) > 1e-12 * max(1.0, float(np.max(np.abs(np.asarray(lam)))))
        if not keep.any():
            raise ValueError("R is zero: give a nonzero coupling, or use D")
        lam, vecs = lam[keep], vecs[:, keep]
    return lam, vecs.T


def veselova(inertia: ArrayLike) -> NonholonomicSystem:
    """Veselova's problem in 3D (seed 001, sec. 2; Veselov & Veselova 1986): state
    ``(M = Iω, γ) ∈ R⁶``, ``M' = M × ω + λγ``, ``γ' = γ × ω`` with
    ``λ = −(I⁻¹(M × ω), γ)/(I⁻¹γ, γ)`` keeping the constraint ``(ω, γ) = 0``. Density
    ``sqrt((I⁻¹γ, γ))``; integrals: the energy (on the constraint), |γ|², |M × γ|².

    Arguments:
        inertia: principal moments ``(I1, I2, I3)``, positive.
    """
    g, I = _inertia(inertia, 3)
    return _build(g, I, 0.0, None, True, _LR, "veselova")


def veselova_n(J: Optional[ArrayLike] = None, n: Optional[int] = None, *, A: Optional[ArrayLike] = None
               ) -> NonholonomicSystem:
    """The n-dimensional Veselova problem on so(n) × S^{n−1} (seed 001, sec. 4; Fedorov &
    Jovanović 2004): ``M' = [M, Ω] + Λ``, Λγ = 0, constraint ``PΩP = 0``.

    ``veselova_n(J)``: the rigid body ``I(Ω) = JΩ + ΩJ`` with ``J`` of length n.
    ``veselova_n(n=n, A=A)``: ``I(Ω) = AΩA`` with ``A`` positive (a vector: diag A), the
    inertia that admits Chaplygin's reducing multiplier (density ∝ (Aγ, γ)^{(n−2)/2}).
    """
    if (J is None) == (A is None):
        raise ValueError("veselova_n: give the rigid-body J, or A= (with n) for I(Ω) = AΩA, not both")
    if A is not None:
        n = _check_n(n)
        a = as_float(A, "A")
        Amat = jnp.diag(positive_vector(a, n, "A")) if a.ndim == 1 else _spd(a, "A")
        if Amat.shape != (n, n):
            raise ValueError(f"veselova_n: A must be ({n},) or ({n}, {n}), got {a.shape}")
        g = so(n)
        return _build(g, _spd(_operator(g, lambda X: Amat @ X @ Amat), "I(Ω) = AΩA"), 0.0, None, True, _LR,
                      "veselova_n")
    Jv = as_float(J, "J")
    if Jv.ndim == 2 and n is None:
        raise ValueError("veselova_n: with an inertia matrix J in so(n) coordinates, give n too")
    n = _check_n(Jv.shape[0] if n is None else n)
    g, I = _inertia(Jv, n, "J") if n > 3 else _inertia(_rigid_3d(Jv), 3, "J")
    return _build(g, I, 0.0, None, True, _LR, "veselova_n")


def _rigid_3d(J: Array) -> Array:
    """The principal moments of the 3D rigid body ``JΩ + ΩJ``: ``I_i = J_j + J_k``."""
    J = positive_vector(J, 3, "J")
    return jnp.sum(J) - J


def chaplygin_sphere(inertia: ArrayLike, D: float) -> NonholonomicSystem:
    """Chaplygin's ball rolling without slipping (marble), 3D (seed 001, sec. 5; Chaplygin 1903,
    Borisov & Mamaev 2007): state ``(k, γ)``, ``k = Jω``, ``J = I + D(1 − γγᵀ)`` on |γ| = 1
    (D = mR²), ``k' = k × ω``, ``γ' = γ × ω``. Density ``det J^{−1/2}``; integrals ½(k, ω),
    (k, γ), |k|², |γ|²."""
    g, I = _inertia(inertia, 3)
    return _build(g, I, D, None, False, ("energy", "gamma_norms", "k_dot_gamma", "k_norm"), "chaplygin_sphere")


def rubber_chaplygin_sphere(inertia: ArrayLike, D: float, n: int = 3) -> NonholonomicSystem:
    """The rubber Chaplygin sphere (rolling without slipping or twisting; seed 001, sec. 6;
    Ehlers & Koiller 2007): the marble sphere's ``k = J(γ)Ω`` with the LR constraint
    ``PΩP = 0`` (3D: (ω, γ) = 0). Its reaction includes the J̇Ω term: in 3D
    ``λ = −(J⁻¹(k × ω − J̇ω), γ)/(J⁻¹γ, γ)`` (001-equations.md prints ``+ J̇ω``, which is wrong
    off the constraint, where the constraint function then changes; on it J̇ω vanishes). Density
    ``det J^{−1/2} sqrt(det⟨J⁻¹E_a, E_b⟩)``; integrals: energy, |γ|², |kγ|². Its trajectories
    are Veselova's with inertia I + D·1.

    ``inertia``: n = 3, principal moments; n ≥ 4, the rigid-body J ``(n,)`` or a ``(d, d)`` matrix.
    """
    g, I = _inertia(inertia, _check_n(n))
    return _build(g, I, D, None, True, _LR, "rubber_chaplygin_sphere")


def lplusr(inertia: ArrayLike, D: Optional[ArrayLike] = None, T: Optional[ArrayLike] = None, n: int = 3, *,
           R: Optional[ArrayLike] = None) -> NonholonomicSystem:
    """An L+R system (seed 001, sec. 3; Fedorov & Jovanović 2004), ``k' = [k, Ω]``, no multiplier.

    ``lplusr(inertia, D, T)``: r advected vectors γ_i with
    ``J = I + Σ_i [D_i pr(γ_i) + T_i (1 − pr(γ_i))]``; integrals: energy, ⟨k, k⟩, |kγ_i|², the
    Gram matrix of the γ_i.

    ``lplusr(inertia, R)`` (a matrix in place of D) or ``lplusr(inertia, R=R)``: the general L+R
    system with a symmetric ``(d, d)`` matrix R in the
    algebra's coordinates, written ``R = Σ_a R_a ξ_a ⊗ ξ_a`` (its eigen-decomposition at t = 0);
    the ξ_a are advected, ``ξ_a' = [ξ_a, Ω]``, and ``J = I + Σ_a R_a ξ_a ⊗ ξ_a``. State
    ``(k, ξ_1, …, ξ_m)`` over the m nonzero eigenvalues; integrals: energy, ⟨k, k⟩, ⟨k, ξ_a⟩, the
    Gram matrix of the ξ_a (001-equations.md, table). Both may be given together.

    Density ``|det J|^{−1/2}``. ``inertia``: n = 3, principal moments; n ≥ 4, the rigid-body J
    ``(n,)`` or a ``(d, d)`` matrix.
    """
    if D is not None and R is None and np.ndim(D) == 2:  # lplusr(inertia, R): a matrix is the general R
        D, R = None, D
    if D is None and T is not None:
        raise ValueError("lplusr: T (the twist couplings) needs D")
    if D is None and R is None:
        raise ValueError("lplusr: give the couplings D (and T) of advected vectors, or a general R=, or both")
    g, I = _inertia(inertia, _check_n(n))
    weights, xis = (None, None) if R is None else _decompose(R, g.dim)
    names = (_LPLUSR if D is not None else ("energy", "k_norm")) + (("k_xi", "xi_gram") if R is not None else ())
    return _build(g, I, np.zeros(0) if D is None else D, T, False, names, "lplusr", weights, xis)


def spherical_support(inertia: ArrayLike, balls: Sequence[tuple[float, float]], rubber: bool = False,
                      n: int = 3) -> NonholonomicSystem:
    """A ball of radius 1 on balls of inertia I_i and radius r_i with fixed centres (seed 001,
    sec. 5): the L+R system with ``D_i = I_i / r_i²`` and ``T_i = I_i`` for rubber contacts (no
    twist) or 0 for marble ones. ``balls``: ``[(I_i, r_i), ...]``."""
    b = np.asarray(balls, dtype=float)
    if b.ndim != 2 or b.shape[1] != 2 or b.shape[0] < 1 or not np.all(b > 0):
        raise ValueError(f"spherical_support: balls must be [(I_i, r_i), ...] with positive entries, got {balls!r}")
    D = b[:, 0] / b[:, 1] ** 2
    T = b[:, 0] if rubber else np.zeros(len(b))
    system = lplusr(inertia, D, T, n)
    return NonholonomicSystem(system.algebra, system.inertia, system.D, system.T, False, system.integral_names,
                              system.default, "spherical_support")
