"""The member contract: the program of one member of an ensemble, in the pieces that every
kernel (scan, entries, fused, native) batches over a block of members, the member axis last.

* ``init(dyn_m, y0) -> carry``: the member's start (a member that cannot start fails alone,
  with its own result code);
* ``step(dyn_m, carry) -> carry``: one step of the kernels' time loop (a fixed step of the
  method, or every adaptive attempt up to the next save time);
* ``advance(dyn_m, carry, step=None) -> carry``: one save interval (``step``: :meth:`step`
  batched over the members, if given);
* ``observe(dyn_m, carry)``: the observable kept at a save;
* ``summary(dyn_m, carry) -> (final state, result code, statistics)``.

``dyn_m`` is the member's share of the system's arrays. A member declares ``n_steps`` (the
kernels' time loop: saves after the first), ``save_every``, ``dtype``, ``replays`` (whether
the kernels may run steps untested and replay a member that is not finite) and ``sorts``
(whether the runner orders the members by predicted cost: then it has ``step_estimate(dyn_m,
y0)``, the smaller the dearer), and ``finished(dyn_m, carry)``: a member done before the end,
whose steps leave its carry as it is (a terminal event), so that a kernel may give its lane to
another (the native kernel does). A per-member feature (an event, a tangent vector, a noise
increment) is a member that carries its state in the carry and keeps to these pieces: every
kernel then runs it.
"""

from __future__ import annotations

import abc
import functools
from typing import Any, Callable, ClassVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree

from ._integrator import RESULTS, AbstractIntegrator, StepInfo
from ._integrator._base import deferred_finiteness
from ._integrator._implicit import collecting_statistics

__all__ = ["AbstractMember", "AbstractWrappedMember", "Carry", "FixedMember", "count_dtype", "carry_summary", "in_cost_order", "steps", "innermost",
           "the_state"]


def count_dtype():
    """int64 step and iteration counters with x64 on (no overflow past 2³¹ steps), else int32."""
    return jnp.int64 if jax.config.jax_enable_x64 else jnp.int32


@final
class Carry(eqx.Module):
    """The carry of a fixed-step run (:func:`lpjax.integrate`'s scan and the ensembles' fixed-step
    member): the method's state and the running result and statistics."""

    state: PyTree
    result: RESULTS
    max_residual: Float[Array, ""]
    max_iterations: Int[Array, ""]
    total_iterations: Int[Array, ""]
    num_failed: Int[Array, ""]

    @classmethod
    def start(cls, state: PyTree, rdtype) -> "Carry":
        zero = jnp.zeros((), count_dtype())
        return cls(state, RESULTS.successful, jnp.zeros((), rdtype), zero, zero, zero)

    def update(self, state: PyTree, result: RESULTS, info: StepInfo) -> "Carry":
        count = self.num_failed.dtype
        stats = (self.max_residual, self.max_iterations, self.total_iterations)
        if not info.explicit_step:  # (an explicit step's zeros leave them as they are)
            stats = (jnp.maximum(self.max_residual, info.residual.astype(self.max_residual.dtype)),
                     jnp.maximum(self.max_iterations, info.iterations.astype(count)),
                     self.total_iterations + info.iterations.astype(count))
        if isinstance(result._value, np.ndarray) and result._value == RESULTS.successful._value:  # known when traced
            return Carry(state, self.result, *stats, self.num_failed)
        failed = result != RESULTS.successful
        return Carry(state, RESULTS.where(self.result == RESULTS.successful, result, self.result), *stats,
                      self.num_failed + failed.astype(count))


class AbstractMember(eqx.Module):
    """One member's program (see the module)."""

    sorts: ClassVar[bool]
    # and n_steps, save_every: fields or properties of each member (not declared here, where
    # they would come first among a subclass's fields, before its positional ones)

    @property
    @abc.abstractmethod
    def replays(self) -> bool:
        """Whether the kernels may run steps untested and replay a member that is not finite."""

    @property
    @abc.abstractmethod
    def dtype(self):
        """The floating dtype of the member's state."""

    @abc.abstractmethod
    def system(self, dyn_m):
        """The member's system from its share of the arrays."""

    @abc.abstractmethod
    def init(self, dyn_m, y0):
        """The member's carry at its start."""

    @abc.abstractmethod
    def step(self, dyn_m, carry):
        """One step of the kernels' time loop."""

    @abc.abstractmethod
    def advance(self, dyn_m, carry, step=None):
        """One save interval."""

    @abc.abstractmethod
    def observe(self, dyn_m, carry):
        """The observable kept at a save."""

    @abc.abstractmethod
    def summary(self, dyn_m, carry):
        """``(final state, result code, statistics)``."""

    @abc.abstractmethod
    def finished(self, dyn_m, carry):
        """Whether the member is done before the end of the run (a bool), where its :meth:`step`
        leaves the carry as it is, bit for bit: a kernel may then stop stepping it and give its
        lane to a member still running. None for a program whose members always run to the end
        (known when traced). A program whose members finish also has ``step_running(dyn_m,
        carry)``: :meth:`step` for a member known not finished, which a kernel that stops
        stepping finished members runs instead (the same carry, without what keeps a finished
        one's)."""


def steps(step, dyn_m, carry, n: int):
    """``n`` applications of ``step(dyn_m, ·)`` to ``carry`` (a ``lax.scan``): one save interval."""
    return jax.lax.scan(lambda c, _: (step(dyn_m, c), None), carry, None, length=n)[0]


def carry_summary(method, system, carry: Carry, n_steps: int, stats: bool) -> tuple:
    """A fixed-step member's ``(final state, result code, statistics)`` from its :class:`Carry`
    (``stats``: with the solver's, not only the failed steps' count)."""
    y = method.observe(system, carry.state)
    out = {"num_failed_steps": carry.num_failed}
    if stats:
        out = {"max_residual": carry.max_residual, "max_iterations": carry.max_iterations,
               "mean_iterations": carry.total_iterations.astype(y.dtype) / n_steps, **out}
    return y, carry.result._value, out


def the_state(system, y):
    """The observable of a run that keeps its states (:func:`lpjax.integrate`)."""
    return y


def innermost(x):
    """The fixed-step or adaptive member program inside wrapped ones (:class:`AbstractWrappedMember`),
    or the carry of that program inside the wrapped ones' carries (each holds it as ``inner``)."""
    while hasattr(x, "inner"):
        x = x.inner
    return x


class AbstractWrappedMember(AbstractMember):
    """A member program around an ``inner`` one (a per-member feature: events, tangent vectors):
    the method, the system and the sizes are the inner member's; every step is tested (no
    replay: a feature reads the state of each step). Features nest: events around tangent
    vectors; :func:`innermost` finds the fixed-step or adaptive program and its carry."""

    inner: eqx.AbstractVar[AbstractMember]

    replay: ClassVar[str] = "written"  # (the fused kernel's summary: no finiteness flag for a replay)

    @property
    def method(self):
        return self.inner.method

    @property
    def replays(self) -> bool:
        return False

    @property
    def n_steps(self) -> int:
        return self.inner.n_steps

    @property
    def dtype(self):
        return self.inner.dtype

    def system(self, dyn_m):
        return self.inner.system(dyn_m)


@final
class FixedMember(AbstractMember):
    """One member's program, in pieces that a block runner batches over members (the member
    axis last): ``init``, ``advance`` (``save_every`` steps), ``observe`` and ``summary``."""

    static: Any = eqx.field(static=True)
    method: AbstractIntegrator
    dt: Any
    n_steps: int = eqx.field(static=True)
    save_every: int = eqx.field(static=True)
    observe_fn: Callable
    stats: bool = eqx.field(static=True, default=True)
    # for a method whose non-finite entries last: "save" tests the state after each save and
    # replays a member that is not finite (see advance); "none" leaves the test to the caller,
    # after the run (summary_and_finite; the fused kernel's); "written" runs the steps as written
    replay: str = eqx.field(static=True, default="save")

    sorts: ClassVar[bool] = False  # (run in the callers' order)

    @property
    def replays(self) -> bool:
        """Whether the kernels may run steps untested and replay a member that is not finite."""
        return self.method.nonfinite_lasts

    @property
    def dtype(self):
        return jnp.result_type(self.dt)

    def system(self, dyn_m):
        return eqx.combine(dyn_m, self.static)

    def init(self, dyn_m, y0):  # a member the method cannot start from fails alone, from step 0
        state, result = self.method.init_or_fail(self.system(dyn_m), y0, self.dt)
        result = RESULTS.where(jnp.all(jnp.isfinite(y0)), result, RESULTS.invalid_initial_state)
        return eqx.tree_at(lambda c: c.result, Carry.start(state, y0.dtype), result)

    def step(self, dyn_m, carry):
        with collecting_statistics(self.stats):  # (at trace time)
            state, result, info = self.method.step(self.system(dyn_m), carry.state, self.dt)
        return carry.update(state, result, info)

    def advance(self, dyn_m, carry, step=None):
        """``save_every`` steps (of ``step``, :meth:`step` batched over members on the last axis,
        if given).

        For a method whose non-finite entries last (:attr:`lpjax.AbstractIntegrator.nonfinite_lasts`)
        the steps run without testing each new state (:func:`deferred_finiteness`); the state
        after them is tested once, and a member whose state is not finite runs the same steps
        again as written, from the same carry: its result code, failed-step count and
        statistics are those of the steps as written, bit for bit. The replay is a loop that
        makes no trip unless a member needs it (under ``vmap`` and in the kernels, a block's
        members run it together, each keeping its own carry)."""
        batched = step is not None
        step = step or self.step

        def run(c):
            return steps(step, dyn_m, c, self.save_every)

        if not self.method.nonfinite_lasts or self.replay == "written":
            return run(carry)
        with deferred_finiteness():
            fast = run(carry)
        if self.replay == "none":
            return fast
        state_axes = (lambda a: tuple(range(a.ndim - 1))) if batched else (lambda a: None)
        finite = [jnp.all(jnp.isfinite(a), axis=state_axes(a)) for a in jax.tree.leaves(fast.state)
                  if jnp.issubdtype(a.dtype, jnp.inexact)]
        bad = ~functools.reduce(jnp.logical_and, finite)
        if batched:  # the block's carry has the members on its last axis
            def replay():
                again = run(carry)
                return jax.tree.map(lambda a, b: jnp.where(bad, a, b), again, fast)

            return jax.lax.cond(jnp.any(bad), replay, lambda: fast)
        _, out = jax.lax.while_loop(lambda c: c[0], lambda c: (jnp.zeros_like(c[0]), run(carry)), (bad, fast))
        return out

    def observe(self, dyn_m, carry):
        system = self.system(dyn_m)
        return self.observe_fn(system, self.method.observe(system, carry.state))

    def summary(self, dyn_m, carry):
        return carry_summary(self.method, self.system(dyn_m), carry, self.n_steps, self.stats)

    def finished(self, dyn_m, carry):
        return None

    def summary_and_finite(self, dyn_m, carry):
        """:meth:`summary`, and whether the state is finite (int32 1 or 0): with ``replay="none"``
        a member that met an inf or NaN on the way still has one at the end (the method's
        non-finite entries last)."""
        leaves = [a for a in jax.tree.leaves(carry.state) if jnp.issubdtype(a.dtype, jnp.inexact)]
        finite = functools.reduce(jnp.logical_and, [jnp.all(jnp.isfinite(a)) for a in leaves])
        return (*self.summary(dyn_m, carry), finite.astype(jnp.int32))


@eqx.filter_jit
def _step_estimates(member, dyn, y0s, batched: bool):
    return jax.vmap(member.step_estimate, in_axes=(0 if batched else None, 0))(dyn, y0s)


def in_cost_order(run: Callable, member: AbstractMember, dyn, y0s, batched: bool, sort: bool = True):
    """``run(dyn, y0s)``; for a member that sorts (and ``sort``), with the members ordered by predicted cost,
    the dearest first (the smallest ``step_estimate``), and the outputs back in the callers'
    order.

    A block of members runs as long as its slowest member (a ``while`` runs while any lane's
    condition holds); sorted, a block holds members of like cost, and the native kernel's
    threads, which take runs of chunks from a queue in order, start with the dearest. Each
    member's result does not depend on its place."""
    if not (member.sorts and sort):
        return run(dyn, y0s)
    h = _step_estimates(member, dyn, jnp.asarray(y0s), batched)
    xp = np if isinstance(y0s, np.ndarray) else jnp
    order = xp.asarray(jnp.argsort(h, stable=True))
    inverse = xp.argsort(order)
    out = run(jax.tree.map(lambda a: a[order], dyn) if batched else dyn, y0s[order])
    return jax.tree.map(lambda a: a[inverse], out)
