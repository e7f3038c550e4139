"""One member's adaptive program: Gauss–Legendre steps (or Collective(GL)) of the member's own
sizes under a :class:`lpjax.PIDController`, stepping exactly onto the save times.

The loop is diffrax's (``diffeqsolve`` with ``PIDController(..., step_ts=ts)``), decision for
decision: a step from ``t`` to ``min(t + dt, the next save time)`` (and, within 100 ulp of the
final time, to it, or halfway to it after a rejected step, as diffrax's ``_clip_to_end``), its
step-doubling error estimate (:mod:`lpjax._integrator._error_estimates`; a NaN error counts as
infinite), the controller's acceptance and next ``dt`` from the size of the step taken. A
rejected step keeps the state, its stage predictor and the controller's history. The saves are
stepped onto rather than interpolated, so every saved state is a state of the method, which
keeps every quadratic invariant to roundoff whatever the step sizes; and the steps are then
those of ``diffeqsolve(..., step_ts=ts)``. By default (local extrapolation) a member goes on
from the step-doubling half steps, as :class:`lpjax.diffrax.GaussLegendre` with
``local_extrapolation=True``: two steps of the method, so still a state of it, and about
``2^{2s}`` times more accurate; ``local_extrapolation=False`` goes on from the full step, as
that solver's default does.

The member has the pieces that the ensemble kernels run (:class:`lpjax._member.AbstractMember`):
``init``, ``step`` (here: every attempt up to the next save time, a ``while`` loop), ``advance``
(one ``step``), ``observe`` and ``summary``. The save times are looked up by a select over
``ts`` (a sum of one entry), so that the kernels need no indexed load: O(len(ts)) operations a
save.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int, PyTree

from ._controller import ControllerState, PIDController
from ._integrator import RESULTS, AbstractIntegrator
from ._integrator._error_estimates import error_order, error_space, step_and_error
from ._member import AbstractMember, count_dtype
from ._schedule import ADAPTIVE_STATS, AdaptiveSchedule

__all__ = ["AdaptiveMember", "adaptive_member"]

@final
class _AdaptiveCarry(eqx.Module):
    """A member between attempts: the method's state, the time reached ``t``, the controller's
    next step ``dt`` (before clipping), whether the last attempt was rejected, the index of the
    next save time, the controller's state, the counts of accepted and rejected steps and the
    result code."""

    state: PyTree
    t: Float[Array, ""]
    dt: Float[Array, ""]
    rejected_last: Bool[Array, ""]
    save: Int[Array, ""]
    control: ControllerState
    accepted: Int[Array, ""]
    rejected: Int[Array, ""]
    result: RESULTS


def _select(ts: Float[Array, " n"], k: Int[Array, ""]) -> Float[Array, ""]:
    """``ts[min(k, n − 1)]`` as a sum of one selected entry (exact)."""
    k = jnp.minimum(k, ts.shape[0] - 1)
    return jnp.sum(jnp.where(jnp.arange(ts.shape[0]) == k, ts, jnp.zeros_like(ts)))


@final
class AdaptiveMember(AbstractMember):
    """An adaptive member program (see the module): ``ts`` the save times (the last is the
    final time), ``dt0`` the first step (None: :meth:`PIDController.initial_step`), at most
    ``max_steps`` attempts (accepted and rejected), then ``RESULTS.max_steps_reached``."""

    static: Any = eqx.field(static=True)
    method: AbstractIntegrator
    controller: PIDController
    ts: Float[Array, " n"]
    t_floor: Float[Array, ""]  # 100 ulp below the final time: diffrax's threshold to clip to it
    dt0: Optional[Float[Array, ""]]
    max_steps: int = eqx.field(static=True)
    observe_fn: Callable
    estimate: str = eqx.field(static=True, default="doubling")
    extrapolate: bool = eqx.field(static=True, default=True)

    sorts: ClassVar[bool] = True  # the runner orders the members by step_estimate (in_cost_order)
    replay: ClassVar[str] = "written"  # (the fused kernel's summary: no finiteness flag for a replay)
    save_every: ClassVar[int] = 1  # one step of the kernels' programs is every attempt up to the next save

    @property
    def replays(self) -> bool:
        return False  # no replay of steps whose non-finite values last: every attempt is tested

    @property
    def n_steps(self) -> int:
        return self.ts.shape[0]

    @property
    def dtype(self):
        return self.ts.dtype

    def system(self, dyn_m):
        return eqx.combine(dyn_m, self.static)

    def step_estimate(self, dyn_m, y0):
        """The first step that :meth:`PIDController.initial_step` selects for ``y0``: the first
        step where ``dt0`` is None, and the member's predicted cost (its inverse) otherwise."""
        system = self.system(dyn_m)
        f, z0 = error_space(self.method, system, self.method.init_or_fail(system, y0, jnp.ones((), self.ts.dtype))[0])
        return self.controller.initial_step(f, z0, error_order(self.method, self.estimate))

    def init(self, dyn_m, y0):
        system, dtype = self.system(dyn_m), self.ts.dtype
        dt, control = self.controller.init(self.step_estimate(dyn_m, y0) if self.dt0 is None else self.dt0, dtype)
        state, result = self.method.init_or_fail(system, y0, dt)
        result = RESULTS.where(jnp.all(jnp.isfinite(y0)) & jnp.isfinite(dt), result, RESULTS.invalid_initial_state)
        zero = jnp.zeros((), count_dtype())
        return _AdaptiveCarry(state, jnp.zeros((), dtype), dt, jnp.asarray(False), jnp.zeros((), jnp.int32), control,
                              zero, zero, result)

    def _attempt(self, system, c: _AdaptiveCarry, t_save) -> _AdaptiveCarry:
        t_end = self.ts[-1]
        t1 = jnp.minimum(c.t + c.dt, t_save)
        t1 = jnp.where(t1 > self.t_floor, jnp.where(c.rejected_last, c.t + 0.5 * (t_end - c.t), t_end), t1)
        h = t1 - c.t
        new, error, result, _ = step_and_error(self.method, system, c.state, h, self.estimate, self.extrapolate)
        error = jnp.where(jnp.isnan(error), jnp.inf, error)
        y0, y1 = error_space(self.method, system, c.state)[1], error_space(self.method, system, new)[1]
        keep, dt, control, too_small = self.controller.adapt(y0, y1, error, h, error_order(self.method, self.estimate), c.control)
        state = jax.tree.map(lambda a, b: jnp.where(keep, a, b), new, c.state)
        result = RESULTS.where(keep, result, RESULTS.successful)
        result = RESULTS.where(too_small, RESULTS.dt_min_reached, result)
        return _AdaptiveCarry(state, jnp.where(keep, t1, c.t), dt, ~keep, c.save, control,
                              c.accepted + keep.astype(c.accepted.dtype), c.rejected + (~keep).astype(c.rejected.dtype),
                              RESULTS.where(c.result == RESULTS.successful, result, c.result))

    def until_save(self, dyn_m, carry: _AdaptiveCarry, tape, record):
        """Every attempt from ``carry.t`` up to the next save time (or until the member fails or
        reaches ``max_steps`` attempts), ``after, tape = record(before, after, tape)`` after each
        (``record`` may end the member: a result other than successful stops the attempts)."""
        system = self.system(dyn_m)
        t_save = _select(self.ts, carry.save)

        def going(ct):
            c = ct[0]
            return (c.t < t_save) & (c.result == RESULTS.successful) & (c.accepted + c.rejected < self.max_steps)

        def attempt(ct):
            c, tape = ct
            new = self._attempt(system, c, t_save)
            return record(c, new, tape)

        c, tape = jax.lax.while_loop(going, attempt, (carry, tape))
        stuck = (c.t < t_save) & (c.result == RESULTS.successful)
        return eqx.tree_at(lambda x: (x.save, x.result), c,
                           (c.save + 1, RESULTS.where(stuck, RESULTS.max_steps_reached, c.result))), tape

    def step(self, dyn_m, carry: _AdaptiveCarry) -> _AdaptiveCarry:
        """Every attempt from ``carry.t`` up to the next save time (or until the member fails or
        reaches ``max_steps`` attempts)."""
        return self.until_save(dyn_m, carry, None, lambda before, after, tape: (after, tape))[0]

    def step_taped(self, dyn_m, carry: _AdaptiveCarry, tape: tuple) -> tuple:
        """:meth:`step`, and ``tape = (states, hs)`` with each accepted step written in: its size
        into ``hs[k − 1]`` and the method's state after it into ``states[k]``, ``k`` the count of
        accepted steps (``states[0]``: the start). What the discrete adjoint over the accepted
        steps replays (:func:`lpjax._integrate_adaptive.solve`)."""
        def record(before, after, tape):
            states, hs = tape
            k, took = after.accepted, after.accepted > before.accepted
            states = jax.tree.map(lambda buf, a: buf.at[k].set(jnp.where(took, a, buf[k])), states, after.state)
            return after, (states, hs.at[k - 1].set(jnp.where(took, after.t - before.t, hs[k - 1])))

        return self.until_save(dyn_m, carry, tape, record)

    def advance(self, dyn_m, carry, step=None):
        """One save interval (``step``: :meth:`step` batched over the members, if given)."""
        return (step or self.step)(dyn_m, carry)

    def finished(self, dyn_m, carry):
        return None

    def observe(self, dyn_m, carry):
        system = self.system(dyn_m)
        return self.observe_fn(system, self.method.observe(system, carry.state))

    def summary(self, dyn_m, carry):
        y = self.method.observe(self.system(dyn_m), carry.state)
        stats = dict(zip(ADAPTIVE_STATS, (carry.accepted, carry.rejected, carry.dt, carry.t)))
        return y, carry.result._value, stats


def adaptive_member(static, method, adaptive: AdaptiveSchedule, dt0, observe_fn, dtype) -> AdaptiveMember:
    """An :class:`AdaptiveMember` in ``dtype`` (save times, first step, the final time's floor)."""
    t_end = np.asarray(adaptive.ts[-1], dtype)
    floor = t_end
    for _ in range(100):
        floor = np.nextafter(floor, np.asarray(-np.inf, dtype))
    return AdaptiveMember(static, method, adaptive.controller, jnp.asarray(adaptive.ts, dtype), jnp.asarray(floor, dtype),
                          None if dt0 is None else jnp.asarray(dt0, dtype), adaptive.max_steps, observe_fn,
                          adaptive.estimate, adaptive.extrapolate)
