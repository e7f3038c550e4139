"""The kernels of :func:`lpjax.ensemble` and :func:`lpjax.ensemble_function` as objects, with
the options of a run: ``kernel=lpjax.kernels.Native(threads=2)``. The strings ``"scan"``,
``"entries"``, ``"fused"`` and ``"native"`` are shorthands for their defaults, and ``"auto"``
picks one for the platform. Results do not depend on a kernel's options.

* :class:`Scan` — the member program under ``vmap``; every program, every platform,
  differentiable;
* :class:`Entries` — entry by entry over a block;
* :class:`Fused` — one Triton kernel per block with the time loop inside (GPUs);
* :class:`Native` — compiled by LLVM for the host's cores (``pip install 'lpjax[cpu]'``).

:class:`AbstractKernel` is what a run asks of each (block size, worker threads, chunk size,
host or device, and whether it can run a program); see the documentation's "Concepts".
"""

from ._ensemble._kernels import (
    AbstractKernel as AbstractKernel,
    Entries as Entries,
    Fused as Fused,
    Native as Native,
    Scan as Scan,
)

__all__ = ["AbstractKernel", "Scan", "Entries", "Fused", "Native"]
