"""The Kida vortex as a Lie–Poisson system on so(2,1)* (seed 002, sec. 5.2)."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._algebra import so21
from .._system import LiePoissonSystem
from .._checks import finite_array

__all__ = ["kida_vortex", "KidaHamiltonian", "kida_initial_state", "kida_mu_from_lambda_phi", "kida_lambda_phi_from_mu"]

_C = np.pi / 16


class KidaHamiltonian(eqx.Module):
    """Excess energy ``h(mu) = ε mu_2 + ω mu_3 − (π/8) ln(π/8 − mu_3)`` (seed 002, eq. (22)),
    defined for ``mu_3 < π/8``. Beyond, its value and its gradient are NaN (not the finite
    gradient of a complex logarithm), so a run that leaves the domain fails with a result code."""

    eps: Scalar
    omega: Scalar

    def __call__(self, mu: Float[Array, " 3"]) -> Scalar:
        gap = np.pi / 8 - mu[2]
        h = self.eps * mu[1] + self.omega * mu[2] - (np.pi / 8) * jnp.log(gap)
        return h * jnp.where(gap > 0, 1.0, jnp.nan)  # outside the domain: NaN value, and NaN gradient

    def check_state(self, mu) -> None:
        if not float(mu[2]) < np.pi / 8:
            raise ValueError(f"kida_vortex: the Hamiltonian (22) needs mu_3 < π/8 = {np.pi / 8:.6f}, got mu_3 = "
                             f"{float(mu[2])!r}")


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
    return LiePoissonSystem(so21(), h, 1, casimirs=_f1, name="kida_vortex", casimir_names=("f₁ = μ₁² + μ₂² − μ₃²",))


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


def kida_initial_state(
    eps: float, omega: float, mu1: float = 1.0, f1: float = -0.25, h: float = 1.0, branch: int = 1
) -> np.ndarray:
    """``mu`` with given ``mu_1``, Casimir ``f_1`` and energy ``h`` (seed 002, Fig. 1 data).

    The defaults are the paper's run: ``mu_1(0) = 1``, ``f_1 = −1/4``, ``h = 1`` (with
    ε = 1/2, ω = −1). ``mu_2 = branch · sqrt(f_1 − mu_1² + mu_3²)`` and ``mu_3 < π/8`` is found
    by a grid scan plus bisection; for the paper's data ``branch=+1`` gives
    ``mu ≈ (1, 0.0834, −1.1211)`` and ``branch=−1`` gives ``(1, −2.3619, −2.6131)``.
    Raises ``ValueError`` if no such ``mu`` exists in ``mu_3 ∈ [−10³, π/8)``.
    """
    if branch not in (1, -1):
        raise ValueError(f"branch must be +1 or -1, got {branch!r}")

    def residual(m3):
        m2sq = f1 - mu1**2 + m3**2
        m2 = branch * np.sqrt(np.where(m2sq >= 0, m2sq, np.nan))
        return eps * m2 + omega * m3 - (np.pi / 8) * np.log(np.pi / 8 - m3) - h

    grid = np.linspace(-1e3, np.pi / 8 - 1e-12, 400_001)
    with np.errstate(invalid="ignore"):
        vals = residual(grid)
    idx = np.nonzero(np.sign(vals[:-1]) * np.sign(vals[1:]) <= 0)[0]  # NaN (invalid) never matches
    if idx.size == 0:
        raise ValueError(f"no Kida state with mu1={mu1}, f1={f1}, h={h} on branch {branch}")
    a, b = grid[idx[-1]], grid[idx[-1] + 1]
    for _ in range(100):
        c = 0.5 * (a + b)
        a, b = (c, b) if np.sign(residual(c)) == np.sign(residual(a)) else (a, c)
    m3 = 0.5 * (a + b)
    return np.array([mu1, branch * np.sqrt(max(f1 - mu1**2 + m3**2, 0.0)), m3])
