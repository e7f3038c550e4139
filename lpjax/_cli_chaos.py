"""``lpjax chaos``: a chaos map (MEGNO or FLI) over a 2-D family of states on one level set of a
system's energy and Casimirs, into a zarr store, with an optional picture.

The family: the grid point ``(u, v)`` is the state ``y0 + u e_I + v e_J`` (``I, J`` the two
coordinates of ``--plane``, ``u, v`` over ``±--extent``), moved to the nearest point of the
level set of ``y0``'s energy and Casimirs: Gauss–Newton's least-norm corrections
``y ← y − Gᵀ(GGᵀ)⁻¹ c(y)``, ``c`` the constraints' values less ``y0``'s and ``G`` their gradients,
until ``|c| ≤ 1e-13 (1 + |c₀|)`` (``c₀`` the centre's values; at most 50 iterations). A grid point
that does not reach it is left off the level set: its member is started from NaN and fails alone
(``invalid_initial_state``), and the picture leaves it blank. The store holds every grid point,
row by row (``NY`` rows of ``NX``)."""

from __future__ import annotations

import time

import click
import numpy as np

from ._cli_args import _Failure, _outputs_checked, _parse_y0, _positive_finite, _whole_steps, complete_method, complete_system
from ._io import atomic_write

_LEVEL_TOL, _LEVEL_ITERS = 1e-13, 50


def level_set_grid(system, y0, plane, extent, grid) -> tuple[np.ndarray, np.ndarray]:
    """``(states (NY·NX, d), on the level set (NY·NX,))``: the family of the module."""
    import jax
    import jax.numpy as jnp

    def constraints(y):
        return jnp.concatenate([jnp.atleast_1d(system.casimirs(y)), jnp.atleast_1d(system.energy(y))])

    y0 = jnp.asarray(y0)
    target = constraints(y0)
    scale = 1.0 + jnp.abs(target)

    def project(y):
        def body(c):
            y, _, k = c
            r = constraints(y) - target
            G = jax.jacfwd(constraints)(y)
            y = y - G.T @ jnp.linalg.solve(G @ G.T, r)
            return y, jnp.max(jnp.abs(constraints(y) - target) / scale), k + 1

        err0 = jnp.max(jnp.abs(constraints(y) - target) / scale)
        y, err, _ = jax.lax.while_loop(lambda c: (c[1] > _LEVEL_TOL) & (c[2] < _LEVEL_ITERS) & jnp.isfinite(c[1]),
                                       body, (y, err0, 0))
        return y, err <= _LEVEL_TOL

    (i, j), (nx, ny) = plane, grid
    u, v = np.meshgrid(np.linspace(-extent[0], extent[0], nx), np.linspace(-extent[1], extent[1], ny))
    starts = np.tile(np.asarray(y0), (nx * ny, 1))
    starts[:, i] += u.ravel()
    starts[:, j] += v.ravel()
    ys, ok = jax.jit(jax.vmap(project))(jnp.asarray(starts))
    return np.array(ys), np.asarray(ok)


@click.command("chaos")
@click.argument("system", shell_complete=complete_system)
@click.option("--grid", type=int, nargs=2, required=True, metavar="NX NY", help="grid points along I and along J")
@click.option("--plane", type=int, nargs=2, required=True, metavar="I J", help="the two coordinates of y0 the grid varies")
@click.option("--extent", type=float, nargs=2, default=(0.5, 0.5), show_default=True, metavar="DU DV",
              help="the grid spans y0[I] ± DU and y0[J] ± DV (before the move onto the level set)")
@click.option("--indicator", type=click.Choice(["megno", "fli"]), default="megno", show_default=True)
@click.option("--method", "-m", default="gl4", show_default=True, shell_complete=complete_method)
@click.option("--dt", type=float, default=0.01, show_default=True)
@click.option("--t1", type=float, required=True, help="the end time (from t = 0): a whole number of --dt steps")
@click.option("--y0", help="the centre of the grid (default: the system's own state)")
@click.option("--param", "-p", "params", multiple=True, metavar="NAME=VALUE", help="a system parameter (repeatable)")
@click.option("--out", required=True, help="the zarr store (a directory)")
@click.option("--plot", help="write a PNG of the map")
@click.option("--kernel", type=click.Choice(["auto", "scan", "entries", "fused", "native"]), default="auto",
              show_default=True)
@click.option("--progress/--no-progress", default=None, help="a progress bar over chunks (default: when stderr is a terminal)")
def chaos_cmd(system, grid, plane, extent, indicator, method, dt, t1, y0, params, out, plot, kernel, progress):
    """A chaos map of SYSTEM (MEGNO's ⟨Y⟩ or the FLI at --t1) over a grid of states on one level
    set of its energy and Casimirs, into a zarr store: the grid point (u, v) is y0 + u e_I + v e_J
    moved to the nearest point of y0's level set (Gauss–Newton)."""
    if min(grid) < 1:
        raise _Failure(f"--grid must be two positive ints, got {grid[0]} {grid[1]}")
    if not all(np.isfinite(e) and e >= 0 for e in extent):
        raise _Failure(f"--extent must be two finite numbers >= 0, got {extent[0]} {extent[1]}")
    _positive_finite(dt, "--dt")
    _positive_finite(t1, "--t1")
    n_steps = _whole_steps(t1, dt)
    _outputs_checked(out, plot, "lpjax chaos")
    from ._catalog import build
    from ._ensemble import ensemble
    from ._tangents import FLI, MEGNO

    entry, resolved, sys_, meth, centre = build(system, method, params, _parse_y0(y0))
    d = int(np.size(centre))
    if plane[0] == plane[1] or not all(0 <= a < d for a in plane):
        raise _Failure(f"--plane must be two different coordinates of {entry.name}'s state, 0 ... {d - 1}, got "
                       f"{plane[0]} {plane[1]}")
    states, ok = level_set_grid(sys_, centre, plane, extent, grid)
    states[~ok] = np.nan
    chosen = MEGNO() if indicator == "megno" else FLI()
    t = time.perf_counter()
    sol = ensemble(sys_, meth, states, dt, n_steps, observe=chosen, out=out, kernel=kernel, progress=progress,
                   metadata={"system": entry.name, "parameters": resolved, "method": method, "grid": list(grid),
                             "plane": list(plane), "extent": list(extent), "centre": np.asarray(centre).tolist()})
    wall = time.perf_counter() - t
    values = np.where(np.asarray(sol.result) == 0, np.asarray(sol.observables[indicator])[:, -1], np.nan)
    line = (f"<Y> <= 2.5 on {np.nanmean(values <= 2.5):.0%} of them" if indicator == "megno"
            else f"FLI in [{np.nanmin(values):.3g}, {np.nanmax(values):.3g}]") if np.any(ok) else "none ran"
    click.echo(f"{grid[0]} x {grid[1]} states of {entry.name} ({int(ok.sum())} on the level set) with {method}, "
               f"{n_steps} steps of {dt:g} to t = {n_steps * dt:g}: {line}; {wall:.2f} s, compilation included; "
               f"failed (off the level set included): {sol.failed.size}")
    click.echo(f"  wrote {out}")
    if plot:
        _plot(values.reshape(grid[1], grid[0]), plane, extent, centre, indicator, entry.name, n_steps * dt, plot)
        click.echo(f"  wrote {plot}")


def _plot(values, plane, extent, centre, indicator: str, name: str, t1: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (i, j), c = plane, np.asarray(centre)
    fig, ax = plt.subplots(figsize=(6.4, 5.2))
    im = ax.imshow(values, origin="lower", aspect="auto", cmap="magma",
                   extent=(c[i] - extent[0], c[i] + extent[0], c[j] - extent[1], c[j] + extent[1]),
                   **({"vmin": 0.0, "vmax": 8.0} if indicator == "megno" else {}))
    fig.colorbar(im, ax=ax, label="MEGNO ⟨Y⟩ (2: torus)" if indicator == "megno" else "FLI")
    ax.set(xlabel=f"y[{i}] (before the move onto the level set)", ylabel=f"y[{j}]",
           title=f"{name}: {indicator.upper()} at t = {t1:g}")
    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, dpi=120, format="png"))
    plt.close(fig)
