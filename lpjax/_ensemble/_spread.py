"""Initial states of an ensemble spread about one state, on the state's own symplectic leaf.

:func:`spread_states` moves a Lie–Poisson state ``μ₀`` along its coadjoint orbit,
``μ = exp(ad*_ξ) μ₀`` with a small random ``ξ ∈ 𝔤`` (Marsden & Ratiu, *Introduction to
Mechanics and Symmetry*, §14.2: the orbit is the leaf, and every Casimir is constant on it), so
that the members share the Casimirs of ``μ₀`` and differ in everything else (energy included).
A system that is not Lie–Poisson but has Casimirs (the nonholonomic systems' ``γᵢ·γⱼ``) is
spread in every coordinate and then brought back to the level set of its Casimirs by
minimal-norm Newton steps. Asked to (``vary_casimirs=True``), or for a system with no
Casimirs, the spread is Gaussian in every coordinate.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from .._checks import as_numbers, refuse_silent_float32
from .._system import AbstractLiePoissonSystem, AbstractSystem

__all__ = ["spread_states", "Spread"]

_NEWTON_STEPS = 50


class Spread(NamedTuple):
    """Output of :func:`spread_states`: the states (``(n, d)``), how they were spread
    (``"coadjoint orbit"``, ``"Casimir level set"`` or ``"every coordinate"``), and the names
    of the Casimirs that differ between members (empty unless ``"every coordinate"``)."""

    states: np.ndarray
    manner: str
    varied_casimirs: tuple[str, ...]


def spread_states(system: AbstractSystem, y0, n: int, spread: float, *, seed: int = 0,
                  vary_casimirs: bool = False) -> Spread:
    """``n`` states about ``y0`` for an ensemble of ``system``.

    A Lie–Poisson system: ``μᵢ = exp(ad*_{ξᵢ}) μ₀`` with ``ξᵢ ~ N(0, spread² I)`` in the
    algebra's basis, where ``(ad*_ξ μ)_j = c_ij^k ξ^i μ_k``; the matrix exponential is
    scipy's, in float64. Each ``μᵢ`` lies on the coadjoint orbit of ``μ₀``, so its Casimirs
    equal ``μ₀``'s to roundoff (the heavy top's ``|Γ|²`` and ``M·Γ``: Γ stays on its sphere).
    Other systems with Casimirs: ``y₀ + spread·z`` (z standard normal), then Newton steps
    ``y ← y − Jᵀ(JJᵀ)⁻¹(C(y) − C(y₀))`` on the Casimirs ``C`` until they hold to roundoff.
    ``vary_casimirs=True`` (or a system without Casimirs): ``y₀ + spread·z``, and
    :attr:`Spread.varied_casimirs` names the Casimirs that then differ between members.
    """
    if not isinstance(system, AbstractSystem):
        raise TypeError(f"spread_states: system must be an lpjax system, got {type(system).__name__}")
    refuse_silent_float32(y0, "spread_states", "y0")
    y0 = np.asarray(as_numbers(y0, "spread_states: y0"), np.float64)
    system.check_state(jnp.asarray(y0))
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"spread_states: n must be a positive integer, got {n!r}")
    if not (np.isfinite(spread) and spread >= 0):
        raise ValueError(f"spread_states: spread must be finite and >= 0, got {spread}")
    rng = np.random.default_rng(seed)
    names = tuple(system.casimir_names)
    if vary_casimirs or not names:
        return Spread(y0 + spread * rng.standard_normal((n, y0.size)), "every coordinate", names)
    if isinstance(system, AbstractLiePoissonSystem):
        c = np.asarray(system.algebra.structure_constants, np.float64)
        xi = spread * rng.standard_normal((n, c.shape[0]))
        ad_star = np.einsum("ijk,ni->njk", c, xi)  # (ad*_ξ μ)_j = c_ij^k ξ^i μ_k
        return Spread(np.einsum("njk,k->nj", scipy.linalg.expm(ad_star), y0), "coadjoint orbit", ())
    y = y0 + spread * rng.standard_normal((n, y0.size))
    return Spread(_onto_level_set(system, y, y0), "Casimir level set", ())


def _onto_level_set(system: AbstractSystem, y: np.ndarray, y0: np.ndarray) -> np.ndarray:
    """Minimal-norm Newton steps from each row of ``y`` onto ``C(y) = C(y0)``."""
    dtype = jnp.result_type(float)
    target = system.casimirs(jnp.asarray(y0, dtype))

    def newton(x, _):
        r = system.casimirs(x) - target
        J = jax.jacfwd(system.casimirs)(x)
        return x - J.T @ jnp.linalg.solve(J @ J.T, r), None

    run = jax.jit(jax.vmap(lambda x: jax.lax.scan(newton, x, None, _NEWTON_STEPS)[0]))
    out = np.asarray(run(jnp.asarray(y, dtype)), np.float64)
    defect = np.max(np.abs(np.asarray(jax.vmap(system.casimirs)(jnp.asarray(out, dtype))) - np.asarray(target)))
    if not np.isfinite(defect) or defect > 1e3 * np.finfo(dtype).eps * max(1.0, float(np.max(np.abs(target)))):
        raise ValueError(f"spread_states: the spread states could not be brought back to the Casimirs' level set "
                         f"(defect {defect:.2g}); use a smaller spread")
    return out
