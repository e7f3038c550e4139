"""The code context of :mod:`lpjax._native`: the entrywise evaluator of :mod:`lpjax._soa` run
with a context that writes LLVM IR, one instruction per scalar operation on SSA values
(:class:`Sym`), ``scan`` and ``while`` as loops over stack slots (promoted to registers by
LLVM), and ``cond`` as selects (as ``vmap`` does) or, around loops, as a branch. Operations
follow XLA's semantics without reassociation or contraction (plain IEEE instructions, no
fast-math flags): NaN-propagating ``max``/``min``, saturating float-to-int conversion, integer
division by zero defined."""

from __future__ import annotations

from typing import Callable

import jax
import jax.extend.core as jcore
import numpy as np
from jax import lax

from ._soa import Context, Unfusable, _scan_operands, evaluate
from ._soa_rules import _is_entries

__all__ = ["Sym", "IR", "lit", "llvm_type"]

_TYPES = {np.dtype(k): v for k, v in (("float64", "double"), ("float32", "float"), ("int64", "i64"),
                                      ("int32", "i32"), ("uint32", "i32"), ("int8", "i8"), ("uint8", "i8"),
                                      ("bool", "i1"))}


class Sym:
    """A scalar SSA value of the generated code, and the member loop (``seg``) that defines
    it (None: defined outside every member loop, the same for all members)."""

    __slots__ = ("name", "dtype", "seg")

    def __init__(self, name: str, dtype, seg=None):
        self.name, self.dtype, self.seg = name, np.dtype(dtype), seg

    def __repr__(self):
        return f"Sym({self.name}: {self.dtype})"


def _is_sym(x) -> bool:
    return isinstance(x, Sym)


def _dtype(x) -> np.dtype:
    return x.dtype if _is_sym(x) else np.asarray(x).dtype


def llvm_type(dt) -> str:
    """The LLVM type that holds ``dt`` (unsigned integers share their signed type)."""
    dt = np.dtype(dt)
    if dt not in _TYPES:
        raise Unfusable(f"dtype {dt}")
    return _TYPES[dt]


def lit(x, dtype=None) -> str:
    """A value as an operand: an SSA name, or a constant of ``dtype`` (default: its own)."""
    if _is_sym(x):
        return x.name
    a = np.asarray(x)
    dt = np.dtype(dtype or a.dtype)
    llvm_type(dt)
    v = a.astype(dt).item()
    if dt == np.bool_:
        return "true" if v else "false"
    if dt.kind == "f":  # the exact bits, as a double (LLVM writes float constants as doubles too)
        return f"0x{np.float64(v).view(np.uint64):016X}"
    return str(int(a.astype(dt).view(dt.str.replace("u", "i")))) if dt.kind == "u" else str(int(v))


_FCMP = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
_ICMP = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
_LIBM = frozenset("exp log sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh expm1 log1p erf erfc lgamma "
                  "exp2 cbrt".split())
_INTRINSIC = {"sqrt": "sqrt", "floor": "floor", "ceil": "ceil", "abs": "fabs"}
_IDENTITY = frozenset({"copy", "copy_p", "stop_gradient"})
_BINARY = {lax.add: lax.add_p, lax.mul: lax.mul_p, lax.max: lax.max_p, lax.min: lax.min_p,
           lax.bitwise_and: lax.and_p, lax.bitwise_or: lax.or_p}


class IR(Context):
    """The evaluator's context for LLVM IR: entries are :class:`Sym` values (or trace-time
    constants), and every operation appends instructions to :attr:`lines`. Stack slots go to
    :attr:`slots` (the entry block), declarations to :attr:`decls`, loop metadata to
    :attr:`meta`.

    **Member loops.** :meth:`members` runs a body for each member of a chunk (``%n`` members,
    the i-th at :attr:`i`) as a loop whose accesses to the chunk's arrays touch member i alone,
    marked parallel for LLVM's vectorizer. A loop of the member program at the top of such a
    body (``split``) is turned inside out: the member loop closes, the loop runs over the
    chunk with a member loop inside each pass (a ``while`` as masked passes over the chunk,
    while any member's condition holds, as ``vmap`` does), and a new member loop goes on
    after it. Values that cross from one member loop into a later one pass through the
    scratch: a region of ``chunk`` 8-byte slots each (the store is added to the loop that
    defines the value, the load at the top of the loop that uses it)."""

    def __init__(self, chunk: int = 1, split: bool = True):
        super().__init__(None)
        self.lines, self.slots, self.decls, self.meta, self.count = [], [], set(), [], 0
        self.chunk, self.split, self.regions = chunk, split, 0
        self.segment, self.level, self.i, self.tag, self.loops = None, 0, None, "", 0
        self.seg_i, self.seg_tag, self.spills, self.reloads, self.spilled, self.reloaded = {}, {}, {}, {}, {}, {}

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def fresh(self, stem: str = "v") -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def new(self, rhs: str, dtype) -> Sym:
        s = Sym(f"%{self.fresh()}", dtype, self.segment)
        self.emit(f"{s.name} = {rhs}")
        return s

    def slot(self, dtype) -> str:
        """A stack slot of ``dtype`` (in the entry block), its address."""
        name = f"%{self.fresh('s')}"
        self.slots.append(f"  {name} = alloca {llvm_type(dtype)}")
        return name

    def ref(self, x, dtype=None) -> str:
        """``x`` as an operand here (see :meth:`here`)."""
        return lit(self.here(x), dtype)

    def load(self, address: str, dtype, array: bool = False) -> Sym:
        """A load; ``array``: from a chunk or global array (tagged with the member loop's group)."""
        return self.new(f"load {llvm_type(dtype)}, ptr {address}{self.tag if array else ''}", dtype)

    def store(self, x, address: str, dtype, array: bool = False) -> None:
        x = self.cast(x, dtype)
        self.emit(f"store {llvm_type(dtype)} {self.ref(x, dtype)}, ptr {address}{self.tag if array else ''}")

    def call(self, fn: str, args: list, dt, ret=None) -> Sym:
        """``fn`` (a libm function or an ``llvm.`` intrinsic) of ``args``, all of ``dt``."""
        t, r = llvm_type(dt), llvm_type(ret or dt)
        self.decls.add(f"declare {r} @{fn}({', '.join([t] * len(args))})")
        return self.new(f"call {r} @{fn}({', '.join(f'{t} {self.ref(a, dt)}' for a in args)})", ret or dt)

    # ----------------------------------------------------------------------- member loops

    def region(self) -> int:
        """A new region of the scratch (``chunk`` slots of 8 bytes): its index."""
        self.regions += 1
        return self.regions - 1

    def element(self, region: int, dtype, index=None) -> str:
        """The address of the slot of member ``index`` (default: :attr:`i`) in ``region``."""
        base = self.new(f"getelementptr i8, ptr %scratch, i64 {8 * self.chunk * region}", np.int64).name
        return self.new(f"getelementptr {llvm_type(dtype)}, ptr {base}, i64 {lit(index or self.i)}", np.int64).name

    def get(self, regions, avals) -> list:
        """This member's values in ``regions`` (object arrays of region indices)."""
        out = []
        for r, a in zip(regions, avals):
            v = np.empty(a.shape, object)
            for i in np.ndindex(a.shape):
                v[i] = self.load(self.element(r[i], a.dtype), a.dtype, array=True)
            out.append(v)
        return out

    def put(self, regions, values, avals) -> None:
        for r, v, a in zip(regions, values, avals):
            e = self.entries(v, a.shape)
            for i in np.ndindex(a.shape):
                self.store(e[i], self.element(r[i], a.dtype), a.dtype, array=True)

    def new_regions(self, avals) -> list:
        out = []
        for a in avals:
            r = np.empty(a.shape, object)
            for i in np.ndindex(a.shape):
                r[i] = self.region()
            out.append(r)
        return out

    def here(self, x):
        """``x`` usable in the current member loop: a value of an earlier one is stored to the
        scratch at the end of that loop and loaded at the top of this one."""
        if not _is_sym(x) or x.seg is None or x.seg == self.segment:
            return x
        key = (x.name, self.segment)
        if key not in self.reloaded:
            if x.name not in self.spilled:
                k = self.spilled[x.name] = self.region()
                base, at = self.fresh("a"), self.fresh("a")
                t = llvm_type(x.dtype)
                self.spills[x.seg] += [f"  %{base} = getelementptr i8, ptr %scratch, i64 {8 * self.chunk * k}",
                                       f"  %{at} = getelementptr {t}, ptr %{base}, i64 {self.seg_i[x.seg].name}",
                                       f"  store {t} {x.name}, ptr %{at}{self.seg_tag[x.seg]}"]
            k, t = self.spilled[x.name], llvm_type(x.dtype)
            base, at, v = self.fresh("a"), self.fresh("a"), Sym(f"%{self.fresh()}", x.dtype, self.segment)
            self.reloads[self.segment] += [f"  %{base} = getelementptr i8, ptr %scratch, i64 {8 * self.chunk * k}",
                                           f"  %{at} = getelementptr {t}, ptr %{base}, i64 {self.i.name}",
                                           f"  {v.name} = load {t}, ptr %{at}{self.tag}"]
            self.reloaded[key] = v
        return self.reloaded[key]

    def members(self, body: Callable[[], None]) -> None:
        """``body()`` for each member of the chunk (see the class docstring)."""
        self.open()
        body()
        self.close()

    def open(self) -> None:
        """Start a member loop (a new segment)."""
        assert self.segment is None, "member loops do not nest"
        self.loops += 1
        seg = self.loops
        g, loop, par = (f"!{3 * seg + k}" for k in range(3))
        self.meta += [f"{g} = distinct !{{}}", f"{loop} = distinct !{{{loop}, {par}}}",
                      f'{par} = !{{!"llvm.loop.parallel_accesses", {g}}}']
        counter = self.slot(np.int64)
        self.store(np.int64(0), counter, np.int64)
        self.emit(f"br label %M{seg}h")
        self.label(f"M{seg}h")
        self.segment = seg
        self.tag = self.seg_tag[seg] = f", !llvm.access.group {g}"
        self.i = self.load(counter, np.int64)
        go = self.new(f"icmp slt i64 {self.i.name}, %n", np.bool_)
        self.emit(f"br i1 {go.name}, label %M{seg}b, label %M{seg}x")
        self.label(f"M{seg}b")
        self.seg_i[seg], self.spills[seg], self.reloads[seg] = self.i, [], []
        self.lines.append(("reload", seg))
        self._counter = counter

    def close(self) -> None:
        """End the current member loop."""
        seg, counter = self.segment, self._counter
        self.lines.append(("spill", seg))
        nxt = self.new(f"add i64 {self.i.name}, 1", np.int64)
        self.emit(f"store i64 {nxt.name}, ptr {counter}")
        self.emit(f"br label %M{seg}h, !llvm.loop !{3 * seg + 1}")
        self.label(f"M{seg}x")
        self.segment, self.i, self.tag = None, None, ""

    def splits(self) -> bool:
        """Whether a loop met now turns inside out (at the top of a member loop's body)."""
        return self.split and self.segment is not None and self.level == 0

    def text(self) -> list:
        """:attr:`lines` with the scratch traffic between member loops in place."""
        out = []
        for line in self.lines:
            if isinstance(line, tuple):
                out += (self.reloads if line[0] == "reload" else self.spills)[line[1]]
            else:
                out.append(line)
        return out

    # ----------------------------------------------------------------------- operations

    def op(self, instr: str, a, b, dt, out=None) -> Sym:
        return self.new(f"{instr} {llvm_type(dt)} {self.ref(a, dt)}, {self.ref(b, dt)}", out or dt)

    def select(self, p, a, b, dt) -> Sym:
        t = llvm_type(dt)
        return self.new(f"select i1 {self.ref(p, np.bool_)}, {t} {self.ref(a, dt)}, {t} {self.ref(b, dt)}", dt)

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
        dts = [_dtype(a) for a in args]
        for dt in dts:
            llvm_type(dt)
        return self._scalar(name, args, dts, params)

    def _scalar(self, name: str, a: list, dts: list, params: dict):
        dt = next(x.dtype for x in a if _is_sym(x)) if name not in ("select_n", "clamp") else dts[-1]
        flt, uns, boolean = dt.kind == "f", dt.kind == "u", dt == np.bool_
        same = _identity(name, a, dt)
        if same is not None:
            return same
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
            return self.new(f"fneg {llvm_type(dt)} {self.ref(a[0], dt)}", dt) if flt else self.op("sub", 0, a[0], dt)
        if name == "abs":
            if flt:
                return self.call(f"llvm.fabs.{_suffix(dt)}", [a[0]], dt)
            return self.select(self.op("icmp slt", a[0], 0, dt, np.bool_), self.op("sub", 0, a[0], dt), a[0], dt)
        if name == "sign":
            if flt:  # keeps ±0 and NaN
                neg = self.select(self.op("fcmp olt", a[0], 0.0, dt, np.bool_), -1.0, a[0], dt)
                return self.select(self.op("fcmp ogt", a[0], 0.0, dt, np.bool_), 1.0, neg, dt)
            pos = self.new(f"zext i1 {self.op('icmp sgt', a[0], 0, dt, np.bool_).name} to {llvm_type(dt)}", dt)
            neg = self.new(f"zext i1 {self.op('icmp slt', a[0], 0, dt, np.bool_).name} to {llvm_type(dt)}", dt)
            return self.op("sub", pos, neg, dt)
        if name in _FCMP:
            if flt:
                return self.op(f"fcmp {_FCMP[name]}", a[0], a[1], dt, np.bool_)
            cmp = _ICMP[name] if not (uns or boolean) or name in ("eq", "ne") else "u" + _ICMP[name][1:]
            return self.op(f"icmp {cmp}", a[0], a[1], dt, np.bool_)
        if name in ("and", "or", "xor") and not flt:
            return self.op(name, a[0], a[1], dt)
        if name == "not" and not flt:
            return self.op("xor", a[0], True if boolean else -1, dt)
        if name == "select_n":
            p, cases = a[0], a[1:]
            if dts[0] == np.bool_:
                return self.select(p, cases[1], cases[0], dt)
            e = cases[-1]
            for k in range(len(cases) - 2, -1, -1):
                e = self.select(self.op("icmp eq", p, k, dts[0], np.bool_), cases[k], e, dt)
            return e
        if name == "clamp":  # clamp(lo, x, hi)
            return self._scalar("min", [self._scalar("max", [a[1], a[0]], dts, {}), a[2]], dts, {})
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
        if not flt:
            raise Unfusable(f"primitive {name!r} on {dt}")
        return self._float(name, a, dt, params)

    def _float(self, name: str, a: list, dt, params: dict):
        if name == "is_finite":
            return self.op("fcmp one", self.call(f"llvm.fabs.{_suffix(dt)}", [a[0]], dt), np.inf, dt, np.bool_)
        if name in _INTRINSIC:
            return self.call(f"llvm.{_INTRINSIC[name]}.{_suffix(dt)}", [a[0]], dt)
        if name in _LIBM:
            return self.call(name + ("f" if dt == np.float32 else ""), [a[0]], dt)
        if name == "rsqrt":
            return self.op("fdiv", 1.0, self.call(f"llvm.sqrt.{_suffix(dt)}", [a[0]], dt), dt)
        if name in ("pow", "atan2", "nextafter"):
            y = a[1] if _dtype(a[1]) == dt else self.cast(a[1], dt)
            return self.call(name + ("f" if dt == np.float32 else ""), [a[0], y], dt)
        if name == "logistic":
            e = self.call("exp" + ("f" if dt == np.float32 else ""), [self.new(f"fneg {llvm_type(dt)} {self.ref(a[0])}", dt)], dt)
            return self.op("fdiv", 1.0, self.op("fadd", 1.0, e, dt), dt)
        if name == "round":
            how = "roundeven" if int(params["rounding_method"]) == 1 else "round"
            return self.call(f"llvm.{how}.{_suffix(dt)}", [a[0]], dt)
        raise Unfusable(f"primitive {name!r}")

    def binary(self, op: Callable, a, b):
        if op not in _BINARY:
            raise Unfusable(f"reduction by {op}")
        return self.bind(_BINARY[op], [a, b], {})

    def cast(self, x, dtype):
        dtype = np.dtype(dtype)
        llvm_type(dtype)
        if not _is_sym(x):
            return np.asarray(x).astype(dtype)[()]
        x, src = self.here(x), x.dtype
        if src == dtype:
            return x
        s, t = llvm_type(src), llvm_type(dtype)
        if dtype == np.bool_:
            return self.op("fcmp une" if src.kind == "f" else "icmp ne", x, 0, src, np.bool_)
        if src.kind == "f" and dtype.kind == "f":
            return self.new(f"{'fpext' if dtype.itemsize > src.itemsize else 'fptrunc'} {s} {x.name} to {t}", dtype)
        if src.kind == "f":  # saturating, NaN to 0 (XLA's conversion)
            how = "fptoui" if dtype.kind == "u" else "fptosi"
            return self.call(f"llvm.{how}.sat.{t}.{_suffix(src)}", [x], src, dtype)
        if dtype.kind == "f":
            return self.new(f"{'uitofp' if src.kind in 'ub' else 'sitofp'} {s} {x.name} to {t}", dtype)
        if s == t:
            return Sym(x.name, dtype)
        if dtype.itemsize < src.itemsize:
            return self.new(f"trunc {s} {x.name} to {t}", dtype)
        return self.new(f"{'zext' if src.kind in 'ub' else 'sext'} {s} {x.name} to {t}", dtype)

    # ----------------------------------------------------------------------- loops

    def carry(self, values, avals) -> list:
        """Stack slots for a loop's carry (object arrays of addresses), initialised to ``values``."""
        out = []
        for v, a in zip(values, avals):
            e, s = self.entries(v, a.shape), np.empty(a.shape, object)
            for i in np.ndindex(a.shape):
                s[i] = self.slot(a.dtype)
                self.store(e[i], s[i], a.dtype)
            out.append(s)
        return out

    def read(self, slots, avals) -> list:
        out = []
        for s, a in zip(slots, avals):
            v = np.empty(a.shape, object)
            for i in np.ndindex(a.shape):
                v[i] = self.load(s[i], a.dtype)
            out.append(v)
        return out

    def write(self, slots, values, avals) -> None:
        for s, v, a in zip(slots, values, avals):
            e = self.entries(v, a.shape)
            for i in np.ndindex(a.shape):
                self.store(e[i], s[i], a.dtype)

    def counted(self, length, body: Callable, meta: str = "") -> None:
        """``body(i)`` for ``i`` in ``0 … length − 1`` (an i64 operand): a loop whose latch
        carries ``meta`` (loop metadata)."""
        counter, tag = self.slot(np.int64), self.fresh("L")
        self.store(np.int64(0), counter, np.int64)
        self.emit(f"br label %{tag}h")
        self.label(f"{tag}h")
        i = self.load(counter, np.int64)
        go = self.new(f"icmp slt i64 {i.name}, {lit(length, np.int64)}", np.bool_)
        self.emit(f"br i1 {go.name}, label %{tag}b, label %{tag}x")
        self.label(f"{tag}b")
        body(i)
        self.store(self.op("add", i, 1, np.int64), counter, np.int64)
        self.emit(f"br label %{tag}h{meta}")
        self.label(f"{tag}x")


def _is(x, value) -> bool:
    """Whether ``x`` is the constant ``value`` (with its sign, for a float zero)."""
    if _is_sym(x):
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
            if not _is_sym(x):
                return y if bool(x) == (name == "and") else np.bool_(x)
    if name == "select_n" and not _is_sym(a[0]):
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


def _has_loops(jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("while", "scan"):
            return True
        if any(_has_loops(sub) for sub in jcore.jaxprs_in_params(eqn.params)):
            return True
    return False


def _scan(ctx: IR, eqn, vals):
    p = eqn.params
    body = p["jaxpr"]
    consts, init, xs = _scan_operands(p, vals)
    ncarry, length = len(init), p["length"]
    carry_avals = [v.aval for v in body.jaxpr.invars[len(consts):len(consts) + ncarry]]
    y_avals = [v.aval for v in body.jaxpr.outvars[ncarry:]]
    if xs or y_avals:  # unrolled: the indices are known
        carry, ys = list(init), [np.empty((length, *a.shape), object) for a in y_avals]
        for t in (range(length - 1, -1, -1) if p["reverse"] else range(length)):
            outs = evaluate(ctx, body.jaxpr, body.consts, list(consts) + carry + [x[t] for x in xs])
            carry = outs[:ncarry]
            for y, o, a in zip(ys, outs[ncarry:], y_avals):
                y[t] = ctx.entries(o, a.shape)
        return carry + ys

    def run(carry):
        return evaluate(ctx, body.jaxpr, body.consts, list(consts) + carry)

    if ctx.splits():  # passes over the chunk, a member loop in each
        regions = ctx.new_regions(carry_avals)
        ctx.put(regions, init, carry_avals)
        ctx.close()
        ctx.counted(length, lambda _: ctx.members(lambda: ctx.put(regions, run(ctx.get(regions, carry_avals)),
                                                                  carry_avals)))
        ctx.open()
        return ctx.get(regions, carry_avals)
    slots = ctx.carry(init, carry_avals)
    ctx.level += 1
    ctx.counted(length, lambda _: ctx.write(slots, run(ctx.read(slots, carry_avals)), carry_avals))
    ctx.level -= 1
    return ctx.read(slots, carry_avals)


def _while(ctx: IR, eqn, vals):
    p = eqn.params
    cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    avals = [v.aval for v in bj.jaxpr.invars[nb:]]

    def cond(carry):
        (go,) = evaluate(ctx, cj.jaxpr, cj.consts, list(vals[:nc]) + carry)
        go = np.asarray(go, object).reshape(()).item()
        if not _is_sym(go):
            raise Unfusable("a while loop whose condition does not depend on the member")
        return go

    def body(carry):
        return evaluate(ctx, bj.jaxpr, bj.consts, list(vals[nc:nc + nb]) + carry)

    if ctx.splits():
        return _masked_while(ctx, vals[nc + nb:], avals, cond, body)
    slots = ctx.carry(vals[nc + nb:], avals)  # a member's own loop: it iterates until its own condition fails
    tag = ctx.fresh("W")
    ctx.level += 1
    ctx.emit(f"br label %{tag}h")
    ctx.label(f"{tag}h")
    carry = ctx.read(slots, avals)
    ctx.emit(f"br i1 {cond(carry).name}, label %{tag}b, label %{tag}x")
    ctx.label(f"{tag}b")
    ctx.write(slots, body(carry), avals)
    ctx.emit(f"br label %{tag}h")
    ctx.label(f"{tag}x")
    ctx.level -= 1
    return carry


def _masked_while(ctx: IR, init, avals, cond, body):
    """A while loop as passes over the chunk while any member's condition holds: each pass
    runs the body for every member and keeps the new carry of those whose condition held
    (their flag), so a member's values do not change once its condition fails."""
    regions, flag, anyone = ctx.new_regions(avals), ctx.region(), ctx.slot(np.bool_)
    bool_ = np.dtype(np.bool_)
    ctx.put(regions, init, avals)
    ctx.close()

    def flagged(carry):  # the member's flag for the next pass, and the chunk's "any"
        go = cond(carry)
        ctx.store(go, ctx.element(flag, bool_), bool_, array=True)
        ctx.store(ctx.op("or", ctx.load(anyone, bool_), go, bool_), anyone, bool_)

    ctx.store(False, anyone, bool_)
    ctx.members(lambda: flagged(ctx.get(regions, avals)))
    tag = ctx.fresh("W")
    ctx.emit(f"br label %{tag}h")
    ctx.label(f"{tag}h")
    more = ctx.load(anyone, bool_)
    ctx.emit(f"br i1 {more.name}, label %{tag}b, label %{tag}x")
    ctx.label(f"{tag}b")
    ctx.store(False, anyone, bool_)

    def one_pass():
        carry = ctx.get(regions, avals)
        go = ctx.load(ctx.element(flag, bool_), bool_, array=True)
        new = body(carry)
        kept = []
        for n, c, a in zip(new, carry, avals):
            e, out = ctx.entries(n, a.shape), np.empty(a.shape, object)
            for i in np.ndindex(a.shape):
                out[i] = ctx.select(go, e[i], c[i], a.dtype)
            kept.append(out)
        ctx.put(regions, kept, avals)
        flagged(kept)

    ctx.members(one_pass)
    ctx.emit(f"br label %{tag}h")
    ctx.label(f"{tag}x")
    ctx.open()
    return ctx.get(regions, avals)


def _cond(ctx: IR, eqn, vals):
    index, ops = vals[0], vals[1:]
    branches = eqn.params["branches"]
    if not _is_entries(index):
        b = branches[int(np.clip(int(index), 0, len(branches) - 1))]
        return evaluate(ctx, b.jaxpr, b.consts, list(ops))
    idx = np.asarray(index, object).reshape(()).item()
    avals = [v.aval for v in eqn.outvars]
    if not any(_has_loops(b.jaxpr) for b in branches):  # every branch, then a select (vmap's way; it vectorizes)
        outs = [evaluate(ctx, b.jaxpr, b.consts, list(ops)) for b in branches]
        result = []
        for k, a in enumerate(avals):
            es, out = [ctx.entries(o[k], a.shape) for o in outs], np.empty(a.shape, object)
            for i in np.ndindex(a.shape):
                out[i] = ctx.bind(lax.select_n_p, [idx] + [e[i] for e in es], {})
            result.append(out)
        return result
    slots = [np.empty(a.shape, object) for a in avals]
    for s, a in zip(slots, avals):
        for i in np.ndindex(a.shape):
            s[i] = ctx.slot(a.dtype)
    tag, dt = ctx.fresh("C"), _dtype(idx)
    if dt == np.bool_:
        idx = ctx.cast(idx, np.int32)
    clamped = ctx._scalar("clamp", [0, idx, len(branches) - 1], [_dtype(idx)] * 3, {})
    cases = " ".join(f"{llvm_type(_dtype(idx))} {k}, label %{tag}b{k}" for k in range(len(branches) - 1))
    ctx.emit(f"switch {llvm_type(_dtype(idx))} {lit(clamped)}, label %{tag}b{len(branches) - 1} [{cases}]")
    ctx.level += 1
    for k, b in enumerate(branches):
        ctx.label(f"{tag}b{k}")
        ctx.write(slots, evaluate(ctx, b.jaxpr, b.consts, list(ops)), avals)
        ctx.emit(f"br label %{tag}x")
    ctx.label(f"{tag}x")
    ctx.level -= 1
    return ctx.read(slots, avals)


IR.control = {"scan": _scan, "while": _while, "cond": _cond}
