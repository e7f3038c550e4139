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
(:mod:`lpjax._fused`). Any method's own step runs this way, unchanged.

Values that do not depend on the members (constants, index arithmetic) are evaluated at trace
time as plain numpy arrays. A primitive this evaluator does not know raises
:class:`Unfusable`, so that callers can fall back to ``vmap``.

Semantics follow ``vmap`` with the member axis last: a ``while`` loop runs while any member's
condition holds and keeps each member's carry once its own condition fails; a ``cond`` on a
per-member predicate evaluates every branch and selects.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

import equinox as eqx
import jax
import jax.extend.core as jcore
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["Unfusable", "Context", "members_last", "split", "join", "evaluate", "vectors", "from_vectors"]


class Unfusable(NotImplementedError):
    """A primitive (or a form of one) that the entrywise evaluator does not support."""


_ELEMENTWISE = frozenset("""
    abs acos acosh add add_any and asin asinh atan atan2 atanh cbrt ceil clamp conj convert_element_type copy copy_p
    cos cosh div eq erf erf_inv erfc exp exp2 expm1 floor ge gt imag integer_pow is_finite le lgamma log log1p
    logistic lt max min mul ne neg nextafter not or pow real reduce_precision rem round rsqrt select_n shift_left
    shift_right_arithmetic shift_right_logical sign sin sinh sqrt square stop_gradient sub tan tanh xor
    """.split())

# data movement: evaluated on an array of flat indices into the operands, then gathered
_MOVES = frozenset("""
    broadcast_in_dim reshape squeeze expand_dims slice transpose rev concatenate stack split pad gather scatter
    dynamic_slice dynamic_update_slice
    """.split())
# operands (by position) of a data-movement primitive that are indices and must be known at trace time
_INDEX_OPERANDS = {"gather": slice(1, 2), "scatter": slice(1, 2), "dynamic_slice": slice(1, None),
                   "dynamic_update_slice": slice(2, None)}

_REDUCERS = {
    "reduce_sum": lax.add, "reduce_max": lax.max, "reduce_min": lax.min, "reduce_prod": lax.mul,
    "reduce_and": lax.bitwise_and, "reduce_or": lax.bitwise_or,
}

_CALLS = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
          "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr", "remat": "jaxpr", "checkpoint": "jaxpr",
          "custom_vjp_call_jaxpr": "fun_jaxpr", "eval_jaxpr": "call_jaxpr"}


def _is_entries(v) -> bool:
    return isinstance(v, np.ndarray) and v.dtype == object


class Context:
    """The block size B and the member-vector helpers."""

    def __init__(self, B: int):
        self.B = B

    def full(self, x, dtype) -> jax.Array:
        """``x`` (an entry, 0-d or ``(B,)``) as a ``(B,)`` array of ``dtype``."""
        x = jnp.asarray(x, dtype)
        return x if x.shape == (self.B,) else jnp.broadcast_to(x, (self.B,))

    @staticmethod
    def entries(v, shape) -> np.ndarray:
        """``v`` (entries or a trace-time constant) as an object array of ``shape``."""
        shape = tuple(shape)
        if _is_entries(v):
            return v if v.shape == shape else np.broadcast_to(v, shape)
        c = np.broadcast_to(np.asarray(v), shape)
        out = np.empty(shape, object)
        for i in np.ndindex(shape):
            out[i] = c[i]
        return out

    def bind(self, prim, args: Sequence, params: dict):
        """``prim`` on entries that are 0-d or ``(B,)``: the 0-d ones broadcast when mixed."""
        shapes = {jnp.shape(a) for a in args}
        if len(shapes) > 1:
            args = [a if jnp.shape(a) == (self.B,) else jnp.broadcast_to(jnp.asarray(a), (self.B,)) for a in args]
        return prim.bind(*args, **params)


def _constant(prim, vals, params):
    with jax.ensure_compile_time_eval():
        out = prim.bind(*vals, **params)
    return [np.asarray(o) for o in out] if prim.multiple_results else [np.asarray(out)]


def _elementwise(ctx: Context, eqn, vals):
    aval = eqn.outvars[0].aval
    ops = [ctx.entries(v, aval.shape) for v in vals]
    out = np.empty(aval.shape, object)
    for i in np.ndindex(aval.shape):
        out[i] = ctx.bind(eqn.primitive, [o[i] for o in ops], eqn.params)
    return [out]


def _move(ctx: Context, eqn, vals):
    """Data movement: the primitive on flat indices of its data operands, then a take."""
    name = eqn.primitive.name
    index_ops = range(len(vals))[_INDEX_OPERANDS.get(name, slice(0, 0))]
    pool, idx_args, offset = [], [], 0
    for k, (v, var) in enumerate(zip(vals, eqn.invars)):
        if k in index_ops:
            if _is_entries(v):
                raise Unfusable(f"{name} with indices that depend on the members")
            idx_args.append(v)
            continue
        e = ctx.entries(v, var.aval.shape)
        pool.extend(e.reshape(-1))
        idx_args.append(np.arange(offset, offset + e.size, dtype=np.int32).reshape(e.shape))
        offset += e.size
    outs = []
    for where in _constant(eqn.primitive, idx_args, eqn.params):
        out = np.empty(where.shape, object)
        for i in np.ndindex(where.shape):
            out[i] = pool[int(where[i])]
        outs.append(out)
    return outs


_SCATTERS = {"scatter-add": lax.add, "scatter_add": lax.add, "scatter-mul": lax.mul, "scatter_mul": lax.mul,
             "scatter-min": lax.min, "scatter_min": lax.min, "scatter-max": lax.max, "scatter_max": lax.max}


def _scatter_combine(ctx: Context, eqn, vals):
    """``scatter-add/mul/min/max`` with indices known at trace time (autodiff's transpose of
    indexing, ``x.at[i].add(u)``, ``x.at[i].multiply(s)``): each output entry is its operand
    entry combined with the updates that land on it, which a scatter-add of one-hot updates
    (the same dimension numbers) finds."""
    operand, indices, updates = vals
    name = eqn.primitive.name
    if _is_entries(indices):
        raise Unfusable(f"{name} with indices that depend on the members")
    o_aval, u_aval = eqn.invars[0].aval, eqn.invars[2].aval
    n_u = math.prod(u_aval.shape)
    params = {k: v for k, v in eqn.params.items() if k not in ("update_jaxpr", "update_consts")}
    with jax.ensure_compile_time_eval():
        one_hot = jnp.eye(n_u, dtype=np.float32).reshape((n_u, *u_aval.shape))
        zeros = jnp.zeros(o_aval.shape, np.float32)
        hits = jax.vmap(lambda u: lax.scatter_add(zeros, jnp.asarray(indices), u, params["dimension_numbers"],
                                                  mode=params.get("mode")))(one_hot)
    hits = np.asarray(hits).reshape(n_u, -1).astype(int)  # hits[j, i]: times update j lands on entry i
    op = _SCATTERS[name]
    o = ctx.entries(operand, o_aval.shape).reshape(-1)
    u = ctx.entries(updates, u_aval.shape).reshape(-1)
    out = np.empty(o.size, object)
    for i in range(o.size):
        acc = o[i]
        for j in np.flatnonzero(hits[:, i]):
            for _ in range(hits[j, i]):
                acc = _binary(ctx, op, acc, u[j])
        out[i] = acc
    return [out.reshape(o_aval.shape)]


def _reduce(ctx: Context, eqn, vals):
    (v,) = vals
    aval = eqn.invars[0].aval
    axes = tuple(eqn.params["axes"])
    e = ctx.entries(v, aval.shape)
    keep = [a for a in range(e.ndim) if a not in axes]
    e = np.transpose(e, keep + list(axes)).reshape([aval.shape[a] for a in keep] + [-1])
    if e.shape[-1] == 0:
        raise Unfusable(f"{eqn.primitive.name} over an empty axis")
    op = _REDUCERS[eqn.primitive.name]
    out = np.empty(e.shape[:-1], object)
    for i in np.ndindex(out.shape):
        out[i] = functools.reduce(lambda a, b: _binary(ctx, op, a, b), list(e[i]))
    return [out]


def _binary(ctx: Context, op: Callable, a, b):
    if jnp.shape(a) != jnp.shape(b):
        a, b = ctx.full(a, jnp.result_type(a)), ctx.full(b, jnp.result_type(b))
    return op(a, b)


def _dot_general(ctx: Context, eqn, vals):
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    L, R = (ctx.entries(v, var.aval.shape) for v, var in zip(vals, eqn.invars))
    lf = [a for a in range(L.ndim) if a not in lc and a not in lb]
    rf = [a for a in range(R.ndim) if a not in rc and a not in rb]
    L = np.transpose(L, list(lb) + lf + list(lc))
    R = np.transpose(R, list(rb) + rf + list(rc))
    nb, nk = len(lb), int(np.prod([eqn.invars[0].aval.shape[a] for a in lc], dtype=int))
    bshape = L.shape[:nb]
    L = L.reshape(bshape + L.shape[nb:nb + len(lf)] + (nk,))
    R = R.reshape(bshape + R.shape[nb:nb + len(rf)] + (nk,))
    aval = eqn.outvars[0].aval
    out_dtype = aval.dtype
    out = np.empty(aval.shape, object)
    for b in np.ndindex(bshape):
        for i in np.ndindex(L.shape[nb:-1]):
            for j in np.ndindex(R.shape[nb:-1]):
                terms = [_binary(ctx, lax.mul, _as(L[b + i + (k,)], out_dtype), _as(R[b + j + (k,)], out_dtype))
                         for k in range(nk)]
                acc = functools.reduce(lambda a, c: _binary(ctx, lax.add, a, c), terms) if terms else jnp.zeros((), out_dtype)
                out[b + i + j] = acc
    return [out]


def _as(x, dtype):
    return jnp.asarray(x).astype(dtype) if jnp.result_type(x) != dtype else jnp.asarray(x)


# ------------------------------------------------------------------------------------- loops


def _stacked(ctx: Context, v, aval) -> jax.Array:
    """Entries of ``aval``'s shape as one ``(entries, B)`` array."""
    flat = [ctx.full(x, aval.dtype) for x in ctx.entries(v, aval.shape).reshape(-1)]
    return jnp.stack(flat) if flat else jnp.zeros((0, ctx.B), aval.dtype)


def vectors(ctx: Context, values: Sequence[np.ndarray], avals) -> list:
    """Values (entries or constants) as a flat list of ``(B,)`` arrays: a loop carry, in which
    every value becomes per-member."""
    return [ctx.full(x, a.dtype) for v, a in zip(values, avals) for x in ctx.entries(v, a.shape).reshape(-1)]


def from_vectors(flat: Sequence, avals) -> list:
    """The inverse of :func:`vectors`: object arrays of ``avals``' shapes."""
    out, k = [], 0
    for a in avals:
        n = math.prod(a.shape)
        e = np.empty(n, object)
        for i in range(n):
            e[i] = flat[k + i]
        out.append(e.reshape(a.shape))
        k += n
    return out


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
        return c.reshape(()).item() if _is_entries(c) else jnp.asarray(c)

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
        elif name == "scan":
            outs = _scan(ctx, eqn, vals)
        elif name == "while":
            outs = _while(ctx, eqn, vals)
        elif name == "cond":
            outs = _cond(ctx, eqn, vals)
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
        closed, out_shape = jax.make_jaxpr(one, return_shape=True)(*member)
        ctx = Context(B)
        ins = [split(leaves[k], flags[k]) for k in arrays]
        outs = evaluate(ctx, closed.jaxpr, closed.consts, ins)
        out_leaves, out_tree = jax.tree.flatten(out_shape)
        return jax.tree.unflatten(out_tree, [join(o, B, s.dtype) for o, s in zip(outs, out_leaves)])

    return run


def _broadcast_prefix(prefix, tree) -> list:
    flags = []
    jax.tree.map(lambda p, sub: flags.extend([bool(p)] * len(jax.tree.leaves(sub))), prefix, tree,
                 is_leaf=lambda x: isinstance(x, bool))
    return flags
