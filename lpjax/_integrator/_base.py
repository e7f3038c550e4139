"""The integrator contract: ``init / step / observe`` with result codes."""

from __future__ import annotations

import abc
from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PyTree, Scalar

from .._system import AbstractSystem

__all__ = ["RESULTS", "StepInfo", "AbstractIntegrator", "AbstractStateIsY"]


class RESULTS(eqx.Enumeration):
    """Outcome of a step or of a whole integration."""

    successful = ""
    implicit_solve_failed = (
        "The implicit equations of a step did not converge to the tolerance within the "
        "fixed number of iterations. Reduce dt, or raise max_iters."
    )
    nonfinite_state = "The state became non-finite (NaN or inf). Reduce dt."


class StepInfo(eqx.Module):
    """Per-step solver statistics: final residual norm and iterations to reach ``tol``."""

    residual: Scalar
    iterations: Int[Array, ""]

    @classmethod
    def explicit(cls, dtype) -> "StepInfo":
        return cls(jnp.zeros((), dtype), jnp.zeros((), jnp.int32))


class AbstractIntegrator(eqx.Module):
    """A one-step method. It holds only settings, never state or the system.

    ``state = init(system, y0, dt)``; ``state, result, info = step(system, state, dt)``;
    ``y = observe(system, state)``. ``step`` never raises: failures are reported through
    ``result`` (a :class:`RESULTS`), solver statistics through ``info``.
    """

    @property
    @abc.abstractmethod
    def order(self) -> int:
        """Classical order of accuracy."""

    def check_system(self, system: AbstractSystem) -> None:
        """Raise ``TypeError`` if this method cannot step ``system`` (called before tracing)."""
        if not isinstance(system, AbstractSystem):
            raise TypeError(
                f"{type(self).__name__} needs an lpjax system (LiePoissonSystem, "
                f"CanonicalSystem, ...), got {type(system).__name__}"
            )

    @abc.abstractmethod
    def init(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar) -> PyTree:
        ...

    @abc.abstractmethod
    def step(self, system: AbstractSystem, state: PyTree, dt: Scalar) -> tuple[PyTree, Any, StepInfo]:
        ...

    @abc.abstractmethod
    def observe(self, system: AbstractSystem, state: PyTree) -> Float[Array, " n"]:
        ...


class AbstractStateIsY(AbstractIntegrator):
    """An integrator whose internal state is the user's state ``y`` itself."""

    def init(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar) -> Float[Array, " n"]:
        return y0

    def observe(self, system: AbstractSystem, state: Float[Array, " n"]) -> Float[Array, " n"]:
        return state


def finite_result(y: Array) -> Any:
    """``RESULTS.nonfinite_state`` where ``y`` has a NaN/inf entry, else ``successful``."""
    return RESULTS.where(jnp.all(jnp.isfinite(y)), RESULTS.successful, RESULTS.nonfinite_state)
