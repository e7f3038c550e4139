"""The ``lpjax`` command: ``lpjax list``, ``lpjax run SYSTEM`` and ``lpjax reproduce FIGURE``."""

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
    args = ap.parse_args(argv)
    if args.cmd == "list":
        return _cmd_list()
    if args.cmd == "reproduce":
        return _cmd_reproduce(args)
    return _cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
