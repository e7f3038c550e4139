"""Processed composition (Blanes, Casas & Ros 1999; HLW V.3.3 "effective order"):
``Ψ_h = P⁻¹ ∘ K_h ∘ P`` with a cheap kernel ``K`` of a symmetric second-order method and a
processor ``P``. ``Ψ^N = P⁻¹ ∘ K^N ∘ P``: the kernel alone runs the steps, the processor is
applied once at the start and its inverse only at the outputs, and the outputs have the
scheme's effective order where ``K`` alone has a lower one."""

from __future__ import annotations

from typing import Any, Optional, final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree, Scalar

from .._system import AbstractFamily, AbstractSystem
from ._base import AbstractIntegrator
from ._schemes import PROCESSED_SCHEMES, processor_fractions
from .composition import Composition, adjoint_of

__all__ = ["Processed"]


@final
class Processed(AbstractIntegrator):
    r"""The processed method ``P⁻¹ ∘ K ∘ P`` of ``inner`` (module docstring), a symmetric method of
    order 2 (a splitting, Moser–Veselov, GL2), or a first-order one with an adjoint (the Suris
    maps), whose Strang-like ``Φ*_{h/2} ∘ Φ_{h/2}`` then takes its place:

    ==========================  ===============  ======  =========  ==========================================
    ``scheme``                  effective order  kernel  processor  source
    ==========================  ===============  ======  =========  ==========================================
    ``"blanes6"``               6                7       10         Blanes (2001); Leimkuhler & Reich, Table 6.3
    ``"blanes-casas-murua8"``   8                13      20         Blanes, Casas & Murua (2006)
    ==========================  ===============  ======  =========  ==========================================

    (stages: steps of ``inner``). The state carries the processed point ``P(y)`` and ``dt``;
    :meth:`observe` (and so every save) applies ``P⁻¹``, which costs the processor's steps at each
    output, not at each step. The kernel alone is of order 4: the effective order holds at the
    outputs, for fixed steps of one size (``P`` depends on ``dt``). Each stage is a step of
    ``inner``, so the method keeps what ``inner`` keeps (Casimirs, the Poisson structure).
    """

    inner: AbstractIntegrator
    scheme: str = eqx.field(static=True, default="blanes6")

    def __check_init__(self):
        if not isinstance(self.inner, AbstractIntegrator):
            raise TypeError(f"Processed: inner must be an lpjax integrator, got {type(self.inner).__name__}")
        if self.scheme not in PROCESSED_SCHEMES:
            raise ValueError(f"Processed: unknown scheme {self.scheme!r}; the schemes are "
                             f"{', '.join(map(repr, PROCESSED_SCHEMES))}")
        if adjoint_of(self.inner) is None or self.inner.order > 2:
            raise ValueError(f"Processed: the scheme's conditions are for a symmetric method of order 2 (or one of "
                             f"order 1 with its adjoint); {type(self.inner).__name__} is of order {self.inner.order}"
                             + ("" if adjoint_of(self.inner) is not None else " and has no adjoint")
                             + "; compose it with Composition instead")

    @property
    def kernel(self) -> Composition:
        """The kernel ``K``: a composition of ``inner`` (of order 4 alone)."""
        return Composition(self.inner, self.scheme, _kernel=True)

    @property
    def order(self) -> int:
        return PROCESSED_SCHEMES[self.scheme].order

    @property
    def family(self) -> AbstractFamily:
        return self.kernel.family

    @property
    def nonfinite_lasts(self) -> bool:
        return self.inner.nonfinite_lasts

    def _process(self, system: AbstractSystem, y: Float[Array, " n"], dt: Scalar, fractions: np.ndarray):
        """``y`` through steps of ``inner`` (or ``Φ*_{z/2} ∘ Φ_{z/2}``) of ``z dt`` for each ``z``."""
        inner, adjoint = self.inner, adjoint_of(self.inner)
        for z in fractions:
            for method, f in ((inner, float(z)),) if inner.symmetric else ((inner, 0.5 * z), (adjoint, 0.5 * z)):
                state = method.init(system, y, f * dt)
                y = method.observe(system, method.step(system, state, f * dt)[0])
        return y

    def _start(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar):
        """``(P(y0), dt)``: the kernel's first point and the step the processor was run with."""
        dt = jnp.asarray(dt, y0.dtype)
        return self._process(system, y0, dt, processor_fractions(self.scheme)), dt

    def init(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar) -> PyTree:
        y, dt = self._start(system, y0, dt)
        return self.kernel.init(system, y, dt), dt

    def init_or_fail(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar) -> tuple[PyTree, Any]:
        y, dt = self._start(system, y0, dt)
        state, result = self.kernel.init_or_fail(system, y, dt)
        return (state, dt), result

    def step(self, system: AbstractSystem, state: PyTree, dt: Scalar):
        kernel_state, _ = state
        kernel_state, result, info = self.kernel.step(system, kernel_state, dt)
        return (kernel_state, jnp.asarray(dt, state[1].dtype)), result, info

    def observe(self, system: AbstractSystem, state: PyTree) -> Float[Array, " n"]:
        kernel_state, dt = state
        inverse = -processor_fractions(self.scheme)[::-1]
        return self._process(system, self.kernel.observe(system, kernel_state), dt, inverse)

    def save(self, system: AbstractSystem, state: PyTree) -> tuple[Float[Array, " n"], Optional[PyTree]]:
        return self.observe(system, state), None
