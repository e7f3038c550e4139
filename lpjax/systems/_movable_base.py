"""Heavy top on a movable base with kinetic-shaping control (seed 002, sec. 5.3)."""

from __future__ import annotations

from typing import Optional, final

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Scalar

from .. import _small as sm
from .._algebra import se3_x_r3
from .._system import LiePoissonSystem
from .._checks import finite_array, positive_vector

__all__ = ["movable_base_top", "MovableBaseHamiltonian", "movable_base_mu"]


@final
class MovableBaseHamiltonian(eqx.Module):
    """``h_c(Π, P, Γ) = ½ (Π, P)ᵀ K(ρ)⁻¹ (Π, P) + mgl χ·Γ`` (seed 002, eq. (28), errata form).

    ``K(ρ) = [[I₀, ml χ̂], [−ml χ̂, ρ Id]]`` is the locked kinetic-energy matrix in (Ω, v),
    so that ``Π = I₀Ω + ml χ×v`` and ``P = −ml χ×Ω + ρ v``.
    """

    inertia: Float[Array, " 3"]  # I₀ = diag(I1, I1, I3) about the junction point
    m: Scalar
    l: Scalar
    g: Scalar
    rho: Scalar
    chi: Float[Array, " 3"]
    kinv: Float[Array, "6 6"]  # K(ρ)⁻¹, computed once (differentiable in the parameters)

    def __init__(self, inertia, m, l, g, rho, chi):
        self.inertia, self.m, self.l, self.g, self.rho, self.chi = inertia, m, l, g, rho, chi
        self.kinv = jnp.linalg.inv(self.locked_inertia())

    def locked_inertia(self) -> Float[Array, "6 6"]:
        """``K(ρ)``."""
        C = self.m * self.l * sm.hat3(self.chi)
        top = jnp.concatenate([jnp.diag(self.inertia), C], axis=1)
        bottom = jnp.concatenate([-C, self.rho * jnp.eye(3, dtype=C.dtype)], axis=1)
        return jnp.concatenate([top, bottom], axis=0)

    def __call__(self, mu: Float[Array, " 9"]) -> Scalar:
        z = mu[:6]
        kinetic = 0.5 * jnp.dot(z, jnp.sum(self.kinv * z[None, :], axis=1))
        return kinetic + self.m * self.g * self.l * jnp.dot(self.chi, mu[6:])


def _casimirs(mu: Float[Array, " 9"]) -> Float[Array, " 3"]:
    P, G = mu[3:6], mu[6:]
    return jnp.stack([jnp.dot(P, P), jnp.dot(P, G), jnp.dot(G, G)])


def movable_base_top(
    rho: Optional[ArrayLike] = None,
    M: ArrayLike = 0.44,
    m: ArrayLike = 0.7,
    I1: ArrayLike = 0.2,
    I3: ArrayLike = 0.24,
    l: ArrayLike = 0.215,
    g: ArrayLike = 9.8,
) -> LiePoissonSystem:
    """Controlled heavy top on a movable base, on (se(3) × R³)* with the (−) bracket (29).

    State ``mu = (Π, P, Γ)``; equations (30): ``Π' = Π×∂h/∂Π + P×∂h/∂P + Γ×∂h/∂Γ``,
    ``P' = P×∂h/∂Π``, ``Γ' = Γ×∂h/∂Π``. Hamiltonian :class:`MovableBaseHamiltonian`
    with χ = e₃. Parameters and their defaults are those of seed 002 (from its ref. [9]):
    base mass ``M``, top mass ``m``, ``I1 = I2``, ``I3``, ``l``, ``g``.

    ``rho=None`` is the paper's stabilising gain ``0.9 m² l² / I1``; ``rho = M + m`` is the
    uncontrolled system. Casimirs (31): ``|P|², P·Γ, |Γ|²``.
    """
    M, m, I1, I3, l, g = (finite_array(v, (), name) for v, name in
                          ((M, "M"), (m, "m"), (I1, "I1"), (I3, "I3"), (l, "l"), (g, "g")))
    positive_vector(jnp.stack([M, m, I1, I3, l]), 5, "(M, m, I1, I3, l)")
    if rho is None:
        rho = 0.9 * m**2 * l**2 / I1
    rho = finite_array(rho, (), "rho")
    h = MovableBaseHamiltonian(
        inertia=jnp.stack([I1, I1, I3]), m=m, l=l, g=g, rho=rho,
        chi=jnp.array([0.0, 0.0, 1.0], dtype=jnp.result_type(m)),
    )
    return LiePoissonSystem(se3_x_r3(), h, -1, casimirs=_casimirs, name="movable_base_top")


def movable_base_mu(
    system: LiePoissonSystem, Omega: ArrayLike, v: ArrayLike, Gamma: ArrayLike
) -> Float[Array, " 9"]:
    """``mu = (Π, P, Γ)`` from angular velocity Ω, base velocity v and Γ (body frame)."""
    if not isinstance(getattr(system, "hamiltonian", None), MovableBaseHamiltonian):
        raise TypeError("movable_base_mu needs a system made by movable_base_top")
    Omega, v, Gamma = (finite_array(x, (3,), n) for x, n in ((Omega, "Omega"), (v, "v"), (Gamma, "Gamma")))
    z = system.hamiltonian.locked_inertia() @ jnp.concatenate([Omega, v])
    return jnp.concatenate([z, Gamma])
