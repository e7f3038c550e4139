"""Classical explicit Runge–Kutta method of order 4 (the non-structure-preserving baseline)."""

from __future__ import annotations

from typing import ClassVar, final

from jaxtyping import Array, Float, Scalar

from .._system import AbstractSystem, AnySystem
from .adjoint import Adjoint
from ._base import AbstractAdjointPair, AbstractStateIsY, StepInfo, finite_result

__all__ = ["RK4"]


@final
class RK4(AbstractStateIsY, AbstractAdjointPair):
    """Classical RK4. Order 4; preserves linear invariants only (Casimirs and energy drift).
    Not symmetric; its :attr:`adjoint` is the implicit :class:`lpjax.Adjoint` of it, and
    :class:`lpjax.Composition` composes the two."""

    order: ClassVar[int] = 4
    nonfinite_lasts: ClassVar[bool] = True
    family: ClassVar[AnySystem] = AnySystem()

    @property
    def adjoint(self) -> Adjoint:
        return Adjoint(self)

    def step(self, system: AbstractSystem, y: Float[Array, " n"], dt: Scalar):
        f = system.vector_field
        k1 = f(y)
        k2 = f(y + 0.5 * dt * k1)
        k3 = f(y + 0.5 * dt * k2)
        k4 = f(y + dt * k3)
        y1 = y + (dt / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
        return y1, finite_result(y1), StepInfo.explicit(y.dtype)
