"""The kernels as objects (:mod:`lpjax.kernels`): how a block of members runs one member
program, with the options of a run. Each answers the few questions a run asks: whether it runs
on a platform, its block size, its worker threads and chunk size, whether it runs on the host,
and whether it can run a program (:meth:`AbstractKernel.prepare`, else :class:`Unfusable` and
the run falls back to :class:`Scan`).

A member program is anything with the pieces of :class:`lpjax._member.AbstractMember`;
nothing here imports the run.
"""

from __future__ import annotations

import abc
import os
from typing import ClassVar, Optional, final

import equinox as eqx
import jax

from ._blocks import run_blocks
from ._fused import run_fused
from ._native import available as native_available, native_program, run_native, run_native_host

__all__ = ["AbstractKernel", "Scan", "Entries", "Fused", "Native", "CPU_BLOCK", "CPU_CHUNK", "ACCEL_CHUNK"]

CPU_BLOCK = 2048  # members per block on CPU: 6 float64 components of 2048 members fit in L2
CPU_CHUNK = 16384  # members per chunk on CPU (scan and entries kernels)
ACCEL_CHUNK = 1 << 20  # on an accelerator, and for the native kernel (it splits a chunk over the cores itself)
_CPU_THREADS = 4  # worker threads over the chunks for the scan and entries kernels on CPU, at most


def _cpu_block(n: int) -> int:
    """A power of two from 64 to :data:`CPU_BLOCK`: every member is computed by the same vector
    code (never by a loop's scalar remainder), so results do not depend on the chunk size."""
    return max(64, 1 << (min(n, CPU_BLOCK).bit_length() - 1))


def _positive(value, name: str, power_of_two: bool = False) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (power_of_two and value & (value - 1)):
        kind = "a power of two" if power_of_two else "a positive int"
        raise ValueError(f"{name} must be {kind} or None, got {value!r}")


def _trace(kernel, member, dyn, y0s, batched: bool, platform: str) -> None:
    """``kernel``'s run of ``member`` traced for chunks like ``y0s``, padded to whole blocks
    (:class:`Unfusable` where the entrywise evaluator meets what it cannot run)."""
    block = kernel.members_per_block(y0s.shape[0], platform, member.sorts)
    padded = lambda a: jax.ShapeDtypeStruct((-(-y0s.shape[0] // block) * block, *a.shape[1:]), a.dtype)  # noqa: E731
    jax.eval_shape(lambda d, y: kernel.run(member, d, y, batched, block, platform),
                   jax.tree.map(padded, dyn) if batched else dyn, padded(y0s))


class AbstractKernel(eqx.Module):
    """How a block of members runs (see the module). ``name`` is its shorthand (``"scan"``,
    ``"entries"``, ``"fused"``, ``"native"``), as a run's settings record it; ``on_host``: it runs
    whole chunks on the host's cores with threads of its own, on numpy arrays (no device, no
    padding); ``how``: the words of its fallback warning. ``sort_by_cost`` (every kernel's
    option, default True): members of a program that predicts its cost (adaptive steps) run
    ordered by it, the dearest first, so that a block's members end together (False: in the
    callers' order, for measurements; results are the same)."""

    sort_by_cost: eqx.AbstractVar[bool]
    name: eqx.AbstractClassVar[str]
    on_host: eqx.AbstractClassVar[bool]
    how: eqx.AbstractClassVar[str]

    @abc.abstractmethod
    def check(self, platform: str) -> None:
        """``ValueError`` where it cannot run on ``platform`` (``"cpu"``, ``"gpu"``, ``"tpu"``)."""

    @abc.abstractmethod
    def members_per_block(self, n: int, platform: str, sorts: bool) -> int:
        """Members per block for ``n`` members (``sorts``: a member program sorted by cost)."""

    @abc.abstractmethod
    def workers(self, platform: str, devices: Optional[tuple]) -> int:
        """Threads over the chunks of a run."""

    @abc.abstractmethod
    def default_chunk(self, platform: str) -> int:
        """Members per chunk by default."""

    @abc.abstractmethod
    def prepare(self, member, dyn, y0s: jax.ShapeDtypeStruct, batched: bool, platform: str) -> None:
        """Build what a run of ``member`` on chunks like ``y0s`` needs; :class:`Unfusable` where
        the kernel cannot run the program."""

    @abc.abstractmethod
    def run(self, member, dyn, y0s, batched: bool, block: int, platform: str) -> tuple:
        """``(final y, observables, result codes, statistics)`` of the members ``y0s`` (a
        multiple of ``block``), members first."""


class AbstractBlocks(AbstractKernel):
    """The scan and entries kernels: XLA programs of blocks, worker threads on CPU."""

    threads: eqx.AbstractVar[Optional[int]]
    vmap: eqx.AbstractClassVar[bool]

    def __check_init__(self):
        _positive(self.threads, f"{type(self).__name__}: threads")

    def check(self, platform: str) -> None:
        pass

    def members_per_block(self, n: int, platform: str, sorts: bool) -> int:
        return _cpu_block(n) if platform == "cpu" else n

    def workers(self, platform: str, devices: Optional[tuple]) -> int:
        if platform != "cpu" or devices:  # a device is fed by one thread's pipeline
            return 1
        return self.threads or max(1, min(os.cpu_count() or 1, _CPU_THREADS))

    def default_chunk(self, platform: str) -> int:
        return CPU_CHUNK if platform == "cpu" else ACCEL_CHUNK

    def run(self, member, dyn, y0s, batched: bool, block: int, platform: str) -> tuple:
        return run_blocks(member, dyn, y0s, batched, block, self.vmap)


@final
class Scan(AbstractBlocks):
    """``kernel="scan"``: the member program under ``vmap``, a ``lax.scan`` over the steps
    outside it, in blocks (on CPU, powers of two from 64 to 2048 members). It runs every
    program, on every platform, and is differentiable. ``threads``: worker threads over the
    chunks on CPU (default: the cores, at most 4)."""

    threads: Optional[int] = None
    sort_by_cost: bool = True
    name: ClassVar[str] = "scan"
    on_host: ClassVar[bool] = False
    how: ClassVar[str] = "under vmap"
    vmap: ClassVar[bool] = True

    def prepare(self, member, dyn, y0s, batched: bool, platform: str) -> None:
        pass


@final
class Entries(AbstractBlocks):
    """``kernel="entries"``: the member program entry by entry over a block, every value a
    vector over the members (:mod:`lpjax._ensemble._kernels._entrywise`), in a scan.
    ``threads`` as for :class:`Scan`."""

    threads: Optional[int] = None
    sort_by_cost: bool = True
    name: ClassVar[str] = "entries"
    on_host: ClassVar[bool] = False
    how: ClassVar[str] = "entry by entry"
    vmap: ClassVar[bool] = False

    def prepare(self, member, dyn, y0s, batched: bool, platform: str) -> None:
        _trace(self, member, dyn, y0s, batched, platform)


@final
class Fused(AbstractKernel):
    """``kernel="fused"``: one Pallas (Triton) kernel per block of members with the whole time
    loop inside (:mod:`lpjax._ensemble._kernels._fused`); on CPU it runs in Pallas' interpret
    mode (slow: for tests). ``block``: members per program on a GPU, a power of two (default 256;
    32, one warp, for adaptive members, whose blocks run as long as their slowest member);
    ``num_warps``: Triton's warps per program (default ``block / 32``: one member per thread)."""

    block: Optional[int] = eqx.field(default=None, kw_only=True)
    num_warps: Optional[int] = eqx.field(default=None, kw_only=True)
    sort_by_cost: bool = eqx.field(default=True, kw_only=True)
    name: ClassVar[str] = "fused"
    on_host: ClassVar[bool] = False
    how: ClassVar[str] = "entry by entry"

    def __check_init__(self):
        _positive(self.block, "Fused: block", power_of_two=True)
        _positive(self.num_warps, "Fused: num_warps", power_of_two=True)

    def check(self, platform: str) -> None:
        if platform == "tpu":
            raise ValueError("kernel='fused' is a Triton kernel, for GPUs (and CPU tests in interpret mode), not TPUs")

    def members_per_block(self, n: int, platform: str, sorts: bool) -> int:
        if platform != "gpu":
            return _cpu_block(n) if platform == "cpu" else n
        return min(self.block or (32 if sorts else 256), 1 << max(0, (n - 1).bit_length()))

    def workers(self, platform: str, devices: Optional[tuple]) -> int:
        return 1

    def default_chunk(self, platform: str) -> int:
        return ACCEL_CHUNK

    def prepare(self, member, dyn, y0s, batched: bool, platform: str) -> None:
        _trace(self, member, dyn, y0s, batched, platform)

    def run(self, member, dyn, y0s, batched: bool, block: int, platform: str) -> tuple:
        warps = self.num_warps or max(1, block // 32)
        (y_final, result, stats), saved = run_fused(member, dyn, y0s, member.n_steps // member.save_every, batched,
                                                    block, platform, warps)
        return y_final, saved, result, stats


@final
class Native(AbstractKernel):
    """``kernel="native"`` (CPU, ``pip install 'lpjax[cpu]'``): the member program compiled by
    LLVM into one function (:mod:`lpjax._ensemble._kernels._native`) that runs chunks of members
    over the cores. Results do not depend on its options.

    Args:
        chunk: members per chunk of the kernel (default 256, whose carry stays in L2; 32 for
            adaptive members, whose chunks run as long as their slowest member).
        threads: threads over the chunks (default: one per usable core).
        speculate_every: steps between saves, at least, for an explicit step to run with its
            finiteness tests taken as passed (a chunk that met an inf or NaN runs them again as
            written); a larger number than the steps between saves turns it off.
        split: loops at the top of the member program run as passes over the chunk (masked for
            a ``while``), which vectorize; False: a loop per member.
        max_lines: the largest program (LLVM instructions) compiled; a larger one runs on the
            scan, with a warning.
        sort_by_cost: as for every kernel (:class:`AbstractKernel`).
    """

    chunk: Optional[int] = eqx.field(default=None, kw_only=True)
    threads: Optional[int] = eqx.field(default=None, kw_only=True)
    speculate_every: int = eqx.field(default=4, kw_only=True)
    split: bool = eqx.field(default=True, kw_only=True)
    max_lines: int = eqx.field(default=200_000, kw_only=True)
    sort_by_cost: bool = eqx.field(default=True, kw_only=True)
    name: ClassVar[str] = "native"
    on_host: ClassVar[bool] = True
    how: ClassVar[str] = "natively (kernel='native')"

    def __check_init__(self):
        _positive(self.chunk, "Native: chunk")
        _positive(self.threads, "Native: threads")
        _positive(self.speculate_every, "Native: speculate_every")
        _positive(self.max_lines, "Native: max_lines")
        if not isinstance(self.split, bool):
            raise ValueError(f"Native: split must be True or False, got {self.split!r}")

    def check(self, platform: str) -> None:
        if platform != "cpu":
            raise ValueError(f"kernel='native' compiles for the CPU, not {platform!r}")
        if not native_available():
            raise ValueError("kernel='native' needs llvmlite: pip install 'lpjax[cpu]'")

    def members_per_block(self, n: int, platform: str, sorts: bool) -> int:
        return n  # one call for every member: the kernel splits them into chunks itself

    def workers(self, platform: str, devices: Optional[tuple]) -> int:
        return 1  # its own threads

    def default_chunk(self, platform: str) -> int:
        return ACCEL_CHUNK

    def prepare(self, member, dyn, y0s, batched: bool, platform: str) -> None:
        native_program(member, dyn, y0s.shape[1], y0s.dtype, member.n_steps // member.save_every, batched, self)

    def run(self, member, dyn, y0s, batched: bool, block: int, platform: str) -> tuple:
        (y_final, result, stats), saved = run_native(member, dyn, y0s, member.n_steps // member.save_every, batched,
                                                     self)
        return y_final, saved, result, stats

    def run_host(self, member, dyn, y0s, batched: bool, out=None) -> tuple:
        """:meth:`run` on numpy arrays outside JAX, into the arrays of ``out`` where they fit:
        ``((final y, result codes, statistics), observables)``."""
        return run_native_host(member, dyn, y0s, member.n_steps // member.save_every, batched, self, out)

