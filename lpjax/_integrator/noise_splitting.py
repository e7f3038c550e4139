"""A splitting of a stochastic Lie–Poisson system with linear noise: the exact noise flows
around any lpjax method's step of the drift, composed symmetrically.

For linear noise ``hᵢ = ⟨μ, ξᵢ⟩`` the noise field is ``Aᵢμ`` with the constant generator ``Aᵢ``
(:meth:`~lpjax.StochasticLiePoissonSystem.noise_generators`), and its flow over an increment
``w`` is the coadjoint action ``exp(w Aᵢ)``: a Poisson map that keeps every Casimir. The step is
Strang's ``N₁(½ΔW₁) ∘ … ∘ N_m(½ΔW_m) ∘ D_h ∘ N_m(½ΔW_m) ∘ … ∘ N₁(½ΔW₁)`` (applied right to left:
``N₁`` first and last), ``D_h`` a step of the drift's method on the deterministic
system (:attr:`~lpjax.StochasticLiePoissonSystem.drift`). With a Poisson drift method (Moser–
Veselov, a Lie–Poisson splitting, Gauss–Legendre for quadratic Casimirs) every Casimir is kept on
every path. Without drift the step is the exact flow, for one noise field or commuting ones.
"""

from __future__ import annotations

from typing import final

import jax.numpy as jnp
from jaxtyping import Array, Float, Scalar

from ._base import AbstractIntegrator, first_failure
from ._stochastic import AbstractStochasticIntegrator, check_stochastic, exp_apply

__all__ = ["NoiseSplitting"]


@final
class NoiseSplitting(AbstractStochasticIntegrator):
    """Strang splitting of the exact linear-noise flows around ``drift``'s step (see the module).

    Args:
        drift: any lpjax method of the drift (``GaussLegendre(2)``, ``MoserVeselov()``,
            ``LiePoissonSplitting()``, ...), started afresh from the point each step (its own
            state, such as predicted stages, does not survive the noise flows).
    """

    drift: AbstractIntegrator

    def __check_init__(self):
        if not isinstance(self.drift, AbstractIntegrator):
            raise TypeError(f"NoiseSplitting: drift must be an lpjax method (GaussLegendre(2), MoserVeselov(), ...), "
                            f"got {type(self.drift).__name__}")

    def check_system(self, system) -> None:
        check_stochastic(self, system)
        if system.linear_noise is None:
            raise ValueError("NoiseSplitting: the noise fields' exact flows are known for linear noise, ⟨μ, ξᵢ⟩, given "
                             "as vectors ξᵢ; noise Hamiltonians hᵢ(μ) take StochasticMidpoint")
        if system.dissipation is not None:
            raise ValueError("NoiseSplitting: the drift with dissipation is not Lie–Poisson; it takes StochasticMidpoint")
        self.drift.check_system(system.drift)

    def strong_order(self, system) -> float:
        return 1.0 if system.n_noise == 1 else 0.5

    def step(self, system, y: Float[Array, " n"], dt: Scalar, dW: Float[Array, " m"]):
        self.check_system(system)
        A = system.noise_generators(y.dtype)
        norms = jnp.max(jnp.sum(jnp.abs(A), axis=1), axis=1)
        half = 0.5 * jnp.asarray(dW, y.dtype)
        order = range(system.n_noise)
        for i in order:
            y = exp_apply(A[i], half[i], y, norms[i])
        state, result, info = self.drift.step(system.drift, self.drift.init(system.drift, y, dt), dt)
        y = self.drift.observe(system.drift, state)
        for i in reversed(order):
            y = exp_apply(A[i], half[i], y, norms[i])
        return y, first_failure(result, y), info

