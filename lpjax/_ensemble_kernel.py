"""The chunk kernel of :func:`lpjax.ensemble`: one member's program (``init``, ``advance`` by
``save_every`` steps, ``observe``, ``summary``, the same ``init/step`` and result codes as
:func:`lpjax.integrate`) and the three ways to run it over a block of members, all with the
member axis last:

* ``"scan"``: ``vmap`` of each piece, the time loop (``lax.scan``) outside the ``vmap``;
* ``"entries"``: each piece entry by entry (:mod:`lpjax._soa`), every value a vector over the
  block;
* ``"fused"``: one Pallas kernel per block with the whole time loop inside (:mod:`lpjax._fused`).

Blocks run one after the other (``lax.map``) within a chunk; with several devices a chunk is
split over them by ``shard_map``.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from ._fused import run_fused
from ._integrate import _Carry
from ._integrator import AbstractIntegrator
from ._soa import members_last

__all__ = ["run_chunk"]


@final
class _Member(eqx.Module):
    """One member's program, in pieces that a block runner batches over members (the member
    axis last): ``init``, ``advance`` (``save_every`` steps), ``observe`` and ``summary``."""

    static: Any = eqx.field(static=True)
    method: AbstractIntegrator
    dt: Any
    n_steps: int = eqx.field(static=True)
    save_every: int = eqx.field(static=True)
    observe_fn: Callable

    def system(self, dyn_m):
        return eqx.combine(dyn_m, self.static)

    def init(self, dyn_m, y0):  # a member the method cannot start from fails alone, from step 0
        state, result = self.method.init_or_fail(self.system(dyn_m), y0, self.dt)
        return eqx.tree_at(lambda c: c.result, _Carry.start(state, y0.dtype), result)

    def step(self, dyn_m, carry):
        state, result, info = self.method.step(self.system(dyn_m), carry.state, self.dt)
        return carry.update(state, result, info)

    def advance(self, dyn_m, carry, step=None):
        """``save_every`` steps (of ``step``, a batched :meth:`step`, if given)."""
        step = step or self.step
        return jax.lax.scan(lambda c, _: (step(dyn_m, c), None), carry, None, length=self.save_every)[0]

    def observe(self, dyn_m, carry):
        system = self.system(dyn_m)
        return self.observe_fn(system, self.method.observe(system, carry.state))

    def summary(self, dyn_m, carry):
        y = self.method.observe(self.system(dyn_m), carry.state)
        stats = {"max_residual": carry.max_residual, "max_iterations": carry.max_iterations,
                 "mean_iterations": carry.total_iterations.astype(y.dtype) / self.n_steps,
                 "num_failed_steps": carry.num_failed}
        return y, carry.result._value, stats


def _members_last(fn, batched: bool, kernel: str):
    """``fn(dyn_m, x)`` of one member as a function of a block with the member axis last."""
    if kernel == "scan":
        return jax.vmap(fn, in_axes=(-1 if batched else None, -1), out_axes=-1)
    return members_last(fn, (batched, True))


def _run_members(dyn, static, method, y0s, dt, n_steps: int, save_every: int, observe_fn, batched: bool, block: int,
                 kernel: str, interpret: bool):
    """Members ``y0s`` (B, d), B a multiple of ``block``: ``(final y, observables, result codes,
    statistics)``, each with the members on the first axis."""
    B, d = y0s.shape
    n_save = n_steps // save_every
    member = _Member(static, method, dt, n_steps, save_every, observe_fn)
    if kernel == "fused":
        (y_final, result, stats), saved = run_fused(member, dyn, y0s, n_save, batched, block, interpret)
        return y_final, saved, result, stats
    init, observe, summary = (_members_last(f, batched, kernel) for f in (member.init, member.observe, member.summary))
    if kernel == "scan":  # the time loop outside the vmap: the carry keeps the member axis last
        advance = functools.partial(member.advance, step=_members_last(member.step, batched, kernel))
    else:
        advance = _members_last(member.advance, batched, kernel)

    def run_block(dyn_b, y_b):
        dyn_b = jax.tree.map(lambda a: jnp.moveaxis(a, 0, -1), dyn_b) if batched else dyn_b
        carry = init(dyn_b, y_b.T)

        def one_save(c, _):
            c = advance(dyn_b, c)
            return c, observe(dyn_b, c)

        first = observe(dyn_b, carry)
        carry, saved = jax.lax.scan(one_save, carry, None, length=n_save)
        saved = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, saved)
        return summary(dyn_b, carry), saved

    nb = B // block
    y_blocks = y0s.reshape(nb, block, d)
    if batched:
        out = jax.lax.map(lambda a: run_block(*a), (jax.tree.map(lambda a: a.reshape(nb, block, *a.shape[1:]), dyn), y_blocks))
    else:
        out = jax.lax.map(lambda y: run_block(dyn, y), y_blocks)
    # (nb, ..., block) -> (nb * block, ...)
    (y_final, result, stats), saved = jax.tree.map(lambda a: jnp.moveaxis(a, -1, 1).reshape(B, *a.shape[1:-1]), out)
    return y_final, saved, result, stats


@eqx.filter_jit
def run_chunk(dyn, static, method, y0s, dt, n_steps: int, save_every: int, observe_fn, batched: bool, block: int,
               devices: Optional[tuple], kernel: str, interpret: bool):
    """One chunk (members first in and out); with ``devices``, split over them by ``shard_map``."""

    def run(dyn, y0s):
        return _run_members(dyn, static, method, y0s, dt, n_steps, save_every, observe_fn, batched, block, kernel,
                            interpret)

    if devices is None:
        return run(dyn, y0s)
    mesh = Mesh(np.array(devices), ("members",))
    members, whole = PartitionSpec("members"), PartitionSpec()
    dyn_spec = jax.tree.map(lambda _: members if batched else whole, dyn)
    return jax.shard_map(run, mesh=mesh, in_specs=(dyn_spec, members), out_specs=members, check_vma=False)(dyn, y0s)
