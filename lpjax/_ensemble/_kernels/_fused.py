"""The fused ensemble kernel: one Pallas (Triton) kernel runs a block of members through the
whole run.

Each program of the grid takes ``block`` members, and sees only them: the states, the
outputs and a batched system's arrays are members-last ``(entries, N)`` arrays whose
``BlockSpec`` gives program ``i`` the columns ``i·block … (i+1)·block − 1``; the method's
arrays and a shared system's arrays come whole (scalars). The member program (``init``, then
``n_save`` times ``advance`` (``save_every`` steps of the method's own step) and ``observe``,
then ``summary``) runs entry by entry (:mod:`lpjax._ensemble._kernels._entrywise`), every value a vector over the
block, with the time loop inside the kernel: the state is loaded once, stays in registers for
the whole run, and only the observables at the saves, the final state, the result codes and
the statistics are stored. (A ``lax.scan`` over the ensemble reads and writes every component
in memory at every step.)

Triton, explicitly (``compiler_params=triton.CompilerParams``): without them ``pallas_call``
takes the Mosaic GPU route on JAX ≥ 0.10, which copies whole arrays into shared memory and
refuses float64. ``num_warps = block / 32``: one member per thread, so a member's carry
(state, result code, statistics) is held in one thread's registers, as in a hand-written
CUDA kernel with one thread per member. ``num_stages = 1``: Triton's software pipelining
overlaps global loads with a loop's compute, and the step loops here load nothing, so more
stages would only reserve shared memory. On CPU the kernel runs in Pallas' interpret mode
(for tests: it is slow); ``platform="gpu"`` on a machine without one builds the GPU kernel,
for lowering with ``jax.export(..., platforms=("cuda",))``.

The member program is traced once per member, with every array it uses (the system's, the
method's, dt) passed in as a kernel input: a kernel cannot close over traced values.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

from ._entrywise import Context, evaluate, from_vectors, member_avals, trace_member, vectors

__all__ = ["run_fused", "printing_triton_ir"]

_debug = False


@contextlib.contextmanager
def printing_triton_ir():
    """Within it, the fused kernel is built with ``pallas_call(debug=True)``, which prints the
    kernel's jaxpr and its Triton IR when it is lowered for a GPU (tests read the IR)."""
    global _debug
    before, _debug = _debug, True
    try:
        yield
    finally:
        _debug = before


class _Programs(NamedTuple):
    """The member program traced entry by entry: ``init``, ``advance``, ``observe`` and
    ``summary`` as closed jaxprs of (method arrays, system arrays, values), with the avals of
    their inputs and outputs."""

    mem_leaves: list
    dyn_leaves: list
    mem_avals: list
    dyn_avals: list
    init: Any
    advance: Any
    observe: Any
    summary: Any
    carry_avals: list
    obs_avals: list
    obs_tree: Any
    sum_avals: list
    sum_tree: Any


def _programs(member, dyn, state: jax.ShapeDtypeStruct, batched: bool) -> _Programs:
    """``member``'s four programs, traced once per member with every array it uses (the
    system's, the method's, dt) as an input: a kernel cannot close over traced values."""
    mem_dyn, mem_static = eqx.partition(member, eqx.is_array)
    mem_leaves, mem_tree = jax.tree.flatten(mem_dyn)
    dyn_leaves, dyn_tree = jax.tree.flatten(dyn)

    def program(name):
        def fn(mem_l, dyn_l, *rest):
            m = eqx.combine(jax.tree.unflatten(mem_tree, mem_l), mem_static)
            return getattr(m, name)(jax.tree.unflatten(dyn_tree, dyn_l), *rest)

        return fn

    mem_avals, dyn_avals = member_avals(mem_leaves, False), member_avals(dyn_leaves, batched)
    init_j, carry_shape = trace_member(program("init"), mem_avals, dyn_avals, state)
    carry_avals, carry_tree = jax.tree.flatten(carry_shape)

    def on_carry(name):
        fn = program(name)
        return lambda mem_l, dyn_l, carry_l: jax.tree.leaves(fn(mem_l, dyn_l, jax.tree.unflatten(carry_tree, carry_l)))

    advance_j, _ = trace_member(on_carry("advance"), mem_avals, dyn_avals, carry_avals)
    observe_j, obs_shape = trace_member(program("observe"), mem_avals, dyn_avals, carry_shape)
    summary = "summary_and_finite" if member.replay == "none" else "summary"
    summary_j, sum_shape = trace_member(program(summary), mem_avals, dyn_avals, carry_shape)
    obs_avals, obs_tree = jax.tree.flatten(obs_shape)
    sum_avals, sum_tree = jax.tree.flatten(sum_shape)
    return _Programs(mem_leaves, dyn_leaves, mem_avals, dyn_avals, init_j, advance_j, observe_j, summary_j, carry_avals,
                     obs_avals, obs_tree, sum_avals, sum_tree)


def _kernel(p: _Programs, state: jax.ShapeDtypeStruct, n_save: int, batched: bool, block: int):
    """The kernel of one program of the grid: its block of members loaded once, the whole run
    on vectors over the block, the observables stored at each save and the summary at the end."""
    n_mem, n_dyn, n_sum = len(p.mem_leaves), len(p.dyn_leaves), len(p.sum_avals)

    def kernel(*refs):
        y_ref, mem_refs = refs[0], refs[1:1 + n_mem]
        dyn_refs = refs[1 + n_mem:1 + n_mem + n_dyn]
        sum_refs = refs[1 + n_mem + n_dyn:1 + n_mem + n_dyn + n_sum]
        obs_refs = refs[1 + n_mem + n_dyn + n_sum:]
        ctx = Context(block)

        def load(ref, aval, per_member: bool):
            e = np.empty(max(1, math.prod(aval.shape)), object)
            for k in range(e.size):
                e[k] = ref[k, :] if per_member else ref[k]
            return e[: math.prod(aval.shape)].reshape(aval.shape)

        mem_e = [load(r, a, False) for r, a in zip(mem_refs, p.mem_avals)]
        dyn_e = [load(r, a, batched) for r, a in zip(dyn_refs, p.dyn_avals)]
        y = load(y_ref, state, True)

        def store(ref, values, avals, *at):
            for v, r, a in zip(values, ref, avals):
                for k, x in enumerate(ctx.entries(v, a.shape).reshape(-1)):
                    r[(*at, k, slice(None))] = ctx.full(x, a.dtype)

        def run(closed, *args):
            return evaluate(ctx, closed.jaxpr, closed.consts, [x for group in args for x in group])

        carry = run(p.init, mem_e, dyn_e, [y])
        store(obs_refs, run(p.observe, mem_e, dyn_e, carry), p.obs_avals, 0)

        def one_save(s, flat):
            c = run(p.advance, mem_e, dyn_e, from_vectors(flat, p.carry_avals))
            store(obs_refs, run(p.observe, mem_e, dyn_e, c), p.obs_avals, s + 1)
            return vectors(ctx, c, p.carry_avals)

        flat = lax.fori_loop(0, n_save, one_save, vectors(ctx, carry, p.carry_avals))
        store(sum_refs, run(p.summary, mem_e, dyn_e, from_vectors(flat, p.carry_avals)), p.sum_avals)

    return kernel


def run_fused(member, dyn, y0s, n_save: int, batched: bool, block: int, platform: str, num_warps: int):
    """The member program ``member`` (``init/advance/observe/summary`` of ``(dyn_m, ...)``) for
    the members ``y0s`` (``(B, d)``, ``B`` a multiple of ``block``) of the system arrays
    ``dyn`` (with a leading member axis if ``batched``). Returns ``(summary, saved)`` with the
    members on the first axis, like the scan path.

    For a method whose non-finite entries last, the kernel runs the steps without testing
    them (``replay="none"``) and says which members' states are finite at the end; if one is
    not, the whole call runs again as written (``replay="written"``, a second kernel behind a
    ``lax.cond``), so that codes and counts are those of the steps as written. The replay is
    thus not in the kernel that runs: a kernel holding it kept the start of every save and the
    whole written step beside the fast loop."""
    if not member.replays:
        return _run_fused(member, dyn, y0s, n_save, batched, block, platform, num_warps)
    (y_final, result, stats, finite), saved = _run_fused(dataclasses.replace(member, replay="none"), dyn, y0s, n_save,
                                                         batched, block, platform, num_warps)
    return lax.cond(jnp.all(finite == 1), lambda: ((y_final, result, stats), saved),
                    lambda: _run_fused(dataclasses.replace(member, replay="written"), dyn, y0s, n_save, batched, block,
                                       platform, num_warps))


def _run_fused(member, dyn, y0s, n_save: int, batched: bool, block: int, platform: str, num_warps: int):
    B, d = y0s.shape
    state = jax.ShapeDtypeStruct((d,), y0s.dtype)
    p = _programs(member, dyn, state, batched)

    # kernel inputs: the states (d, B); the method's arrays and shared system arrays flat; the
    # batched system arrays as (entries, B)
    inputs = [y0s.T] + [a.reshape(-1) for a in p.mem_leaves]
    inputs += [jnp.moveaxis(a, 0, -1).reshape(-1, B) if batched else a.reshape(-1) for a in p.dyn_leaves]
    out_shape = [jax.ShapeDtypeStruct((max(1, math.prod(a.shape)), B), a.dtype) for a in p.sum_avals]
    out_shape += [jax.ShapeDtypeStruct((n_save + 1, max(1, math.prod(a.shape)), B), a.dtype) for a in p.obs_avals]

    # each program sees only its own block of members (BlockSpecs on the member axis); the
    # method's and the shared system arrays whole
    whole = lambda a: pl.BlockSpec(a.shape, lambda i, n=a.ndim: (0,) * n)  # noqa: E731
    members_block = lambda a: pl.BlockSpec((*a.shape[:-1], block), lambda i, n=a.ndim: (0,) * (n - 1) + (i,))  # noqa: E731
    n_mem = len(p.mem_leaves)
    in_specs = [members_block(inputs[0])] + [whole(a) for a in inputs[1:1 + n_mem]]
    in_specs += [members_block(a) if batched else whole(a) for a in inputs[1 + n_mem:]]
    out_specs = [members_block(a) for a in out_shape]

    interpret = platform != "gpu"
    params = None if interpret else plt.CompilerParams(num_warps=num_warps, num_stages=1)
    outs = pl.pallas_call(_kernel(p, state, n_save, batched, block), out_shape=out_shape, grid=(B // block,),
                          in_specs=in_specs, out_specs=out_specs, interpret=interpret, compiler_params=params,
                          debug=_debug)(*inputs)
    sums, obs = outs[: len(p.sum_avals)], outs[len(p.sum_avals):]
    summary = [jnp.moveaxis(o, -1, 0)[:, : math.prod(a.shape)].reshape(B, *a.shape) for o, a in zip(sums, p.sum_avals)]
    saved = [jnp.moveaxis(o, -1, 0)[..., : math.prod(a.shape)].reshape(B, n_save + 1, *a.shape)
             for o, a in zip(obs, p.obs_avals)]
    return jax.tree.unflatten(p.sum_tree, summary), jax.tree.unflatten(p.obs_tree, saved)
