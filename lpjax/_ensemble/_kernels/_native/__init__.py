"""The native CPU kernel (``kernel="native"``): the member program compiled by LLVM (through
llvmlite) into one loop over chunks of members.

* :mod:`._run` — the kernel: traced, compiled, cached on disk, loaded and called with the
  options of its kernel object (:class:`lpjax.kernels.Native`);
* :mod:`._source` — the LLVM IR of a whole kernel, ``run_chunks``;
* :mod:`._context` — the code context: the entrywise evaluator of
  :mod:`lpjax._ensemble._kernels._entrywise` run with one instruction per scalar operation;
* :mod:`._rules` — one rule per primitive (a registry) and the peephole rewrites;
* :mod:`._loops` — the member program's loops (``scan``, ``while``, ``cond``) in LLVM IR;
* :mod:`._ir` — the IR writer: scalar SSA values, constants, blocks and member loops.
"""

from ._run import (
    available as available,
    native_program as native_program,
    run_native as run_native,
    run_native_host as run_native_host,
)

__all__ = ["available", "native_program", "run_native", "run_native_host"]
