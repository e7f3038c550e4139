"""The schedule of a run, checked once, with one set of messages, for :func:`lpjax.integrate`,
:func:`lpjax.ensemble` and :func:`lpjax.ensemble_function`: :class:`FixedSchedule` (``dt``,
``n_steps``, ``save_every``) or :class:`AdaptiveSchedule` (the controller, the save times, the
most attempts, the error estimate)."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from ._checks import positive_int, positive_step
from ._controller import PIDController
from ._integrator._error_estimates import ESTIMATES, adaptive_method

__all__ = ["ADAPTIVE_STATS", "AdaptiveSchedule", "FixedSchedule", "adaptive_schedule", "fixed_schedule"]


@dataclasses.dataclass(frozen=True)
class FixedSchedule:
    """A fixed-step run's schedule: ``n_steps`` steps of ``dt``, saved every ``save_every``."""

    dt: Any
    n_steps: int
    save_every: int

    @property
    def n_save(self) -> int:
        return self.n_steps // self.save_every


def fixed_schedule(dt, n_steps, save_every, who: str) -> FixedSchedule:
    """The schedule of a fixed-step run, checked (``who`` names the caller in the messages)."""
    n_steps = positive_int(n_steps, f"{who}: n_steps")
    save_every = positive_int(save_every, f"{who}: save_every")
    if n_steps % save_every:
        raise ValueError(f"{who}: n_steps ({n_steps}) must be divisible by save_every ({save_every})")
    positive_step(dt, f"{who}: dt")
    return FixedSchedule(dt, n_steps, save_every)


# the statistics of an adaptive member: steps accepted and rejected, the controller's next step
# size (before clipping to a save time) and the time reached (t1, unless the member stopped)
ADAPTIVE_STATS = ("num_accepted_steps", "num_rejected_steps", "next_dt", "t_reached")


@dataclasses.dataclass(frozen=True)
class AdaptiveSchedule:
    """An adaptive run's schedule: the controller, the save times (the last is the final time)
    and the most attempts a member may make."""

    controller: PIDController
    ts: tuple
    max_steps: int
    estimate: str = "doubling"
    extrapolate: bool = True

    def settings(self, dt0) -> dict:
        """As an ensemble's settings record it (JSON)."""
        c = self.controller
        return {"controller": {f.name: getattr(c, f.name) for f in dataclasses.fields(c)}, "ts": list(self.ts),
                "max_steps": self.max_steps, "dt0": None if dt0 is None else float(dt0), "error_estimate": self.estimate,
                "local_extrapolation": self.extrapolate, "stat_names": list(ADAPTIVE_STATS)}


def adaptive_schedule(method, dt, n_steps, save_every, t1, ts, controller, max_steps, stats: bool, who: str,
                      error_estimate: Optional[str] = None,
                      local_extrapolation: Optional[bool] = None) -> Optional[AdaptiveSchedule]:
    """The schedule of an adaptive run (``controller`` given), checked; None for a fixed-step one
    (where ``t1``, ``ts`` and ``max_steps`` are refused)."""
    if controller is None:
        extra = [name for name, v in (("t1", t1), ("ts", ts), ("max_steps", max_steps),
                                      ("error_estimate", error_estimate),
                                      ("local_extrapolation", local_extrapolation)) if v is not None]
        if extra:
            raise ValueError(f"{who}: {', '.join(extra)} belong to adaptive runs: pass controller=lpjax.PIDController("
                             "rtol, atol) (or, for fixed steps, dt and n_steps)")
        return None
    if not isinstance(controller, PIDController):
        raise TypeError(f"{who}: controller must be an lpjax.PIDController, got {type(controller).__name__}")
    if n_steps is not None or save_every is not None:
        raise ValueError(f"{who}: an adaptive run (controller=...) takes t1=... and save times ts=..., not n_steps or "
                         "save_every")
    if stats:
        raise ValueError(f"{who}: stats=True collects the stage solves' statistics of fixed-step runs; an adaptive run "
                         f"always returns {', '.join(ADAPTIVE_STATS)}")
    adaptive_method(method, who)
    estimate = "doubling" if error_estimate is None else error_estimate
    if estimate not in ESTIMATES:
        raise ValueError(f"{who}: error_estimate must be one of {', '.join(map(repr, ESTIMATES))}, got {estimate!r}")
    if local_extrapolation is not None and not isinstance(local_extrapolation, (bool, np.bool_)):
        raise TypeError(f"{who}: local_extrapolation must be True, False or None, got {local_extrapolation!r}")
    if local_extrapolation and estimate != "doubling":
        raise ValueError(f"{who}: local_extrapolation goes on from the two half steps of error_estimate='doubling'; "
                         f"error_estimate={estimate!r} has none")
    extrapolate = estimate == "doubling" if local_extrapolation is None else bool(local_extrapolation)
    if dt is not None:  # (None: chosen for each member)
        positive_step(dt, f"{who}: dt0")
    if ts is None:
        if t1 is None:
            raise ValueError(f"{who}: an adaptive run needs its final time: t1=... (or save times ts=...)")
        ts = [t1]
    ts = np.asarray(ts, dtype=np.float64).reshape(-1)
    if ts.size == 0 or not np.all(np.isfinite(ts)) or ts[0] <= 0 or np.any(np.diff(ts) <= 0):
        raise ValueError(f"{who}: ts must be finite, strictly increasing save times > 0 (the run starts at t = 0), "
                         f"got {ts.tolist()[:8]}")
    if t1 is not None and float(t1) != ts[-1]:
        raise ValueError(f"{who}: the last save time ts[-1] = {ts[-1]} is the final time, but t1 = {t1}")
    return AdaptiveSchedule(controller, tuple(ts.tolist()),
                            positive_int(16384 if max_steps is None else max_steps, "max_steps"), estimate, extrapolate)
