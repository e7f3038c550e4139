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
y0)``, the smaller the dearer). A per-member feature (an event, a tangent vector, a noise
increment) is a member that carries its state in the carry and keeps to these pieces: every
kernel then runs it.
"""

from __future__ import annotations

import abc
from typing import Callable, ClassVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree

from ._integrator import RESULTS, StepInfo

__all__ = ["AbstractMember", "Carry", "count_dtype", "in_cost_order"]


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
