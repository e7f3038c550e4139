"""The layout of an :func:`lpjax.ensemble` run (:class:`Plan`), fixed from its inputs before any
work: chunks, processes, devices, worker threads and the kernel."""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import numpy as np

from .._checks import positive_int
from ._kernel import platform_of, resolve_kernel
from ._kernels import CPU_BLOCK, AbstractKernel
from ._processes import share

__all__ = ["Plan", "make_plan"]

@dataclasses.dataclass(frozen=True)
class Plan:
    """How a run is laid out: ``members`` states of size ``state_size``, ``n_steps`` steps saved
    every ``save_every``, in ``dtype`` (``batched``: a system batched over parameters); the
    ``kernel`` (an object of :mod:`lpjax.kernels`) on ``platform``; chunks of ``chunk`` members (the unit of dispatch, storage,
    progress and resume), each split over ``devices`` (None: one device); ``workers`` threads
    over the chunks; ``processes`` processes (``jax.distributed``), this one being ``process``,
    each running its share of the chunks (:meth:`mine`)."""

    members: int
    state_size: int
    n_steps: int
    save_every: int
    dtype: np.dtype
    batched: bool
    kernel: AbstractKernel
    platform: str
    devices: Optional[tuple]
    workers: int
    chunk: int
    processes: int = 1
    process: int = 0

    @property
    def n_save(self) -> int:
        return self.n_steps // self.save_every

    @property
    def n_chunks(self) -> int:
        return -(-self.members // self.chunk)

    @property
    def padded(self) -> int:
        """Members the compiled chunk runs: ``chunk`` rounded up to a multiple of the devices."""
        ndev = len(self.devices) if self.devices else 1
        return -(-self.chunk // ndev) * ndev

    def span(self, k: int) -> tuple[int, int]:
        """The members ``lo … hi − 1`` of chunk ``k``."""
        return k * self.chunk, min(self.members, (k + 1) * self.chunk)

    def mine(self, todo: list) -> list:
        """This process's share of the chunks ``todo`` (every process is given the same list):
        a contiguous, balanced run of them, so that a fresh run's share is a pure function of the
        chunk index and the process count."""
        return list(todo)[share(len(todo), self.processes, self.process)]

    def __str__(self) -> str:
        where = f"{len(self.devices)} {self.platform} devices" if self.devices else f"one {self.platform} device"
        return (f"{self.members} members of size {self.state_size}, {self.n_steps} steps saved every "
                f"{self.save_every}, {np.dtype(self.dtype)}{', batched system' if self.batched else ''}: "
                f"kernel {self.kernel.name!r} on {where}, {self.n_chunks} chunk(s) of {self.chunk} over "
                f"{self.workers} worker thread(s)"
                + (f", process {self.process} of {self.processes}" if self.processes > 1 else ""))


STORE_CHUNKS = 8  # a store's default: at least this many chunks per process and worker, what an interrupted
MIN_STORE_CHUNK = 64  # or killed run keeps; but no chunk below a CPU block of 64 members (smaller ones pad)


def make_plan(members: int, state_size: int, n_steps: int, save_every: int, dtype, batched: bool, kernel,
              devices=None, chunk_size: Optional[int] = None, processes: int = 1, process: int = 0,
              store: bool = False) -> Plan:
    """The plan of a run (see :func:`lpjax.ensemble` for ``kernel``, ``devices`` and
    ``chunk_size``). ``"auto"`` is the same kernel whatever the number of devices, so that
    several devices give one device's results bit for bit. Several devices: each chunk is split
    over them (``shard_map``); the devices are this process's own (default: all of them, when
    there are several). The native kernel runs on the host's cores with its own threads: it
    takes the whole chunk, whatever the devices. Into a ``store``, the default chunks are at
    least :data:`STORE_CHUNKS` per process and worker (of at least :data:`MIN_STORE_CHUNK`
    members): the unit an interrupted or killed run keeps, where one chunk per worker kept
    nothing."""
    chunk_size = None if chunk_size is None else positive_int(chunk_size, "chunk_size")
    if devices is None:
        devices = jax.local_devices() if len(jax.local_devices()) > 1 else None
    elif other := [d for d in devices if d.process_index != process]:
        raise ValueError(f"ensemble: devices must be this process's own (jax.local_devices()), got {other} of "
                         "another process; each process of a multi-process run runs its chunks on its own devices")
    devices = tuple(devices) if devices is not None and len(devices) > 1 else None
    platform = platform_of(None, devices)
    kernel = resolve_kernel(kernel, platform)
    if kernel.on_host:  # whole chunks on the host's cores, whatever the devices
        devices = None
    # threads computing chunks side by side (on CPU's scan and entries kernels; the native kernel has its own,
    # and a device is fed by one thread's pipeline: ensemble's run_chunks)
    workers = kernel.workers(platform, devices)
    chunk = min(chunk_size or kernel.default_chunk(platform), members)
    if chunk_size is None:  # a chunk per worker thread (on CPU, a block at least) and per process
        if platform == "cpu":
            chunk = min(chunk, max(CPU_BLOCK, -(-members // (workers * processes))))
        chunk = min(chunk, -(-members // processes))
        if store:
            chunk = min(chunk, max(MIN_STORE_CHUNK, -(-members // (STORE_CHUNKS * workers * processes))))
        if platform != "cpu":  # chunks of equal size: the last one not padded to a whole chunk
            chunk = -(-members // -(-members // chunk))
    return Plan(members, state_size, n_steps, save_every, np.dtype(dtype), batched, kernel, platform, devices, workers,
                chunk, processes, process)
