"""The LLVM IR of a whole native kernel (:mod:`lpjax._ensemble._kernels._native`): ``run_chunks`` over the chunks
of members, each chunk's member loops for ``init``, the steps between saves (speculative for an
explicit step), ``observe`` at the saves and ``summary``, reading and writing the caller's
arrays. The operations are :mod:`lpjax._ensemble._kernels._native._rules`, the member loops
:mod:`lpjax._ensemble._kernels._native._ir`."""

from __future__ import annotations

import functools
import math
import types

import numpy as np

from .._entrywise import evaluate
from ._ir import Sym, is_sym, lit, llvm_type
from ._loops import uses
from ._context import IR
from ._pool import pool

__all__ = ["source"]

_I64 = np.dtype(np.int64)
_Lane = types.SimpleNamespace  # (the pieces on the current lane, for the pool)


def _unflat(flat: list, avals) -> list:
    """Flat scalars as object arrays of ``avals``' shapes."""
    out, k = [], 0
    for a in avals:
        e = np.empty(a.shape, object)
        for i in np.ndindex(a.shape):
            e[i], k = flat[k], k + 1
        out.append(e)
    return out


def _address(ctx: IR, base: str, index, dtype) -> str:
    """The address of ``base[index]`` (an i64 operand) of ``dtype``."""
    return ctx.new(f"getelementptr {llvm_type(dtype)}, ptr {base}, i64 {ctx.ref(index, _I64)}", _I64).name


def _index(ctx: IR, size: int, e: int, save=None, saves: int = 1):
    """The flat index of entry ``e`` of the current member (``lo + i``) in a members-first
    array of ``size`` entries a member (at save ``save`` of ``saves``, for observables)."""
    row = ctx.op("add", Sym("%lo", _I64), ctx.i if ctx.rows is None else ctx.fetch(ctx.rows, _I64), _I64)
    if save is not None:
        row = ctx.op("add", ctx.op("mul", row, saves, _I64), save, _I64)
    return ctx.op("add", ctx.op("mul", row, size, _I64), e, _I64)


def _read(ctx: IR, bases, avals, member: bool = True) -> list:
    """The entries of arrays (object arrays of ``avals``' shapes): the current member's of
    members-first arrays, or (``member=False``) shared ones."""
    out = []
    for base, a in zip(bases, avals):
        e, size = np.empty(a.shape, object), math.prod(a.shape)
        for k, i in enumerate(np.ndindex(a.shape)):
            at = _index(ctx, size, k) if member else k
            e[i] = ctx.load(_address(ctx, base, at, a.dtype), a.dtype, array=member)
        out.append(e)
    return out


def _write(ctx: IR, values, bases, sizes, save=None, saves: int = 1) -> None:
    """Flat ``(value, dtype)`` pairs into the current member's entries of members-first arrays."""
    k = 0
    for base, size in zip(bases, sizes):
        for e in range(size):
            x, dt = values[k + e]
            ctx.store(x, _address(ctx, base, _index(ctx, size, e, save, saves), dt), dt, array=True)
        k += size


def _speculates(step, save_every: int, speculate_every: int) -> bool:
    """Whether the steps between saves run speculatively (see :func:`_speculated`): a step
    without loops (an explicit method) that tests finiteness, and saves at least
    ``speculate_every`` steps apart (the carry is copied once per save)."""
    return save_every >= speculate_every and uses(step, ("is_finite",)) and not uses(step, ("while", "scan"))


def _speculated(ctx: IR, steps, carry, carry_avals, dtype, speculate: str) -> None:
    """``steps()`` with every finiteness test of the step taken as passed, which leaves the result
    code and the failed-step count alone without loading or storing them, while the tested values
    are summed over the chunk's members and steps (``fadd reassoc``: the sum vectorizes; whether it
    is finite does not depend on the order), except those whose inf or NaN would last in the
    carry (:meth:`IR._lasting <lpjax._ensemble._kernels._native._context.IR._lasting>`): the carry after the steps is
    summed instead. If the sum is not finite (an inf or NaN was tested,
    or the sum overflowed), the chunk's carry goes back to its copy from before the steps, and the
    steps run again as written; that chunk then runs as written to the end (``speculate``, a flag
    slot, is cleared). A chunk's results are therefore those of the steps as written."""
    saved, acc = ctx.new_regions(carry_avals), ctx.slot(dtype)
    tag = ctx.fresh("S")
    ctx.emit(f"br i1 {ctx.load(speculate, np.bool_).name}, label %{tag}f, label %{tag}e")
    ctx.label(f"{tag}f")
    ctx.members(lambda: ctx.put(saved, ctx.get(carry, carry_avals), carry_avals))
    ctx.store(np.zeros((), dtype), acc, dtype)
    ctx.speculate = (acc, np.dtype(dtype))
    steps()

    def test_carry():  # every float of the carry at the end of the steps (see IR._lasting)
        ctx.tested = [x for v, a in zip(ctx.get(carry, carry_avals), carry_avals) if a.dtype.kind == "f"
                      for x in np.ravel(v) if is_sym(x)]
        ctx.sum_tested()

    ctx.members(test_carry)
    ctx.speculate = None
    total = ctx.load(acc, dtype)
    bad = ctx.op("fcmp uno", ctx.op("fsub", total, total, dtype), 0.0, dtype, np.bool_)
    ctx.emit(f"br i1 {bad.name}, label %{tag}r, label %{tag}x")
    ctx.label(f"{tag}r")
    ctx.store(False, speculate, np.bool_)
    ctx.members(lambda: ctx.put(carry, ctx.get(saved, carry_avals), carry_avals))
    ctx.emit(f"br label %{tag}e")
    ctx.label(f"{tag}e")
    steps()
    ctx.emit(f"br label %{tag}x")
    ctx.label(f"{tag}x")


def _flush_denormals(ctx: IR) -> tuple[list, list]:
    """Instructions that set the x86 control register to flush denormal results and inputs to
    zero (as XLA:CPU runs), and that restore it."""
    ctx.decls |= {"declare void @llvm.x86.sse.stmxcsr(ptr)", "declare void @llvm.x86.sse.ldmxcsr(ptr)"}
    ctx.slots += ["  %csr.old = alloca i32", "  %csr.new = alloca i32"]
    enter = ["  call void @llvm.x86.sse.stmxcsr(ptr %csr.old)", "  %csr = load i32, ptr %csr.old",
             "  %csr.ftz = or i32 %csr, 32832", "  store i32 %csr.ftz, ptr %csr.new",
             "  call void @llvm.x86.sse.ldmxcsr(ptr %csr.new)"]
    return enter, ["  call void @llvm.x86.sse.ldmxcsr(ptr %csr.old)"]


def source(pieces: dict, avals: dict, n_save: int, save_every: int, batched: bool, chunk: int, split: bool,
           speculate_every: int, flush_denormals: bool = False) -> tuple[str, int]:
    """The kernel's LLVM IR, and the scratch it needs (slots of 8 bytes). ``run_chunks(lo, hi,
    B, args, scratch)`` runs the members ``lo … hi − 1`` of ``B`` through the whole run,
    ``chunk`` members at a time. ``args`` points to the C-ordered arrays ``Y`` (B, d), the
    member's arrays, the system's (members first if ``batched``), the summaries (B, …) and
    the observables (B, n_save + 1, …); ``scratch`` holds a chunk's carry and the values that
    pass between its member loops."""
    ctx = IR(chunk, split, flush_denormals)
    carry_avals = avals["carry"]
    obs_sizes = [math.prod(a.shape) for a in avals["obs"]]
    sum_sizes = [math.prod(a.shape) for a in avals["sum"]]
    Y, M, D, S, O = _arguments(ctx, [1, len(avals["mem"]), len(avals["dyn"]), len(sum_sizes), len(obs_sizes)])
    mem = _read(ctx, M, avals["mem"], member=False)
    shared = None if batched else _read(ctx, D, avals["dyn"], member=False)
    ctx.entry(mem + (shared or []))  # operations on these alone run once, here
    carry = ctx.new_regions(carry_avals)

    def inputs(with_carry: bool = True) -> list:
        dyn = _read(ctx, D, avals["dyn"]) if batched else shared
        return mem + dyn + (ctx.get(carry, carry_avals) if with_carry else [])

    def piece(name: str, args: list) -> list:
        """A piece's output scalars, flat, each as ``(value, dtype)``."""
        closed = pieces[name]
        outs = evaluate(ctx, closed.jaxpr, closed.consts, args)
        return [(ctx.cast(x, v.aval.dtype), np.dtype(v.aval.dtype)) for o, v in zip(outs, closed.jaxpr.outvars)
                for x in np.ravel(ctx.entries(o, v.aval.shape))]

    def init():
        c = _unflat([x for x, _ in piece("init", inputs(False) + _read(ctx, Y, [avals["y"]]))], carry_avals)
        ctx.put(carry, c, carry_avals)
        _write(ctx, piece("observe", inputs(False) + c), O, obs_sizes, 0, n_save + 1)

    def step():
        ctx.put(carry, _unflat([x for x, _ in piece("step", inputs())], carry_avals), carry_avals)

    def save(s):  # the observable at save s (an i64: 0 is the start)
        _write(ctx, piece("observe", inputs()), O, obs_sizes, s, n_save + 1)

    def observe(s):
        save(ctx.op("add", s, 1, _I64))

    def saves(first, last: int):  # the same observable at the saves first … last
        obs = piece("observe", inputs())
        ctx.counted(ctx.op("sub", last + 1, first, _I64),
                    lambda j: _write(ctx, obs, O, obs_sizes, ctx.op("add", first, j, _I64), n_save + 1))

    speculate = (ctx.slot(np.bool_) if "finished" not in pieces
                 and _speculates(pieces["step"].jaxpr, save_every, speculate_every) else None)

    def steps():
        ctx.counted(save_every, lambda _: ctx.members(step))

    def run(c):  # the chunk starting at member lo0 + c · chunk
        ctx.emit(f"%lo = add i64 %lo0, {lit(ctx.op('mul', c, chunk, _I64))}")
        ctx.emit("%left = sub i64 %hi0, %lo")
        ctx.emit(f"%short = icmp slt i64 %left, {chunk}")
        ctx.emit(f"%n = select i1 %short, i64 %left, i64 {chunk}")
        ctx.members(init)
        if speculate is None:
            ctx.counted(n_save, lambda s: (steps(), ctx.members(functools.partial(observe, s))))
        else:
            ctx.store(True, speculate, np.bool_)
            ctx.counted(n_save, lambda s: (_speculated(ctx, steps, carry, carry_avals, avals["y"].dtype, speculate),
                                           ctx.members(functools.partial(observe, s))))
        ctx.members(lambda: _write(ctx, piece("summary", inputs()), S, sum_sizes))

    if "finished" in pieces:  # members that finish early: a pool of lanes fed from a queue
        pool(ctx, _Lane(carry=(carry, carry_avals), init=init, step=step, observe=save, observe_from=saves,
                        finished=lambda: piece("finished", inputs())[0][0],
                        summary=lambda: _write(ctx, piece("summary", inputs()), S, sum_sizes)),
             chunk, n_save, save_every)
    else:
        ctx.emit(f"%chunks = sdiv i64 %span, {chunk}")
        ctx.counted(Sym("%chunks", _I64), run)
    text = _module(ctx, chunk, flush_denormals)  # places the scratch traffic: the last regions
    return text, ctx.scratch_slots


def _arguments(ctx: IR, counts: list) -> list:
    """The pointers in ``%args``, as ``counts`` of them per group (Y, member, system, summaries,
    observables)."""
    ptrs = [ctx.new(f"load ptr, ptr {ctx.new(f'getelementptr ptr, ptr %args, i64 {k}', _I64).name}", _I64).name
            for k in range(sum(counts))]
    return [ptrs[sum(counts[:j]):sum(counts[:j + 1])] for j in range(len(counts))]


def _module(ctx: IR, chunk: int, flush_denormals: bool) -> str:
    """The text of the module: declarations, then ``run_chunks`` around the body ``ctx`` wrote."""
    # with the flush, LLVM is told that denormals are flushed (no fold that holds only without it: a compare and
    # select into a min instruction, which tells a flushed subnormal from zero differently)
    mode = ' "denormal-fp-math"="preserve-sign,preserve-sign"' if flush_denormals else ""
    head = [f"define void @run_chunks(i64 %lo0, i64 %hi0, i64 %B, ptr noalias %args, ptr noalias %scratch) nounwind{mode} {{",
            "entry:", "  %width = sub i64 %hi0, %lo0", f"  %span = add i64 %width, {chunk - 1}"]
    enter, leave = _flush_denormals(ctx) if flush_denormals else ([], [])
    text = sorted(ctx.decls) + [""] + head + ctx.slots + enter + ctx.text() + leave + ["  ret void", "}", ""] + ctx.meta
    return "\n".join(text) + "\n"
