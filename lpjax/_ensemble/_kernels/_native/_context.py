"""The code context of :mod:`lpjax._ensemble._kernels._native`: the entrywise evaluator of
:mod:`lpjax._ensemble._kernels._entrywise` run with a context that writes LLVM IR, one
instruction per scalar operation on SSA values (:class:`Sym`): each primitive by its rule
(:mod:`._rules`), after the peephole rewrites; ``scan`` and ``while`` as loops over stack slots
(promoted to registers by LLVM), and ``cond`` as selects (as ``vmap`` does) or, around loops, as
a branch (:mod:`._loops`); and the speculation of explicit steps (which values' inf or NaN last,
decided from the operations' kinds, :meth:`IR.keeping`)."""

from __future__ import annotations

from typing import Callable, final

import jax
import numpy as np
from jax import lax

from .._entrywise import Unfusable
from ._ir import AbstractEmitter, Sym, dtype_of, is_sym, lit, llvm_type
from ._loops import CONTROL
from ._rules import RULES, Peephole, suffix

__all__ = ["IR", "Sym"]

_STRICT = frozenset({"fadd", "fsub", "fmul", "fdiv"})  # inf/NaN in, inf/NaN out (fdiv: by its numerator)
_BINARY = {lax.add: lax.add_p, lax.mul: lax.mul_p, lax.max: lax.max_p, lax.min: lax.min_p,
           lax.bitwise_and: lax.and_p, lax.bitwise_or: lax.or_p}


@final
class IR(AbstractEmitter):
    """The code context: :class:`lpjax._ensemble._kernels._native._ir.AbstractEmitter` with each
    primitive on scalars as LLVM instructions (its rule in :data:`RULES`, after the
    :class:`Peephole` rewrites), and the member program's loops
    (:mod:`lpjax._ensemble._kernels._native._loops`)."""

    control = CONTROL

    def __init__(self, chunk: int = 1, split: bool = True, flush: bool = False):
        super().__init__(chunk, split)
        self.flush = flush  # the kernel runs with denormals flushed (x86's control register), as XLA:CPU does
        self.peephole = Peephole()
        self.speculate = None  # (a stack slot, its dtype): is_finite is taken as true, its operands summed there
        self.tested: list = []  # the operands of those tests, not yet summed
        self.parents: dict = {}  # while speculating: a value's name -> the operands whose inf or NaN it keeps
        self.inputs: list = []  # while speculating: the float values this member loop loaded from regions

    # ----------------------------------------------------------------------- operations

    def keeping(self, s: Sym, operands) -> Sym:
        """``s``, whose result is inf or NaN whenever one of ``operands`` is (recorded while
        speculating: :meth:`_lasting`)."""
        if self.speculate is not None:
            self.parents[s.name] = [x.name for x in operands if is_sym(x)]
        return s

    def flushed(self, x, dt):
        """``x``, a subnormal flushed to ±0 where the kernel flushes denormals (``llvm.canonicalize``)."""
        return self.call(f"llvm.canonicalize.{suffix(dt)}", [x], dt) if self.flush and is_sym(x) else x

    def libm(self, name: str, args: list, dt, flush: bool = True) -> Sym:
        """The C library's ``name`` (``namef`` in float32) of ``args``, flushed (``flush``) as the
        arithmetic's operands are: the library reads a subnormal's bits (log of the smallest
        subnormal: −745.1, where the flushed operand gives −inf, as XLA)."""
        args = [self.flushed(x, dt) for x in args] if flush else args
        return self.call(name + ("f" if dt == np.float32 else ""), args, dt)

    def get(self, regions, avals) -> list:
        values = super().get(regions, avals)
        if self.speculate is not None:
            self.inputs += [x for v in values for x in np.ravel(v) if is_sym(x) and x.dtype.kind == "f"]
        return values

    def op(self, instr: str, a, b, dt, out=None) -> Sym:
        s = self.new(f"{instr} {llvm_type(dt)} {self.ref(a, dt)}, {self.ref(b, dt)}", out or dt, (a, b))
        return self.keeping(s, (a,) if instr == "fdiv" else (a, b)) if instr in _STRICT else s

    def select(self, p, a, b, dt) -> Sym:
        t = llvm_type(dt)
        return self.new(f"select i1 {self.ref(p, np.bool_)}, {t} {self.ref(a, dt)}, {t} {self.ref(b, dt)}", dt, (p, a, b))

    def bind(self, prim, args, params):
        if not any(is_sym(a) for a in args):  # constants fold at trace time
            with jax.ensure_compile_time_eval():
                return np.asarray(prim.bind(*args, **params))[()]
        dts = [dtype_of(a) for a in args]
        for dt in dts:
            llvm_type(dt)
        return self.apply(prim.name, list(args), dts, params)

    def apply(self, name: str, a: list, dts: list, params=None):
        """The primitive ``name`` on scalars ``a`` of dtypes ``dts``: a peephole rewrite, else its
        rule."""
        if name not in RULES:
            raise Unfusable(f"primitive {name!r}")
        dt = next(x.dtype for x in a if is_sym(x)) if name not in ("select_n", "clamp") else dts[-1]
        out = self.peephole.rewrite(self, name, a, dt, dts)
        if out is None:
            out = RULES[name](self, a, dt, dts, params or {}, name)
            self.peephole.note(name, a, dt, out)
        return out

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
            how = "fpext" if dtype.itemsize > src.itemsize else "fptrunc"
            return self.keeping(self.new(f"{how} {s} {x.name} to {t}", dtype, (x,)), (x,))
        if src.kind == "f":  # saturating, NaN to 0 (XLA's conversion)
            how = "fptoui" if dtype.kind == "u" else "fptosi"
            return self.call(f"llvm.{how}.sat.{t}.{suffix(src)}", [x], src, dtype)
        if dtype.kind == "f":
            return self.new(f"{'uitofp' if src.kind in 'ub' else 'sitofp'} {s} {x.name} to {t}", dtype, (x,))
        if s == t:
            return Sym(x.name, dtype, x.seg)
        if dtype.itemsize < src.itemsize:
            return self.new(f"trunc {s} {x.name} to {t}", dtype, (x,))
        return self.new(f"{'zext' if src.kind in 'ub' else 'sext'} {s} {x.name} to {t}", dtype, (x,))
