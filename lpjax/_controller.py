"""Step-size control for adaptive runs: :class:`PIDController`, with diffrax's meaning of every
setting, written for one member's flat state so that a batched runner (``vmap``, the ensemble
kernels) can carry each member's own controller state.

The controller (Söderlind, "Digital filters in adaptive time-stepping", ACM TOMS 29 (2003)
1–26; Hairer & Wanner, *Solving ODEs II*, §IV.2, for the integral (I) controller) scales the
step by

    factor = clip(safety · ε₀^{-(β₁+β₂+β₃)/k} · ε₁^{(β₂+2β₃)/k} · ε₂^{-β₃/k}, fmin, fmax),

with ``εᵢ`` the scaled error norms of this step and the two accepted steps before it,
``(β₁, β₂, β₃) = (icoeff, pcoeff, dcoeff)`` and ``k`` the error order; a step is accepted
when ``ε₀ < 1``, where ``ε₀ = rms(e / (atol + rtol·max(|y₀|, |y₁|)))``.
"""

from __future__ import annotations

import math
from typing import Optional, final

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

__all__ = ["PIDController", "ControllerState"]


@final
class ControllerState(eqx.Module):
    """``(1/ε₁, 1/ε₂, at_dtmin)``: the inverse scaled errors of the last two accepted steps,
    and whether the step is pinned at ``dtmin`` (diffrax's ``_PidState``)."""

    inv_error: Float[Array, ""]
    inv_error_prev: Float[Array, ""]
    at_dtmin: Bool[Array, ""]


def _number(v, name: str, *, positive: bool = False, allow_none: bool = False) -> Optional[float]:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0):
        want = "a finite float > 0" if positive else "a finite float"
        raise ValueError(f"PIDController: {name} must be {want}{' or None' if allow_none else ''}, got {v!r}")
    return float(v)


@final
class PIDController(eqx.Module):
    """A PID step-size controller with diffrax's ``PIDController`` settings and decisions:
    ``rtol``, ``atol``, ``pcoeff``, ``icoeff``, ``dcoeff``, ``dtmin``, ``dtmax``,
    ``force_dtmin``, ``factormin``, ``factormax`` and ``safety`` mean what they mean there, and
    :meth:`adapt` makes the same decision as diffrax's ``adapt_step_size`` (same acceptance,
    same next step, same controller state; tested to roundoff). The default is the integral
    controller (``icoeff=1``), as in diffrax."""

    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    pcoeff: float = eqx.field(static=True, default=0.0)
    icoeff: float = eqx.field(static=True, default=1.0)
    dcoeff: float = eqx.field(static=True, default=0.0)
    dtmin: Optional[float] = eqx.field(static=True, default=None)
    dtmax: Optional[float] = eqx.field(static=True, default=None)
    force_dtmin: bool = eqx.field(static=True, default=True)
    factormin: float = eqx.field(static=True, default=0.2)
    factormax: float = eqx.field(static=True, default=10.0)
    safety: float = eqx.field(static=True, default=0.9)

    def __check_init__(self):
        _number(self.rtol, "rtol", positive=True)
        _number(self.atol, "atol", positive=True)
        for name in ("pcoeff", "icoeff", "dcoeff"):
            _number(getattr(self, name), name)
        _number(self.dtmin, "dtmin", positive=True, allow_none=True)
        _number(self.dtmax, "dtmax", positive=True, allow_none=True)
        if self.dtmin is not None and self.dtmax is not None and self.dtmin > self.dtmax:
            raise ValueError(f"PIDController: dtmin = {self.dtmin} exceeds dtmax = {self.dtmax}")
        if not 0 < _number(self.factormin, "factormin", positive=True) <= 1:
            raise ValueError(f"PIDController: factormin must lie in (0, 1], got {self.factormin}")
        if _number(self.factormax, "factormax", positive=True) < 1:
            raise ValueError(f"PIDController: factormax must be >= 1, got {self.factormax}")
        if not 0 < _number(self.safety, "safety", positive=True) <= 1:
            raise ValueError(f"PIDController: safety must lie in (0, 1], got {self.safety}")

    def init(self, dt0, dtype) -> tuple[Float[Array, ""], ControllerState]:
        """The first step (``dt0`` clipped to ``[dtmin, dtmax]``) and the initial state."""
        dt = jnp.asarray(dt0, dtype)
        if self.dtmax is not None:
            dt = jnp.minimum(dt, self.dtmax)
        if self.dtmin is not None:
            dt = jnp.maximum(dt, self.dtmin)
        one = jnp.ones((), dtype)
        return dt, ControllerState(one, one, jnp.asarray(False))

    def initial_step(self, f, y0: Float[Array, " n"], error_order: float) -> Float[Array, ""]:
        """The first step for ``dt0=None``, as diffrax selects it (HNW I, II.4): with the scale
        ``atol + rtol·|y₀|``, ``d₀ = rms(y₀)``, ``d₁ = rms(f(y₀))``, ``h₀ = 0.01 d₀/d₁`` (10⁻⁶
        if either is below 10⁻⁵), ``d₂ = rms(f(y₀ + h₀ f(y₀)) − f(y₀)) / h₀`` and
        ``h₁ = (0.01 / max(d₁, d₂))^{1/k}``; the step is ``min(100 h₀, h₁)``."""
        scale = self.atol + jnp.abs(y0) * self.rtol
        rms = lambda x: jnp.sqrt(jnp.mean(jnp.square(x / scale)))  # noqa: E731
        f0 = f(y0)
        d0, d1 = rms(y0), rms(f0)
        small = (d0 < 1e-5) | (d1 < 1e-5)
        h0 = jnp.where(small, 1e-6, 0.01 * (d0 / jnp.where(small, 1, d1)))
        d2 = rms(f(y0 + h0 * f0) - f0) / h0
        max_d = jnp.maximum(d1, d2)
        h1 = jnp.where(max_d <= 1e-15, jnp.maximum(1e-6, h0 * 1e-3), (0.01 / max_d) ** (1 / float(error_order)))
        return jnp.minimum(100 * h0, h1)

    def scaled_error(self, y0: Float[Array, " n"], y1: Float[Array, " n"], y_error: Float[Array, " n"]):
        """``ε = rms(e / (atol + rtol·max(|y₀|, |y₁|)))``; a NaN candidate is scaled by ``y₀``."""
        y1 = jnp.where(jnp.any(jnp.isnan(y1)), y0, y1)
        x = y_error / (self.atol + jnp.maximum(jnp.abs(y0), jnp.abs(y1)) * self.rtol)
        return jnp.sqrt(jnp.mean(x * x)) if x.size else jnp.zeros((), x.dtype)

    def adapt(self, y0, y1, y_error, dt, error_order: float, state: ControllerState):
        """``(accept, next_dt, state, dt_min_reached)`` after a step of size ``dt`` from ``y0``
        to the candidate ``y1`` with error estimate ``y_error``. ``dt_min_reached`` is set
        when ``force_dtmin=False`` and the step would fall below ``dtmin``."""
        error = self.scaled_error(y0, y1, y_error)
        accept = error < 1
        if self.dtmin is not None:
            accept = accept | state.at_dtmin
        inv = 1 / error
        k = float(error_order)
        c1 = (self.icoeff + self.pcoeff + self.dcoeff) / k
        c2 = -(self.pcoeff + 2 * self.dcoeff) / k
        c3 = self.dcoeff / k
        factor = self.safety * (1 if c1 == 0 else inv ** c1) * (1 if c2 == 0 else state.inv_error ** c2) \
            * (1 if c3 == 0 else state.inv_error_prev ** c3)
        factor = jnp.clip(factor, jnp.where(accept, 1, self.factormin), jnp.where(accept, self.factormax, self.safety))
        new_dt = dt * factor.astype(jnp.result_type(dt))
        inv = jnp.where((inv == 0) | jnp.isinf(inv), 1, inv)
        too_small = jnp.asarray(False)
        at_dtmin = state.at_dtmin
        if self.dtmax is not None:
            new_dt = jnp.minimum(new_dt, self.dtmax)
        if self.dtmin is not None:
            if not self.force_dtmin:
                too_small = new_dt < self.dtmin
            new_dt = jnp.where(at_dtmin & (factor == 1), self.dtmin, new_dt)
            at_dtmin = new_dt <= self.dtmin
            new_dt = jnp.maximum(new_dt, self.dtmin)
        new = ControllerState(jnp.where(accept, inv, state.inv_error),
                              jnp.where(accept, state.inv_error, state.inv_error_prev), jnp.asarray(at_dtmin))
        return accept, new_dt, new, too_small
