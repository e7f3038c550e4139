"""The scalar-code context of :mod:`lpjax._native`: the entrywise evaluator of :mod:`lpjax._soa`
run with a context that writes one line of Python per operation on scalar variables
(:class:`Sym`), with ``scan`` as a ``for`` loop (unrolled when small), ``while`` as a per-member
``while`` loop and ``cond`` as an ``if``. The lines are compiled by numba (``fastmath=False``,
``error_model="numpy"``: IEEE semantics, no exceptions), with the helpers of :data:`HELPERS`."""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.extend.core as jcore
import numpy as np
from jax import lax

from ._soa import Context, Unfusable, _scan_operands, evaluate
from ._soa_rules import _is_entries

__all__ = ["Sym", "Source", "HELPERS", "lit", "UNROLL"]

UNROLL = 0  # scans unrolled when length x (equations in the body) is at most this: none, as numba took
# 204-500 s on the Moser-Veselov step with its 20 iterations unrolled (a scan with xs or ys always is)

# ------------------------------------------------------------------------------- scalar code


class Sym:
    """A scalar variable of the generated code."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype):
        self.name, self.dtype = name, np.dtype(dtype)

    def __repr__(self):
        return f"Sym({self.name}: {self.dtype})"


def _is_sym(x) -> bool:
    return isinstance(x, Sym)


def _dtype(x) -> np.dtype:
    return x.dtype if _is_sym(x) else np.asarray(x).dtype


def _check_dtype(dt: np.dtype) -> np.dtype:
    if dt not in (np.float64, np.float32, np.int32, np.int64, np.uint32, np.uint8, np.int8, np.bool_):
        raise Unfusable(f"dtype {dt}")
    return dt


def lit(x) -> str:
    """A value as an expression: a variable's name, or a literal of its dtype."""
    if _is_sym(x):
        return x.name
    a = np.asarray(x)
    dt = _check_dtype(a.dtype)
    v = a.item()
    if dt == np.bool_:
        return "True" if v else "False"
    if dt.kind == "f":
        r = "math.nan" if math.isnan(v) else ("math.inf" if v == math.inf else "(-math.inf)" if v == -math.inf
                                              else repr(float(v)))
        return r if dt == np.float64 else f"np.float32({r})"
    return f"np.{dt.name}({int(v)})"


def _typed(expr: str, dt: np.dtype) -> str:
    """``expr`` held in ``dt``: numba computes small ints as int64 and some float32 functions
    in float64, so those results are cast back (float64 and bool need nothing)."""
    return expr if dt in (np.float64, np.bool_) else f"np.{dt.name}({expr})"


_FLOAT_CALLS = {n: f"math.{n}" for n in
                "exp log sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh expm1 log1p erf erfc lgamma sqrt".split()}
_FLOAT_CALLS.update(floor="np.floor", ceil="np.ceil", exp2="np.exp2", cbrt="np.cbrt")
_INFIX = {"add": "+", "add_any": "+", "sub": "-", "mul": "*"}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_BITWISE = {"and": "&", "or": "|", "xor": "^"}
_IDENTITY = frozenset({"copy", "copy_p", "stop_gradient"})
_BINARY = {lax.add: "add", lax.mul: "mul", lax.max: "max", lax.min: "min", lax.bitwise_and: "and",
           lax.bitwise_or: "or"}


def _expr(name: str, a: list, dts: list, params: dict) -> tuple[str, np.dtype]:
    """The expression of primitive ``name`` on the operand expressions ``a`` (dtypes ``dts``),
    with its result dtype."""
    dt = dts[0]
    flt, integer = dt.kind == "f", dt.kind in "iu"
    if name in _INFIX:
        return f"({a[0]} {_INFIX[name]} {a[1]})", dt
    if name == "div":
        return (f"({a[0]} / {a[1]})" if flt else f"_idiv({a[0]}, {a[1]})"), dt
    if name == "rem":
        return (f"math.fmod({a[0]}, {a[1]})" if flt else f"_irem({a[0]}, {a[1]})"), dt
    if name in ("max", "min"):
        if dt == np.bool_:
            return f"({a[0]} {'|' if name == 'max' else '&'} {a[1]})", dt
        return (f"_f{name}({a[0]}, {a[1]})" if flt else f"{name}({a[0]}, {a[1]})"), dt
    if name == "neg":
        return f"(-{a[0]})", dt
    if name == "abs":
        return f"abs({a[0]})", dt
    if name == "sign":
        return (f"_fsign({a[0]})" if flt else f"(({a[0]} > 0) - ({a[0]} < 0))"), dt
    if name in _COMPARE:
        return f"({a[0]} {_COMPARE[name]} {a[1]})", np.dtype(bool)
    if name in _BITWISE and (integer or dt == np.bool_):
        return f"({a[0]} {_BITWISE[name]} {a[1]})", dt
    if name == "not":
        return (f"(not {a[0]})" if dt == np.bool_ else f"(~{a[0]})"), dt
    if name == "select_n":
        p, cases = a[0], a[1:]
        if dts[0] == np.bool_ and len(cases) == 2:
            return f"({cases[1]} if {p} else {cases[0]})", dts[1]
        e = cases[-1]
        for k in range(len(cases) - 2, -1, -1):
            e = f"({cases[k]} if {p} == {k} else {e})"
        return e, dts[1]
    if name == "clamp":  # clamp(lo, x, hi)
        f = "_f" if dts[1].kind == "f" else ""
        return f"{f}min({f}max({a[1]}, {a[0]}), {a[2]})", dts[1]
    if name == "is_finite":
        return f"math.isfinite({a[0]})", np.dtype(bool)
    if name == "integer_pow":
        y = int(params["y"])
        prod = " * ".join([a[0]] * abs(y)) if y else ("1.0" if flt else "1")
        return (f"({prod})" if y >= 0 else f"(1.0 / ({prod}))"), dt
    if name == "square":
        return f"({a[0]} * {a[0]})", dt
    if name in ("shift_left", "shift_right_arithmetic") and integer:
        return f"({a[0]} {'<<' if name == 'shift_left' else '>>'} {a[1]})", dt
    if not flt:
        raise Unfusable(f"primitive {name!r} on {dt}")
    if name in _FLOAT_CALLS:
        return f"{_FLOAT_CALLS[name]}({a[0]})", dt
    if name == "rsqrt":
        return f"(1.0 / math.sqrt({a[0]}))", dt
    if name == "pow":
        return f"np.power({a[0]}, {a[1]})", dt
    if name == "atan2":
        return f"math.atan2({a[0]}, {a[1]})", dt
    if name == "logistic":
        return f"(1.0 / (1.0 + math.exp(-{a[0]})))", dt
    if name == "nextafter":
        return f"np.nextafter({a[0]}, {a[1]})", dt
    if name == "round":
        return (f"np.rint({a[0]})" if int(params["rounding_method"]) == 1 else f"_fround({a[0]})"), dt
    raise Unfusable(f"primitive {name!r}")


class Source(Context):
    """The evaluator's context for code: entries are :class:`_Sym` variables (or trace-time
    constants), and every operation appends a line."""

    def __init__(self, prefix: str):
        super().__init__(None)
        self.prefix, self.lines, self.depth, self.count = prefix, [], 0, 0

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def name(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count}"

    def new(self, expr: str, dtype) -> Sym:
        s = Sym(self.name(), dtype)
        self.emit(f"{s.name} = {expr}")
        return s

    def bind(self, prim, args, params):
        name = prim.name
        if not any(_is_sym(a) for a in args):  # constants fold at trace time
            with jax.ensure_compile_time_eval():
                return np.asarray(prim.bind(*args, **params))[()]
        if name in _IDENTITY:
            return args[0]
        if name == "reduce_precision":
            info = np.finfo(_dtype(args[0]))
            if (params["exponent_bits"], params["mantissa_bits"]) != (info.nexp, info.nmant):
                raise Unfusable("reduce_precision to a narrower format")
            return args[0]
        if name == "convert_element_type":
            return self.cast(args[0], params["new_dtype"])
        dts = [_check_dtype(_dtype(a)) for a in args]
        expr, dt = _expr(name, [lit(a) for a in args], dts, params)
        return self.new(_typed(expr, dt), dt)

    def binary(self, op: Callable, a, b):
        if op not in _BINARY:
            raise Unfusable(f"reduction by {op}")
        return self.bind(getattr(lax, f"{_BINARY[op]}_p"), [a, b], {})

    def cast(self, x, dtype):
        dtype = _check_dtype(np.dtype(dtype))
        if not _is_sym(x):
            return np.asarray(x).astype(dtype)[()]
        if x.dtype == dtype:
            return x
        if dtype == np.bool_:
            return self.new(f"({x.name} != 0)", dtype)
        return self.new(f"np.{dtype.name}({x.name})", dtype)

    # loops: the carry as variables, assigned at the end of each pass

    def variables(self, values, avals) -> list:
        """Fresh variables of ``avals``' shapes, initialised to ``values``."""
        out = []
        for v, a in zip(values, avals):
            e = self.entries(v, a.shape)
            s = np.empty(a.shape, object)
            for i in np.ndindex(a.shape):
                s[i] = Sym(self.name(), a.dtype)
                self.emit(f"{s[i].name} = {lit(self.cast(e[i], a.dtype))}")
            out.append(s)
        return out

    def assign(self, targets, values, avals) -> None:
        pairs = [(t.name, lit(self.cast(v, a.dtype))) for tv, vv, a in zip(targets, values, avals)
                 for t, v in zip(np.ravel(tv), np.ravel(self.entries(vv, a.shape)))]
        pairs = [(t, v) for t, v in pairs if t != v]
        if pairs:
            self.emit(f"{', '.join(t for t, _ in pairs)} = {', '.join(v for _, v in pairs)}")


def _size(jaxpr) -> int:
    """Equations in ``jaxpr``, with those of its sub-jaxprs."""
    n = 0
    for eqn in jaxpr.eqns:
        n += 1
        for sub in jcore.jaxprs_in_params(eqn.params):
            n += _size(sub)
    return n


def _scan(ctx: Source, eqn, vals):
    p = eqn.params
    body = p["jaxpr"]
    consts, init, xs = _scan_operands(p, vals)
    ncarry, length = len(init), p["length"]
    avals = [v.aval for v in body.jaxpr.invars]
    carry_avals = avals[len(consts):len(consts) + ncarry]
    y_avals = [v.aval for v in body.jaxpr.outvars[ncarry:]]
    if xs or y_avals or length * _size(body.jaxpr) <= UNROLL:  # unrolled: indices known, no inner loop
        carry, ys = list(init), [np.empty((length, *a.shape), object) for a in y_avals]
        for t in (range(length - 1, -1, -1) if p["reverse"] else range(length)):
            outs = evaluate(ctx, body.jaxpr, body.consts, list(consts) + carry + [x[t] for x in xs])
            carry = outs[:ncarry]
            for y, o, a in zip(ys, outs[ncarry:], y_avals):
                y[t] = ctx.entries(o, a.shape)
        return carry + ys
    carry = ctx.variables(init, carry_avals)
    ctx.emit(f"for _ in range({length}):")
    ctx.depth += 1
    outs = evaluate(ctx, body.jaxpr, body.consts, list(consts) + carry)
    ctx.assign(carry, outs, carry_avals)
    ctx.depth -= 1
    return carry


def _while(ctx: Source, eqn, vals):
    p = eqn.params
    cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    avals = [v.aval for v in bj.jaxpr.invars[nb:]]
    carry = ctx.variables(vals[nc + nb:], avals)
    ctx.emit("while True:")
    ctx.depth += 1
    (go,) = evaluate(ctx, cj.jaxpr, cj.consts, list(vals[:nc]) + carry)
    ctx.emit(f"if not {lit(np.asarray(go, object).reshape(()).item())}:")
    ctx.emit("    break")
    ctx.assign(carry, evaluate(ctx, bj.jaxpr, bj.consts, list(vals[nc:nc + nb]) + carry), avals)
    ctx.depth -= 1
    return carry


def _cond(ctx: Source, eqn, vals):
    index, ops = vals[0], vals[1:]
    branches = eqn.params["branches"]
    if not _is_entries(index):
        b = branches[int(np.clip(int(index), 0, len(branches) - 1))]
        return evaluate(ctx, b.jaxpr, b.consts, list(ops))
    idx = lit(index.reshape(()).item())
    avals = [v.aval for v in eqn.outvars]
    outs = [np.empty(a.shape, object) for a in avals]
    for o, a in zip(outs, avals):
        for i in np.ndindex(a.shape):
            o[i] = Sym(ctx.name(), a.dtype)
    for k, b in enumerate(branches):
        last = k == len(branches) - 1
        ctx.emit("else:" if last else f"{'if' if k == 0 else 'elif'} {idx} <= {k}:")
        ctx.depth += 1
        values = evaluate(ctx, b.jaxpr, b.consts, list(ops))
        for o, v, a in zip(outs, values, avals):  # every branch assigns every output
            e = ctx.entries(v, a.shape)
            for i in np.ndindex(a.shape):
                ctx.emit(f"{o[i].name} = {lit(ctx.cast(e[i], a.dtype))}")
        ctx.depth -= 1
    return outs


Source.control = {"scan": _scan, "while": _while, "cond": _cond}



# the helpers the lines call (numba functions in the generated module)
HELPERS = '''
@_jit
def _fmax(a, b):
    return a if (a > b or a != a) else b


@_jit
def _fmin(a, b):
    return a if (a < b or a != a) else b


@_jit
def _fsign(x):
    return x / abs(x) if x != 0 and x == x else x


@_jit
def _fround(x):
    t = np.trunc(x)
    return t + np.copysign(1.0, x) if abs(x - t) >= 0.5 else t


@_jit
def _idiv(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


@_jit
def _irem(a, b):
    r = abs(a) % abs(b)
    return r if a >= 0 else -r
'''
