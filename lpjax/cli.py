"""The ``lpjax`` command: ``lpjax list``, ``lpjax run SYSTEM``, ``lpjax ensemble SYSTEM``,
``lpjax show STORE``, ``lpjax reproduce FIGURE`` and ``lpjax tune movable-top``."""

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
    "lagrange_top": (
        lambda: _zoo().lagrange_top(3, frame="rest"),
        [0.3, -0.2, 0.5, 0.0, 0.6, 0.8],
        "Lagrange top on e(3)*, rest frame (seed 000, sec. 6), gravity e3",
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
    if key in ("mv", "moser-veselov"):
        return lpjax.MoserVeselov()
    if key == "suris":
        return lpjax.SurisLagrangeTop()
    raise SystemExit(f"lpjax: unknown method {name!r}; expected 'rk4', 'gl<order>' with even order (gl2, gl4, ...), "
                     "'mv' (Moser-Veselov, rigid bodies) or 'suris' (Lagrange top)")


def _cmd_list() -> int:
    print("systems:")
    for name, (_, _, summary) in _SYSTEMS.items():
        print(f"  {name:16s} {summary}")
    print("methods:\n  rk4              classical Runge-Kutta 4\n  gl<2s>           Gauss-Legendre with s stages (gl2, gl4, gl6, ...)"
          "\n  mv               Moser-Veselov (rigid bodies)\n  suris            Suris' map (lagrange_top)")
    print("figures (lpjax reproduce):\n  " + "\n  ".join(_figure_names()) + "\n  all")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    system, method, y0 = _system_and_method(args.system, args.method)
    if not (args.dt > 0 and np.isfinite(args.dt)) or not (args.t1 > 0 and np.isfinite(args.t1)):
        raise SystemExit("lpjax: --dt and --t1 must be finite and > 0")
    if args.plot:
        try:
            require_matplotlib("lpjax run --plot")
        except ImportError as e:
            raise SystemExit(f"lpjax: {e}") from None
    import lpjax
    from lpjax.diagnostics import relative_invariant_error

    n_steps = max(1, int(round(args.t1 / args.dt)))
    save_every = max(1, n_steps // args.saves)
    n_steps -= n_steps % save_every
    sol = lpjax.integrate(system, method, y0, args.dt, n_steps, save_every=save_every)
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


def _system_and_method(system_name: str, method_name: str):
    """The zoo system, the method and the default state, in float64 (x64 on before anything is built)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    if system_name not in _SYSTEMS:
        raise SystemExit(f"lpjax: unknown system {system_name!r}; choose one of {', '.join(_SYSTEMS)}")
    make, y0, _ = _SYSTEMS[system_name]
    system, method = make(), _method(method_name)
    try:
        method.check_system(system)
    except (TypeError, ValueError) as e:
        raise SystemExit(f"lpjax: {e}") from None
    return system, method, np.asarray(y0)


def _cmd_ensemble(args: argparse.Namespace) -> int:
    import lpjax

    system, method, y0 = _system_and_method(args.system, args.method)
    if args.n < 1 or args.steps < 1 or not (args.dt > 0 and np.isfinite(args.dt)) or not (args.spread >= 0):
        raise SystemExit("lpjax: --n and --steps must be >= 1, --dt finite and > 0, --spread >= 0")
    rng = np.random.default_rng(args.seed)
    y0s = y0 + args.spread * rng.standard_normal((args.n, y0.size))
    t = time.perf_counter()
    try:
        sol = lpjax.ensemble(system, method, y0s, args.dt, args.steps, save_every=args.save_every or args.steps,
                             observe=args.observe, out=args.out, resume=args.resume, kernel=args.kernel,
                             metadata={"seed": args.seed, "spread": args.spread, "system": args.system, "method": args.method})
    except (FileExistsError, PermissionError, ValueError) as e:
        raise SystemExit(f"lpjax: {e}") from None
    wall = time.perf_counter() - t
    print(f"{args.n} members x {args.steps} steps of {args.system} with {args.method}: {wall:.2f} s "
          f"({args.n * args.steps / wall:.3g} body-steps/s, compilation included); failed: {sol.failed.size}")
    print(f"  wrote {args.out}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    import lpjax

    try:
        sol = lpjax.open_ensemble(args.store)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"lpjax: {e}") from None
    import zarr

    attrs = dict(zarr.open_group(args.store, mode="r").attrs)
    print(f"{args.store}: {sol.n_members} members, {attrs['n_steps']} steps of dt {attrs['dt']}, "
          f"saved every {attrs['save_every']} ({sol.ts.size} saves), dtype {attrs['dtype']}")
    print(f"  lpjax {attrs['lpjax']}, created {attrs['created']}, metadata {json.dumps(attrs['metadata'])}")
    print(f"  method: {attrs['method'].splitlines()[0]}")
    print(f"  failed members: {sol.failed.size}" + (f" (first: {sol.failed[:10].tolist()})" if sol.failed.size else ""))
    errors = {}
    for name in sol.observables:
        first, last = sol.observables[name][:, 0], sol.observables[name][:, -1]
        ok = np.asarray(sol.result[:]) == 0
        err = (np.abs(last - first) / np.maximum(np.abs(first), np.finfo(first.dtype).tiny))[ok]
        errors[name] = err.reshape(err.shape[0], -1).max(axis=1) if err.ndim > 1 else err
        print(f"  {name}: final mean {np.array2string(sol.mean(name)[-1], precision=6)}, "
              f"relative change start->end: median {np.median(errors[name]):.3e}, max {errors[name].max():.3e}")
    if args.plot:
        _show_plot(sol, errors, args.plot)
        print(f"  wrote {args.plot}")
    return 0


def _show_plot(sol, errors: dict, path: str) -> None:
    require_matplotlib("lpjax show --plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, err in errors.items():
        axes[0].hist(np.log10(np.maximum(err, 1e-18)), bins=50, alpha=0.6, label=name)
        q = sol.quantile([0.05, 0.5, 0.95], name)
        q = q.reshape(3, q.shape[1], -1)[..., 0]
        axes[1].plot(sol.ts, q[1], label=f"{name} (first component): median")
        axes[1].fill_between(sol.ts, q[0], q[2], alpha=0.3, label=f"{name}: 5-95%")
    axes[0].set(xlabel="log10 relative change, start to end", ylabel="members", title="final invariant errors")
    axes[1].set(xlabel="t", title="observable quantiles over the members")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    _atomic_write(path, lambda p: fig.savefig(p, dpi=100, format="png"))


_REPRODUCE_DEFAULT_OUT = "results/<seed>/"


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
    from .reproduce import json_name, reproduce

    by_seed: dict[str, list[str]] = {}
    for name in chosen:
        by_seed.setdefault(name.split("-")[0], []).append(name)
    for seed, names in by_seed.items():
        out = args.out or f"results/{seed}"
        t = time.perf_counter()
        try:
            reproduce(names, out, log=print)
        except ValueError as e:  # e.g. a damaged results JSON
            raise SystemExit(f"lpjax: {e}") from None
        print(f"wrote {len(names)} figure(s) and {json_name(names[0])} to {out} in {time.perf_counter() - t:.1f} s")
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
    ens = sub.add_parser("ensemble", help="run an ensemble around a system's default state into a zarr store")
    ens.add_argument("system")
    ens.add_argument("--n", type=int, required=True, help="members")
    ens.add_argument("--method", default="gl4")
    ens.add_argument("--dt", type=float, default=0.01)
    ens.add_argument("--steps", type=int, required=True)
    ens.add_argument("--save-every", type=int, default=None, help="steps between saves (default: start and end only)")
    ens.add_argument("--seed", type=int, default=0)
    ens.add_argument("--spread", type=float, default=0.1, help="standard deviation of the Gaussian spread of the states")
    ens.add_argument("--observe", choices=["casimirs", "energy", "state"], default="casimirs")
    ens.add_argument("--out", required=True, help="the zarr store (a directory)")
    ens.add_argument("--resume", action="store_true", help="finish an interrupted store with the same settings")
    ens.add_argument("--kernel", choices=["auto", "scan", "entries", "fused"], default="auto",
                     help="how a block of members runs (auto: fused on a GPU, scan otherwise)")
    show = sub.add_parser("show", help="summarize an ensemble store")
    show.add_argument("store")
    show.add_argument("--plot", help="write a PNG: histogram of the final invariant errors, quantiles over time")
    rep = sub.add_parser("reproduce", help="reproduce a figure of a seed paper (PNG + JSON)")
    rep.add_argument("figure", help="seed001-fig1, seed002-fig1, seed002-fig2, seed002-fig3, seed002-fig5, "
                                    "seed002-fig6 or all")
    rep.add_argument("--out", default=None,
                     help=f"output directory for the PNGs and <seed>.json (default {_REPRODUCE_DEFAULT_OUT})")
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
    if args.cmd == "ensemble":
        return _cmd_ensemble(args)
    if args.cmd == "show":
        return _cmd_show(args)
    return _cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
