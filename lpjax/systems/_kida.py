"""The Kida vortex as a Lie–Poisson system on so(2,1)* (seed 002, sec. 5.2)."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._algebra import so21
from .._system import LiePoissonSystem
from ._common import finite_array

__all__ = ["kida_vortex", "KidaHamiltonian", "kida_mu_from_lambda_phi", "kida_lambda_phi_from_mu"]

_C = np.pi / 16


class KidaHamiltonian(eqx.Module):
    """Excess energy ``h(mu) = ε mu_2 + ω mu_3 − (π/8) ln(π/8 − mu_3)`` (seed 002, eq. (22))."""

    eps: Scalar
    omega: Scalar

    def __call__(self, mu: Float[Array, " 3"]) -> Scalar:
        return self.eps * mu[1] + self.omega * mu[2] - (np.pi / 8) * jnp.log(np.pi / 8 - mu[2])


def _f1(mu: Float[Array, " 3"]) -> Float[Array, " 1"]:
    return (mu[0] ** 2 + mu[1] ** 2 - mu[2] ** 2)[None]


def kida_vortex(eps: ArrayLike, omega: ArrayLike) -> LiePoissonSystem:
    """Kida vortex on so(2,1)* with the (+) bracket: ``mu_dot = −ad*_{∇h} mu`` (eqs (22), (23)).

    ``mu_1' = ω mu_2 + ε mu_3 + π mu_2/(π − 8 mu_3)``, ``mu_2' = −mu_1 (ω + π/(π − 8 mu_3))``,
    ``mu_3' = ε mu_1``; ε is the strain rate and ω the background vorticity. Casimir (19):
    ``f_1 = mu_1² + mu_2² − mu_3²``; physical vortices lie on ``f_1 = −π²/64`` (errata).
    The Hamiltonian needs ``mu_3 < π/8``.
    """
    h = KidaHamiltonian(finite_array(eps, (), "eps"), finite_array(omega, (), "omega"))
    return LiePoissonSystem(so21(), h, 1, casimirs=_f1, name="kida_vortex")


def kida_mu_from_lambda_phi(lam: ArrayLike, phi: ArrayLike) -> Float[Array, "... 3"]:
    """Aspect ratio λ = b/a and angle φ to mu (the corrected eq. (21), see the seed errata).

    ``mu_1 = (π/16)(λ − 1/λ) sin 2φ``, ``mu_2 = (π/16)(λ − 1/λ) cos 2φ``,
    ``mu_3 = −(π/16)(λ + 1/λ)``; then ``f_1 = −π²/64``.
    """
    lam, phi = jnp.asarray(lam), jnp.asarray(phi)
    d = _C * (lam - 1 / lam)
    return jnp.stack([d * jnp.sin(2 * phi), d * jnp.cos(2 * phi), -_C * (lam + 1 / lam)], axis=-1)


def kida_lambda_phi_from_mu(mu: Float[Array, "... 3"]) -> tuple[Array, Array]:
    """Inverse of :func:`kida_mu_from_lambda_phi` on ``f_1 = −π²/64``, with ``0 < λ ≤ 1``.

    ``(λ, φ)`` and ``(1/λ, φ + π/2)`` describe the same ellipse; this returns the first,
    with ``φ ∈ (−π/2, π/2]``. Uses only ``mu_3`` for λ, so off the physical level the
    result is the ellipse with the same ``mu_3``.
    """
    mu = jnp.asarray(mu)
    s = jnp.maximum(-mu[..., 2] / _C, 2.0)  # λ + 1/λ ≥ 2
    lam = (s - jnp.sqrt(s * s - 4.0)) / 2.0
    phi = 0.5 * jnp.arctan2(-mu[..., 0], -mu[..., 1])  # λ − 1/λ ≤ 0 flips both signs
    return lam, phi
