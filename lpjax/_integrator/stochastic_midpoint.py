"""The stochastic implicit midpoint rule: Gauss–Legendre's one-stage method with the Wiener
increments (Milstein, Repin & Tretyakov 2002; Hong, Xu & Wang for stochastic Poisson systems).

``y₁ = y + h f(ȳ) + Σᵢ ΔWᵢ gᵢ(ȳ)``, ``ȳ = (y + y₁)/2``, for ``dy = f dt + Σᵢ gᵢ ∘ dWᵢ``. Each
field of a stochastic Lie–Poisson system is ``Π(ȳ)∇(·)`` in one Poisson tensor, and for a
quadratic Casimir ``C`` the difference ``C(y₁) − C(y) = ∇C(ȳ)·(y₁ − y)`` is exact, where
``∇C(ȳ)ᵀΠ(ȳ) = 0``: every quadratic Casimir is kept on every path, to roundoff. Strong order 1
for one noise field or commuting ones, ½ otherwise (in the Stratonovich sense, without the
iterated integrals it would need).
"""

from __future__ import annotations

from typing import Optional, final

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Scalar

from .._checks import optional_tol, positive_int
from ._base import first_failure
from ._implicit import implicit_solve, newton_update
from ._stochastic import AbstractStochasticIntegrator, check_stochastic

__all__ = ["StochasticMidpoint"]

NEWTON_ITERS = 12  # Newton updates at most where the fixed point contracts by less than ½ (a large increment)


def _midpoint_residual(Z: Float[Array, " n"], args) -> Float[Array, " n"]:
    """``Z − h f(y + Z/2) − Σᵢ ΔWᵢ gᵢ(y + Z/2)`` for the increment ``Z = y₁ − y``."""
    system, y, dt, dW = args
    mid = y + 0.5 * Z
    return Z - dt * system.vector_field(mid) - dW @ system.noise_fields(mid)


@final
class StochasticMidpoint(AbstractStochasticIntegrator):
    """The stochastic implicit midpoint rule (see the module): keeps every quadratic Casimir on
    every path; strong order 1 with one noise field or commuting ones, ½ otherwise.

    Its implicit equation is solved by fixed-point iteration from the Euler guess
    ``h f(y) + Σ ΔWᵢ gᵢ(y)``, to roundoff (``early_exit``) or for ``max_iters`` updates, with
    ``tol`` the mixed test of :func:`lpjax.GaussLegendre` (None: 256 ε); gradients by the implicit
    function theorem. The iteration contracts by about ``½(h‖∂f‖ + Σ|ΔWᵢ|‖∂gᵢ‖)`` an update; where
    that is ½ or more (a large increment: the Gaussian's tail, or a coarse step), up to
    :data:`NEWTON_ITERS` Newton updates follow, in the same step.
    """

    max_iters: int = 40
    tol: Optional[float] = None
    early_exit: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        positive_int(self.max_iters, "StochasticMidpoint: max_iters")
        optional_tol(self.tol, "StochasticMidpoint: tol")

    def check_system(self, system) -> None:
        check_stochastic(self, system)

    def strong_order(self, system) -> float:
        return 1.0 if system.n_noise == 1 else 0.5

    def step(self, system, y: Float[Array, " n"], dt: Scalar, dW: Float[Array, " m"]):
        self.check_system(system)
        dW = jnp.asarray(dW, y.dtype)
        Z0 = dt * system.vector_field(y) + dW @ system.noise_fields(y)
        args = (system, y, dt, dW)
        Z, result, info = implicit_solve(_midpoint_residual, Z0, args, lambda r, _: r, max_iters=self.max_iters,
                                         tol=self.tol, early_exit=self.early_exit, scale=jnp.abs(y),
                                         fallback=lambda _: newton_update(_midpoint_residual, args),
                                         fallback_iters=NEWTON_ITERS)
        # one more update: the solve stops at roundoff of y, leaving an error of one sign in Z (the iteration comes from
        # the same side every step), which drifts the Casimirs by 2e-17 a step; one more update divides it by ~100
        Z = Z - _midpoint_residual(Z, args)
        y1 = y + Z
        return y1, first_failure(result, y1), info
