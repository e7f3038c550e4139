"""Ensembles: many members of one system and method at once (:func:`ensemble`), in chunks,
with a resumable zarr store.

* :mod:`._api` — :func:`ensemble` (validate → plan → open the results → run the chunks →
  collect) and :func:`ensemble_function`;
* :mod:`._validate` — the inputs checked, the observables;
* :mod:`._spread` — :func:`spread_states`, members' initial states on one symplectic leaf;
* :mod:`._plan` — :class:`._plan.Plan`, the run's layout (chunks, processes, devices, threads,
  kernel);
* :mod:`._results` — where the chunks go (a store or arrays), this process's share of them,
  and the solution;
* :mod:`._processes` — several processes (``jax.distributed``): shares, agreement, barriers,
  and the local launcher of ``lpjax ensemble --processes``;
* :mod:`._store` — :class:`EnsembleSolution`, the zarr store and the run's settings;
* :mod:`._kernel` — the contract between the run and its kernels: one member's program
  (``init``, ``advance``, ``observe``, ``summary``), :class:`EnsembleFunction`, the kernel's
  choice and the block loop that runs a block of members with one of the kernels: ``scan``
  (``vmap``), ``entries``, ``fused`` or ``native``;
* :mod:`._kernels` — the back ends, which import nothing of the run: the entrywise program
  (:mod:`._kernels._entrywise`, :mod:`._kernels._entrywise_rules`) that ``entries`` runs and the
  compiled kernels are built on, ``fused`` (Pallas, :mod:`._kernels._fused`) and ``native``
  (LLVM, :mod:`._kernels._native`: its ``_run`` with ``_source``, ``_rules``, ``_loops``,
  ``_ir``).
"""

from ._api import (
    EnsembleOutput as EnsembleOutput,
    EnsembleSolution as EnsembleSolution,
    ensemble as ensemble,
    ensemble_function as ensemble_function,
    open_ensemble as open_ensemble,
)
from ._spread import Spread as Spread, spread_states as spread_states

__all__ = ["ensemble", "ensemble_function", "EnsembleOutput", "EnsembleSolution", "open_ensemble", "spread_states", "Spread"]
