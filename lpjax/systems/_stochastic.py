"""Stochastic bodies: the rigid body and the heavy top with noise in the body's angular momentum."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike

from .._system import StochasticLiePoissonSystem
from ._heavy_top import heavy_top
from ._rigid_body import rigid_body

__all__ = ["stochastic_rigid_body", "stochastic_heavy_top"]


def _body_noise(noise: ArrayLike, who: str) -> np.ndarray:
    xi = jnp.asarray(noise, dtype=float)
    xi = xi[None] if xi.ndim == 1 else xi
    if xi.ndim != 2 or xi.shape[1] != 3 or xi.shape[0] < 1:
        raise ValueError(f"{who}: noise must be vectors ξᵢ of the body frame, shape (m, 3) or (3,), got {jnp.shape(noise)}")
    return xi


def stochastic_rigid_body(inertia: ArrayLike, noise: ArrayLike) -> StochasticLiePoissonSystem:
    """Euler's top with linear noise in the angular momentum (Stratonovich):
    ``dM = M × Ω dt + Σᵢ M × ξᵢ ∘ dWᵢ``, ``Ω = I⁻¹M``, noise Hamiltonians ``⟨M, ξᵢ⟩``.

    Arguments:
        inertia: principal moments ``(I1, I2, I3)``, positive.
        noise: the vectors ``ξᵢ`` (body frame), shape ``(m, 3)`` or ``(3,)``.

    Every path keeps ``|M|²``; the energy is not kept (the noise rotates M about ξᵢ).
    """
    return StochasticLiePoissonSystem(rigid_body(inertia), noise=_body_noise(noise, "stochastic_rigid_body"))


def stochastic_heavy_top(inertia: ArrayLike, chi: ArrayLike, mgl: ArrayLike, noise: ArrayLike) -> StochasticLiePoissonSystem:
    """The heavy top (:func:`heavy_top`) with linear noise in the body's angular momentum
    (Stratonovich): noise Hamiltonians ``⟨M, ξᵢ⟩``, so that
    ``dM = (M × Ω + mgl Γ × χ) dt + Σᵢ M × ξᵢ ∘ dWᵢ`` and ``dΓ = Γ × Ω dt + Σᵢ Γ × ξᵢ ∘ dWᵢ``.

    Arguments:
        inertia, chi, mgl: as for :func:`heavy_top`.
        noise: the vectors ``ξᵢ`` (body frame), shape ``(m, 3)`` or ``(3,)``.

    Every path keeps the Casimirs ``|Γ|²`` and ``M·Γ``.
    """
    xi = _body_noise(noise, "stochastic_heavy_top")
    return StochasticLiePoissonSystem(heavy_top(inertia, chi, mgl),
                                      noise=jnp.concatenate([xi, jnp.zeros_like(xi)], axis=1))
