"""Free rigid bodies: the Euler top on so(3)* and the n-dimensional rigid body on so(n)*."""

from __future__ import annotations

from typing import final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._algebra import so, so3
from .._system import AbstractFreeRigidBody, LiePoissonSystem
from .._checks import positive_vector

__all__ = ["rigid_body", "rigid_body_n", "RigidBodyHamiltonian", "RigidBodyNHamiltonian"]


@final
class RigidBodyHamiltonian(AbstractFreeRigidBody):
    """``h(M) = ½ Σ_i M_i² / I_i`` with principal moments ``inertia`` (body frame).

    A free rigid body on so(3)* with mass tensor ``J_i = (I_j + I_k − I_i)/2``.
    """

    inertia: Float[Array, " 3"]

    @property
    def mass_tensor(self) -> Float[Array, " 3"]:
        return 0.5 * jnp.sum(self.inertia) - self.inertia

    def __call__(self, M: Float[Array, " 3"]) -> Scalar:
        return 0.5 * jnp.sum(M * M / self.inertia)


def rigid_body(inertia: ArrayLike) -> LiePoissonSystem:
    """Euler top ``Ṁ = M × Ω``, ``Ω = I⁻¹M`` on so(3)* (body frame, (−) bracket).

    Arguments:
        inertia: principal moments of inertia ``(I1, I2, I3)``, positive.

    Invariants: energy ``½ M·Ω`` and the Casimir ``|M|²`` (returned by ``casimirs``).
    """
    inertia = positive_vector(inertia, 3, "inertia")
    return LiePoissonSystem(
        so3(), RigidBodyHamiltonian(inertia), -1, casimirs=_norm_squared, name="rigid_body", casimir_names=("|M|²",)
    )


def _norm_squared(M: Float[Array, " 3"]) -> Float[Array, " 1"]:
    return jnp.sum(M * M)[None]


def _pair_sums(n: int) -> tuple[np.ndarray, np.ndarray]:
    iu = np.triu_indices(n, 1)
    return iu[0], iu[1]


@final
class RigidBodyNHamiltonian(AbstractFreeRigidBody):
    """``H(M) = ½ Σ_{j<k} M_jk² / (J_j + J_k)`` (seed 000, eq. (4.7) without potential)."""

    J: Float[Array, " n"]

    @property
    def mass_tensor(self) -> Float[Array, " n"]:
        return self.J

    def omega(self, M: Float[Array, " d"]) -> Float[Array, " d"]:
        """Angular velocity ``Ω_jk = M_jk / (J_j + J_k)``, inverting (4.6)."""
        j, k = _pair_sums(self.J.shape[0])
        return M / (self.J[j] + self.J[k])

    def __call__(self, M: Float[Array, " d"]) -> Scalar:
        return 0.5 * jnp.sum(M * self.omega(M))


class _TraceCasimirs(eqx.Module):
    """The Casimirs of so(n)*: ``tr M^{2k}`` for k = 1 … ⌊n/2⌋, the last replaced by the Pfaffian
    ``Pf M`` for even n. ``(Pf M)² = det M`` is a polynomial in the traces, so ``tr M^n`` adds
    nothing to them, while the sign of ``Pf M`` tells the two components of a generic orbit
    apart."""

    algebra: object
    n: int = eqx.field(static=True)

    @property
    def names(self) -> tuple[str, ...]:
        sup = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
        names = [f"tr M{str(2 * k).translate(sup)}" for k in range(1, self.n // 2 + 1)]
        return tuple(names[:-1] + ["Pf M"] if self.n % 2 == 0 else names)

    def __call__(self, mu: Array) -> Array:
        X = self.algebra.hat(mu)
        out, P = [], X
        for _ in range(self.n // 2):
            P2 = P @ X
            out.append(jnp.trace(P2))
            P = P2 @ X
        if self.n % 2 == 0:
            out[-1] = _pfaffian(X, tuple(range(self.n)), {})
        return jnp.stack(out)


def _pfaffian(X: Array, idx: tuple, memo: dict) -> Array:
    """``Pf`` of the skew matrix ``X`` restricted to the rows and columns ``idx`` (even length), by
    expansion along the first row, ``Pf X = Σ_j (−1)^{j−1} x_1j Pf X_{1̂ĵ}``, with each minor once."""
    if not idx:
        return jnp.ones((), X.dtype)
    if idx not in memo:
        i, rest = idx[0], idx[1:]
        memo[idx] = sum((-1) ** k * X[i, j] * _pfaffian(X, rest[:k] + rest[k + 1 :], memo) for k, j in enumerate(rest))
    return memo[idx]


def rigid_body_n(J: ArrayLike) -> LiePoissonSystem:
    """Free n-dimensional rigid body ``Ṁ = [M, Ω]``, ``M = JΩ + ΩJ`` on so(n)*.

    Seed 000, eqs (4.4)–(4.7) with ``A = 0``. ``J = (J_1, …, J_n)`` are the (positive)
    diagonal entries of the mass tensor; coordinates are the upper-triangle entries of
    ``M`` (:func:`lpjax.algebras.so`). For n = 3 this is the Euler top with principal
    moments ``I_1 = J_2 + J_3`` etc. Casimirs returned: ``tr(M^{2k})``, k = 1 … ⌊n/2⌋, the last
    replaced by ``Pf M`` for even n (``casimir_names``: ``("tr M²", "Pf M")`` for n = 4).
    """
    J = positive_vector(J, None, "J")
    n = J.shape[0]
    if n < 2:
        raise ValueError(f"rigid_body_n needs n >= 2 moments, got {n}")
    g = so(n)
    return LiePoissonSystem(
        g, RigidBodyNHamiltonian(J), -1, casimirs=_TraceCasimirs(g, n), name="rigid_body_n"
    )
