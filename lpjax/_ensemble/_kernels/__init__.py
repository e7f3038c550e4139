"""The back ends of an ensemble run: the kernels that run one member's program (the pieces of
:class:`lpjax._ensemble._kernel._Member`: ``init``, ``advance``, ``observe``, ``summary``) over
a block of members, the member axis last. The contract with the run (:class:`EnsembleFunction
<lpjax._ensemble._kernel.EnsembleFunction>`, the kernel's choice, the block size, the ``scan``
kernel) is :mod:`lpjax._ensemble._kernel`; nothing here imports the run.

* :mod:`._entrywise` — the shared entrywise program: a member's function traced to a jaxpr and
  evaluated entry by entry, every array value an object array of its per-member shape whose
  entries are vectors over the members (:func:`members_last`), with the rules of each primitive
  in :mod:`._entrywise_rules`. A primitive it does not know raises :class:`Unfusable`, and the
  run falls back to the scan. The ``"entries"`` kernel runs it as it is (the block loop of
  :mod:`lpjax._ensemble._kernel`); the two compiled back ends below run the same evaluator with
  contexts of their own.
* :mod:`._fused` — ``"fused"``: one Pallas (Triton) kernel per block with the whole time loop
  inside, each value a vector over the block held in registers (:func:`run_fused`).
* :mod:`._native` — ``"native"``: the member program written as LLVM IR and compiled by llvmlite
  into one CPU loop over chunks of members on a thread pool (:func:`run_native` inside JAX,
  :func:`run_native_host` on numpy arrays); see :mod:`._native._run`.
"""

from ._entrywise import Unfusable as Unfusable, members_last as members_last
from ._fused import run_fused as run_fused
from ._native import (
    available as native_available,
    native_program as native_program,
    run_native as run_native,
    run_native_host as run_native_host,
)

__all__ = ["Unfusable", "members_last", "native_available", "native_program", "run_fused", "run_native",
           "run_native_host"]
