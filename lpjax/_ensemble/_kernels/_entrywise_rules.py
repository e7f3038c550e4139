"""The entrywise rules of :mod:`lpjax._ensemble._kernels._entrywise`: how one primitive acts on values held as numpy
object arrays of member vectors (elementwise arithmetic, data movement with indices known at
trace time, scatters, reductions over the state's axes, small ``dot_general``), and the
member-vector helpers. The loops and the evaluator that dispatches to these are in
:mod:`lpjax._ensemble._kernels._entrywise`."""

from __future__ import annotations

import functools
import math
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["Unfusable", "Context", "vectors", "from_vectors"]


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


def _is_entries(v) -> bool:
    return isinstance(v, np.ndarray) and v.dtype == object


class Context:
    """The block size B and the member-vector helpers. ``control`` maps ``scan``, ``while`` and
    ``cond`` to rules of the same signature as the evaluator's (``None``: its own, which build
    JAX loops over member vectors); a context that emits code instead gives its own."""

    control = None

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

    def binary(self, op: Callable, a, b):
        """``op`` (``lax.add``, ``lax.mul``, ``lax.max``, ...) on two entries. A trace-time
        constant of the other's dtype stays a scalar literal (lax broadcasts it), so that a
        large kernel does not trace thousands of broadcasts of constants."""
        if jnp.shape(a) != jnp.shape(b) and not (_literal(a, b) or _literal(b, a)):
            a, b = self.full(a, jnp.result_type(a)), self.full(b, jnp.result_type(b))
        return op(a, b)

    @staticmethod
    def cast(x, dtype):
        """An entry as ``dtype``."""
        return jnp.asarray(x).astype(dtype) if jnp.result_type(x) != dtype else jnp.asarray(x)


def _literal(c, other) -> bool:
    """Whether ``c`` is a numpy scalar constant with the dtype of ``other``."""
    return isinstance(c, (np.generic, np.ndarray)) and np.ndim(c) == 0 and c.dtype == jnp.result_type(other)


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
                acc = ctx.binary(op, acc, u[j])
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
    exact = op in (lax.bitwise_and, lax.bitwise_or) or np.dtype(aval.dtype).kind in "iub"
    out = np.empty(e.shape[:-1], object)
    for i in np.ndindex(out.shape):
        out[i] = _pairwise(ctx, op, list(e[i])) if exact else functools.reduce(lambda a, b: ctx.binary(op, a, b), list(e[i]))
    return [out]


def _pairwise(ctx: Context, op, xs: list):
    """``op`` over ``xs`` as a balanced tree (depth log₂ n rather than n: shorter dependency
    chains), for operations whose result does not depend on the order: logical ones, and any
    on integers."""
    while len(xs) > 1:
        xs = [ctx.binary(op, xs[k], xs[k + 1]) if k + 1 < len(xs) else xs[k] for k in range(0, len(xs), 2)]
    return xs[0]


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
                terms = [ctx.binary(lax.mul, ctx.cast(L[b + i + (k,)], out_dtype), ctx.cast(R[b + j + (k,)], out_dtype))
                         for k in range(nk)]
                acc = functools.reduce(lambda a, c: ctx.binary(lax.add, a, c), terms) if terms else jnp.zeros((), out_dtype)
                out[b + i + j] = acc
    return [out]


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
