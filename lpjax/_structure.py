"""What a function of a state can contain, decided from its jaxpr rather than from values.

:func:`monomials` reads a scalar function ``h(μ)`` as a program and says which monomials of
``μ`` of degree at most two it may contain, and which entries of ``μ`` it may depend on in any
other way. Arrays whose values are known (concrete constants, integer index arrays) are
evaluated; an entry known to be zero drops the terms it multiplies. Values that are not known
(an array traced under ``jit``, ``vmap`` or ``grad``, or one a function closes over inside
such a transform) count as nonzero wherever they may be: a structure that holds for every
value of them. A traced parameter therefore cannot hide a term: ``c·μ₁μ₂`` has the monomial
``μ₁μ₂`` whatever ``c`` is, where a check of the Hessian's values at ``c = 0`` would see none.

The reading is conservative: a primitive it has no rule for makes each of its outputs "any
function of every entry its inputs depend on", and a term that cancels is still a term
(``c·μ₁μ₂ − c·μ₁μ₂`` has ``μ₁μ₂``). It never says a term is absent when it may be present.
"""

from __future__ import annotations

import functools
import operator
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jax_core  # trace_state_clean: no public equivalent
from jax.extend import core as jcore

__all__ = ["Monomials", "monomials", "reads_traced", "tracing"]


def tracing() -> bool:
    """Whether a transform (``jit``, ``vmap``, ``grad``) is tracing: if not, no value is traced.
    (JAX's own test, where this JAX has it: a few hundred nanoseconds, where
    :func:`reads_traced` calls a function.)"""
    clean = getattr(jax_core, "trace_state_clean", None)
    return True if clean is None else not clean()


def reads_traced(fn: Callable, *args) -> bool:
    """Whether ``fn(*args)`` (concrete ``args``) reads a value traced by an enclosing ``jit``,
    ``vmap`` or ``grad``: an array of a module ``fn`` is bound to, or one it closes over. Its
    output is then traced, even where everything else is evaluated at once (a call of ``fn``:
    60 µs for a top's Hamiltonian, where tracing it to a jaxpr takes 0.4 ms)."""
    if not tracing():
        return False
    with jax.ensure_compile_time_eval():
        out = fn(*args)
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(out))


def _term_product(a, b):
    """The product of two terms: a monomial (a sorted tuple of indices, degree ≤ 2) or a
    frozenset (any function of those entries; degree > 2 is one)."""
    if isinstance(a, frozenset) or isinstance(b, frozenset):
        deps = frozenset(a) | frozenset(b)
        return deps if deps else ()
    t = tuple(sorted(a + b))
    return t if len(t) <= 2 else frozenset(t)


class _Terms:
    """The terms an entry may contain (empty: the entry is zero)."""

    __slots__ = ("items",)

    def __init__(self, items=frozenset()):
        self.items = frozenset(items)

    def __add__(self, other):
        if isinstance(other, np.ndarray):  # a 0-d array of terms: NumPy applies this entrywise
            return NotImplemented
        return self if isinstance(other, int) and other == 0 else _Terms(self.items | other.items)

    __radd__ = __add__

    def __mul__(self, other):
        if isinstance(other, np.ndarray):
            return NotImplemented
        return _Terms(_term_product(a, b) for a in self.items for b in other.items)

    def deps(self) -> frozenset:
        return frozenset(i for t in self.items for i in t)

    def mu_free(self) -> bool:
        return all(t == () for t in self.items)


_ZERO, _ONE = _Terms(), _Terms({()})


def _any_function(deps: frozenset) -> _Terms:
    return _Terms({frozenset(deps)}) if deps else _ONE


class Monomials(NamedTuple):
    """The structure of ``h(μ)``: ``linear`` (k: ``μ_k`` may appear), ``squares`` (``μ_k²``),
    ``products`` ((i, j), i < j: ``μ_iμ_j``), ``other`` (entries ``h`` may depend on otherwise:
    a higher degree or a non-polynomial function), and ``through`` (the primitives that made
    ``other``)."""

    linear: frozenset
    squares: frozenset
    products: frozenset
    other: frozenset
    through: tuple


def monomials(fn: Callable, d: int, dtype) -> Monomials:
    """The monomials of degree ≤ 2 the scalar ``fn(μ)`` (``μ`` of shape ``(d,)``) may contain,
    read off its jaxpr (module docstring)."""
    closed = jax.make_jaxpr(fn)(jax.ShapeDtypeStruct((d,), dtype))
    mu = np.empty((d,), object)
    for i in range(d):
        mu[i] = _Terms({(i,)})
    reasons: list = []
    with jax.ensure_compile_time_eval():
        (out,) = _run(closed.jaxpr, [_known(c) for c in closed.consts], [mu], reasons)
    terms = out.reshape(()).item() if _is_struct(out) else (_ONE if np.any(np.asarray(out) != 0) else _ZERO)
    items = terms.items
    mono = [t for t in items if isinstance(t, tuple)]
    return Monomials(linear=frozenset(t[0] for t in mono if len(t) == 1),
                     squares=frozenset(t[0] for t in mono if len(t) == 2 and t[0] == t[1]),
                     products=frozenset(t for t in mono if len(t) == 2 and t[0] != t[1]),
                     other=frozenset(i for t in items if isinstance(t, frozenset) for i in t),
                     through=tuple(dict.fromkeys(reasons)))


# ------------------------------------------------------------------ the interpreter


def _known(c):
    """A constant of the jaxpr: its value where known, else (traced) every entry maybe nonzero."""
    if isinstance(c, jax.core.Tracer):
        return _filled(np.shape(c), _ONE)
    return np.asarray(c)


def _filled(shape, terms: _Terms) -> np.ndarray:
    out = np.empty(shape, object)
    out.fill(terms)
    return out


def _boxed(v) -> np.ndarray:
    """An entry's terms as a 0-d array (NumPy returns the bare object from an operation on 0-d arrays);
    anything else as an array."""
    if not isinstance(v, _Terms):
        return np.asarray(v)  # a known value (a sub-program's literal output)
    out = np.empty((), object)
    out[()] = v
    return out


def _is_struct(v) -> bool:
    return isinstance(v, np.ndarray) and v.dtype == object


def _struct(v) -> np.ndarray:
    """``v`` as terms: a known array's entries are zero or maybe-nonzero constants."""
    if _is_struct(v):
        return v
    v = np.asarray(v)
    out = np.empty(v.shape, object)
    flat = out.reshape(-1)
    for i, x in enumerate(v.reshape(-1)):
        flat[i] = _ONE if x != 0 else _ZERO
    return out


def _has_other(v) -> bool:
    return _is_struct(v) and any(isinstance(t, frozenset) for e in v.reshape(-1) for t in e.items)


def _deps(*values) -> frozenset:
    out = frozenset()
    for v in values:
        if _is_struct(v):
            for t in v.reshape(-1):
                out |= t.deps()
    return out


def _read(env, v):
    return v.val if isinstance(v, jcore.Literal) else env[v]


def _run(jaxpr, consts, args, reasons: list) -> list:
    env: dict = {}
    for var, val in zip(jaxpr.constvars, consts):
        env[var] = val
    for var, val in zip(jaxpr.invars, args):
        env[var] = val
    for eqn in jaxpr.eqns:
        ins = [_read(env, v) for v in eqn.invars]
        if not any(_is_struct(x) for x in ins):
            outs = eqn.primitive.bind(*ins, **eqn.params)
            outs = [np.asarray(o) for o in (outs if eqn.primitive.multiple_results else [outs])]
        else:
            outs = [_boxed(o) for o in _rule(eqn, ins, reasons)]
            if (any(map(_has_other, outs)) and not any(map(_has_other, ins)) and _sub_jaxpr(eqn.params) is None
                    and eqn.primitive.name != "cond"):
                reasons.append(eqn.primitive.name)  # where a term beyond degree two first appears
        for var, val in zip(eqn.outvars, outs):
            env[var] = val
    return [_read(env, v) for v in jaxpr.outvars]


def _opaque(eqn, ins) -> list:
    """No rule: every output entry is any function of every entry the inputs depend on."""
    deps = _deps(*ins)
    return [_filled(v.aval.shape, _any_function(deps)) for v in eqn.outvars]


def _divide(a: _Terms, b: _Terms) -> _Terms:
    if b.mu_free() and b.items:
        return a
    return _any_function(a.deps() | b.deps()) if a.items else _ZERO


def _power(a: np.ndarray, y: int) -> np.ndarray:
    if y < 0:
        return np.vectorize(_divide, otypes=[object])(_filled(a.shape, _ONE), _power(a, -y))
    out = _filled(a.shape, _ONE)
    for _ in range(y):
        out = out * a
    return out


def _sub_jaxpr(params):
    for name in ("jaxpr", "call_jaxpr"):
        j = params.get(name)
        if isinstance(j, jcore.ClosedJaxpr):
            return j.jaxpr, list(j.consts)
        if isinstance(j, jcore.Jaxpr):
            return j, []
    return None


_SAME = {"neg", "copy", "copy_p", "reduce_precision", "real", "optimization_barrier"}
_UNION = {"add", "sub", "add_any"}
# primitives that only move entries: run on entry labels (_moved)
_MOVES = {"slice", "squeeze", "expand_dims", "reshape", "broadcast_in_dim", "transpose", "rev", "gather",
          "dynamic_slice", "dynamic_update_slice", "concatenate", "pad", "scatter"}


def _rule(eqn, ins, reasons: list) -> list:
    name = eqn.primitive.name
    if name in _SAME or (name == "convert_element_type" and jnp.issubdtype(eqn.params["new_dtype"], jnp.inexact)
                         and jnp.issubdtype(eqn.invars[0].aval.dtype, jnp.inexact)):
        return [_struct(x) for x in ins] if eqn.primitive.multiple_results else [_struct(ins[0])]
    if name in _UNION:
        return [_struct(ins[0]) + _struct(ins[1])]
    if name == "mul":
        return [_struct(ins[0]) * _struct(ins[1])]
    if name == "div":
        return [np.vectorize(_divide, otypes=[object])(_struct(ins[0]), _struct(ins[1]))]
    if name == "integer_pow":
        return [_power(_struct(ins[0]), int(eqn.params["y"]))]
    if name == "square":
        return [_power(_struct(ins[0]), 2)]
    if name == "reduce_sum":
        return [np.add.reduce(_struct(ins[0]), axis=tuple(eqn.params["axes"]), initial=_ZERO)]
    if name == "dot_general":
        return [_dot_general(_struct(ins[0]), _struct(ins[1]), eqn.params["dimension_numbers"])]
    if name == "select_n":
        return _select(eqn, ins, reasons)
    if name in _MOVES:
        moved = _moved(eqn, ins)
        if moved is not None:
            return moved
    if name == "cond":
        return _cond(eqn, ins, reasons)
    sub = _sub_jaxpr(eqn.params)
    if sub is not None and len(sub[0].invars) == len(ins):
        return _run(sub[0], sub[1], ins, reasons)
    return _opaque(eqn, ins)


def _dot_general(a: np.ndarray, b: np.ndarray, dims) -> np.ndarray:
    (ca, cb), (ba, bb) = dims
    fa = [i for i in range(a.ndim) if i not in ca and i not in ba]
    fb = [i for i in range(b.ndim) if i not in cb and i not in bb]
    A = np.transpose(a, list(ba) + fa + list(ca))
    B = np.transpose(b, list(bb) + list(cb) + fb)
    nb = int(np.prod([a.shape[i] for i in ba], dtype=int))
    m = int(np.prod([a.shape[i] for i in fa], dtype=int))
    k = int(np.prod([a.shape[i] for i in ca], dtype=int))
    n = int(np.prod([b.shape[i] for i in fb], dtype=int))
    A, B = A.reshape(nb, m, k), B.reshape(nb, k, n)
    out = _filled((nb, m, n), _ZERO)
    for i in range(nb):
        for r in range(m):
            for c in range(n):
                out[i, r, c] = functools.reduce(operator.add, (A[i, r, j] * B[i, j, c] for j in range(k)), _ZERO)
    return out.reshape([a.shape[i] for i in ba] + [a.shape[i] for i in fa] + [b.shape[i] for i in fb])


def _select(eqn, ins, reasons: list) -> list:
    pred, cases = ins[0], [_struct(x) for x in ins[1:]]
    shape = eqn.outvars[0].aval.shape
    cases = [np.broadcast_to(c, shape) for c in cases]
    if not _is_struct(pred):
        return [np.choose(np.broadcast_to(np.asarray(pred).astype(int), shape), cases)]
    if _deps(pred):
        return _opaque(eqn, ins)
    return [functools.reduce(operator.add, cases)]  # the predicate is traced: either case


def _moved(eqn, ins):
    """A primitive that moves entries, with its index operands known: run it on labels (1, 2, …
    for the entries of every floating operand), and read each output entry's label back. None
    if an index operand is not known."""
    floats = [jnp.issubdtype(v.aval.dtype, jnp.inexact) for v in eqn.invars]
    if any(_is_struct(x) and not f for x, f in zip(ins, floats)):
        return None
    pool, labelled, offset = [], [], 0
    dtype = jnp.result_type(float)
    for x, f in zip(ins, floats):
        if not f:
            labelled.append(x)
            continue
        s = _struct(x)
        pool.extend(s.reshape(-1))
        labelled.append(np.arange(offset + 1, offset + 1 + s.size, dtype=np.float64).reshape(s.shape).astype(dtype))
        offset += s.size
    outs = eqn.primitive.bind(*labelled, **eqn.params)
    result = []
    for o in (outs if eqn.primitive.multiple_results else [outs]):
        o = np.asarray(o)
        s = np.empty(o.shape, object)
        flat = s.reshape(-1)
        for i, x in enumerate(o.reshape(-1)):
            k = int(x) if np.isfinite(x) and x == int(x) else 0
            flat[i] = pool[k - 1] if 1 <= k <= len(pool) else (_ZERO if x == 0 else _ONE)
        result.append(s)
    return result


def _cond(eqn, ins, reasons: list) -> list:
    branches, index, ops = eqn.params["branches"], ins[0], ins[1:]
    if not _is_struct(index):
        b = branches[int(np.asarray(index))]
        return _run(b.jaxpr, list(b.consts), ops, reasons)
    if _deps(index):
        return _opaque(eqn, ins)
    outs = [_run(b.jaxpr, list(b.consts), ops, reasons) for b in branches]
    return [functools.reduce(operator.add, [_struct(o[i]) for o in outs]) for i in range(len(eqn.outvars))]
