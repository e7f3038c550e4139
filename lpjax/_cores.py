"""The cores this process may use, and pinning a process to some of them, where the operating
system offers it: Linux has CPU affinity (``os.sched_getaffinity``/``sched_setaffinity``); macOS
and Windows do not, and there every core counts and nothing is pinned."""

from __future__ import annotations

import os

__all__ = ["usable_cores", "pin_this_thread"]


def usable_cores() -> list[int]:
    """The cores this process may run on: its affinity where the OS has one, else all of them."""
    affinity = getattr(os, "sched_getaffinity", None)
    return sorted(affinity(0)) if affinity is not None else list(range(os.cpu_count() or 1))


def pin_this_thread(cores) -> bool:
    """Run the calling thread (and the processes it starts from now on) on ``cores``; False,
    doing nothing, where the OS has no CPU affinity."""
    pin = getattr(os, "sched_setaffinity", None)
    if pin is None:
        return False
    pin(0, cores)
    return True
