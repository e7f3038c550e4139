"""The ``lpjax`` command (click): ``list``, ``run``, ``ensemble``, ``show``, ``reproduce``,
``tune`` and ``completion``.

Every system of :mod:`lpjax.systems` and every method is reachable by name or alias
(``lpjax list``). Bad input ends with one line on stderr, ``lpjax: ...``, and a non-zero exit
status; ``lpjax --debug ...`` shows the traceback instead. Outputs are checked before any
work and written atomically.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Optional, Sequence

import click
import numpy as np

from ._cli_plots import _run_plot, _show_plot, _tune_plot
from ._cli_args import (_Failure, _need_matplotlib, _parse_y0, _positive_finite, _save_every, _tolerances, _whole_steps,
                        _writable_target, _x64, complete_method, complete_system)
from ._cli_chaos import chaos_cmd
from ._cli_run import _result_text, _run_adaptive, _run_metadata, _run_with_progress, _steps_text, _write_npz
from ._cli_signals import _resume_hint

_PROGRESS_STEPS = 100_000  # runs at least this long show a progress bar (--progress forces one)
_REPRODUCE_DEFAULT_OUT = "results/<seed>/"


# ----------------------------------------------------------------------------- the group


class _Group(click.Group):
    def resolve_command(self, ctx, args):  # a one-line message for an unknown command
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError:
            raise click.UsageError(f"unknown command {args[0]!r}; choose one of {', '.join(self.commands)}") from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="show the traceback of an error")
@click.version_option(package_name="lpjax", prog_name="lpjax")
@click.pass_context
def cli(ctx, debug):
    """Structure-preserving Lie-Poisson integrators."""
    ctx.obj = {"debug": debug}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns 0, or raises ``SystemExit`` with one line ``lpjax: ...``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv[:1] or os.environ.get("LPJAX_DEBUG") == "1"
    try:
        cli.main(args=argv, prog_name="lpjax", standalone_mode=False)
    except click.exceptions.Exit as e:
        if e.exit_code:
            raise SystemExit(e.exit_code) from None
    except click.Abort as e:
        if isinstance(e.__cause__, KeyboardInterrupt):  # Ctrl-C (click turns it into Abort)
            print(f"lpjax: interrupted{_resume_hint(argv)}", file=sys.stderr)
            raise SystemExit(130) from None
        raise SystemExit("lpjax: aborted") from None
    except click.ClickException as e:
        if debug:
            raise
        raise SystemExit(f"lpjax: {_one_line(e.format_message())}") from None
    except (_Failure, ValueError, TypeError, OSError, RuntimeError, ImportError) as e:
        if debug:
            raise
        raise SystemExit(f"lpjax: {_one_line(str(e) or type(e).__name__)}") from None
    except Exception as e:  # a defect of lpjax itself: still one line, with the way to the traceback
        if debug:
            raise
        raise SystemExit(f"lpjax: internal error {type(e).__name__}: {_one_line(str(e))} (lpjax --debug ... shows "
                         "the traceback)") from None
    return 0


def _one_line(message: str) -> str:
    """The first meaningful line (JAX and Equinox errors carry stack notes after it)."""
    lines = [ln.strip() for ln in str(message).splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith(("Above is the stack", "File ", "---", "equinox.EquinoxRuntimeError: ")):
            return ln
    if lines and lines[-1].startswith("equinox.EquinoxRuntimeError: "):
        return lines[-1].split(": ", 1)[1]
    return lines[0] if lines else "error"


def _complete_figure(ctx, param, incomplete):
    from .reproduce import FIGURES

    return [n for n in (*FIGURES, "all") if n.startswith(incomplete)]


# ----------------------------------------------------------------------------- list


@cli.command("list")
@click.option("--pairs/--no-pairs", default=True, help="list the methods that run each system (builds every system)")
def list_cmd(pairs):
    """List systems (with parameters and aliases), methods and figures."""
    from ._catalog import listing

    click.echo("\n".join(listing(pairs, _figure_names())))


# ----------------------------------------------------------------------------- run


@cli.command("run")
@click.argument("system", shell_complete=complete_system)
@click.option("--method", "-m", default="gl4", show_default=True, shell_complete=complete_method)
@click.option("--dt", type=float, default=0.05, show_default=True)
@click.option("--t1", type=float, default=100.0, show_default=True, help="end time (from t = 0)")
@click.option("--saves", type=int, default=1000, show_default=True,
              help="at least how many states to save (every k steps, k a divisor of the steps: the last at --t1)")
@click.option("--y0", help="initial state: numbers separated by commas (default: the system's own)")
@click.option("--param", "-p", "params", multiple=True, metavar="NAME=VALUE",
              help="a system parameter (repeatable); values are JSON: 2.5, [1, 2, 3], true")
@click.option("--out", help="write ts, ys and metadata to this .npz file")
@click.option("--plot", help="write a PNG of the state and invariant errors")
@click.option("--progress/--no-progress", default=None, help=f"a progress bar (default: runs of >= {_PROGRESS_STEPS} steps)")
@click.option("--rtol", type=float, help="adaptive steps (Gauss-Legendre, collective): the PID controller's relative "
                                         "tolerance (diffrax's); --dt is then the first step, --saves equally spaced "
                                         "save times to --t1")
@click.option("--atol", type=float, help="adaptive steps: the absolute tolerance (default: --rtol)")
def run_cmd(system, method, dt, t1, saves, y0, params, out, plot, progress, rtol, atol):
    """Integrate SYSTEM from the zoo and report its invariant errors."""
    _positive_finite(dt, "--dt")
    _positive_finite(t1, "--t1")
    if saves < 1:
        raise _Failure(f"--saves must be >= 1, got {saves}")
    tol = _tolerances(rtol, atol)  # (rtol, atol) of adaptive steps, or None
    n_steps = None if tol else _whole_steps(t1, dt)
    if out:
        _writable_target(out, "--out", ".npz")
    if plot:
        _writable_target(plot, "--plot", ".png")
        _need_matplotlib("lpjax run --plot")
    _x64()
    from ._catalog import build

    entry, resolved, sys_, meth, state = build(system, method, params, _parse_y0(y0))
    if tol:
        sol, wall = _run_adaptive(sys_, meth, state, dt, t1, saves, *tol)
        n_steps, save_every = int(sol.stats["num_accepted_steps"]), None
    else:
        save_every = _save_every(n_steps, saves)  # a divisor: the run ends at --t1
        sol, wall = _run_with_progress(sys_, meth, state, dt, n_steps, save_every,
                                       n_steps >= _PROGRESS_STEPS if progress is None else progress)
    from .diagnostics import relative_invariant_error

    e = np.asarray(relative_invariant_error(sys_.energy, sol.ys))
    c = np.asarray(relative_invariant_error(sys_.casimirs, sol.ys)).reshape(len(sol.ys), -1)
    click.echo(f"{entry.name} with {method}: {_steps_text(sol, n_steps, dt, tol)} to t = {float(sol.ts[-1]):g} "
               f"({wall:.2f} s)")
    click.echo(f"  result                      {_result_text(sol.result)}")
    click.echo(f"  max relative energy error   {e.max():.3e}")
    click.echo(f"  max relative Casimir error  {(c.max() if c.size else 0.0):.3e}")
    if out:
        meta = _run_metadata(entry.name, resolved, method, meth, dt, n_steps, save_every, state, sol, wall, tol)
        _write_npz(out, ts=np.asarray(sol.ts), ys=np.asarray(sol.ys), metadata=np.array(json.dumps(meta)))
        click.echo(f"  wrote {out}")
    if plot:
        _run_plot(entry.name, sys_, sol, e, c, plot)
        click.echo(f"  wrote {plot}")
    if _result_text(sol.result) != "successful":
        raise _Failure(f"the run {_result_text(sol.result)}")


# ----------------------------------------------------------------------------- ensemble, show


@cli.command("ensemble")
@click.argument("system", shell_complete=complete_system)
@click.option("--n", "n_members", type=int, required=True, help="members")
@click.option("--method", "-m", default="gl4", show_default=True, shell_complete=complete_method)
@click.option("--dt", type=float, help="the step (default 0.01); with --rtol the first step (default: one selected for "
                                       "each member)")
@click.option("--steps", type=int, help="fixed steps of --dt (or give --t1)")
@click.option("--t1", type=float, help="the end time (from t = 0): a whole number of --dt steps, or with --rtol the end "
                                       "of each member's adaptive run")
@click.option("--save-every", type=int, default=None, help="steps between saves (default: start and end only)")
@click.option("--saves", type=int, help="at least this many saves after the start, equally spaced, the last at the end")
@click.option("--save-times", help="adaptive runs: the save times, numbers separated by commas (the last is the end)")
@click.option("--rtol", type=float, help="adaptive steps (Gauss-Legendre, collective): each member's own, under a PID "
                                         "controller with this relative tolerance (diffrax's)")
@click.option("--atol", type=float, help="adaptive steps: the absolute tolerance (default: --rtol)")
@click.option("--error-estimate", type=click.Choice(["doubling", "defect"]),
              help="adaptive steps: step doubling (default; the run goes on from the two half steps) or the "
                   "collocation defect (one stage solve a step; its tolerance is not an error)")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--spread", type=float, default=0.1, show_default=True,
              help="the states' spread: exp(ad*_xi) y0 with xi ~ N(0, spread^2) in the algebra, on y0's coadjoint "
                   "orbit, so that every member keeps y0's Casimirs (nonholonomic systems: a Gaussian spread brought "
                   "back to the Casimirs' level set)")
@click.option("--vary-casimirs", is_flag=True,
              help="spread every coordinate by N(0, spread^2) instead, so that the Casimirs differ between members")
@click.option("--y0", help="the centre of the spread (default: the system's own state)")
@click.option("--param", "-p", "params", multiple=True, metavar="NAME=VALUE", help="a system parameter (repeatable)")
@click.option("--observe", type=click.Choice(["casimirs", "energy", "state"]), default="casimirs", show_default=True)
@click.option("--out", required=True, help="the zarr store (a directory)")
@click.option("--resume", is_flag=True, help="finish an interrupted store with the same settings")
@click.option("--progress/--no-progress", default=None, help="a progress bar over chunks (default: when stderr is a terminal)")
@click.option("--kernel", type=click.Choice(["auto", "scan", "entries", "fused", "native"]), default="auto",
              show_default=True,
              help="how a block of members runs (auto: native on a CPU when the lpjax[cpu] extra is installed "
                   "and $LPJAX_CPU_KERNEL is not 'scan', else scan; fused on a GPU; scan on a TPU)")
@click.option("--processes", type=click.IntRange(min=1), help="start K local processes of one run, each on its share of the cores")
@click.option("--distributed/--no-distributed", default=None,
              help="join a multi-process run (jax.distributed; default: when a launcher started several processes)")
def ensemble_cmd(**options):
    """Run an ensemble around a state of SYSTEM into a zarr store: fixed steps (--steps or --t1),
    or each member's own adaptive steps (--rtol/--atol, to --t1)."""
    from ._cli_ensemble import run_ensemble

    run_ensemble(**options)


@cli.command("section")
@click.argument("system", shell_complete=complete_system)
@click.option("--surface", type=int, required=True, help="the section is y[INDEX] = 0 (the state's coordinate INDEX)")
@click.option("--direction", type=click.Choice(["+", "-", "both"]), default="+", show_default=True,
              help="crossings upwards (+), downwards (-) or both")
@click.option("--crossings", type=int, default=50, show_default=True, help="crossings recorded per member, at most")
@click.option("--n", "n_members", type=int, required=True, help="members")
@click.option("--method", "-m", default="gl6", show_default=True, shell_complete=complete_method)
@click.option("--dt", type=float, default=0.01, show_default=True)
@click.option("--t1", type=float, required=True, help="the end time (from t = 0): a whole number of --dt steps")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--spread", type=float, default=0.1, show_default=True, help="as for lpjax ensemble")
@click.option("--y0", help="the centre of the spread (default: the system's own state)")
@click.option("--param", "-p", "params", multiple=True, metavar="NAME=VALUE", help="a system parameter (repeatable)")
@click.option("--out", required=True, help="the zarr store (a directory)")
@click.option("--plot", help="write a PNG of the crossings in the plane of --axes")
@click.option("--axes", type=int, nargs=2, help="the two coordinates of the picture (default: the first two others)")
@click.option("--kernel", type=click.Choice(["auto", "scan", "entries", "fused", "native"]), default="auto",
              show_default=True)
@click.option("--progress/--no-progress", default=None, help="a progress bar over chunks (default: when stderr is a terminal)")
def section_cmd(**options):
    """A Poincaré section of an ensemble around a state of SYSTEM, into a zarr store: each
    member's crossings of y[SURFACE] = 0, located by the method's own partial step."""
    from ._cli_section import run_section

    run_section(**options)


cli.add_command(chaos_cmd)


@cli.command("show")
@click.argument("store")
@click.option("--plot", help="write a PNG: histogram of the final invariant errors, quantiles over time")
def show_cmd(store, plot):
    """Summarize an ensemble store."""
    if plot:
        _writable_target(plot, "--plot", ".png")
        _need_matplotlib("lpjax show --plot")
    from ._ensemble import open_ensemble

    sol = open_ensemble(store)
    attrs = sol.settings
    if "controller" in attrs:  # adaptive steps
        c, steps = attrs["controller"], np.asarray(sol.stats["num_accepted_steps"][:])
        click.echo(f"{store}: {sol.n_members} members, adaptive steps at rtol {c['rtol']:g}, atol {c['atol']:g} to "
                   f"t = {attrs['ts'][-1]:g} (accepted steps per member: mean {steps.mean():.0f}, max {steps.max()}), "
                   f"{sol.ts.size} saves, dtype {attrs['dtype']}")
    else:
        click.echo(f"{store}: {sol.n_members} members, {attrs['n_steps']} steps of dt {attrs['dt']:g}, "
                   f"saved every {attrs['save_every']} ({sol.ts.size} saves), dtype {attrs['dtype']}")
    click.echo(f"  lpjax {attrs['lpjax']}, created {attrs['created']}, metadata {json.dumps(attrs['metadata'])}")
    click.echo(f"  system: {attrs['system'].splitlines()[0]}")
    click.echo(f"  method: {attrs['method'].splitlines()[0]}")
    if sol.y0s is not None:
        y0s = np.asarray(sol.y0s[:])
        click.echo(f"  y0s: {y0s.shape}, from {np.array2string(y0s.min(axis=0), precision=4)} "
                   f"to {np.array2string(y0s.max(axis=0), precision=4)}")
    if attrs.get("batched_system"):
        click.echo("  batched system arrays: " + ", ".join(f"{k} {tuple(v.shape)}" for k, v in sol.system_arrays.items()))
    click.echo(f"  failed members: {sol.failed.size}" + (f" (first: {sol.failed[:10].tolist()})" if sol.failed.size else ""))
    if sol.events is not None:
        stop = sol.result_names.index("event_occurred")
        count, stopped = np.asarray(sol.events.count[:]), int(np.sum(np.asarray(sol.result[:]) == stop))
        click.echo(f"  events: {len(attrs['events'])}, {int(count.sum())} crossings recorded ({count.mean():.1f} a member, "
                   f"at most {sol.events.ts.shape[1]}); {stopped} members stopped at a terminal event")
    errors = {}
    for name in sol.observables:
        first, last = sol.observables[name][:, 0], sol.observables[name][:, -1]
        ok = np.asarray(sol.result[:]) == 0
        err = (np.abs(last - first) / np.maximum(np.abs(first), np.finfo(first.dtype).tiny))[ok]
        errors[name] = err.reshape(err.shape[0], -1).max(axis=1) if err.ndim > 1 else err
        click.echo(f"  {name}: final mean {np.array2string(sol.mean(name)[-1], precision=6)}, "
                   f"relative change start->end: median {np.median(errors[name]):.3e}, max {errors[name].max():.3e}")
    if plot:
        _show_plot(sol, errors, plot)
        click.echo(f"  wrote {plot}")


# ----------------------------------------------------------------------------- reproduce


def _figure_names():
    from .reproduce import FIGURES

    return FIGURES


@cli.command("reproduce")
@click.argument("figure", shell_complete=_complete_figure)
@click.option("--out", default=None, help=f"output directory for the PNGs and <seed>.json (default {_REPRODUCE_DEFAULT_OUT})")
def reproduce_cmd(figure, out):
    """Reproduce a figure of a seed paper (PNG + JSON): seed001-fig1, seed002-fig1, seed002-fig2,
    seed002-fig3, seed002-fig5, seed002-fig6 or all (seed 002's Fig. 4 is a drawing of the top)."""
    figures = _figure_names()
    if figure == "all":
        chosen = list(figures)
    elif figure in figures:
        chosen = [figure]
    else:
        raise _Failure(f"unknown figure {figure!r}; choose one of {', '.join(figures)}, all")
    _x64()
    from .reproduce import json_name, reproduce

    by_seed: dict[str, list[str]] = {}
    for name in chosen:
        by_seed.setdefault(name.split("-")[0], []).append(name)
    for seed, names in by_seed.items():
        target = out or f"results/{seed}"
        t = time.perf_counter()
        reproduce(names, target, log=click.echo)
        click.echo(f"wrote {len(names)} figure(s) and {json_name(names[0])} to {target} in {time.perf_counter() - t:.1f} s")


# ----------------------------------------------------------------------------- tune


@cli.command("tune")
@click.argument("problem", type=click.Choice(["movable-top"]))
@click.option("--rho0", type=float, default=None, help="initial gain in (0, rho_c) (default 0.9 rho_c)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object: rho, rho_c, cost, cost_paper, iterations")
@click.option("--plot", help="write a PNG: J over the stable range, and Gamma_3(t) at rho* and 0.9 rho_c")
@click.option("--max-steps", type=click.IntRange(min=1), default=100, show_default=True, help="most optimizer updates")
@click.option("--progress/--no-progress", default=None, help="a progress bar per iteration (default: when stderr is a terminal)")
def tune_cmd(problem, rho0, as_json, plot, max_steps, progress):
    """Tune a control gain: movable-top (seed 002, sec. 5.3)."""
    if plot:
        _writable_target(plot, "--plot", ".png")
        _need_matplotlib("lpjax tune --plot")
    _x64()
    from .control import tune_upright_top, upright_top_cost

    res = tune_upright_top(rho0, max_steps=max_steps, progress=progress)
    paper = 0.9 * res.rho_c
    cost_paper = float(upright_top_cost(paper))
    if as_json:
        click.echo(json.dumps({"rho": res.rho, "rho_c": res.rho_c, "cost": res.cost, "cost_paper": cost_paper,
                               "iterations": res.iterations}))
    else:
        click.echo("movable-base top, cost J = mean of int exp(-t/tau)/tau [(1 - Gamma3) + w |u|^2/(mbar g)^2] dt "
                   "(tau = 2 s, T = 20 s, w = 0.05, 4 initial states)")
        click.echo(f"  rho*          {res.rho:.8g}  (rho*/rho_c = {res.rho / res.rho_c:.6f}, rho_c = {res.rho_c:.8g})")
        click.echo(f"  J(rho*)       {res.cost:.8g}   dJ/drho = {res.gradient:.2e}")
        click.echo(f"  J(0.9 rho_c)  {cost_paper:.8g}  (the paper's gain)")
        click.echo(f"  iterations    {res.iterations} (optax L-BFGS)")
    if plot:
        _tune_plot(res, paper, plot)
        if not as_json:
            click.echo(f"  wrote {plot}")


# ----------------------------------------------------------------------------- completion


@cli.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_cmd(shell):
    """Print the shell completion script: eval "$(lpjax completion bash)"."""
    from click.shell_completion import get_completion_class

    comp = get_completion_class(shell)(cli, {}, "lpjax", "_LPJAX_COMPLETE")
    click.echo(comp.source())


if __name__ == "__main__":
    sys.exit(main())
