"""Events and Poincaré sections, located by the method's own partial step.

An :class:`Event` is a scalar function ``cond(t, y)`` of the time and the (observed) state whose
zero is the event. After each step from ``(t, y)`` of size ``h``, an event whose ``cond`` changed
sign in its ``direction`` is located: ``τ`` in ``(0, h]`` with ``cond(t + τ, Φ_τ(y)) = 0``, where
``Φ_τ`` is one step of the method itself, of size ``τ`` (a bracketed root finder, Illinois'
regula falsi, to a bracket of a few ulp of ``τ``). The event's state is then a state of the
method: every invariant the method keeps holds there, as along the trajectory.

* **Terminal** (``terminal=True``, default): the member stops there, with the result code
  ``RESULTS.event_occurred``; its final state and time are the event's.
* **A section** (``terminal=False``, ``max_crossings=K``): up to ``K`` crossings are recorded,
  each a time and a state, and the run goes on from the step's end, not from the crossing: the
  trajectory is that of the run without the section, bit for bit.

:class:`EventMember` adds events to a fixed-step member program
(:class:`lpjax._member.FixedMember`), :class:`AdaptiveEventMember` to an adaptive one (each
accepted step a step of the events), both on :class:`AbstractEventMember`: the carry holds the
events' values at the state, the counts and the record, so that every kernel (scan, entries,
fused, native) runs it. The search and the record's writes are a ``cond`` on a crossing in the
step: the native kernel runs it over the members that crossed alone (the record is untouched in
the other steps), the other kernels for every member, selecting (a ``while`` search that makes
no trip where no member of a block crossed, selects over the record's K·(d + 2) entries). A
member stopped by a terminal event is :meth:`EventMember.finished`: the native kernel gives its
lane to the next member.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any, Callable, ClassVar, NamedTuple, Sequence, Union, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ._integrator import RESULTS
from ._adaptive import AdaptiveMember
from ._member import AbstractMember, AbstractWrappedMember, innermost, steps

__all__ = ["AbstractEventMember", "AdaptiveEventMember", "Event", "EventMember", "EventRecord", "as_events",
           "describe_event", "event_record", "event_stat_names", "with_events", "EVENT_ITERATIONS", "EVENT_STATS"]

EVENT_ITERATIONS = 100  # root finder's iterations at most (Illinois converges superlinearly: ~10 in practice)
# an event member's statistics beside the fixed-step member's: the time reached, and the record
EVENT_STATS = ("t_final", "event_count", "event_ts", "event_ys", "event_which")


@final
class Event(eqx.Module):
    """An event: the zeros of ``cond(t, y)`` (a scalar function of the time and the state).

    Args:
        cond: ``cond(t, y) -> scalar``; ``y`` is the observed state (as :func:`lpjax.integrate`
            saves it).
        direction: ``+1``: crossings from negative to non-negative values only (upwards);
            ``-1``: from positive to non-positive (downwards); ``0``: both.
        terminal: stop the member at the first crossing (``RESULTS.event_occurred``); else
            record crossings and go on (a Poincaré section).
        max_crossings: crossings recorded at most (a terminal event records one).
    """

    cond: Callable
    direction: int = eqx.field(static=True, default=0)
    terminal: bool = eqx.field(static=True, default=True)
    max_crossings: int = eqx.field(static=True, default=1)

    def __check_init__(self):
        if not callable(self.cond):
            raise TypeError(f"Event: cond must be a function cond(t, y) -> scalar, got {type(self.cond).__name__}")
        if self.direction not in (-1, 0, 1) or isinstance(self.direction, bool):
            raise ValueError(f"Event: direction must be +1 (upwards), -1 (downwards) or 0 (both), got {self.direction!r}")
        if not isinstance(self.terminal, (bool, np.bool_)):
            raise TypeError(f"Event: terminal must be True or False, got {self.terminal!r}")
        if isinstance(self.max_crossings, bool) or not isinstance(self.max_crossings, int) or self.max_crossings < 1:
            raise ValueError(f"Event: max_crossings must be a positive int, got {self.max_crossings!r}")
        if self.terminal and self.max_crossings != 1:
            raise ValueError("Event: a terminal event stops at its first crossing: max_crossings must be 1")


class EventRecord(NamedTuple):
    """The crossings of a run's events (leading axes: the members of an ensemble): ``ts``
    ``(..., K)`` and ``ys`` ``(..., K, d)`` the crossings' times and states in the order met
    (unused entries: NaN), ``count`` ``(...)`` how many, ``which`` ``(..., K)`` the index of the
    event in the list (−1 where unused). ``K`` is the sum of the events' ``max_crossings``."""

    ts: Array
    ys: Array
    count: Array
    which: Array


def as_events(events: Union[None, Event, Sequence[Event]], who: str) -> tuple:
    """``events`` as a tuple of :class:`Event` (empty for None), checked; the same tuple object for
    the same events, so that a repeated run finds its preparation (:mod:`lpjax._memo`)."""
    if events is None:
        return ()
    events = (events,) if isinstance(events, Event) else tuple(events)
    for e in events:
        if not isinstance(e, Event):
            raise TypeError(f"{who}: events must be an lpjax.Event or a list of them, got {type(e).__name__}")
    if not events:
        raise ValueError(f"{who}: events is an empty list: pass None for a run without events")
    return _interned(*events)


@functools.lru_cache(maxsize=64)
def _interned(*events: Event) -> tuple:
    return events


@final
class _Record(eqx.Module):
    """The events' part of a member's carry: their values at the state, the crossings recorded
    per event and in all, and the record."""

    g: Float[Array, " E"]
    counts: Int[Array, " E"]
    count: Int[Array, ""]
    ts: Float[Array, " K"]
    ys: Float[Array, "K d"]
    which: Int[Array, " K"]


def _crossed(g0, g1, direction: int):
    up, down = (g0 < 0) & (g1 >= 0), (g0 > 0) & (g1 <= 0)
    return up if direction > 0 else down if direction < 0 else up | down


def _conds(events: tuple, t, y, dtype) -> Array:
    return jnp.stack([jnp.asarray(e.cond(t, y), dtype).reshape(()) for e in events])


def _start(events: tuple, method, system, state, t, dtype) -> _Record:
    """The record of a member starting at ``state`` at ``t``."""
    y, K = method.observe(system, state), sum(e.max_crossings for e in events)
    return _Record(_conds(events, t, y, dtype), jnp.zeros((len(events),), jnp.int32), jnp.zeros((), jnp.int32),
                   jnp.full((K,), jnp.nan, dtype), jnp.full((K, *y.shape), jnp.nan, dtype), jnp.full((K,), -1, jnp.int32))


def _locate(cond: Callable, method, system, state0, t0, h, g0, g1, y1, active, dtype):
    """``(τ, the observed state after a step of τ)`` with ``cond(t0 + τ, Φ_τ) = 0``, bracketed in
    ``[0, h]`` (``g0``, ``g1`` the values at its ends, ``y1`` the observed state at ``h``): Illinois'
    regula falsi while ``active`` and the bracket is wider than a few ulp of ``τ``. The loop
    carries the observed state, not the method's (a predictor, a lifted point): less to keep."""
    tiny = 4 * jnp.finfo(dtype).eps

    def going(s):
        a, _, b, _, _, it, _ = s
        return active & (it < EVENT_ITERATIONS) & (b - a > tiny * b)

    def body(s):
        a, fa, b, fb, side, it, yb = s
        m = b - fb * (b - a) / (fb - fa)
        m = jnp.where((m > a) & (m < b), m, 0.5 * (a + b))  # (a bisection where the secant leaves the bracket)
        ym = method.observe(system, method.step(system, state0, m)[0])
        fm = jnp.asarray(cond(t0 + m, ym), dtype).reshape(())
        right = (jnp.sign(fm) == jnp.sign(fb)) | (fm == 0)  # the root is in [a, m] (or at m): m replaces b
        new_a, new_fa = jnp.where(right, a, m), jnp.where(right, jnp.where(side > 0, 0.5 * fa, fa), fm)
        new_b, new_fb = jnp.where(right, m, b), jnp.where(right, fm, jnp.where(side < 0, 0.5 * fb, fb))
        new_a = jnp.where(fm == 0, m, new_a)  # on the zero: the bracket closes there
        return new_a, new_fa, new_b, new_fb, jnp.where(right, 1, -1).astype(side.dtype), it + 1, jnp.where(right, ym, yb)

    zero = jnp.zeros((), dtype)
    s = (zero, g0, h + zero, g1, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), y1)
    _, _, tau, _, _, _, y = jax.lax.while_loop(going, body, s)
    return tau, y


def _stepped(method, system, state0, tau, state1, stop):
    """The method's state after a step of ``tau`` from ``state0`` where ``stop`` (a loop of one trip
    there: a terminal event's state, met once in a member's run), else ``state1``."""
    def body(s):
        return method.step(system, state0, tau)[0], jnp.zeros((), bool)

    return jax.lax.while_loop(lambda s: s[1], body, (state1, stop))[0]


def _write(rec: _Record, e: int, keep, t, y) -> _Record:
    """The crossing of event ``e`` at ``t`` (observed state ``y``) written into the record where
    ``keep`` (selects over the record, K·(d + 2) of them: an index that differs between members
    is no kernel's indexed write; they run only in the branch of a crossing)."""
    at = (jnp.arange(rec.ts.shape[0]) == rec.count) & keep
    counts = jnp.where((jnp.arange(rec.counts.shape[0]) == e) & keep, rec.counts + 1, rec.counts)
    return _Record(rec.g, counts, rec.count + keep.astype(rec.count.dtype), jnp.where(at, t, rec.ts),
                   jnp.where(at[:, None], y[None], rec.ys), jnp.where(at, e, rec.which))


def after_step(events: tuple, method, system, rec: _Record, state0, t0, state1, t1, live, dtype):
    """The events over one step from ``(t0, state0)`` to ``(t1, state1)`` (``live``: a step that
    counts): ``(record, stop, t, state)``, where ``stop`` says a terminal event ended the member
    at ``t`` in ``state`` (else ``t1``, ``state1``). The search and the writes are a ``cond`` on
    a crossing: a branch that the native kernel takes per member, in a member loop of its own
    (the record is then read and written only where a member crossed); other kernels select."""
    y1 = method.observe(system, state1)
    g1 = _conds(events, t1, y1, dtype)
    crossed = jnp.stack([live & _crossed(rec.g[e], g1[e], ev.direction) & (rec.counts[e] < ev.max_crossings)
                         for e, ev in enumerate(events)])

    def found(rec, state1, y1, g1, crossed, _):
        located = [_locate(ev.cond, method, system, state0, t0, t1 - t0, rec.g[e], g1[e], y1, crossed[e], dtype)
                   for e, ev in enumerate(events)]
        stop_tau = jnp.full((), jnp.inf, dtype)  # the first terminal crossing in this step, if any
        for e, ((tau, _), ev) in enumerate(zip(located, events)):
            if ev.terminal:
                stop_tau = jnp.where(crossed[e], jnp.minimum(stop_tau, tau), stop_tau)
        for e, (tau, y) in enumerate(located):
            rec = _write(rec, e, crossed[e] & (tau <= stop_tau), t0 + tau, y)
        stop = jnp.isfinite(stop_tau)
        if not any(e.terminal for e in events):
            return eqx.tree_at(lambda r: r.g, rec, g1), stop, t1, state1
        state = _stepped(method, system, state0, stop_tau, state1, stop)
        t = jnp.where(stop, t0 + stop_tau, t1)
        g = jnp.where(stop, _conds(events, t, method.observe(system, state), dtype), g1)
        return eqx.tree_at(lambda r: r.g, rec, g), stop, t, state

    def none(rec, state1, y1, g1, crossed, hit):  # (every output an operand: hit is False here)
        return eqx.tree_at(lambda r: r.g, rec, g1), hit, t1, state1

    hit = jnp.any(crossed)
    return jax.lax.cond(hit, found, none, rec, state1, y1, g1, crossed, hit)


@final
class _EventCarry(eqx.Module):
    inner: Any  # the fixed-step member's carry (or a tangent member's around it)
    k: Int[Array, ""]  # steps taken
    t: Float[Array, ""]  # the time reached (the event's, after a terminal one)
    rec: _Record


class AbstractEventMember(AbstractWrappedMember):
    """A member program with events around an ``inner`` one (its method, system, observable and
    sizes); every step tested: an event is located from a tested state."""

    events: eqx.AbstractVar[tuple]

    def observe(self, dyn_m, carry):
        return self.inner.observe(dyn_m, carry.inner)


@final
class EventMember(AbstractEventMember):
    """A fixed-step member program (``inner``: a :class:`~lpjax._member.FixedMember`, or a
    tangent member around one) with ``events`` located and recorded (see the module). A terminal
    event keeps the whole inner carry from its step on: a tangent member's indicator stays at its
    values of that step."""

    inner: AbstractMember
    events: tuple

    @property
    def sorts(self) -> bool:
        return False

    @property
    def save_every(self) -> int:
        return self.inner.save_every

    def init(self, dyn_m, y0):
        c = self.inner.init(dyn_m, y0)
        t, base = jnp.zeros((), self.dtype), innermost(c)
        return _EventCarry(c, jnp.zeros((), base.num_failed.dtype), t,
                           _start(self.events, self.method, self.system(dyn_m), base.state, t, self.dtype))

    def step(self, dyn_m, carry: _EventCarry) -> _EventCarry:
        return self._step(dyn_m, carry, innermost(carry).result == RESULTS.event_occurred)

    def step_running(self, dyn_m, carry: _EventCarry) -> _EventCarry:
        """:meth:`step` for a member known not to be finished (bit for bit: a stopped member's
        carry is kept by selects, here on a flag that is false)."""
        return self._step(dyn_m, carry, None)

    def _step(self, dyn_m, carry: _EventCarry, stopped) -> _EventCarry:
        inner = self.inner.step(dyn_m, carry.inner)
        k, base = carry.k + 1, innermost(inner)
        live = base.result == RESULTS.successful
        live = live if stopped is None else ~stopped & live
        dt = innermost(self.inner).dt
        rec, stop, t, state = after_step(self.events, self.method, self.system(dyn_m), carry.rec,
                                         innermost(carry.inner).state, carry.t, base.state, k.astype(self.dtype) * dt,
                                         live, self.dtype)
        if not any(e.terminal for e in self.events):  # nothing stops the member: no state to keep
            return _EventCarry(inner, k, t, rec)
        result = RESULTS.where(stop & (base.result == RESULTS.successful), RESULTS.event_occurred, base.result)
        inner = eqx.tree_at(lambda c: (innermost(c).state, innermost(c).result), inner, (state, result))
        g = rec.g
        if stopped is not None:  # (the record is written only where a crossing is kept)
            (inner, k, t, g) = jax.tree.map(lambda old, x: jnp.where(stopped, old, x),
                                            (carry.inner, carry.k, carry.t, carry.rec.g), (inner, k, t, g))
        return _EventCarry(inner, k, t, eqx.tree_at(lambda r: r.g, rec, g))

    def finished(self, dyn_m, carry: _EventCarry):
        """A member stopped by a terminal event (its steps keep its carry), else None: no event stops it."""
        return innermost(carry).result == RESULTS.event_occurred if any(e.terminal for e in self.events) else None

    def advance(self, dyn_m, carry, step=None):
        return steps(step or self.step, dyn_m, carry, self.save_every)

    def summary(self, dyn_m, carry):
        y, result, stats = self.inner.summary(dyn_m, carry.inner)
        return y, result, {**stats, "t_final": carry.t, **record_stats(carry.rec)}


def with_events(member, events: tuple):
    """``member`` (a fixed-step or adaptive member program, or a tangent member around one) with
    ``events`` (none: as it is)."""
    if not events:
        return member
    adaptive = isinstance(innermost(member), AdaptiveMember)
    return AdaptiveEventMember(member, events) if adaptive else EventMember(member, events)


def event_stat_names(adaptive: bool) -> tuple:
    """The statistics an event member adds (an adaptive member has its ``t_reached`` already)."""
    return EVENT_STATS[1:] if adaptive else EVENT_STATS


def record_stats(rec: _Record) -> dict:
    """The record as a member's statistics."""
    return {"event_count": rec.count, "event_ts": rec.ts, "event_ys": rec.ys, "event_which": rec.which}


def describe_event(e: Event) -> dict:
    """An event as a run's settings record it (JSON), so that a store is resumed only with the
    same events: its function by name and, for a Python function, a digest of its code (its
    bytecode, constants and names: two lambdas on other coordinates differ), and its options."""
    cond = e.cond
    name = f"{getattr(cond, '__module__', '?')}.{getattr(cond, '__qualname__', type(cond).__name__)}"
    code = getattr(cond, "__code__", None)
    if code is not None:
        text = repr((code.co_code, code.co_consts, code.co_names)).encode()
        name += f" [{hashlib.sha256(text).hexdigest()[:12]}]"
    elif type(cond).__repr__ is not object.__repr__:  # (an object's own repr; the default one names its address)
        name += f" [{cond!r}]"
    return {"cond": name, "direction": e.direction, "terminal": bool(e.terminal), "max_crossings": e.max_crossings}


def event_record(stats: dict) -> EventRecord:
    """The :class:`EventRecord` in an event member's statistics (:meth:`EventMember.summary`)."""
    return EventRecord(stats["event_ts"], stats["event_ys"], stats["event_count"], stats["event_which"])


@final
class _AdaptiveEventCarry(eqx.Module):
    inner: Any  # the adaptive member's carry (or a tangent member's around it)
    rec: _Record


@final
class AdaptiveEventMember(AbstractEventMember):
    """An adaptive member program (``inner``: an :class:`~lpjax._adaptive.AdaptiveMember`, or a
    tangent member around one, each with ``until_save``) with ``events``: each accepted step is
    a step of the events (see the module); a terminal event ends the member's attempts there."""

    inner: AbstractMember
    events: tuple

    sorts: ClassVar[bool] = True  # (by the inner member's predicted cost)
    save_every: ClassVar[int] = 1

    def step_estimate(self, dyn_m, y0):
        return self.inner.step_estimate(dyn_m, y0)

    def init(self, dyn_m, y0):
        c = self.inner.init(dyn_m, y0)
        base = innermost(c)
        return _AdaptiveEventCarry(c, _start(self.events, self.method, self.system(dyn_m), base.state, base.t,
                                             self.dtype))

    def step(self, dyn_m, carry: _AdaptiveEventCarry) -> _AdaptiveEventCarry:
        system = self.system(dyn_m)

        def record(before, after, rec):
            live = (after.accepted > before.accepted) & (after.result == RESULTS.successful)
            rec, stop, t, state = after_step(self.events, self.method, system, rec, before.state, before.t,
                                             after.state, after.t, live, self.dtype)
            result = RESULTS.where(stop & (after.result == RESULTS.successful), RESULTS.event_occurred, after.result)
            return eqx.tree_at(lambda c: (c.state, c.t, c.result), after, (state, t, result)), rec

        return _AdaptiveEventCarry(*self.inner.until_save(dyn_m, carry.inner, carry.rec, record))

    def finished(self, dyn_m, carry):
        return None  # (its attempts stop at a terminal event already; its lane is not given to another)

    def advance(self, dyn_m, carry, step=None):
        return (step or self.step)(dyn_m, carry)

    def summary(self, dyn_m, carry):
        y, result, stats = self.inner.summary(dyn_m, carry.inner)
        return y, result, {**stats, **record_stats(carry.rec)}
