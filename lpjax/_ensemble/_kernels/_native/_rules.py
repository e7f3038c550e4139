"""The code context of :mod:`lpjax._ensemble._kernels._native`: the entrywise evaluator of
:mod:`lpjax._ensemble._kernels._entrywise` run with a context that writes LLVM IR, one
instruction per scalar operation on SSA values (:class:`Sym`), ``scan`` and ``while`` as loops
over stack slots (promoted to registers by LLVM), and ``cond`` as selects (as ``vmap`` does) or,
around loops, as a branch. Operations follow XLA's semantics without reassociation or contraction
(plain IEEE instructions, no fast-math flags): NaN-propagating ``max``/``min``, saturating
float-to-int conversion, integer division by zero defined."""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np
from jax import lax

from .._entrywise import Unfusable
from ._ir import Emitter, Sym, dtype_of, is_sym, lit, llvm_type
from ._loops import CONTROL

__all__ = ["Sym", "IR"]

_FCMP = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
_ICMP = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
_LIBM = frozenset("exp log sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh expm1 log1p erf erfc lgamma "
                  "exp2 cbrt".split())
_INTRINSIC = {"sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "abs": "fabs"}
_IDENTITY = frozenset({"copy", "copy_p", "stop_gradient"})
_STRICT = frozenset({"fadd", "fsub", "fmul", "fdiv", "fneg", "fpext", "fptrunc"})  # inf/NaN in, inf/NaN out
_BINARY = {lax.add: lax.add_p, lax.mul: lax.mul_p, lax.max: lax.max_p, lax.min: lax.min_p,
           lax.bitwise_and: lax.and_p, lax.bitwise_or: lax.or_p}


class IR(Emitter):
    """:class:`lpjax._ensemble._kernels._native._ir.Emitter` with the operations: each primitive on scalars as LLVM
    instructions, and the member program's loops (:mod:`lpjax._ensemble._kernels._native._loops`)."""

    control = CONTROL

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.negated: dict = {}  # the name of an fneg's result -> its operand
        self.finite: dict = {}  # an is_finite result (or a conjunction of them) -> its sum of x − x
        self.equal: dict = {}  # the name of an integer ``x == k`` (k a constant) -> (x's name, k)
        self.speculate = None  # (a stack slot, its dtype): is_finite is taken as true, its operands summed there
        self.tested: list = []  # the operands of those tests, not yet summed
        self.parents: dict = {}  # while speculating: a value's name -> the operands whose inf or NaN it keeps
        self.inputs: list = []  # while speculating: the float values this member loop loaded from regions

    # ----------------------------------------------------------------------- operations

    def new(self, rhs: str, dtype, of=None) -> Sym:
        s = super().new(rhs, dtype, of)
        if self.speculate is not None and of is not None:
            code = rhs.split(" ", 1)[0]
            if code in _STRICT or (code == "call" and any(f"@llvm.{f}." in rhs for f in ("fabs", "sqrt"))):
                self.parents[s.name] = [x.name for x in (of[:1] if code == "fdiv" else of) if is_sym(x)]
        return s

    def get(self, regions, avals) -> list:
        values = super().get(regions, avals)
        if self.speculate is not None:
            self.inputs += [x for v in values for x in np.ravel(v) if is_sym(x) and x.dtype.kind == "f"]
        return values

    def op(self, instr: str, a, b, dt, out=None) -> Sym:
        return self.new(f"{instr} {llvm_type(dt)} {self.ref(a, dt)}, {self.ref(b, dt)}", out or dt, (a, b))

    def select(self, p, a, b, dt) -> Sym:
        t = llvm_type(dt)
        return self.new(f"select i1 {self.ref(p, np.bool_)}, {t} {self.ref(a, dt)}, {t} {self.ref(b, dt)}", dt, (p, a, b))

    def bind(self, prim, args, params):
        name = prim.name
        if not any(is_sym(a) for a in args):  # constants fold at trace time
            with jax.ensure_compile_time_eval():
                return np.asarray(prim.bind(*args, **params))[()]
        if name in _IDENTITY:
            return args[0]
        if name == "reduce_precision":
            info = np.finfo(dtype_of(args[0]))
            if (params["exponent_bits"], params["mantissa_bits"]) != (info.nexp, info.nmant):
                raise Unfusable("reduce_precision to a narrower format")
            return args[0]
        if name == "convert_element_type":
            return self.cast(args[0], params["new_dtype"])
        dts = [dtype_of(a) for a in args]
        for dt in dts:
            llvm_type(dt)
        return self._scalar(name, args, dts, params)

    def _scalar(self, name: str, a: list, dts: list, params: dict):
        """One primitive on scalars ``a`` of dtypes ``dts``: by the group it belongs to."""
        dt = next(x.dtype for x in a if is_sym(x)) if name not in ("select_n", "clamp") else dts[-1]
        same = _identity(name, a, dt)
        if same is not None:
            return same
        for group in (self._arithmetic, self._logical, self._powers):
            out = group(name, a, dt, dts, params)
            if out is not None:
                return out
        if dt.kind != "f":
            raise Unfusable(f"primitive {name!r} on {dt}")
        return self._float(name, a, dt, params)

    def _arithmetic(self, name: str, a: list, dt, dts: list, params: dict):
        """``add``, ``sub``, ``mul``, ``div``, ``rem``, ``max``, ``min``, ``neg``, ``abs``, ``sign``
        (None for another primitive)."""
        flt, uns, boolean = dt.kind == "f", dt.kind == "u", dt == np.bool_
        if name == "mul" and flt:  # (−1)·y = −y and (−x)·y = −(x·y) to the bit: the product is shared with x·y
            for x, y in ((a[0], a[1]), (a[1], a[0])):
                if _is(x, -1.0):
                    return self._scalar("neg", [y], dts, {})
                if is_sym(x) and x.name in self.negated:
                    return self._scalar("neg", [self.op("fmul", self.negated[x.name], y, dt)], dts, {})
        if name in ("add", "add_any", "sub", "mul") and not boolean:
            return self.op(("f" if flt else "") + {"add_any": "add"}.get(name, name), a[0], a[1], dt)
        if name in ("div", "rem") and flt:
            return self.op("f" + name, a[0], a[1], dt)
        if name in ("div", "rem") and dt.kind in "iu":  # XLA: x / 0 = -1 (all ones), x % 0 = x
            zero = self.op("icmp eq", a[1], 0, dt, np.bool_)
            safe = self.select(zero, np.asarray(1, dt), a[1], dt)
            q = self.op(("u" if uns else "s") + name, a[0], safe, dt)
            return self.select(zero, np.asarray(-1).astype(dt) if name == "div" else a[0], q, dt)
        if name in ("max", "min"):
            if boolean:
                return self.op("or" if name == "max" else "and", a[0], a[1], dt)
            if flt:  # NaN-propagating
                c = self.op("fcmp " + ("ogt" if name == "max" else "olt"), a[0], a[1], dt, np.bool_)
                c = self.op("or", c, self.op("fcmp uno", a[0], a[0], dt, np.bool_), np.bool_)
                return self.select(c, a[0], a[1], dt)
            pre = "u" if uns else "s"
            return self.select(self.op(f"icmp {pre}{'gt' if name == 'max' else 'lt'}", a[0], a[1], dt, np.bool_),
                               a[0], a[1], dt)
        if name == "neg":
            if not flt:
                return self.op("sub", 0, a[0], dt)
            if is_sym(a[0]) and a[0].name in self.negated:
                return self.negated[a[0].name]
            out = self.new(f"fneg {llvm_type(dt)} {self.ref(a[0], dt)}", dt, a)
            self.negated[out.name] = a[0]
            return out
        if name == "abs":
            if flt:
                return self.call(f"llvm.fabs.{_suffix(dt)}", [a[0]], dt)
            return self.select(self.op("icmp slt", a[0], 0, dt, np.bool_), self.op("sub", 0, a[0], dt), a[0], dt)
        if name == "sign":
            if flt:  # keeps ±0 and NaN
                neg = self.select(self.op("fcmp olt", a[0], 0.0, dt, np.bool_), -1.0, a[0], dt)
                return self.select(self.op("fcmp ogt", a[0], 0.0, dt, np.bool_), 1.0, neg, dt)
            pos, neg = (self.op(f"icmp s{c}", a[0], 0, dt, np.bool_) for c in ("gt", "lt"))
            pos, neg = (self.new(f"zext i1 {x.name} to {llvm_type(dt)}", dt, (x,)) for x in (pos, neg))
            return self.op("sub", pos, neg, dt)
        return None

    def _logical(self, name: str, a: list, dt, dts: list, params: dict):
        """Comparisons, ``and``, ``or``, ``xor``, ``not``, ``select_n``, ``clamp`` (None for
        another primitive)."""
        flt, uns, boolean = dt.kind == "f", dt.kind == "u", dt == np.bool_
        if name in _FCMP:
            if flt:
                return self.op(f"fcmp {_FCMP[name]}", a[0], a[1], dt, np.bool_)
            cmp = _ICMP[name] if not (uns or boolean) or name in ("eq", "ne") else "u" + _ICMP[name][1:]
            out = self.op(f"icmp {cmp}", a[0], a[1], dt, np.bool_)
            if name == "eq" and is_sym(a[0]) and not is_sym(a[1]):
                self.equal[out.name] = (a[0].name, a[1])
            return out
        tests = [self.finite.get(x.name) if is_sym(x) else None for x in a]
        if name == "and" and boolean and None not in tests and tests[0].dtype == tests[1].dtype:
            # a conjunction of finiteness tests: the sum of their x − x (0, or NaN for an inf or NaN x) is not NaN
            return self._all_finite(self.op("fadd", tests[0], tests[1], tests[0].dtype))
        if name in ("and", "or", "xor") and not flt:
            return self.op(name, a[0], a[1], dt)
        if name == "not" and not flt:
            return self.op("xor", a[0], True if boolean else -1, dt)
        if name == "select_n":
            p, cases = a[0], a[1:]
            if dts[0] == np.bool_:
                x, k = self.equal.get(p.name, (None, None))
                if is_sym(cases[0]) and cases[0].name == x and _is(cases[1], k):  # x == k ? k : x is x
                    return cases[0]
                return self.select(p, cases[1], cases[0], dt)
            e = cases[-1]
            for k in range(len(cases) - 2, -1, -1):
                e = self.select(self.op("icmp eq", p, k, dts[0], np.bool_), cases[k], e, dt)
            return e
        if name == "clamp":  # clamp(lo, x, hi)
            return self._scalar("min", [self._scalar("max", [a[1], a[0]], dts, {}), a[2]], dts, {})
        return None

    def _powers(self, name: str, a: list, dt, dts: list, params: dict):
        """``integer_pow``, ``square`` and the shifts (None for another primitive)."""
        flt = dt.kind == "f"
        if name == "integer_pow":  # JAX's own sequence of products
            y, x, acc = int(params["y"]), a[0], None
            if y == 0:
                return np.asarray(1).astype(dt)[()]
            for bit in _bits(abs(y)):
                if bit is True:
                    acc = x if acc is None else self.op("fmul" if flt else "mul", acc, x, dt)
                else:
                    x = self.op("fmul" if flt else "mul", x, x, dt)
            return self.op("fdiv" if flt else "sdiv", 1, acc, dt) if y < 0 else acc
        if name == "square":
            return self.op("fmul" if flt else "mul", a[0], a[0], dt)
        if name in ("shift_left", "shift_right_arithmetic", "shift_right_logical") and not flt:
            return self.op({"shift_left": "shl", "shift_right_arithmetic": "ashr"}.get(name, "lshr"), a[0], a[1], dt)
        return None

    def _float(self, name: str, a: list, dt, params: dict):
        if name == "is_finite":
            if self.speculate is not None:  # taken as true, the operand summed (_source._speculated)
                self.tested.append(a[0])
                if self.level:  # inside a loop of the member loop's body: summed here
                    self.sum_tested()
                return np.True_
            return self._all_finite(self.op("fsub", a[0], a[0], dt))
        if name in _INTRINSIC:
            return self.call(f"llvm.{_INTRINSIC[name]}.{_suffix(dt)}", [a[0]], dt)
        if name in _LIBM:
            return self.call(name + ("f" if dt == np.float32 else ""), [a[0]], dt)
        if name == "rsqrt":
            return self.op("fdiv", 1.0, self.call(f"llvm.sqrt.{_suffix(dt)}", [a[0]], dt), dt)
        if name in ("pow", "atan2", "nextafter"):
            y = a[1] if dtype_of(a[1]) == dt else self.cast(a[1], dt)
            return self.call(name + ("f" if dt == np.float32 else ""), [a[0], y], dt)
        if name == "logistic":
            e = self.call("exp" + ("f" if dt == np.float32 else ""), [self._scalar("neg", a, [dt], {})], dt)
            return self.op("fdiv", 1.0, self.op("fadd", 1.0, e, dt), dt)
        if name == "round":
            how = "roundeven" if int(params["rounding_method"]) == 1 else "round"
            return self.call(f"llvm.{how}.{_suffix(dt)}", [a[0]], dt)
        raise Unfusable(f"primitive {name!r}")

    def sum_tested(self, lasting=frozenset()) -> None:
        """Add the operands of the finiteness tests taken as true since the last call, except those
        named in ``lasting`` (a tree of sums, then one ``fadd reassoc`` into the accumulator, which
        vectorizes as a reduction)."""
        slot, dt = self.speculate
        terms = [self.cast(x, dt) for x in self.tested if x.name not in lasting]
        self.tested = []
        if not terms:
            return
        while len(terms) > 1:
            terms = [self.op("fadd", *terms[k:k + 2], dt) if k + 1 < len(terms) else terms[k]
                     for k in range(0, len(terms), 2)]
        self.store(self.new(f"fadd reassoc {llvm_type(dt)} {lit(self.load(slot, dt))}, {self.ref(terms[0], dt)}", dt),
                   slot, dt)

    def close(self) -> None:
        if self.speculate is not None:
            self.sum_tested(self._lasting())
            self.inputs = []
        super().close()

    def _lasting(self) -> set:
        """The values of this member loop whose inf or NaN would reach what it leaves in its
        regions (through operations whose result is inf or NaN when that operand is: IEEE
        +, −, ×, ÷ by their numerator, negation, abs, sqrt, float casts), if every float it
        loaded from its regions does too; else none. Such an inf or NaN then lasts to the end of
        the steps, where the carry is tested (:func:`lpjax._ensemble._kernels._native._source._speculated`), so the
        value itself needs no test in every step."""
        seen, todo = set(), [v.name for (seg, _), v in self.held.items() if seg == self.segment and is_sym(v)]
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo += self.parents.get(name, ())
        return seen if all(x.name in seen for x in self.inputs) else set()

    def _all_finite(self, s: Sym) -> Sym:
        """``s`` (a sum of ``x − x`` terms) is not NaN: every ``x`` is finite."""
        out = self.op("fcmp ord", s, 0.0, s.dtype, np.bool_)
        self.finite[out.name] = s
        return out

    def binary(self, op: Callable, a, b):
        if op not in _BINARY:
            raise Unfusable(f"reduction by {op}")
        return self.bind(_BINARY[op], [a, b], {})

    def cast(self, x, dtype):
        dtype = np.dtype(dtype)
        llvm_type(dtype)
        if not is_sym(x):
            return np.asarray(x).astype(dtype)[()]
        x, src = self.here(x), x.dtype
        if src == dtype:
            return x
        s, t = llvm_type(src), llvm_type(dtype)
        if dtype == np.bool_:
            return self.op("fcmp une" if src.kind == "f" else "icmp ne", x, 0, src, np.bool_)
        if src.kind == "f" and dtype.kind == "f":
            return self.new(f"{'fpext' if dtype.itemsize > src.itemsize else 'fptrunc'} {s} {x.name} to {t}", dtype, (x,))
        if src.kind == "f":  # saturating, NaN to 0 (XLA's conversion)
            how = "fptoui" if dtype.kind == "u" else "fptosi"
            return self.call(f"llvm.{how}.sat.{t}.{_suffix(src)}", [x], src, dtype)
        if dtype.kind == "f":
            return self.new(f"{'uitofp' if src.kind in 'ub' else 'sitofp'} {s} {x.name} to {t}", dtype, (x,))
        if s == t:
            return Sym(x.name, dtype, x.seg)
        if dtype.itemsize < src.itemsize:
            return self.new(f"trunc {s} {x.name} to {t}", dtype, (x,))
        return self.new(f"{'zext' if src.kind in 'ub' else 'sext'} {s} {x.name} to {t}", dtype, (x,))

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


def _suffix(dt) -> str:
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
