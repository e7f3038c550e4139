"""One member's program, run entry by entry over a block of members ("structure of arrays").

:func:`members_last` traces a function of ONE member (a step, an observable, a whole time loop)
to a jaxpr and evaluates it with every array value held as a numpy object array of its
per-member shape, whose entries are arrays over the members of a block (shape ``(B,)``):
``y`` of shape ``(6,)`` becomes six member vectors. Every operation then becomes elementwise
code over members: small matrix products, slices, reductions over the state's axes and
scatters turn into arithmetic on the entries, and loops (``scan``, ``while``) carry the
entries. This is the layout of a hand-written structure-of-arrays loop (members on the last
axis, the time loop outside the member loop), and it is what a fused GPU kernel needs: every
value in it is one vector over the block, which stays in registers
(:mod:`lpjax._ensemble._kernels._fused`). Any method's own step runs this way, unchanged.

Values that do not depend on the members (constants, index arithmetic) are evaluated at trace
time as plain numpy arrays. A primitive this evaluator does not know raises
:class:`Unfusable`, so that callers can fall back to ``vmap``.

Semantics follow ``vmap`` with the member axis last: a ``while`` loop runs while any member's
condition holds and keeps each member's carry once its own condition fails; a ``cond`` on a
per-member predicate evaluates every branch and selects.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import equinox as eqx
import jax
import jax.extend.core as jcore
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..._small import entrywise_solves
from ._entrywise_rules import (
    _ELEMENTWISE, _MOVES, _REDUCERS, _SCATTERS, Context, Unfusable, _constant, _dot_general, _elementwise,
    _is_entries, _move, _reduce, _scatter_combine, _stacked, from_vectors, vectors,
)

__all__ = ["Unfusable", "Context", "members_last", "split", "join", "evaluate", "vectors", "from_vectors", "trace",
           "trace_member", "member_avals"]

_CALLS = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
          "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "remat": "jaxpr", "checkpoint": "jaxpr",
          "custom_vjp_call_jaxpr": "fun_jaxpr", "eval_jaxpr": "call_jaxpr"}



def _scan_operands(params: dict, vals: list) -> tuple[list, list, list]:
    """A scan's operands as ``(consts, carry, xs)``: counted by ``num_consts``/``num_carry``
    (JAX ≤ 0.10) or grouped by the flat tree ``ft_in`` (JAX ≥ 0.11)."""
    if "num_consts" in params:
        nc, ncarry = params["num_consts"], params["num_carry"]
        return list(vals[:nc]), list(vals[nc:nc + ncarry]), list(vals[nc + ncarry:])
    consts, carry, xs = params["ft_in"].update(list(vals)).unpack()
    return list(consts), list(carry), list(xs)


def _scan(ctx: Context, eqn, vals):
    p = eqn.params
    body = p["jaxpr"]
    consts, init, xs = _scan_operands(p, vals)
    nc, ncarry = len(consts), len(init)
    in_avals = [v.aval for v in body.jaxpr.invars]
    carry_avals = in_avals[nc:nc + ncarry]
    x_avals = in_avals[nc + ncarry:]
    y_avals = [v.aval for v in body.jaxpr.outvars[ncarry:]]
    # per-member xs as stacked (length, entries, B) arrays; constant xs as they are
    xs_in = [np.asarray(x) if not _is_entries(x) else jnp.stack([_stacked(ctx, x[t, ...], a) for t in range(x.shape[0])])
             for x, a in zip(xs, x_avals)]

    def f(carry, x_t):
        xv = [(from_vectors(list(x), [a])[0] if _is_entries(x0) else x) for x, x0, a in zip(x_t, xs, x_avals)]
        outs = evaluate(ctx, body.jaxpr, body.consts, list(consts) + from_vectors(carry, carry_avals) + xv)
        c = vectors(ctx, outs[:ncarry], carry_avals)
        ys = [_stacked(ctx, y, a) for y, a in zip(outs[ncarry:], y_avals)]
        return c, ys

    # not unrolled: entry by entry a body is many small operations, and XLA's compile time grows
    # steeply with unrolled copies of it (a GL6 step with 30 unrolled iterations: 92 s against 2 s)
    carry, ys = lax.scan(f, vectors(ctx, init, carry_avals), xs_in, length=p["length"], reverse=p["reverse"])
    out = from_vectors(carry, carry_avals)
    for y, a in zip(ys, y_avals):  # (length, entries, B)
        e = np.empty((p["length"],) + tuple(a.shape), object)
        for t in range(p["length"]):
            e[t, ...] = from_vectors(list(y[t]), [a])[0]
        out.append(e)
    return out


def _while(ctx: Context, eqn, vals):
    p = eqn.params
    cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
    cc, bc = vals[:p["cond_nconsts"]], vals[p["cond_nconsts"]:p["cond_nconsts"] + p["body_nconsts"]]
    init = vals[p["cond_nconsts"] + p["body_nconsts"]:]
    avals = [v.aval for v in bj.jaxpr.invars[p["body_nconsts"]:]]

    def pred(flat):
        (c,) = evaluate(ctx, cj.jaxpr, cj.consts, list(cc) + from_vectors(flat, avals))
        if not _is_entries(c):
            return jnp.any(jnp.asarray(c))
        # (a predicate batched by vmap, as JAX's while keeps it: the loop goes on while any entry holds)
        return functools.reduce(lambda a, b: ctx.bind(lax.or_p, [a, b], {}), np.ravel(c))

    def body(flat):
        new = vectors(ctx, evaluate(ctx, bj.jaxpr, bj.consts, list(bc) + from_vectors(flat, avals)), avals)
        go = pred(flat)
        return [jnp.where(go, n, o) for n, o in zip(new, flat)] if jnp.ndim(go) else new

    # "any member still going" as a max over an int32 vector: a reduction that Triton lowers
    # (jnp.any is reduce_or, which Pallas' Triton lowering does not have)
    out = lax.while_loop(lambda flat: jnp.max(jnp.asarray(pred(flat), jnp.int32)) > 0, body, vectors(ctx, init, avals))
    return from_vectors(out, avals)


def _cond(ctx: Context, eqn, vals):
    index, ops = vals[0], vals[1:]
    branches = eqn.params["branches"]
    if not _is_entries(index):
        b = branches[int(np.clip(int(index), 0, len(branches) - 1))]
        return evaluate(ctx, b.jaxpr, b.consts, list(ops))
    idx = index.reshape(()).item()
    outs = [evaluate(ctx, b.jaxpr, b.consts, list(ops)) for b in branches]
    idx = jnp.clip(idx, 0, len(branches) - 1).astype(jnp.int32)
    result = []
    for k, var in enumerate(eqn.outvars):
        es = [ctx.entries(o[k], var.aval.shape) for o in outs]
        out = np.empty(var.aval.shape, object)
        for i in np.ndindex(var.aval.shape):
            out[i] = ctx.bind(lax.select_n_p, [idx] + [e[i] for e in es], {})
        result.append(out)
    return result


_CONTROL = {"scan": _scan, "while": _while, "cond": _cond}

# ------------------------------------------------------------------------------------- the evaluator


def evaluate(ctx: Context, jaxpr, consts, args) -> list:
    """Evaluate ``jaxpr`` on ``args`` (object arrays of member vectors, or trace-time constants)."""
    env: dict = {}

    def read(v):
        return np.asarray(v.val, v.aval.dtype) if isinstance(v, jcore.Literal) else env[v]

    for v, c in zip(jaxpr.constvars, consts):  # closed-over tracers are the same for every member
        env[v] = _uniform(c) if isinstance(c, jax.core.Tracer) else np.asarray(c)
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    for eqn in jaxpr.eqns:
        vals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        if not any(_is_entries(v) for v in vals):
            outs = _constant(eqn.primitive, vals, eqn.params)
        elif name in _ELEMENTWISE:
            outs = _elementwise(ctx, eqn, vals)
        elif name in _MOVES:
            outs = _move(ctx, eqn, vals)
        elif name in _REDUCERS:
            outs = _reduce(ctx, eqn, vals)
        elif name in _SCATTERS:
            outs = _scatter_combine(ctx, eqn, vals)
        elif name == "dot_general":
            outs = _dot_general(ctx, eqn, vals)
        elif name in _CALLS:
            outs = _call(ctx, eqn, vals)
        elif name == "call_hi_primitive":  # JAX ≥ 0.11: custom_jvp/vjp and remat as "high" primitives
            outs = _lowered(ctx, eqn, vals)
        elif name in _CONTROL:
            outs = (ctx.control or _CONTROL)[name](ctx, eqn, vals)
        elif name == "optimization_barrier":  # a boundary for XLA's fusion; nothing to keep here
            outs = vals
        else:
            raise Unfusable(f"primitive {name!r}")
        for v, o in zip(eqn.outvars, outs):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


def _call(ctx: Context, eqn, vals):
    sub = eqn.params[_CALLS[eqn.primitive.name]]
    if isinstance(sub, jcore.ClosedJaxpr):
        return evaluate(ctx, sub.jaxpr, sub.consts, vals)
    return evaluate(ctx, sub, (), vals)


def _lowered(ctx: Context, eqn, vals):
    """A "high" primitive (``call_hi_primitive``) through its expansion into ordinary ones."""
    avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
    closed = jax.make_jaxpr(lambda *a: eqn.primitive.to_lojax(*a, **eqn.params))(*avals)
    return evaluate(ctx, closed.jaxpr, closed.consts, vals)


def _uniform(x) -> np.ndarray:
    """A traced array that is the same for every member, as entries (0-d traced values)."""
    out = np.empty(jnp.shape(x), object)
    for i in np.ndindex(out.shape):
        out[i] = x[i]
    return out


# ------------------------------------------------------------------------------------- public


def split(x, batched: bool) -> np.ndarray:
    """An array as entries: with ``batched``, ``x`` has the member axis last (``(*S, B)``)."""
    x = jnp.asarray(x)
    shape = x.shape[:-1] if batched else x.shape
    out = np.empty(shape, object)
    for i in np.ndindex(shape):
        out[i] = x[i]
    return out


def join(e, B: int, dtype) -> jax.Array:
    """Entries as one array with the member axis last: ``(*S, B)``."""
    shape = np.shape(e)
    return _stacked(Context(B), e, jax.ShapeDtypeStruct(shape, dtype)).reshape(shape + (B,))


def members_last(fn: Callable, batched: Any) -> Callable:
    """``fn`` (a function of one member's arrays) on a block of members with the member axis
    last. ``batched`` is a pytree prefix of ``fn``'s arguments: True for arguments that carry
    the member axis, False for those shared by every member. Returns a function of the same
    arguments whose outputs all carry the member axis last. Raises :class:`Unfusable` at call
    time for a primitive the evaluator does not support."""

    def run(*args):
        flags = _broadcast_prefix(batched, args)
        leaves, tree = jax.tree.flatten(args)
        arrays = [k for k, x in enumerate(leaves) if eqx.is_array(x)]
        Bs = {jnp.shape(leaves[k])[-1] for k in arrays if flags[k]}
        if len(Bs) != 1:
            raise ValueError(f"members_last: the batched arguments need one common last axis, got {sorted(Bs)}")
        (B,) = Bs

        def one(*arrs):
            ls = list(leaves)
            for k, a in zip(arrays, arrs):
                ls[k] = a
            return fn(*jax.tree.unflatten(tree, ls))

        member = [jax.ShapeDtypeStruct(jnp.shape(leaves[k])[:-1] if flags[k] else jnp.shape(leaves[k]),
                                       jnp.result_type(leaves[k])) for k in arrays]
        closed, out_shape = trace(one, *member)
        ctx = Context(B)
        ins = [split(leaves[k], flags[k]) for k in arrays]
        outs = evaluate(ctx, closed.jaxpr, closed.consts, ins)
        out_leaves, out_tree = jax.tree.flatten(out_shape)
        return jax.tree.unflatten(out_tree, [join(o, B, s.dtype) for o, s in zip(outs, out_leaves)])

    return run


def trace(fn: Callable, *avals) -> tuple:
    """``jax.make_jaxpr(fn, return_shape=True)`` with small linear solves unrolled
    (:func:`lpjax._small.entrywise_solves`): LU has no entrywise rule. ``fn`` is wrapped afresh
    so that JAX's trace cache cannot hand back a trace made outside the context."""
    with entrywise_solves():
        return jax.make_jaxpr(lambda *a: fn(*a), return_shape=True)(*avals)


def member_avals(leaves, batched: bool) -> list:
    """One member's avals of ``leaves`` (without their leading member axis if ``batched``)."""
    return [jax.ShapeDtypeStruct(a.shape[1:] if batched else a.shape, a.dtype) for a in leaves]


def trace_member(fn: Callable, *avals) -> tuple:
    """:func:`trace` for a kernel: a program that closes over traced values is refused
    (:class:`Unfusable`), since a kernel takes every array it uses as an input."""
    closed, out = trace(fn, *avals)
    if any(isinstance(c, jax.core.Tracer) for c in closed.consts):
        raise Unfusable("the member program closes over traced values")
    return _without_dead_code(closed), out


def _without_dead_code(closed):
    """``closed`` with the equations that no output needs removed, inside loops too (a loop
    carry that nothing reads, such as the stop flag of a fixed-iteration solve): JAX's own
    dead-code elimination, which keeps every input."""
    try:
        from jax._src.interpreters.partial_eval import dce_jaxpr
    except ImportError:  # a JAX without it: the code runs as traced
        return closed
    jaxpr, _ = dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars), instantiate=True)
    return jcore.ClosedJaxpr(jaxpr, closed.consts)


def _broadcast_prefix(prefix, tree) -> list:
    flags = []
    jax.tree.map(lambda p, sub: flags.extend([bool(p)] * len(jax.tree.leaves(sub))), prefix, tree,
                 is_leaf=lambda x: isinstance(x, bool))
    return flags
