"""Projection onto a constraint after each step of another method (seed 001; Hairer, Lubich &
Wanner, *Geometric Numerical Integration*, IV.4)."""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Optional, final

import equinox as eqx
import jax
from jaxtyping import Array, Float, Scalar

from .._system import AbstractFamily, AbstractSystem
from ._base import AbstractIntegrator, first_failure

__all__ = ["Projected", "ProjectableFamily"]


@final
class ProjectableFamily(AbstractFamily):
    """Systems with a ``project(y)`` method (a :class:`lpjax.NonholonomicSystem`, for one) in
    the family of the inner method."""

    inner: AbstractFamily
    description: ClassVar[str] = "systems with a project(y) method onto their constraint (e.g. NonholonomicSystem)"

    def mismatch(self, system) -> Optional[Exception]:
        if not callable(getattr(system, "project", None)):
            return TypeError(f"{type(system).__name__} has no project(y) method to project onto a constraint")
        return self.inner.mismatch(system)

    def guard(self, system) -> Optional[Callable[[], tuple]]:
        return self.inner.guard(system)


@final
class Projected(AbstractIntegrator):
    """``inner``'s step followed by ``system.project`` of the new state. For constraints that
    ``inner`` does not keep by itself: Gauss–Legendre keeps bilinear ones (the LR constraint
    in (M, γ)) to roundoff, but not ``(J(γ)⁻¹k, γ) = 0`` of the rubber sphere in (k, γ). The
    order is ``inner``'s; the projection of :class:`lpjax.NonholonomicSystem` moves k along the
    reaction directions and leaves γ alone. ``inner``'s state must be the state vector itself
    or carry it as ``.y`` (RK4, Gauss–Legendre)."""

    inner: AbstractIntegrator

    @property
    def order(self) -> int:
        return self.inner.order

    @property
    def family(self) -> ProjectableFamily:
        return ProjectableFamily(self.inner.family)

    def init(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar) -> Any:
        return self.inner.init(system, y0, dt)

    def init_or_fail(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar):
        return self.inner.init_or_fail(system, y0, dt)

    def step(self, system: AbstractSystem, state: Any, dt: Scalar):
        state, result, info = self.inner.step(system, state, dt)
        if isinstance(state, jax.Array):
            state = system.project(state)
            y = state
        elif hasattr(state, "y"):
            state = eqx.tree_at(lambda s: s.y, state, system.project(state.y))
            y = state.y
        else:
            raise TypeError(f"Projected: {type(self.inner).__name__}'s state is neither the state vector nor has .y")
        return state, first_failure(result, y), info

    def observe(self, system: AbstractSystem, state: Any) -> Float[Array, " n"]:
        return self.inner.observe(system, state)

    def save(self, system: AbstractSystem, state: Any):
        return self.inner.save(system, state)
