"""The LLVM IR writer under :mod:`lpjax._ensemble._kernels._native`: :class:`AbstractEmitter` (on the
scalar values of :mod:`._values`), which holds the instructions, the stack slots, the scratch regions of a
chunk and its member loops. The operations are :mod:`lpjax._ensemble._kernels._native._rules` (through
:mod:`lpjax._ensemble._kernels._native._context`); the loops of the
member program :mod:`lpjax._ensemble._kernels._native._loops`."""

from __future__ import annotations

import abc
from typing import Callable

import numpy as np

from .._entrywise import Context
from ._values import Sym, dtype_of, is_sym, lit, llvm_type

__all__ = ["Sym", "AbstractEmitter", "lit", "llvm_type", "is_sym", "dtype_of", "ENTRY"]

REGION_PAD = 64  # bytes between the end of a region of the scratch and the start of the next (see offset)
ENTRY = 0  # the segment of values computed once, in the entry block (member loops count from 1)


class AbstractEmitter(Context, abc.ABC):
    """The evaluator's context for LLVM IR (without its operations, which
    :class:`lpjax._ensemble._kernels._native._context.IR` adds: :meth:`bind`, :meth:`binary`,
    :meth:`cast`): entries are :class:`Sym` values (or trace-time
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
        self.held = {}  # (member loop, region) -> the value the region holds there
        self.origin, self.version, self.stores = {}, {}, 0  # see here()
        self.direct, self.pins, self.marks = {}, {}, []  # marks: the member loops before each open counted loop
        self.placed = None  # the reload lines, once placed (text())
        self.hoisted = []  # the entry block's operations on values of the whole run
        self.mask = None  # inside a masked while's pass: the member's flag (its condition held)
        self.start, self.bound = "0", "%n"  # the lanes a member loop runs: start … bound − 1 (i64 operands)
        self.rows = None  # once lanes move: the region of each lane's member (its row in the caller's arrays)

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    def fresh(self, stem: str = "v") -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def new(self, rhs: str, dtype, of=None) -> Sym:
        """``rhs`` as a new value. ``of``: the operands of a pure operation; when every one is
        the same for the whole run (:data:`ENTRY`), the operation goes to the entry block
        (once per call, not once per member and step) and so does its value."""
        if of is not None and all(not is_sym(a) or a.seg == ENTRY for a in of):
            s = Sym(f"%{self.fresh()}", dtype, ENTRY)
            self.hoisted.append(f"  {s.name} = {rhs}")
            return s
        s = Sym(f"%{self.fresh()}", dtype, self.segment)
        self.emit(f"{s.name} = {rhs}")
        return s

    def entry(self, values) -> None:
        """Mark ``values`` (object arrays of values loaded in the entry block) as the same for the
        whole run, and put the operations hoisted out of the loops here."""
        for v in values:
            for x in np.ravel(v):
                if is_sym(x):
                    x.seg = ENTRY
        self.lines.append(("hoisted", None))

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
        # a C library function as pure (its errno is never read): a member loop that calls it can still
        # vectorize, the call made once per lane
        pure = "" if fn.startswith("llvm.") else " nounwind willreturn memory(none)"
        self.decls.add(f"declare {r} @{fn}({', '.join([t] * len(args))}){pure}")
        return self.new(f"call {r} @{fn}({', '.join(f'{t} {self.ref(a, dt)}' for a in args)})", ret or dt, args)

    @abc.abstractmethod
    def bind(self, prim, args, params):
        """``prim`` on scalar entries: instructions (the rules of the operations)."""

    @abc.abstractmethod
    def binary(self, op: Callable, a, b):
        """A reduction's ``op`` on two scalar entries."""

    @abc.abstractmethod
    def cast(self, x, dtype):
        """A scalar entry as ``dtype``."""

    # ----------------------------------------------------------------------- member loops

    def region(self) -> int:
        """A new region of the scratch (``chunk`` slots of 8 bytes): its index."""
        self.regions += 1
        return self.regions - 1

    def offset(self, region: int) -> int:
        """Where ``region`` starts in the scratch, in bytes: regions a cache line more than
        ``chunk`` slots apart, so that the same member's slots of successive regions do not fall
        into the same sets of the L1 cache (at 256 members a region, 2 KiB apart, every other
        one did: a GL4 step with a terminal event, some 80 regions, ran 1.6x slower: 0.30 s against 0.19 s)."""
        return (8 * self.chunk + REGION_PAD) * region

    @property
    def scratch_slots(self) -> int:
        """The scratch's size, in slots of 8 bytes."""
        return self.offset(self.regions) // 8

    def element(self, region: int, dtype, index=None) -> str:
        """The address of the slot of member ``index`` (default: :attr:`i`) in ``region``."""
        base = self.new(f"getelementptr i8, ptr %scratch, i64 {self.offset(region)}", np.int64).name
        return self.new(f"getelementptr {llvm_type(dtype)}, ptr {base}, i64 {lit(index or self.i)}", np.int64).name

    @staticmethod
    def each(avals, fn: Callable) -> list:
        """Object arrays of ``avals``' shapes with ``fn(k, aval, index)`` for entry ``index`` of
        the k-th."""
        out = []
        for k, a in enumerate(avals):
            e = np.empty(a.shape, object)
            for i in np.ndindex(a.shape):
                e[i] = fn(k, a, i)
            out.append(e)
        return out

    def store_each(self, address: Callable, values, avals, array: bool = False) -> None:
        """``values`` (object arrays of ``avals``' shapes) stored at ``address(k, index)``."""
        for k, (v, a) in enumerate(zip(values, avals)):
            e = self.entries(v, a.shape)
            for i in np.ndindex(a.shape):
                self.store(e[i], address(k, i), a.dtype, array)

    def get(self, regions, avals) -> list:
        """This member's values in ``regions`` (object arrays of region indices). Each is frozen
        (``freeze``: the same value): a select between it and a new value, stored back in its
        place (a masked ``while``, a running minimum), then stays a select and a store, where
        x86 code generation would make it a masked store, several times slower on AMD cores."""
        def one(k, a, i):
            v = self.held[self.segment, regions[k][i]] = self.fetch(regions[k][i], a.dtype)
            return v
        return self.each(avals, one)

    def fetch(self, region: int, dtype, lane=None) -> Sym:
        """This member's value in ``region``, frozen (see :meth:`get`); a flag is kept as an i64
        (an i8 flag's loads and stores do not vectorize). ``lane``: that lane's value instead
        (a gather)."""
        if np.dtype(dtype) == np.bool_:
            return self.op("icmp ne", self.fetch(region, np.int64, lane), 0, np.int64, np.bool_)
        loaded = self.load(self.element(region, dtype, lane), dtype, array=True)
        v = self.new(f"freeze {llvm_type(dtype)} {loaded.name}", dtype)
        if lane is None:
            self.origin[v.name] = (region, self.version.get(region, 0))
        return v

    def keep(self, x, region: int, dtype, lane=None) -> None:
        """Store ``x`` as this member's value in ``region`` (see :meth:`fetch`); ``lane``: as that
        lane's (a scatter)."""
        if np.dtype(dtype) == np.bool_:
            x, dtype = self.cast(x, np.int64), np.int64
        self.store(x, self.element(region, dtype, None if lane is None else self.here(lane)), dtype, array=True)
        self.stores += 1
        self.version[region] = self.stores
        if lane is None:
            self.held[self.segment, region] = x
        for key in self.pins.pop((self.segment, region), ()):  # read before this store: through the spill
            del self.direct[key]

    def place(self, x):
        """The region that holds ``x`` (a value of a member loop of this pass) when later loops of
        the pass run: the one it was fetched from, if unchanged since, else its spill; None for a
        value of the whole run or a constant."""
        if not is_sym(x) or x.seg is None or x.seg == ENTRY:
            return None
        region = self.held_region(x)
        if region is None:
            region = self.spilled.get(x.name)
            if region is None:
                region = self.spilled[x.name] = self.region()
                self.spill_to(x, region)
        return region

    def put(self, regions, values, avals) -> None:
        """``values`` into ``regions``, except where a region already holds that very value in this
        member loop (a statistic that an explicit step leaves alone is neither loaded nor stored)."""
        for k, (v, a) in enumerate(zip(values, avals)):
            e = self.entries(v, a.shape)
            for i in np.ndindex(a.shape):
                key = (self.segment, regions[k][i])
                if self.held.get(key) is not e[i]:
                    self.keep(e[i], regions[k][i], a.dtype)
                    self.held[key] = e[i]

    def new_regions(self, avals) -> list:
        return self.each(avals, lambda k, a, i: self.region())

    def here(self, x):
        """``x`` usable in the current member loop: a value of an earlier one is stored to the
        scratch at the end of that loop and loaded at the top of this one, or, when ``x`` was
        itself loaded from a region that no store has touched since, loaded from that region
        again (a carry entry that the loops between leave alone passes through without a copy),
        unless this loop runs again with ``x`` unchanged and stores into that region later."""
        if not is_sym(x) or x.seg is None or x.seg == ENTRY or x.seg == self.segment:
            return x
        key = (x.name, self.segment)
        if key not in self.reloaded:
            v = Sym(f"%{self.fresh()}", x.dtype, self.segment)
            self.reloads[self.segment].append((x, v))
            self.reloaded[key] = v
            region = self.held_region(x)
            if region is not None:
                self.direct[key] = region
                if any(mark >= x.seg for mark in self.marks):  # this loop repeats with x unchanged
                    self.pins.setdefault((self.segment, region), []).append(key)
                self.held.setdefault((self.segment, region), v)
        return self.reloaded[key]

    def held_region(self, x):
        """The region that holds ``x`` now (``x`` was fetched from it, and nothing was stored there
        since), else None."""
        region, version = self.origin.get(x.name, (None, None)) if is_sym(x) else (None, None)
        return region if region is not None and self.version.get(region, 0) == version else None

    def spill_to(self, x, region: int) -> bool:
        """Store ``x``, a value of a member loop of this pass over the chunk, into ``region`` at the
        end of that loop (beside its other spills); False for a value of the whole run or a
        constant, which has no such loop."""
        if not is_sym(x) or x.seg is None or x.seg == ENTRY:
            return False
        t, v, seg = llvm_type(x.dtype), x.name, x.seg
        base, at, wide = self.fresh("a"), self.fresh("a"), self.fresh("a")
        lines = [f"  %{base} = getelementptr i8, ptr %scratch, i64 {self.offset(region)}"]
        if x.dtype == np.bool_:  # (a flag is kept as an i64: fetch)
            lines.append(f"  %{wide} = zext i1 {v} to i64")
            t, v = "i64", f"%{wide}"
        self.spills[seg] += lines + [f"  %{at} = getelementptr {t}, ptr %{base}, i64 {self.seg_i[seg].name}",
                                     f"  store {t} {v}, ptr %{at}{self.seg_tag[seg]}"]
        return True

    def _traffic(self) -> dict:
        """The reload lines of every member loop (added to the spill lines of the values they need)."""
        lines = {seg: [] for seg in self.reloads}
        for seg, pairs in self.reloads.items():
            for x, v in pairs:
                region = self.direct.get((x.name, seg))
                if region is None:
                    if x.name not in self.spilled:
                        self.spill_to(x, self.spilled.setdefault(x.name, self.region()))
                    region = self.spilled[x.name]
                flag = x.dtype == np.bool_  # (kept as an i64, as fetch reads it: an i1's loads do not vectorize)
                t = "i64" if flag else llvm_type(x.dtype)
                base, at, raw, got = self.fresh("a"), self.fresh("a"), self.fresh("a"), self.fresh("a")
                lines[seg] += [f"  %{base} = getelementptr i8, ptr %scratch, i64 {self.offset(region)}",
                               f"  %{at} = getelementptr {t}, ptr %{base}, i64 {self.seg_i[seg].name}",
                               f"  %{raw} = load {t}, ptr %{at}{self.seg_tag[seg]}"]
                lines[seg] += ([f"  %{got} = freeze i64 %{raw}", f"  {v.name} = icmp ne i64 %{got}, 0"] if flag
                               else [f"  {v.name} = freeze {t} %{raw}"])
        return lines

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
        self.store(Sym(self.start, np.int64) if self.start != "0" else np.int64(0), counter, np.int64)
        self.emit(f"br label %M{seg}h")
        self.label(f"M{seg}h")
        self.segment = seg
        self.tag = self.seg_tag[seg] = f", !llvm.access.group {g}"
        self.i = self.load(counter, np.int64)
        go = self.new(f"icmp slt i64 {self.i.name}, {self.bound}", np.bool_)
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
        if self.placed is None:
            self.placed = self._traffic()
        out = []
        for line in self.lines:
            if isinstance(line, tuple):
                out += self.hoisted if line[0] == "hoisted" else (self.placed if line[0] == "reload" else self.spills)[line[1]]
            else:
                out.append(line)
        return out

    # ----------------------------------------------------------------------- loops

    def carry(self, values, avals) -> list:
        """Stack slots for a loop's carry (object arrays of addresses), initialised to ``values``."""
        slots = self.each(avals, lambda k, a, i: self.slot(a.dtype))
        self.write(slots, values, avals)
        return slots

    def read(self, slots, avals) -> list:
        return self.each(avals, lambda k, a, i: self.load(slots[k][i], a.dtype))

    def write(self, slots, values, avals) -> None:
        self.store_each(lambda k, i: slots[k][i], values, avals)

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
        self.marks.append(self.loops)
        body(i)
        self.marks.pop()
        self.store(self.op("add", i, 1, np.int64), counter, np.int64)
        self.emit(f"br label %{tag}h{meta}")
        self.label(f"{tag}x")
