"""What :func:`lpjax.integrate` returns."""

from __future__ import annotations

from typing import Any, Optional

import equinox as eqx
from jaxtyping import Array, Float, PyTree

from ._events import EventRecord
from ._integrator import RESULTS

__all__ = ["Solution"]


class Solution(eqx.Module):
    """Output of :func:`integrate`.

    Attributes:
        ts: save times, shape ``(n_save + 1,)`` with ``n_save = n_steps // save_every``.
        ys: states at ``ts`` (the initial state first), shape ``(n_save + 1, *y0.shape)``.
        result: a :class:`RESULTS` code, the first failure met (or ``successful``).
        gs: attitudes at ``ts`` as a batched :class:`lpjax.groups.SO3` / :class:`lpjax.groups.SOn`
            (``gs.R`` has shape ``(n_save + 1, n, n)``), for methods run with
            ``reconstruct=True`` (see :class:`lpjax.AbstractGroupMap`); otherwise ``None``.
        stats: ``max_residual`` (worst implicit-equation residual at the last iteration of a
            step's solve), ``max_iterations`` and ``mean_iterations`` (most and mean iterations
            per step needed to meet ``tol``), ``num_failed_steps`` and ``num_steps``. The
            counters are int64 when JAX's x64 is on, int32 otherwise.
        state: the method's state after the last step (a predictor, a lifted point, an
            attitude): pass the Solution as ``y0`` to :func:`integrate` to continue the run.
        events: with ``events``, the crossings met (:class:`lpjax.EventRecord`); otherwise
            ``None``.
        observables: with ``observe`` (a chaos indicator), its values at ``ts`` (e.g.
            ``"lyapunov"``, ``(n_save + 1, k)``); otherwise ``None``.
    """

    ts: Float[Array, " T"]
    ys: Float[Array, "T n"]
    result: RESULTS
    stats: dict[str, Any]
    gs: Optional[PyTree] = None
    state: Optional[PyTree] = None
    events: Optional[EventRecord] = None
    observables: Optional[dict] = None
