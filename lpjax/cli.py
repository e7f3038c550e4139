"""The ``lpjax`` command: ``lpjax list``, ``lpjax run SYSTEM``, ``lpjax reproduce FIGURE`` and
``lpjax tune movable-top``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Callable, Optional, Sequence

import numpy as np

from ._io import atomic_write as _atomic_write, require_matplotlib

# name -> (factory of the system with default parameters, default initial state, summary)
_SYSTEMS: dict[str, tuple[Callable, list, str]] = {
    "rigid_body": (
        lambda: _zoo().rigid_body([1.0, 2.0, 3.0]),
        [1.0, 0.5, 0.8],
        "Euler top on so(3)*, I = (1, 2, 3)",
    ),
    "heavy_top": (
        lambda: _zoo().heavy_top([1.0, 1.3, 0.7], [0.0, 0.0, 1.0], 2.0),
        [0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386],
        "heavy top on se(3)*, I = (1, 1.3, 0.7), chi = e3, mgl = 2",
    ),
    "rigid_body_4d": (
        lambda: _zoo().rigid_body_n([0.5, 1.0, 1.5, 2.0]),
        [1.0, 0.3, -0.5, 0.2, 0.8, -0.4],
        "free rigid body on so(4)*, J = (0.5, 1, 1.5, 2)",
    ),
    "heavy_top_4d": (
        lambda: _zoo().heavy_top_n([0.5, 0.5, 0.5, 1.0], [0.0, 0.0, 0.0, 1.0]),
        [1.0, 0.3, -0.5, 0.2, 0.8, -0.4, 0.1, 0.2, 0.3, 0.9],
        "heavy top on e(4)*, J = (0.5, 0.5, 0.5, 1), A = e4",
    ),
}


def _zoo():
    from . import systems

    return systems


def _method(name: str):
    import lpjax

    key = name.lower()
    if key == "rk4":
        return lpjax.RK4()
    if key.startswith("gl") and key[2:].isdigit() and int(key[2:]) >= 2 and int(key[2:]) % 2 == 0:
        return lpjax.GaussLegendre(int(key[2:]) // 2)
    raise SystemExit(f"lpjax: unknown method {name!r}; expected 'rk4' or 'gl<order>' with even order (gl2, gl4, gl6, ...)")


def _cmd_list() -> int:
    print("systems:")
    for name, (_, _, summary) in _SYSTEMS.items():
        print(f"  {name:16s} {summary}")
    print("methods:\n  rk4              classical Runge-Kutta 4\n  gl<2s>           Gauss-Legendre with s stages (gl2, gl4, gl6, ...)")
    print("figures (lpjax reproduce):\n  " + "\n  ".join(_figure_names()) + "\n  all")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    if args.system not in _SYSTEMS:
        raise SystemExit(f"lpjax: unknown system {args.system!r}; choose one of {', '.join(_SYSTEMS)}")
    if not (args.dt > 0 and np.isfinite(args.dt)) or not (args.t1 > 0 and np.isfinite(args.t1)):
        raise SystemExit("lpjax: --dt and --t1 must be finite and > 0")
    if args.plot:
        try:
            require_matplotlib("lpjax run --plot")
        except ImportError as e:
            raise SystemExit(f"lpjax: {e}") from None
    import jax

    jax.config.update("jax_enable_x64", True)
    import lpjax
    from lpjax.diagnostics import relative_invariant_error

    make, y0, _ = _SYSTEMS[args.system]
    system, method = make(), _method(args.method)
    n_steps = max(1, int(round(args.t1 / args.dt)))
    save_every = max(1, n_steps // args.saves)
    n_steps -= n_steps % save_every
    sol = lpjax.integrate(system, method, np.asarray(y0), args.dt, n_steps, save_every=save_every)
    e = np.asarray(relative_invariant_error(system.energy, sol.ys))
    c = np.asarray(relative_invariant_error(system.casimirs, sol.ys))
    print(f"{args.system} with {args.method}: {n_steps} steps of {args.dt} to t = {float(sol.ts[-1]):g}")
    print(f"  max relative energy error   {e.max():.3e}")
    print(f"  max relative Casimir error  {c.max():.3e}")
    meta = dict(system=args.system, method=args.method, dt=args.dt, n_steps=n_steps, save_every=save_every,
                lpjax_version=lpjax.__version__)
    if args.out:
        _atomic_write(args.out, lambda p: np.savez(p, ts=np.asarray(sol.ts), ys=np.asarray(sol.ys),
                                                   metadata=np.array(json.dumps(meta))))
        print(f"  wrote {args.out}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
        axes[0].plot(sol.ts, sol.ys)
        axes[0].set_title(f"{args.system}: state")
        axes[1].semilogy(sol.ts[1:], np.maximum(e[1:], 1e-17), label="energy")
        axes[1].semilogy(sol.ts[1:], np.maximum(c.max(axis=1)[1:], 1e-17), label="Casimirs")
        axes[1].set_title("relative invariant error")
        axes[1].legend()
        for ax in axes:
            ax.set_xlabel("t")
        fig.tight_layout()
        _atomic_write(args.plot, lambda p: fig.savefig(p, dpi=100, format="png"))
        print(f"  wrote {args.plot}")
    return 0


_REPRODUCE_DEFAULT_OUT = "results/seed002/"


def _figure_names():
    from .reproduce import FIGURES

    return FIGURES


def _cmd_reproduce(args: argparse.Namespace) -> int:
    figures = _figure_names()
    if args.figure == "all":
        chosen = list(figures)
    elif args.figure in figures:
        chosen = [args.figure]
    else:
        raise SystemExit(f"lpjax: unknown figure {args.figure!r}; choose one of {', '.join(figures)}, all")
    import jax

    jax.config.update("jax_enable_x64", True)
    from .reproduce import JSON_NAME, reproduce

    t = time.perf_counter()
    try:
        reproduce(chosen, args.out, log=print)
    except ValueError as e:  # e.g. a damaged results JSON
        raise SystemExit(f"lpjax: {e}") from None
    print(f"wrote {len(chosen)} figure(s) and {JSON_NAME} to {args.out} in {time.perf_counter() - t:.1f} s")
    return 0


def _writable_target(path: str, flag: str) -> None:
    import os

    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise SystemExit(f"lpjax: {flag} {path!r}: the folder {folder!r} does not exist or is not writable")


def _cmd_tune(args: argparse.Namespace) -> int:
    if args.plot:
        _writable_target(args.plot, "--plot")
        try:
            require_matplotlib("lpjax tune --plot")
        except ImportError as e:
            raise SystemExit(f"lpjax: {e}") from None
    import jax

    jax.config.update("jax_enable_x64", True)
    from .control import tune_upright_top, upright_top_cost

    try:
        res = tune_upright_top(args.rho0)
    except ValueError as e:
        raise SystemExit(f"lpjax: {e}") from None
    paper = 0.9 * res.rho_c
    cost_paper = float(upright_top_cost(paper))
    if args.json:
        print(json.dumps({"rho": res.rho, "rho_c": res.rho_c, "cost": res.cost, "cost_paper": cost_paper,
                          "iterations": res.iterations}))
    else:
        print("movable-base top, cost J = mean of int exp(-t/tau)/tau [(1 - Gamma3) + w |u|^2/(mbar g)^2] dt "
              "(tau = 2 s, T = 20 s, w = 0.05, 4 initial states)")
        print(f"  rho*          {res.rho:.8g}  (rho*/rho_c = {res.rho / res.rho_c:.6f}, rho_c = {res.rho_c:.8g})")
        print(f"  J(rho*)       {res.cost:.8g}   dJ/drho = {res.gradient:.2e}")
        print(f"  J(0.9 rho_c)  {cost_paper:.8g}  (the paper's gain)")
        print(f"  iterations    {res.iterations} (optax L-BFGS)")
    if args.plot:
        _tune_plot(res, paper, args.plot)
        if not args.json:
            print(f"  wrote {args.plot}")
    return 0


def _tune_plot(res, paper: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import lpjax
    from lpjax.control import upright_top_cost, upright_top_initial_states
    from lpjax.systems import movable_base_top

    fracs = np.linspace(0.04, 0.98, 48)
    J = [float(upright_top_cost(f * res.rho_c)) for f in fracs]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].semilogy(fracs, J, "-", label="J(rho)")
    axes[0].plot([res.rho / res.rho_c], [res.cost], "o", label=f"optimum rho* = {res.rho / res.rho_c:.3f} rho_c")
    axes[0].plot([paper / res.rho_c], [float(upright_top_cost(paper))], "s", label="paper: 0.9 rho_c")
    axes[0].set(xlabel="rho / rho_c", ylabel="J", title="cost over the stable range 0 < rho < rho_c")
    for rho, label in ((res.rho, "rho*"), (paper, "0.9 rho_c")):
        system = movable_base_top(rho=rho)
        sol = lpjax.integrate(system, lpjax.GaussLegendre(2), upright_top_initial_states(system)[0], 0.01, 2000)
        axes[1].plot(np.asarray(sol.ts), np.asarray(sol.ys[:, 8]), label=label)
    axes[1].set(xlabel="t [s]", ylabel="Gamma_3", title="initial state 0 (seed 002, sec. 5.3)")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    _atomic_write(path, lambda p: fig.savefig(p, dpi=100, format="png"))
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="lpjax", description="Structure-preserving Lie-Poisson integrators")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list systems and methods")
    run = sub.add_parser("run", help="integrate a system from the zoo")
    run.add_argument("system")
    run.add_argument("--method", default="gl4")
    run.add_argument("--dt", type=float, default=0.05)
    run.add_argument("--t1", type=float, default=100.0)
    run.add_argument("--saves", type=int, default=1000, help="about how many states to save")
    run.add_argument("--out", help="write ts, ys and metadata to this .npz file")
    run.add_argument("--plot", help="write a PNG of the state and invariant errors")
    rep = sub.add_parser("reproduce", help="reproduce a figure of a seed paper (PNG + JSON)")
    rep.add_argument("figure", help="seed002-fig1, seed002-fig2, seed002-fig3, seed002-fig5, seed002-fig6 or all")
    rep.add_argument("--out", default=_REPRODUCE_DEFAULT_OUT,
                     help=f"output directory for the PNGs and seed002.json (default {_REPRODUCE_DEFAULT_OUT})")
    tune = sub.add_parser("tune", help="tune a control gain: movable-top (seed 002, sec. 5.3)")
    tune.add_argument("problem", choices=["movable-top"])
    tune.add_argument("--rho0", type=float, default=None, help="initial gain in (0, rho_c) (default 0.9 rho_c)")
    tune.add_argument("--json", action="store_true", help="print one JSON object: rho, rho_c, cost, cost_paper, iterations")
    tune.add_argument("--plot", help="write a PNG: J over the stable range, and Gamma_3(t) at rho* and 0.9 rho_c")
    args = ap.parse_args(argv)
    if args.cmd == "list":
        return _cmd_list()
    if args.cmd == "reproduce":
        return _cmd_reproduce(args)
    if args.cmd == "tune":
        return _cmd_tune(args)
    return _cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
