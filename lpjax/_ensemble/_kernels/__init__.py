"""The back ends of an ensemble run: the kernels that run one member's program (the pieces of
:class:`lpjax._member.AbstractMember`: ``init``, ``advance``, ``observe``,
``summary``) over a block of members, the member axis last, as objects (:mod:`._kinds`:
:class:`Scan`, :class:`Entries`, :class:`Fused`, :class:`Native`, public as
:mod:`lpjax.kernels`). The run (:class:`EnsembleFunction
<lpjax._ensemble._kernel.EnsembleFunction>`) asks them its questions; nothing here imports it.

* :mod:`._kinds` — the kernel objects and their options;
* :mod:`._blocks` — the block loop of ``Scan`` (``vmap``) and ``Entries``;
* :mod:`._entrywise` — the shared entrywise program: a member's function traced to a jaxpr and
  evaluated entry by entry, every array value an object array of its per-member shape whose
  entries are vectors over the members (:func:`members_last`), with the rules of each primitive
  in :mod:`._entrywise_rules`. A primitive it does not know raises :class:`Unfusable`, and the
  run falls back to the scan. The ``"entries"`` kernel runs it as it is (the block loop of
  :mod:`._blocks`); the two compiled back ends below run the same evaluator with
  contexts of their own.
* :mod:`._fused` — ``"fused"``: one Pallas (Triton) kernel per block with the whole time loop
  inside, each value a vector over the block held in registers (:func:`run_fused`).
* :mod:`._native` — ``"native"``: the member program written as LLVM IR and compiled by llvmlite
  into one CPU loop over chunks of members on a thread pool (:func:`run_native` inside JAX,
  :func:`run_native_host` on numpy arrays); see :mod:`._native._run`.
"""

from ._entrywise import Unfusable as Unfusable
from ._kinds import (
    CPU_BLOCK as CPU_BLOCK,
    AbstractKernel as AbstractKernel,
    Entries as Entries,
    Fused as Fused,
    Native as Native,
    Scan as Scan,
)
from ._native import available as native_available

__all__ = ["AbstractKernel", "CPU_BLOCK", "Entries", "Fused", "Native", "Scan", "Unfusable", "native_available"]
