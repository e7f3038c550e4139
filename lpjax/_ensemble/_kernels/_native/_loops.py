"""The member program's loops in LLVM IR (:mod:`lpjax._ensemble._kernels._native`): ``scan`` as a counted loop,
``while`` as a loop per member or, at the top of a member loop, as masked passes over the
chunk, ``cond`` as selects or, around loops, as a branch."""

from __future__ import annotations

import functools

import jax.extend.core as jcore
import numpy as np
from jax import lax

from .._entrywise import Unfusable, _scan_operands, evaluate
from .._entrywise_rules import _is_entries
from ._values import Sym, is_sym

__all__ = ["CONTROL", "uses"]


def uses(jaxpr, names) -> bool:
    """Whether ``jaxpr`` (or a jaxpr inside it) has an equation of a primitive in ``names``."""
    return any(eqn.primitive.name in names or any(uses(sub, names) for sub in jcore.jaxprs_in_params(eqn.params))
               for eqn in jaxpr.eqns)


def _has_loops(jaxpr) -> bool:
    return uses(jaxpr, ("while", "scan"))


def _scan(ctx, eqn, vals):
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


def _while(ctx, eqn, vals):
    p = eqn.params
    cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    avals = [v.aval for v in bj.jaxpr.invars[nb:]]

    def cond(carry):
        (go,) = evaluate(ctx, cj.jaxpr, cj.consts, list(vals[:nc]) + carry)
        go = functools.reduce(lambda a, b: ctx.bind(lax.or_p, [a, b], {}), np.ravel(np.asarray(go, object)))
        # (a predicate batched by vmap, as JAX's while keeps it: the loop goes on while any entry holds)
        if not is_sym(go):
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


def _masked_while(ctx, init, avals, cond, body):
    """A while loop as passes over the chunk while any member's condition holds: each pass
    runs the body for every member and keeps the new carry of those whose condition held
    (their flag), so a member's values do not change once its condition fails."""
    regions, flag, anyone = ctx.new_regions(avals), ctx.region(), ctx.slot(np.bool_)
    bool_ = np.dtype(np.bool_)
    ctx.put(regions, init, avals)
    ctx.close()

    def flagged(carry):  # the member's flag for the next pass, and the chunk's "any"
        go = cond(carry)
        ctx.keep(go, flag, bool_)
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
        go, outer = ctx.fetch(flag, bool_), ctx.mask
        ctx.mask = go if outer is None else ctx.op("and", outer, go, bool_)
        new = body(carry)
        ctx.mask = outer
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


def _cond(ctx, eqn, vals):
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
    idx = ctx.apply("clamp", [0, ctx.cast(idx, np.int32), len(branches) - 1], [np.dtype(np.int32)] * 3)
    if ctx.splits():
        return _branched(ctx, branches, idx, ops, avals)
    slots = ctx.each(avals, lambda k, a, i: ctx.slot(a.dtype))
    ctx.level += 1
    _switch(ctx, branches, idx, ops, lambda b, outs: ctx.write(slots, outs, avals))
    ctx.level -= 1
    return ctx.read(slots, avals)


def _switch(ctx, branches, idx, ops, keep) -> None:
    """A branch per value of ``idx`` (an i32), each evaluating its jaxpr on ``ops`` and handing
    ``(branch index, outputs)`` to ``keep``."""
    tag = ctx.fresh("C")
    cases = " ".join(f"i32 {k}, label %{tag}b{k}" for k in range(len(branches) - 1))
    ctx.emit(f"switch i32 {ctx.ref(idx, np.int32)}, label %{tag}b{len(branches) - 1} [{cases}]")
    for k, b in enumerate(branches):
        ctx.label(f"{tag}b{k}")
        keep(k, evaluate(ctx, b.jaxpr, b.consts, list(ops)))
        ctx.emit(f"br label %{tag}x")
    ctx.label(f"{tag}x")


def _passed(branch, k: int):
    """The operand that output ``k`` of ``branch`` is, unchanged (its index), else None."""
    out = branch.jaxpr.outvars[k]
    return next((j for j, v in enumerate(branch.jaxpr.invars) if v is out), None)


def _branched(ctx, branches, idx, ops, avals):
    """A ``cond`` around loops at the top of a member loop: a member loop of its own in which
    each member takes its own branch (its loops per member, scalar; the member loops before
    and after vectorize), inside a masked ``while`` only where the member's condition holds
    (:attr:`IR.mask`). The outputs pass to later loops through regions. An output that a
    branch passes unchanged from an operand stays where that operand is: the region it was
    fetched from (a carry entry), or one that the loop defining it stores it into. Such a
    branch stores nothing there; one that changes nothing is not entered, and the operands
    are loaded only inside the branches: a record that a rare branch writes costs a flag's
    load and a test in the steps that do not take it."""
    regions, kept, taken = [], [], set()  # kept[k]: the operand that output k stays in the place of, or None
    for k, a in enumerate(avals):
        passed = {_passed(b, k) for b in branches} - {None}
        j = passed.pop() if len(passed) == 1 else None
        src = ctx.entries(ops[j], a.shape) if j is not None else None
        r, stays = np.empty(a.shape, object), np.zeros(a.shape, bool)
        for i in np.ndindex(a.shape):
            region = ctx.held_region(src[i]) if src is not None else None
            if region is None or region in taken:
                region = ctx.region()
                stays[i] = src is not None and ctx.spill_to(src[i], region)
            else:
                stays[i] = True
            r[i] = region
            taken.add(region)
        regions.append(r)
        kept.append((j, stays))
    idle = [b for b, br in enumerate(branches)  # branches that change nothing
            if all(st.all() and _passed(br, k) == j for k, (j, st) in enumerate(kept))]
    go = ctx.mask if ctx.mask is not None else True
    for b in idle:
        go = ctx.op("and", go, ctx.op("icmp ne", idx, b, np.int32, np.bool_), np.bool_)
    flag, anyone = ctx.region(), ctx.slot(np.bool_)
    ctx.slots.append(f"  store i1 false, ptr {anyone}")  # (at the kernel's entry; cleared after each use)
    ctx.keep(go, flag, np.bool_)
    ctx.store(ctx.op("or", ctx.load(anyone, np.bool_), go, np.bool_), anyone, np.bool_)
    busy = [b for b in range(len(branches)) if b not in idle]
    if len(busy) == 1:  # (an output stays in place where the busy branch passes it through too)
        branch = branches[busy[0]]
        kept = [(j if _passed(branch, k) == j else None, st) for k, (j, st) in enumerate(kept)]
        return _gathered(ctx, branch, ops, avals, regions, kept, flag, anyone)
    ctx.close()
    ctx.open()
    ctx.level += 1
    tag, reload = ctx.fresh("B"), ctx.lines.pop()  # (the operands' loads: inside the branches)
    ctx.emit(f"br i1 {ctx.fetch(flag, np.bool_).name}, label %{tag}t, label %{tag}x")
    ctx.label(f"{tag}t")
    ctx.lines.append(reload)

    def keep(b: int, outs) -> None:
        for k, (o, a) in enumerate(zip(outs, avals)):
            e, (j, stays) = ctx.entries(o, a.shape), kept[k]
            for i in np.ndindex(a.shape):
                if not (stays[i] and _passed(branches[b], k) == j):
                    ctx.keep(e[i], regions[k][i], a.dtype)

    _switch(ctx, branches, idx, ops, keep)
    ctx.emit(f"br label %{tag}x")
    ctx.label(f"{tag}x")
    ctx.level -= 1
    ctx.close()
    ctx.open()
    return ctx.get(regions, avals)

def _gathered(ctx, branch, ops, avals, regions, kept, flag: int, anyone: str):
    """:func:`_branched` where one branch alone does anything: the lanes whose ``flag`` is set
    are listed (a scalar pass over the chunk), and the branch runs over that list as member
    loops of their own (a loop in it as passes over the listed members, which vectorize), its
    operands gathered from the listed lanes and its outputs scattered back."""
    places = [[(x, ctx.place(x)) for x in np.ravel(ctx.entries(o, v.aval.shape))]
              for o, v in zip(ops, branch.jaxpr.invars)]
    lanes, count = ctx.region(), ctx.slot(np.int64)
    i64 = np.dtype(np.int64)
    ctx.close()
    ctx.store(np.int64(0), count, i64)
    tag = ctx.fresh("G")
    ctx.emit(f"br i1 {ctx.load(anyone, np.bool_).name}, label %{tag}l, label %{tag}x")
    ctx.label(f"{tag}l")

    def listed(i):
        tag = ctx.fresh("K")
        ctx.emit(f"br i1 {ctx.op('icmp ne', ctx.load(ctx.element(flag, i64, i), i64), 0, i64, np.bool_).name}, "
                 f"label %{tag}t, label %{tag}x")
        ctx.label(f"{tag}t")
        at = ctx.load(count, i64)
        ctx.store(i, ctx.element(lanes, i64, at), i64)
        ctx.store(ctx.op("add", at, 1, i64), count, i64)
        ctx.emit(f"br label %{tag}x")
        ctx.label(f"{tag}x")

    ctx.counted(Sym(ctx.bound, i64), listed)
    n, outer = ctx.load(count, i64), (ctx.bound, ctx.mask)
    ctx.emit(f"br i1 {ctx.op('icmp sgt', n, 0, i64, np.bool_).name}, label %{tag}t, label %{tag}x")
    ctx.label(f"{tag}t")
    ctx.bound, ctx.mask = n.name, None  # (every listed member takes the branch)
    ctx.open()
    lane = ctx.fetch(lanes, i64)
    args = []
    for (o, v), pl in zip(zip(ops, branch.jaxpr.invars), places):
        e = np.empty(v.aval.shape, object)
        for i, (x, region) in zip(np.ndindex(v.aval.shape), pl):
            e[i] = x if region is None else ctx.fetch(region, x.dtype, lane)
        args.append(e)
    outs = evaluate(ctx, branch.jaxpr, branch.consts, args)
    for k, (o, a) in enumerate(zip(outs, avals)):
        e, (j, stays) = ctx.entries(o, a.shape), kept[k]
        for i in np.ndindex(a.shape):
            if not (stays[i] and j is not None):
                ctx.keep(e[i], regions[k][i], a.dtype, lane)
    ctx.close()
    ctx.bound, ctx.mask = outer
    ctx.emit(f"br label %{tag}x")
    ctx.label(f"{tag}x")
    ctx.store(False, anyone, np.bool_)
    ctx.open()
    return ctx.get(regions, avals)


CONTROL = {"scan": _scan, "while": _while, "cond": _cond}
