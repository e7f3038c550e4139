"""The adjoint of an explicit one-step method, ``Φ*_dt = Φ_{−dt}⁻¹`` (HLW II.3.1): implicit
where ``Φ`` is explicit. For a Runge–Kutta method it is the Runge–Kutta method of coefficients
``a*_ij = b_{s+1−j} − a_{s+1−i,s+1−j}``, ``b*_i = b_{s+1−i}`` (HLW II.3.2); solving
``Φ_{−dt}(y₁) = y`` for ``y₁`` gives the same map without writing its stages."""

from __future__ import annotations

from typing import Optional, final

import equinox as eqx
from jaxtyping import Array, Float, Scalar

from .._system import AbstractFamily, AbstractSystem
from ._base import AbstractAdjointPair, AbstractIntegrator, AbstractStateIsY, first_failure
from ._implicit import AbstractImplicitMethod, implicit_solve, newton_update

__all__ = ["Adjoint"]

NEWTON_ITERS = 12  # Newton updates at most where the fixed point contracts by less than ½ (a coarse step)


def _adjoint_residual(Z: Float[Array, " n"], args) -> Float[Array, " n"]:
    """``Φ_{−dt}(y + Z) − y`` for the increment ``Z = y₁ − y``."""
    system, method, y, dt = args
    return method.step(system, y + Z, -dt)[0] - y


@final
class Adjoint(AbstractImplicitMethod, AbstractStateIsY, AbstractAdjointPair):
    """The adjoint ``Φ*`` of ``method``, an explicit method whose state is ``y`` (RK4, for one):
    a step from ``y`` solves ``Φ_{−dt}(y₁) = y`` for ``y₁``. Same order as ``method``; its
    :attr:`adjoint` is ``method``. :class:`lpjax.Composition` composes the two (``RK4``'s
    :attr:`lpjax.RK4.adjoint` is this), and ``Φ_{dt/2} ∘ Φ*_{dt/2}`` is symmetric.

    The equation is solved by fixed-point iteration on the increment from the guess
    ``Φ_dt(y) − y`` (the two maps differ by ``O(dt^{p+1})``), contracting by about
    ``dt‖∂f‖`` an update, to roundoff (``early_exit``) or for ``max_iters`` updates; where it
    contracts by less than ½, up to :data:`NEWTON_ITERS` Newton updates follow. ``tol`` is the
    mixed test of :class:`lpjax.GaussLegendre` (None: 256 ε).
    """

    method: AbstractIntegrator
    max_iters: int = eqx.field(static=True)
    tol: Optional[float] = eqx.field(static=True)
    early_exit: bool = eqx.field(static=True)

    def __init__(self, method: AbstractIntegrator, max_iters: int = 40, tol: Optional[float] = None,
                 early_exit: bool = True):
        self.method, self.max_iters, self.tol, self.early_exit = method, max_iters, tol, early_exit

    def __check_init__(self):
        if not isinstance(self.method, AbstractStateIsY) or self.method.symmetric:
            raise TypeError("Adjoint: method must be an lpjax method whose state is y and that is not symmetric (a "
                            f"symmetric method is its own adjoint), got {type(self.method).__name__}")

    @property
    def order(self) -> int:
        return self.method.order

    @property
    def family(self) -> AbstractFamily:
        return self.method.family

    @property
    def adjoint(self) -> AbstractIntegrator:
        return self.method

    def step(self, system: AbstractSystem, y: Float[Array, " n"], dt: Scalar):
        args = (system, self.method, y, dt)
        Z0 = self.method.step(system, y, dt)[0] - y
        Z, result, info = implicit_solve(_adjoint_residual, Z0, args, lambda r, _: r, max_iters=self.max_iters,
                                         tol=self.tol, early_exit=self.early_exit, scale=abs(y),
                                         fallback=lambda _: newton_update(_adjoint_residual, args),
                                         fallback_iters=NEWTON_ITERS)
        y1 = y + Z
        return y1, first_failure(result, y1), info
