"""The native kernel's run of members that finish early (:mod:`lpjax._ensemble._kernels._native`): a
pool of lanes fed from a queue of members.

A member program whose ``finished(dyn_m, carry)`` is not None (a terminal event) has members
that are done before the end, their steps leaving their carry as it is. The kernel then keeps
``chunk`` lanes busy: each lane holds a member, its row in the caller's arrays and its own step
count, and the steps' member loops run over the running lanes only. After each step, the lanes
whose member is done (finished, or at the last step) write the saves their member has left (its
carry no longer changes) and its summary, are swapped behind the running lanes, and are given
the next members of the queue, which start at their own step 0. A save falls at each member's
own step count (the members of a pool are at different steps). The run's cost follows the
members' own lengths, whatever their order; its results are those of the members run alone.
"""

from __future__ import annotations

import numpy as np

from ._context import IR
from ._values import Sym

__all__ = ["pool"]

_I64 = np.dtype(np.int64)


def _if(ctx: IR, flag, body) -> None:
    """``body()`` where ``flag`` (an i1 value) holds."""
    tag = ctx.fresh("P")
    ctx.emit(f"br i1 {ctx.ref(flag, np.bool_)}, label %{tag}t, label %{tag}x")
    ctx.label(f"{tag}t")
    body()
    ctx.emit(f"br label %{tag}x")
    ctx.label(f"{tag}x")


def _members_where(ctx: IR, flag: int, body) -> None:
    """``body()`` for each running lane whose ``flag`` region is set: a member loop with a branch
    (its loops per member)."""
    def each():
        ctx.level += 1
        _if(ctx, ctx.fetch(flag, np.bool_), body)
        ctx.level -= 1

    ctx.members(each)


def _swap_out(ctx: IR, flag: int, regions: list, running: str) -> None:
    """Swap each running lane whose ``flag`` region is set with the last running lane, in every
    region of ``regions`` (``(region, dtype)``), and take one from ``running`` (a stack slot):
    a scalar pass over the running lanes."""
    i, m, tag = ctx.slot(_I64), ctx.slot(_I64), ctx.fresh("F")
    ctx.store(np.int64(0), i, _I64)
    ctx.store(ctx.load(running, _I64), m, _I64)
    ctx.emit(f"br label %{tag}h")
    ctx.label(f"{tag}h")
    at, last = ctx.load(i, _I64), ctx.load(m, _I64)
    ctx.emit(f"br i1 {ctx.op('icmp slt', at, last, _I64, np.bool_).name}, label %{tag}b, label %{tag}x")
    ctx.label(f"{tag}b")
    done = ctx.op("icmp ne", ctx.load(ctx.element(flag, _I64, at), _I64), 0, _I64, np.bool_)
    ctx.emit(f"br i1 {done.name}, label %{tag}s, label %{tag}n")
    ctx.label(f"{tag}n")
    ctx.store(ctx.op("add", at, 1, _I64), i, _I64)
    ctx.emit(f"br label %{tag}h")
    ctx.label(f"{tag}s")
    other = ctx.op("sub", last, 1, _I64)
    ctx.store(other, m, _I64)
    for region, dt in regions + [(flag, _I64)]:
        a, b = ctx.element(region, dt, at), ctx.element(region, dt, other)
        x, y = ctx.load(a, dt), ctx.load(b, dt)
        ctx.store(y, a, dt)
        ctx.store(x, b, dt)
        ctx.stores += 1  # (at trace time: a value fetched from the region before is not there any more)
        ctx.version[region] = ctx.stores
    ctx.emit(f"br label %{tag}h")
    ctx.label(f"{tag}x")
    ctx.store(ctx.load(m, _I64), running, _I64)


def pool(ctx: IR, run, chunk: int, n_save: int, save_every: int) -> None:
    """The members ``lo0 … hi0 − 1`` through the whole run in a pool of ``chunk`` lanes (see the
    module). ``run`` has the kernel's pieces on the current lane: ``carry`` (its regions and
    avals), ``init()`` (the carry and save 0 from the lane's row), ``step()``, ``finished()``
    (a flag), ``observe(save)`` (written at save ``save``, an i64) and ``summary()``."""
    n_steps, saves_between = n_save * save_every, n_save > 1  # (one save: the done lanes write it)
    rows, kk, nxt, due, done = ctx.region(), ctx.region(), ctx.region(), ctx.region(), ctx.region()
    running, taken, any_due, any_done = ctx.slot(_I64), ctx.slot(_I64), ctx.slot(np.bool_), ctx.slot(np.bool_)
    lanes = [(r, _I64 if a.dtype == np.bool_ else a.dtype) for v, a in zip(*run.carry) for r in np.ravel(v)]
    lanes += [(rows, _I64), (kk, _I64), (nxt, _I64)]
    ctx.emit("%lo = add i64 %lo0, 0")  # (a lane's member: lo + its row)
    ctx.emit(f"%n = add i64 0, {chunk}")
    ctx.store(np.int64(0), running, _I64)
    ctx.store(np.int64(0), taken, _I64)

    def refill():  # the lanes running … chunk − 1 take the next members of the queue
        r, t = ctx.load(running, _I64), ctx.load(taken, _I64)
        room, left = ctx.op("sub", chunk, r, _I64), ctx.op("sub", Sym("%width", _I64), t, _I64)
        more = ctx.new(f"select i1 {ctx.op('icmp slt', room, left, _I64, np.bool_).name}, i64 {room.name}, "
                       f"i64 {left.name}", _I64)
        end = ctx.op("add", r, more, _I64)

        def start():
            ctx.keep(ctx.op("add", t, ctx.op("sub", ctx.i, r, _I64), _I64), rows, _I64)
            ctx.keep(np.int64(0), kk, _I64)
            if saves_between:
                ctx.keep(np.int64(save_every), nxt, _I64)
            run.init()

        ctx.start, ctx.bound = r.name, end.name
        ctx.members(start)
        ctx.start, ctx.bound = "0", "%n"
        ctx.store(end, running, _I64)
        ctx.store(ctx.op("add", t, more, _I64), taken, _I64)

    def step():  # one step of a running lane, its flags
        run.step()
        k = ctx.op("add", ctx.fetch(kk, _I64), 1, _I64)
        ctx.keep(k, kk, _I64)
        flags = [(done, any_done, ctx.op("or", run.finished(), ctx.op("icmp sge", k, n_steps, _I64, np.bool_),
                                         np.bool_))]
        if saves_between:
            at, step_save = ctx.fetch(nxt, _I64), np.int64(save_every)  # (the lane's next save: no division)
            at_save = ctx.op("icmp eq", k, at, _I64, np.bool_)
            ctx.keep(ctx.select(at_save, ctx.op("add", at, step_save, _I64), at, _I64), nxt, _I64)
            flags.append((due, any_due, at_save))
        for flag, anyone, x in flags:
            ctx.keep(x, flag, np.bool_)
            ctx.store(ctx.op("or", ctx.load(anyone, np.bool_), x, np.bool_), anyone, np.bool_)

    def leave():  # a done lane: the saves its member has left (its carry no longer changes), its summary
        k = ctx.fetch(kk, _I64)  # (the saves up to k are written: at their steps, or k is the last one's)
        first = ctx.op("add", ctx.op("sdiv", k, save_every, _I64), 1, _I64) if saves_between else 1
        run.observe_from(first, n_save)
        run.summary()

    ctx.rows = rows
    refill()
    tag = ctx.fresh("Q")
    ctx.emit(f"br label %{tag}h")
    ctx.label(f"{tag}h")
    ctx.marks.append(ctx.loops)  # (member loops from here on repeat: see IR.here)
    r = ctx.load(running, _I64)
    ctx.emit(f"br i1 {ctx.op('icmp sgt', r, 0, _I64, np.bool_).name}, label %{tag}b, label %{tag}x")
    ctx.label(f"{tag}b")
    ctx.bound = r.name
    ctx.store(False, any_due, np.bool_)
    ctx.store(False, any_done, np.bool_)
    ctx.members(step)
    if saves_between:
        _if(ctx, ctx.load(any_due, np.bool_), lambda: _members_where(
            ctx, due, lambda: run.observe(ctx.op("sdiv", ctx.fetch(kk, _I64), save_every, _I64))))
    _if(ctx, ctx.load(any_done, np.bool_), lambda: (_members_where(ctx, done, leave),
                                                    _swap_out(ctx, done, lanes, running)))
    ctx.bound = "%n"
    refill()
    ctx.marks.pop()
    ctx.emit(f"br label %{tag}h")
    ctx.label(f"{tag}x")
    ctx.rows = None
