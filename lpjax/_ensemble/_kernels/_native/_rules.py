"""The rules of :mod:`lpjax._ensemble._kernels._native`: one per primitive (:data:`RULES`), each
writing LLVM IR for the primitive on scalars through the code context
(:class:`lpjax._ensemble._kernels._native._context.IR`), and the exact rewrites applied before
them (:class:`Peephole`). Operations follow XLA's semantics without reassociation or contraction
(plain IEEE instructions, no fast-math flags): IEEE 754-2019 ``maximum``/``minimum`` (NaN-propagating,
−0 < +0), saturating float-to-int conversion, integer division by zero and ``MIN / −1`` defined;
where the kernel flushes denormals, a subnormal is ±0 to the C library's functions too."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .._entrywise import Unfusable
from ._ir import Sym, dtype_of, is_sym, llvm_type

__all__ = ["RULES", "Peephole", "rule"]

_FCMP = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
_ICMP = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
_LIBM = ("exp log sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh expm1 log1p erf erfc lgamma exp2 "
         "cbrt").split()
_INTRINSIC = {"sqrt": "sqrt", "floor": "floor", "ceil": "ceil"}

# ------------------------------------------------------------------------------ the registry

RULES: dict = {}  # a primitive's name -> its rule: (ir, operands, dtype, operands' dtypes, params) -> value


def rule(*names: str) -> Callable:
    """Register the decorated function as the rule of each primitive of ``names``."""
    def register(fn: Callable) -> Callable:
        for name in names:
            if name in RULES:
                raise ValueError(f"two rules for {name!r}")
            RULES[name] = fn
        return fn

    return register


def _kinds(dt) -> tuple:
    return dt.kind == "f", dt.kind == "u", dt == np.bool_


@rule("add", "add_any", "sub", "mul")
def _ring(ir, a, dt, dts, params, name):
    if dt == np.bool_:
        raise Unfusable(f"primitive {name!r} on {dt}")
    return ir.op(("f" if dt.kind == "f" else "") + {"add_any": "add"}.get(name, name), a[0], a[1], dt)


@rule("div", "rem")
def _division(ir, a, dt, dts, params, name):
    if dt.kind == "f":
        return ir.op("f" + name, a[0], a[1], dt)
    if dt.kind not in "iu":
        raise Unfusable(f"primitive {name!r} on {dt}")
    zero = ir.op("icmp eq", a[1], 0, dt, np.bool_)  # XLA: x / 0 = -1 (all ones), x % 0 = x
    trap = zero
    if dt.kind == "i":  # and MIN / −1 = MIN, MIN % −1 = 0: as x / 1 and x % 1 (the instruction would trap)
        low = ir.op("icmp eq", a[0], np.iinfo(dt).min, dt, np.bool_)
        trap = ir.op("or", zero, ir.op("and", low, ir.op("icmp eq", a[1], -1, dt, np.bool_), np.bool_), np.bool_)
    q = ir.op(("u" if dt.kind == "u" else "s") + name, a[0], ir.select(trap, np.asarray(1, dt), a[1], dt), dt)
    return ir.select(zero, np.asarray(-1).astype(dt) if name == "div" else a[0], q, dt)


@rule("max", "min")
def _extremum(ir, a, dt, dts, params, name):
    flt, uns, boolean = _kinds(dt)
    if boolean:
        return ir.op("or" if name == "max" else "and", a[0], a[1], dt)
    if flt:  # IEEE 754-2019 maximum and minimum, as XLA's: NaN-propagating, −0 < +0
        return ir.call(f"llvm.{name}imum.{suffix(dt)}", [a[0], a[1]], dt)
    pre = "u" if uns else "s"
    return ir.select(ir.op(f"icmp {pre}{'gt' if name == 'max' else 'lt'}", a[0], a[1], dt, np.bool_), a[0], a[1], dt)


@rule("neg")
def _neg(ir, a, dt, dts, params, name):
    if dt.kind != "f":
        return ir.op("sub", 0, a[0], dt)
    return ir.keeping(ir.new(f"fneg {llvm_type(dt)} {ir.ref(a[0], dt)}", dt, a), a)


@rule("abs")
def _abs(ir, a, dt, dts, params, name):
    if dt.kind == "f":
        return ir.keeping(ir.call(f"llvm.fabs.{suffix(dt)}", [a[0]], dt), a)
    return ir.select(ir.op("icmp slt", a[0], 0, dt, np.bool_), ir.op("sub", 0, a[0], dt), a[0], dt)


@rule("sign")
def _sign(ir, a, dt, dts, params, name):
    if dt.kind == "f":  # keeps ±0 and NaN (a subnormal, flushed, is ±0)
        neg = ir.select(ir.op("fcmp olt", a[0], 0.0, dt, np.bool_), -1.0, ir.flushed(a[0], dt), dt)
        return ir.select(ir.op("fcmp ogt", a[0], 0.0, dt, np.bool_), 1.0, neg, dt)
    pos, neg = (ir.op(f"icmp s{c}", a[0], 0, dt, np.bool_) for c in ("gt", "lt"))
    pos, neg = (ir.new(f"zext i1 {x.name} to {llvm_type(dt)}", dt, (x,)) for x in (pos, neg))
    return ir.op("sub", pos, neg, dt)


@rule(*_FCMP)
def _comparison(ir, a, dt, dts, params, name):
    flt, uns, boolean = _kinds(dt)
    if flt:
        return ir.op(f"fcmp {_FCMP[name]}", a[0], a[1], dt, np.bool_)
    cmp = _ICMP[name] if not (uns or boolean) or name in ("eq", "ne") else "u" + _ICMP[name][1:]
    return ir.op(f"icmp {cmp}", a[0], a[1], dt, np.bool_)


@rule("and", "or", "xor")
def _bitwise(ir, a, dt, dts, params, name):
    if dt.kind == "f":
        raise Unfusable(f"primitive {name!r} on {dt}")
    return ir.op(name, a[0], a[1], dt)


@rule("not")
def _not(ir, a, dt, dts, params, name):
    if dt.kind == "f":
        raise Unfusable(f"primitive {name!r} on {dt}")
    return ir.op("xor", a[0], True if dt == np.bool_ else -1, dt)


@rule("select_n")
def _select_n(ir, a, dt, dts, params, name):
    p, cases = a[0], a[1:]
    if dts[0] == np.bool_:
        return ir.select(p, cases[1], cases[0], dt)
    e = cases[-1]
    for k in range(len(cases) - 2, -1, -1):
        e = ir.select(ir.op("icmp eq", p, k, dts[0], np.bool_), cases[k], e, dt)
    return e


@rule("clamp")
def _clamp(ir, a, dt, dts, params, name):  # clamp(lo, x, hi)
    return ir.apply("min", [ir.apply("max", [a[1], a[0]], dts), a[2]], dts)


@rule("integer_pow")
def _integer_pow(ir, a, dt, dts, params, name):  # JAX's own sequence of products
    y, x, acc = int(params["y"]), a[0], None
    mul = "fmul" if dt.kind == "f" else "mul"
    if y == 0:
        return np.asarray(1).astype(dt)[()]
    for bit in _bits(abs(y)):
        if bit is True:
            acc = x if acc is None else ir.op(mul, acc, x, dt)
        else:
            x = ir.op(mul, x, x, dt)
    return ir.op("fdiv" if dt.kind == "f" else "sdiv", 1, acc, dt) if y < 0 else acc


@rule("square")
def _square(ir, a, dt, dts, params, name):
    return ir.op("fmul" if dt.kind == "f" else "mul", a[0], a[0], dt)


@rule("shift_left", "shift_right_arithmetic", "shift_right_logical")
def _shift(ir, a, dt, dts, params, name):
    if dt.kind == "f":
        raise Unfusable(f"primitive {name!r} on {dt}")
    return ir.op({"shift_left": "shl", "shift_right_arithmetic": "ashr"}.get(name, "lshr"), a[0], a[1], dt)


def _floats(fn: Callable) -> Callable:
    """A rule for float operands only (another dtype: :class:`Unfusable`)."""
    def on_floats(ir, a, dt, dts, params, name):
        if dt.kind != "f":
            raise Unfusable(f"primitive {name!r} on {dt}")
        return fn(ir, a, dt, dts, params, name)

    return on_floats


@rule("is_finite")
@_floats
def _is_finite(ir, a, dt, dts, params, name):
    if ir.speculate is not None:  # taken as true, the operand summed (_source._speculated)
        ir.tested.append(a[0])
        if ir.level:  # inside a loop of the member loop's body: summed here
            ir.sum_tested()
        return np.True_
    return ir.peephole.all_finite(ir, ir.op("fsub", a[0], a[0], dt))


@rule(*_INTRINSIC)
@_floats
def _intrinsic(ir, a, dt, dts, params, name):
    out = ir.call(f"llvm.{_INTRINSIC[name]}.{suffix(dt)}", [a[0]], dt)
    return ir.keeping(out, a) if name == "sqrt" else out


@rule(*_LIBM)
@_floats
def _libm(ir, a, dt, dts, params, name):
    return ir.libm(name, [a[0]], dt)


@rule("rsqrt")
@_floats
def _rsqrt(ir, a, dt, dts, params, name):
    return ir.op("fdiv", 1.0, ir.keeping(ir.call(f"llvm.sqrt.{suffix(dt)}", [a[0]], dt), a), dt)


@rule("pow", "atan2", "nextafter")
@_floats
def _libm2(ir, a, dt, dts, params, name):
    y = a[1] if dtype_of(a[1]) == dt else ir.cast(a[1], dt)
    return ir.libm(name, [a[0], y], dt, flush=name != "nextafter")  # (nextafter: on the bits, as XLA's)


@rule("logistic")
@_floats
def _logistic(ir, a, dt, dts, params, name):
    e = ir.libm("exp", [ir.apply("neg", a, [dt])], dt)
    return ir.op("fdiv", 1.0, ir.op("fadd", 1.0, e, dt), dt)


@rule("round")
@_floats
def _round(ir, a, dt, dts, params, name):
    how = "roundeven" if int(params["rounding_method"]) == 1 else "round"
    return ir.call(f"llvm.{how}.{suffix(dt)}", [a[0]], dt)


@rule("copy", "stop_gradient")
def _identity_rule(ir, a, dt, dts, params, name):
    return a[0]


@rule("reduce_precision")
def _reduce_precision(ir, a, dt, dts, params, name):
    info = np.finfo(dt)
    if (params["exponent_bits"], params["mantissa_bits"]) != (info.nexp, info.nmant):
        raise Unfusable("reduce_precision to a narrower format")
    return a[0]


@rule("convert_element_type")
def _convert(ir, a, dt, dts, params, name):
    return ir.cast(a[0], params["new_dtype"])


# ------------------------------------------------------------------------------ peepholes


class Peephole:
    """Exact rewrites before a primitive's rule (:meth:`rewrite`), on what earlier results were
    (:meth:`note`): an operation that is one of its operands or a constant (``x · 1``,
    ``x + (−0)``, ``x & True``, a select on a constant); ``(−1)·y = −y`` and ``(−x)·y = −(x·y)``
    (to the bit: the product is shared with ``x·y``, a skew matrix's two triangles); ``−(−x) = x``;
    ``x == k ? k : x = x``; and a conjunction of finiteness tests as one test that the sum of their
    ``x − x`` is not NaN."""

    def __init__(self):
        self.negated: dict = {}  # the name of an fneg's result -> its operand
        self.finite: dict = {}  # an is_finite result (or a conjunction of them) -> its sum of x − x
        self.equal: dict = {}  # the name of an integer ``x == k`` (k a constant) -> (x's name, k)

    def rewrite(self, ir, name: str, a: list, dt, dts: list):
        same = _identity(name, a, dt)
        if same is not None:
            return same
        if name == "mul" and dt.kind == "f":
            for x, y in ((a[0], a[1]), (a[1], a[0])):
                if _is(x, -1.0):
                    return ir.apply("neg", [y], dts)
                if is_sym(x) and x.name in self.negated:
                    return ir.apply("neg", [ir.op("fmul", self.negated[x.name], y, dt)], dts)
        if name == "neg" and dt.kind == "f" and is_sym(a[0]) and a[0].name in self.negated:
            return self.negated[a[0].name]
        if name == "and" and dt == np.bool_:
            tests = [self.finite.get(x.name) if is_sym(x) else None for x in a]
            if None not in tests and tests[0].dtype == tests[1].dtype:
                return self.all_finite(ir, ir.op("fadd", tests[0], tests[1], tests[0].dtype))
        if name == "select_n" and dts[0] == np.bool_:
            x, k = self.equal.get(a[0].name, (None, None))
            if is_sym(a[1]) and a[1].name == x and _is(a[2], k):
                return a[1]
        return None

    def note(self, name: str, a: list, dt, out) -> None:
        """What the rule of ``name`` made of ``a`` (``out``), for later rewrites."""
        if name == "neg" and dt.kind == "f" and is_sym(out):
            self.negated[out.name] = a[0]
        if name == "eq" and dt.kind != "f" and is_sym(out) and is_sym(a[0]) and not is_sym(a[1]):
            self.equal[out.name] = (a[0].name, a[1])

    def all_finite(self, ir, s: Sym) -> Sym:
        """``s`` (a sum of ``x − x`` terms) is not NaN: every ``x`` is finite."""
        out = ir.op("fcmp ord", s, 0.0, s.dtype, np.bool_)
        self.finite[out.name] = s
        return out


def _is(x, value) -> bool:
    """Whether ``x`` is the constant ``value`` (with its sign, for a float zero)."""
    if is_sym(x):
        return False
    v = np.asarray(x)
    return bool(v == value) and (v.dtype.kind != "f" or np.signbit(v) == np.signbit(value))


def _identity(name: str, a: list, dt):
    """The result of an operation that is exactly one of its operands or a constant
    (``x · 1``, ``x + 0``, ``x − 0``, ``x & True``, a select on a constant, ...), else None."""
    zero = -0.0 if dt.kind == "f" else 0  # x + (−0.0) = x for every x; x + 0.0 is not (−0.0 + 0.0 = +0.0)
    if name in ("add", "add_any"):
        return a[1] if _is(a[0], zero) else a[0] if _is(a[1], zero) else None
    if name == "sub":
        return a[0] if _is(a[1], 0.0 if dt.kind == "f" else 0) else None
    if name == "mul":
        return a[1] if _is(a[0], 1) else a[0] if _is(a[1], 1) else None
    if name in ("and", "or") and dt == np.bool_:
        for x, y in ((a[0], a[1]), (a[1], a[0])):
            if not is_sym(x):
                return y if bool(x) == (name == "and") else np.bool_(x)
    if name == "select_n" and not is_sym(a[0]):
        return a[1 + int(np.clip(int(a[0]), 0, len(a) - 2))]
    return None


def suffix(dt) -> str:
    """LLVM's name of a float type in an intrinsic's name."""
    return "f64" if np.dtype(dt) == np.float64 else "f32"


def _bits(y: int) -> list:
    """JAX's ``integer_pow`` as steps: ``True`` multiplies the accumulator by x, ``False``
    squares x."""
    steps = []
    while y > 0:
        if y & 1:
            steps.append(True)
        y >>= 1
        if y > 0:
            steps.append(False)
    return steps
