"""Ensembles: many members of one system and method at once (:func:`ensemble`), in chunks,
with a resumable zarr store.

* :mod:`._api` — :func:`ensemble` (validate → plan → open the results → run the chunks →
  collect) and :func:`ensemble_function`;
* :mod:`._validate` — the inputs checked, the observables;
* :mod:`._plan` — :class:`._plan.Plan`, the run's layout (chunks, processes, devices, threads,
  kernel);
* :mod:`._results` — where the chunks go (a store or arrays), this process's share of them,
  and the solution;
* :mod:`._processes` — several processes (``jax.distributed``): shares, agreement, barriers,
  and the local launcher of ``lpjax ensemble --processes``;
* :mod:`._store` — :class:`EnsembleSolution`, the zarr store and the run's settings;
* :mod:`._kernel` — one member's program (``init``, ``advance``, ``observe``, ``summary``) and
  the kernels that run a block of members: ``scan`` (``vmap``), ``entries`` (:mod:`._soa`,
  :mod:`._soa_rules`), ``fused`` (Pallas, :mod:`._fused`) and ``native`` (LLVM,
  :mod:`._native` with :mod:`._native_source`, :mod:`._native_rules`, :mod:`._native_loops`,
  :mod:`._native_ir`).
"""

from ._api import (
    EnsembleOutput as EnsembleOutput,
    EnsembleSolution as EnsembleSolution,
    ensemble as ensemble,
    ensemble_function as ensemble_function,
    open_ensemble as open_ensemble,
)

__all__ = ["ensemble", "ensemble_function", "EnsembleOutput", "EnsembleSolution", "open_ensemble"]
