"""One :func:`lpjax.ensemble` run over several processes (``jax.distributed``): each process's
share of the chunks (:func:`share`), the processes agreeing on the settings and on what process
0 found in the store, the barriers (:class:`Group`), and K local processes started for
``lpjax ensemble --processes K`` (:func:`launch_local`, :func:`initialize`).

With one process every operation of :class:`Group` is the plain local one: no collective runs.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional

import numpy as np

from .._cores import pin_this_thread, usable_cores

__all__ = ["Group", "share", "initialize", "launched", "launch_local"]

_MESSAGE = 2048  # bytes of an error message sent from process 0
_KINDS = (FileExistsError, PermissionError, ValueError, OSError)  # raised again as such on every process


def share(n: int, count: int, index: int) -> slice:
    """Process ``index``'s share of ``n`` items among ``count`` processes: the contiguous, balanced
    slice ``[index·n // count, (index + 1)·n // count)``, a pure function of its arguments."""
    return slice(index * n // count, (index + 1) * n // count)


@dataclasses.dataclass(frozen=True)
class Group:
    """The ``count`` processes of one run, this one being ``index`` (``jax.process_count()``,
    ``jax.process_index()``)."""

    count: int = 1
    index: int = 0

    def agree(self, fingerprint: str) -> None:
        """Raise ``ValueError`` on every process unless every process has this settings'
        ``fingerprint`` (a hex SHA-256)."""
        if self.count == 1:
            return
        from jax.experimental import multihost_utils

        every = np.asarray(multihost_utils.process_allgather(np.frombuffer(bytes.fromhex(fingerprint), np.uint8)))
        other = [p for p in range(self.count) if not np.array_equal(every[p], every[0])]
        if other:
            raise ValueError(f"ensemble: process(es) {other} of {self.count} were given other settings than process 0 "
                             "(system, method, dt, n_steps, save_every, observe, initial states, chunk size or dtype "
                             "differ): every process of a run calls ensemble() with the same arguments (draw the "
                             "initial states from one seed, not per process)")

    def from_first(self, payload: Optional[np.ndarray], error: Optional[BaseException], size: int) -> np.ndarray:
        """Process 0's ``payload`` (``size`` bytes) on every process, or its ``error`` raised on every
        process (as the same type for ``FileExistsError``, ``PermissionError``, ``ValueError``,
        ``OSError``; else as ``RuntimeError``)."""
        if self.count > 1:
            from jax.experimental import multihost_utils

            buf = np.zeros(2 + _MESSAGE + size, np.uint8)
            if self.index == 0 and error is not None:
                text = str(error).encode()[:_MESSAGE]
                kind = next((i for i, k in enumerate(_KINDS) if isinstance(error, k)), len(_KINDS))
                buf[:2], buf[2 : 2 + len(text)] = (1, kind), np.frombuffer(text, np.uint8)
            elif self.index == 0:
                buf[2 + _MESSAGE :] = payload
            buf = np.asarray(multihost_utils.broadcast_one_to_all(buf))
            if buf[0] and error is None:
                text = bytes(buf[2 : 2 + _MESSAGE]).rstrip(b"\0").decode(errors="replace")
                error = (_KINDS + (RuntimeError,))[buf[1]](f"{text} (from process 0)")
            payload = buf[2 + _MESSAGE :]
        if error is not None:
            raise error
        return payload

    def barrier(self, name: str) -> None:
        """Wait until every process is here."""
        if self.count > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(f"lpjax.ensemble: {name}")


def launched() -> bool:
    """Whether a launcher started this process as one of several: ``LPJAX_PROCESSES`` (from
    :func:`launch_local`), ``SLURM_NTASKS`` or ``OMPI_COMM_WORLD_SIZE`` above 1."""
    return any(int(os.environ.get(k, "1") or 1) > 1 for k in ("LPJAX_PROCESSES", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"))


def initialize() -> None:
    """``jax.distributed.initialize()`` for this process, with gloo collectives on CPU: the
    coordinator, process count and index from :func:`launch_local`'s variables
    (``JAX_COORDINATOR_ADDRESS``, ``LPJAX_PROCESSES``, ``LPJAX_PROCESS_ID``) when set, else from
    JAX's detection of the launcher (SLURM, Open MPI, Kubernetes, ...)."""
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    count, index = os.environ.get("LPJAX_PROCESSES"), os.environ.get("LPJAX_PROCESS_ID")
    jax.distributed.initialize(num_processes=int(count) if count else None, process_id=int(index) if index else None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def launch_local(count: int, argv: list, env: Optional[dict] = None, timeout: Optional[float] = None) -> int:
    """Run ``python argv`` as ``count`` local processes of one ``jax.distributed`` run (the
    coordinator on localhost, at a free port; each process calls :func:`initialize`), each pinned
    to its share of this process's cores (all of them when there are fewer cores than
    processes, or where the OS has no CPU affinity: macOS, Windows). Waits for all; when one
    fails, or after ``timeout`` seconds, the others are killed (they would wait for it at the
    next barrier, and JAX takes SIGTERM as a preemption notice). Returns the first nonzero exit status (-9 for the killed), else 0.

    The processes run in their own sessions, so that Ctrl-C at a terminal reaches only this
    one: it passes each SIGINT (and SIGTERM, as SIGINT) on to every process still running and
    waits for them (the first stops each at its next chunk boundary, a second at once), then
    raises ``KeyboardInterrupt``. A process that was interrupted on its own (exit status 130)
    is taken as such a first signal."""
    port, cores, end = _free_port(), usable_cores(), time.monotonic() + (timeout or float("inf"))
    procs, signals = [], []

    def forward(signum, frame):
        signals.append(signum)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)

    main = threading.current_thread() is threading.main_thread()
    before = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        for i in range(count):
            mine = cores[share(len(cores), count, i)] or cores
            child = {**(env or os.environ), "JAX_COORDINATOR_ADDRESS": f"localhost:{port}",
                     "LPJAX_PROCESSES": str(count), "LPJAX_PROCESS_ID": str(i)}
            pinned = pin_this_thread(mine)  # this thread's cores, which the child inherits from its start
            try:
                procs.append(subprocess.Popen([sys.executable, *argv], env=child, start_new_session=True))
            finally:
                if pinned:
                    pin_this_thread(cores)
        while (codes := [p.poll() for p in procs]).count(None) and time.monotonic() < end:
            if not signals and 130 in codes:  # one process interrupted on its own: the others stop too
                forward(signal.SIGINT, None)
            elif not signals and any(c for c in codes if c is not None):
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        codes = [p.wait() for p in procs]
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if signals:
        raise KeyboardInterrupt
    return next((c for c in codes if c), 0)
