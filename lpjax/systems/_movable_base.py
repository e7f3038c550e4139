"""Heavy top on a movable base with kinetic-shaping control (seed 002, sec. 5.3)."""

from __future__ import annotations

from typing import Optional, final

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Scalar

from .. import _small as sm
from .._algebra import se3_x_r3, se3_x_r4
from .._system import LiePoissonSystem
from .._checks import checked_value, finite_array, positive_vector

__all__ = ["movable_base_top", "movable_base_top_x3", "MovableBaseX3Hamiltonian", "MovableBaseHamiltonian", "movable_base_mu", "movable_base_rho_c"]

_SINGULAR = 1e-6  # gains within this relative distance of 0 or ρc are rejected (cond K ≳ 1e6)


@final
class MovableBaseHamiltonian(eqx.Module):
    """``h_c(Π, P, Γ) = ½ (Π, P)ᵀ K(ρ)⁻¹ (Π, P) + mgl χ·Γ`` (seed 002, eq. (28), errata form).

    ``K(ρ) = [[I₀, ml χ̂], [−ml χ̂, ρ Id]]`` is the locked kinetic-energy matrix in (Ω, v),
    so that ``Π = I₀Ω + ml χ×v`` and ``P = −ml χ×Ω + ρ v``. Its Schur complement is
    ``𝕀_c = diag(I₁ − m²l²/ρ, I₁ − m²l²/ρ, I₃)``, so ``K(ρ)`` is singular exactly at ρ = 0 and at
    the critical gain ``ρc = m²l²/I₁`` (:attr:`rho_c`).
    """

    inertia: Float[Array, " 3"]  # I₀ = diag(I1, I1, I3) about the junction point
    M: Scalar  # base mass
    m: Scalar
    l: Scalar
    g: Scalar
    rho: Scalar
    chi: Float[Array, " 3"]
    kinv: Float[Array, "6 6"]  # K(ρ)⁻¹, computed once (differentiable in the parameters)

    def __init__(self, inertia, M, m, l, g, rho, chi):
        self.inertia, self.M, self.m, self.l, self.g, self.rho, self.chi = inertia, M, m, l, g, rho, chi
        self.kinv = jnp.linalg.inv(self.locked_inertia())

    @property
    def total_mass(self) -> Scalar:
        """``m̄ = M + m``; the gain ``ρ = m̄`` is the uncontrolled top."""
        return self.M + self.m

    @property
    def rho_c(self) -> Scalar:
        """The critical gain ``ρc = m²l²/I₁``: the upright equilibrium is linearly stable
        exactly for ``0 < ρ < ρc`` (see :func:`movable_base_top`)."""
        return self.m**2 * self.l**2 / self.inertia[0]

    def locked_inertia(self) -> Float[Array, "6 6"]:
        """``K(ρ)``."""
        C = self.m * self.l * sm.hat3(self.chi)
        top = jnp.concatenate([jnp.diag(self.inertia), C], axis=1)
        bottom = jnp.concatenate([-C, self.rho * jnp.eye(3, dtype=C.dtype)], axis=1)
        return jnp.concatenate([top, bottom], axis=0)

    def velocities(self, mu: Float[Array, " 9"]) -> tuple[Float[Array, " 3"], Float[Array, " 3"]]:
        """``(Ω, v) = K(ρ)⁻¹ (Π, P)``: the top's angular velocity and the base velocity (body frame)."""
        w = jnp.sum(self.kinv * mu[None, :6], axis=1)
        return w[:3], w[3:]

    def control_force(self, mu: Float[Array, " 9"]) -> Float[Array, " 3"]:
        """The kinetic-shaping force ``u`` on the base (body frame) that turns the physical top on
        a cart, ``P' = P × Ω + u`` in seed 002, eq. (27) (gain ``m̄``), into the closed loop (30)
        with gain ρ, evaluated on the closed loop's state ``mu = (Π, P_ρ, Γ)``:

        ``u = (m̄ − ρ)(v̇ − v × Ω)``, with ``v̇`` the base acceleration along (30).

        Derivation: both systems move with the same ``(Ω, v)``, so ``Π`` is the same and
        ``P_ρ = P + (ρ − m̄) v``. (30) gives ``P_ρ' = P_ρ × Ω``, hence ``P' = P × Ω − (ρ − m̄)(v̇ −
        v × Ω)``. Seed 002 prints the opposite sign, ``u = (ρ − m̄)(v̇ − v × Ω)``; see
        ``docs/errata.md`` (a test integrates both signs). The total force on the base in (26)
        adds the potential part ``m̄ g Γ`` (:meth:`base_force`).
        """
        Omega, v = self.velocities(mu)
        Pi, P, Gamma = mu[:3], mu[3:6], mu[6:]
        # (30) with ∂h_c/∂Π = Ω, ∂h_c/∂P = v, ∂h_c/∂Γ = mgl χ
        dPi = jnp.cross(Pi, Omega) + jnp.cross(P, v) + self.m * self.g * self.l * jnp.cross(Gamma, self.chi)
        dP = jnp.cross(P, Omega)
        dv = jnp.sum(self.kinv[3:] * jnp.concatenate([dPi, dP])[None, :], axis=1)
        return (self.total_mass - self.rho) * (dv - jnp.cross(v, Omega))

    def base_force(self, mu: Float[Array, " 9"]) -> Float[Array, " 3"]:
        """The whole force on the base in seed 002, eq. (26): ``m̄ g Γ + u`` (gravity compensation
        ``u^p`` and the kinetic shaping :meth:`control_force`)."""
        return self.total_mass * self.g * mu[6:] + self.control_force(mu)

    def __call__(self, mu: Float[Array, " 9"]) -> Scalar:
        z = mu[:6]
        kinetic = 0.5 * jnp.dot(z, jnp.sum(self.kinv * z[None, :], axis=1))
        return kinetic + self.m * self.g * self.l * jnp.dot(self.chi, mu[6:])


def movable_base_rho_c(m: ArrayLike = 0.7, l: ArrayLike = 0.215, I1: ArrayLike = 0.2) -> Array:
    """The critical gain ``ρc = m²l²/I₁`` of :func:`movable_base_top` (seed 002's parameters by
    default: 0.1131...)."""
    m, l, I1 = (finite_array(v, (), name) for v, name in ((m, "m"), (l, "l"), (I1, "I1")))
    positive_vector(jnp.stack([m, l, I1]), 3, "(m, l, I1)")
    return m**2 * l**2 / I1


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

    ``rho=None`` is the paper's stabilising gain ``0.9 ρc``, ``ρc = m² l² / I1``; ``rho = M + m``
    is the uncontrolled system (it falls). Casimirs (31): ``|P|², P·Γ, |Γ|²``.

    **Stability.** Linearised at the upright equilibrium ``(0, 0, χ)``, ``P' = 0`` and the tilt
    ``γ = Γ − χ`` obeys ``γ⊥'' = (mgl / (I₁ − m²l²/ρ)) γ⊥``: the equilibrium is linearly stable
    (eigenvalues on the imaginary axis) exactly for ``0 < ρ < ρc``, where the shaped inertia
    ``I₁ − m²l²/ρ`` is negative, and unstable with real eigenvalues ``±(mgl/(I₁ − m²l²/ρ))^½`` for
    ``ρ < 0`` and ``ρ > ρc`` (so for the physical gain ``M + m``). Seed 002 only says that
    ``0.9 ρc`` stabilises.

    Raises ``ValueError`` (``eqx.error_if`` when ``rho`` is traced) for ``ρ ≤ 0`` (a negative or
    zero locked base mass: ``K(ρ)`` is singular at 0) and for ``|ρ − ρc| ≤ 10⁻⁶ ρc``, where
    ``K(ρ)`` is singular.
    """
    M, m, I1, I3, l, g = (finite_array(v, (), name) for v, name in
                          ((M, "M"), (m, "m"), (I1, "I1"), (I3, "I3"), (l, "l"), (g, "g")))
    positive_vector(jnp.stack([M, m, I1, I3, l]), 5, "(M, m, I1, I3, l)")
    rho_c = m**2 * l**2 / I1
    if rho is None:
        rho = 0.9 * rho_c
    rho = finite_array(rho, (), "rho")
    rho = checked_value(rho, ~(rho > 0), "movable_base_top: the gain rho must be > 0 (K(rho) is singular at 0 and "
                   "the upright top is unstable for rho < 0)")
    rho = checked_value(rho, jnp.abs(rho - rho_c) <= _SINGULAR * rho_c,
                   f"movable_base_top: the gain rho is at the critical gain rho_c = m^2 l^2 / I1 "
                   f"(within {_SINGULAR:g} relative), where the locked inertia K(rho) is singular; the upright "
                   "top is stable for 0 < rho < rho_c")
    h = MovableBaseHamiltonian(
        inertia=jnp.stack([I1, I1, I3]), M=M, m=m, l=l, g=g, rho=rho,
        chi=jnp.array([0.0, 0.0, 1.0], dtype=jnp.result_type(m)),
    )
    return LiePoissonSystem(se3_x_r3(), h, -1, casimirs=_casimirs, name="movable_base_top",
                            casimir_names=("|P|²", "P·Γ", "|Γ|²"))


@final
class MovableBaseX3Hamiltonian(eqx.Module):
    """``h(Π, P, Γ, x₃) = h_c(Π, P, Γ) + m̄ g x₃`` at the gain ``ρ = m̄ = M + m`` (no control):
    seed 002, the Hamiltonian above (26) (in the errata form of :class:`MovableBaseHamiltonian`)."""

    base: MovableBaseHamiltonian

    def __call__(self, mu: Float[Array, " 10"]) -> Scalar:
        return self.base(mu[:9]) + self.base.total_mass * self.base.g * mu[9]


def movable_base_top_x3(
    M: ArrayLike = 0.44, m: ArrayLike = 0.7, I1: ArrayLike = 0.2, I3: ArrayLike = 0.24, l: ArrayLike = 0.215,
    g: ArrayLike = 9.8,
) -> LiePoissonSystem:
    """The heavy top on a movable base without control, with the base's height x₃: seed 002,
    eq. (26) on (se(3) × R⁴)* (:func:`lpjax.algebras.se3_x_r4`, (−) bracket), state
    ``mu = (Π, P, Γ, x₃)``: ``P' = P×∂h/∂Π − (∂h/∂x₃) Γ`` and ``x₃' = Γ·∂h/∂P`` beside the
    equations of :func:`movable_base_top`. The potential-shaping control ``uᵖ = (∂h/∂x₃) Γ``
    removes the ``Γ`` term and decouples x₃, leaving :func:`movable_base_top` with
    ``rho = M + m``. Parameters as there; Casimirs: those of the algebra
    (``quadratic_casimirs``: ``|Γ|²``).
    """
    base = movable_base_top(jnp.asarray(M) + jnp.asarray(m), M=M, m=m, I1=I1, I3=I3, l=l, g=g)  # ρ = m̄: no control
    return LiePoissonSystem(se3_x_r4(), MovableBaseX3Hamiltonian(base.hamiltonian), -1, name="movable_base_top_x3")


def movable_base_mu(
    system: LiePoissonSystem, Omega: ArrayLike, v: ArrayLike, Gamma: ArrayLike
) -> Float[Array, " 9"]:
    """``mu = (Π, P, Γ)`` from angular velocity Ω, base velocity v and Γ (body frame)."""
    if not isinstance(getattr(system, "hamiltonian", None), MovableBaseHamiltonian):
        raise TypeError("movable_base_mu needs a system made by movable_base_top")
    Omega, v, Gamma = (finite_array(x, (3,), n) for x, n in ((Omega, "Omega"), (v, "v"), (Gamma, "Gamma")))
    z = system.hamiltonian.locked_inertia() @ jnp.concatenate([Omega, v])
    return jnp.concatenate([z, Gamma])
