"""Heavy tops: the 3-d heavy top on se(3)* and the n-d heavy top on e(n)* (seed 000, sec. 4)."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._algebra import euclidean, se3
from .._system import LiePoissonSystem
from .._checks import finite_array, positive_vector
from ._rigid_body import RigidBodyHamiltonian, RigidBodyNHamiltonian

__all__ = ["heavy_top", "heavy_top_n", "HeavyTopHamiltonian", "HeavyTopNHamiltonian"]


class HeavyTopHamiltonian(eqx.Module):
    """``h(M, Γ) = ½ M·I⁻¹M + mgl χ·Γ``."""

    kinetic: RigidBodyHamiltonian
    chi: Float[Array, " 3"]
    mgl: Scalar

    def __call__(self, y: Float[Array, " 6"]) -> Scalar:
        return self.kinetic(y[:3]) + self.mgl * jnp.dot(self.chi, y[3:])


def _heavy_top_casimirs(y: Float[Array, " 6"]) -> Float[Array, " 2"]:
    M, G = y[:3], y[3:]
    return jnp.stack([jnp.dot(G, G), jnp.dot(M, G)])


def heavy_top(inertia: ArrayLike, chi: ArrayLike, mgl: ArrayLike) -> LiePoissonSystem:
    """Heavy top on se(3)* (body frame, (−) bracket), state ``y = (M, Γ)``.

    ``Ṁ = M × Ω + mgl Γ × χ``, ``Γ̇ = Γ × Ω``, ``Ω = I⁻¹M``; Γ is the direction of gravity
    in the body frame and χ the unit vector from the fixed point to the centre of mass.

    Arguments:
        inertia: principal moments ``(I1, I2, I3)`` about the fixed point, positive.
        chi: body-frame vector χ (shape (3,)).
        mgl: mass × gravity × distance to the centre of mass.

    Invariants: energy; Casimirs ``|Γ|²`` and ``M·Γ`` (returned by ``casimirs``).
    """
    inertia = positive_vector(inertia, 3, "inertia")
    chi = finite_array(chi, (3,), "chi")
    mgl = finite_array(mgl, (), "mgl")
    h = HeavyTopHamiltonian(RigidBodyHamiltonian(inertia), chi, mgl)
    return LiePoissonSystem(se3(), h, -1, casimirs=_heavy_top_casimirs, name="heavy_top",
                            casimir_names=("|Γ|²", "M·Γ"))


class HeavyTopNHamiltonian(eqx.Module):
    """``H(M, P) = ½ <M, Ω> + <P, A>`` (seed 000, eq. (4.7))."""

    kinetic: RigidBodyNHamiltonian
    A: Float[Array, " n"]

    def __call__(self, y: Array) -> Scalar:
        n = self.A.shape[0]
        d = n * (n - 1) // 2
        return self.kinetic(y[:d]) + jnp.dot(self.A, y[d:])


class _EuclideanCasimirs(eqx.Module):
    """The quadratic Casimirs of e(n)* on ``y = (vee(M), P)``: ``|P|²``, and for n = 3 also
    ``M·P = M₁₂P₃ − M₁₃P₂ + M₂₃P₁``, the pairing of M's axial vector with P (the two of
    ``euclidean(3).quadratic_casimirs()``)."""

    n: int = eqx.field(static=True)
    symbols: tuple[str, str] = eqx.field(static=True, default=("M", "P"))

    @property
    def names(self) -> tuple[str, ...]:
        M, P = self.symbols
        return (f"|{P}|²",) + ((f"{M}·{P}",) if self.n == 3 else ())

    def __call__(self, y: Array) -> Array:
        d = self.n * (self.n - 1) // 2
        M, P = y[:d], y[d:]
        if self.n != 3:
            return jnp.dot(P, P)[None]
        return jnp.stack([jnp.dot(P, P), M[0] * P[2] - M[1] * P[1] + M[2] * P[0]])


def heavy_top_n(J: ArrayLike, A: ArrayLike) -> LiePoissonSystem:
    """n-dimensional heavy top on e(n)* = (so(n) ⋉ Rⁿ)*, state ``y = (M, P)``.

    Moving-frame equations (seed 000, eq. (4.5)): ``Ṁ = [M, Ω] + A ∧ P``, ``Ṗ = −Ω P``
    with ``M_jk = (J_j + J_k) Ω_jk`` (4.6), Hamiltonian (4.7) and bracket (4.8)–(4.9)
    (the (−) Lie–Poisson bracket of :func:`lpjax.algebras.euclidean`). ``M`` is stored as
    its upper-triangle entries, ``a ∧ b = a bᵀ − b aᵀ``.

    Arguments:
        J: diagonal of the mass tensor, shape (n,), positive.
        A: body-frame vector to the centre of mass (times mass and gravity), shape (n,).

    Casimirs returned: ``|P|²``, and ``M·P`` for n = 3.
    """
    J = positive_vector(J, None, "J")
    n = J.shape[0]
    if n < 2:
        raise ValueError(f"heavy_top_n needs n >= 2, got {n}")
    A = finite_array(A, (n,), "A")
    h = HeavyTopNHamiltonian(RigidBodyNHamiltonian(J), A)
    return LiePoissonSystem(euclidean(n), h, -1, casimirs=_EuclideanCasimirs(n), name="heavy_top_n")
