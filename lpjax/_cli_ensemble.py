"""What ``lpjax ensemble`` does besides parsing: its schedule (fixed steps, or adaptive steps to
``--t1`` with save times), the processes, the run under Ctrl-C handling, and its report."""

from __future__ import annotations

import time

import click
import numpy as np

from ._cli_args import (_as_args, _Failure, _parse_numbers, _parse_y0, _positive_finite, _save_every, _save_times,
                        _tolerances, _whole_steps, _x64)
from ._cli_signals import _interrupts

_DEFAULT_DT = 0.01

# a process of `lpjax ensemble --processes K`: on an error, its line, then out at once (past
# jax.distributed's shutdown barrier, which would wait for the others), with status 1, or 130
# when interrupted; the launcher stops the others on an error
_CHILD = ("import os, sys\nfrom lpjax.cli import main\ntry:\n    main()\nexcept SystemExit as e:\n"
          "    code = e.code if isinstance(e.code, int) else 1\n"
          "    if code == 1:\n        print(e.code, file=sys.stderr, flush=True)\n    os._exit(code)")


def _schedule(dt, steps, t1, save_every, saves, save_times, rtol, atol, error_estimate) -> dict:
    """The keyword arguments of :func:`lpjax.ensemble` that fix its steps and saves, checked:
    fixed steps (``--steps``, or ``--t1`` a whole number of ``--dt``), or with ``--rtol/--atol``
    adaptive steps to ``--t1`` saving at ``--save-times`` or ``--saves`` equally spaced times."""
    if saves is not None and saves < 1:
        raise _Failure(f"--saves must be >= 1, got {saves}")
    if dt is not None:
        _positive_finite(dt, "--dt")
    if t1 is not None:
        _positive_finite(t1, "--t1")
    tol = _tolerances(rtol, atol)
    if tol is None:
        extra = [f for f, v in (("--save-times", save_times), ("--error-estimate", error_estimate)) if v is not None]
        if extra:
            raise _Failure(f"{', '.join(extra)}: adaptive runs only (give --rtol/--atol), or --save-every/--saves "
                           "for fixed steps")
        dt = _DEFAULT_DT if dt is None else dt
        if (steps is None) == (t1 is None):
            raise _Failure("give the run's length as --steps N or as --t1 T (a whole number of --dt steps), one of them")
        n = _whole_steps(t1, dt) if steps is None else steps
        if n < 1:
            raise _Failure(f"--steps must be >= 1, got {n}")
        if save_every is not None and saves is not None:
            raise _Failure("give --save-every or --saves, not both")
        if save_every is not None and (save_every < 1 or n % save_every):
            raise _Failure(f"--save-every {save_every} must be >= 1 and divide the {n} steps")
        every = save_every or (_save_every(n, saves) if saves else n)
        return dict(dt=dt, n_steps=n, save_every=every)
    extra = [f for f, v in (("--steps", steps), ("--save-every", save_every)) if v is not None]
    if extra:
        raise _Failure(f"{', '.join(extra)}: fixed steps only; an adaptive run (--rtol/--atol) goes to --t1, saving at "
                       "--save-times or --saves")
    if save_times is not None and saves is not None:
        raise _Failure("give --save-times or --saves, not both")
    ts = None if save_times is None else _parse_numbers(save_times, "--save-times")
    if ts is None and t1 is None:
        raise _Failure("an adaptive run (--rtol/--atol) needs its end time: --t1 T (or --save-times ending at it)")
    if ts is None and saves:
        ts = _save_times(t1, saves)
    from ._controller import PIDController

    return dict(dt=dt, controller=PIDController(rtol=tol[0], atol=tol[1]), t1=t1, ts=ts, error_estimate=error_estimate)


def run_ensemble(system, n_members, method, dt, steps, t1, save_every, saves, save_times, rtol, atol, error_estimate,
                 seed, spread, vary_casimirs, y0, params, observe, out, resume, progress, kernel, processes,
                 distributed) -> None:
    """The body of ``lpjax ensemble`` (see :mod:`lpjax.cli`)."""
    if n_members < 1:
        raise _Failure(f"--n must be >= 1, got {n_members}")
    schedule = _schedule(dt, steps, t1, save_every, saves, save_times, rtol, atol, error_estimate)
    if not (np.isfinite(spread) and spread >= 0):
        raise _Failure(f"--spread must be finite and >= 0, got {spread}")
    from ._ensemble._processes import initialize, launch_local, launched
    from ._ensemble._validate import check_store_path

    check_store_path(out, "--out")  # before any work, and before starting processes (main reports its ValueError)
    if (processes or 1) > 1:
        args = _as_args(click.get_current_context(), ("processes", "distributed"))
        if code := launch_local(processes, ["-c", _CHILD, "ensemble", *args, "--distributed"]):
            raise _Failure(f"--processes {processes}: a process ended with status {code}")
        return
    _x64()
    if distributed or (distributed is None and launched()):
        initialize()
    import jax

    from ._catalog import build
    from ._ensemble import ensemble, spread_states

    entry, resolved, sys_, meth, centre = build(system, method, params, _parse_y0(y0))
    y0s = spread_states(sys_, centre, n_members, spread, seed=seed, vary_casimirs=vary_casimirs)
    t = time.perf_counter()
    try:
        with _interrupts():
            sol = ensemble(sys_, meth, y0s.states, **schedule, observe=observe, out=out, resume=resume, kernel=kernel,
                           progress=progress,
                           metadata={"seed": seed, "spread": spread, "spread_on": y0s.manner, "system": entry.name,
                                     "parameters": resolved, "method": method})
    except FileExistsError:
        raise _Failure(f"{out} already holds a store; pass --resume to finish it, or remove it to start again") from None
    wall = time.perf_counter() - t
    if jax.process_index():
        return
    click.echo(f"{n_members} members of {entry.name} with {method}, {_schedule_text(schedule, sol, wall)}; failed: "
               f"{sol.failed.size}")
    click.echo(f"  spread on the {y0s.manner}" if not y0s.varied_casimirs else
               f"  spread in every coordinate: the Casimirs differ between members ({', '.join(y0s.varied_casimirs)})")
    click.echo(f"  wrote {out}")


def _schedule_text(schedule: dict, sol, wall: float) -> str:
    """The run's steps and time (compilation included)."""
    if "n_steps" in schedule:
        n, dt = schedule["n_steps"], schedule["dt"]
        return (f"{n} steps of {dt:g} to t = {n * dt:g}: {wall:.2f} s ({sol.final_state.shape[0] * n / wall:.3g} body-steps/s, "
                "compilation included)")
    c, steps = schedule["controller"], np.asarray(sol.stats["num_accepted_steps"])
    return (f"adaptive steps at rtol {c.rtol:g}, atol {c.atol:g} to t = {float(sol.ts[-1]):g} (accepted steps per "
            f"member: mean {steps.mean():.0f}, max {steps.max()}): {wall:.2f} s, compilation included")
