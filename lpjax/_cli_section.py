"""What ``lpjax section`` does besides parsing: a Poincaré section of an ensemble around a
state of a system (the crossings of ``y[INDEX] = 0`` in a direction, each located by the
method's own partial step), into a zarr store, with an optional picture."""

from __future__ import annotations

import time

import click
import numpy as np

from ._cli_args import _Failure, _outputs_checked, _parse_y0, _positive_finite, _whole_steps
from ._io import atomic_write

_DIRECTIONS = {"+": 1, "-": -1, "both": 0}


def run_section(system, n_members, method, dt, t1, surface, direction, crossings, seed, spread, y0, params, out,
                plot, axes, kernel, progress) -> None:
    """The body of ``lpjax section`` (see :mod:`lpjax.cli`)."""
    if n_members < 1:
        raise _Failure(f"--n must be >= 1, got {n_members}")
    if crossings < 1:
        raise _Failure(f"--crossings must be >= 1, got {crossings}")
    _positive_finite(dt, "--dt")
    _positive_finite(t1, "--t1")
    n_steps = _whole_steps(t1, dt)
    if not (np.isfinite(spread) and spread >= 0):
        raise _Failure(f"--spread must be finite and >= 0, got {spread}")
    _outputs_checked(out, plot, "lpjax section")
    from ._catalog import build
    from ._ensemble import ensemble, spread_states
    from ._events import Event

    entry, resolved, sys_, meth, centre = build(system, method, params, _parse_y0(y0))
    d = int(np.size(centre))
    if not 0 <= surface < d:
        raise _Failure(f"--surface must be the index of a coordinate of {entry.name}'s state, 0 ... {d - 1}, got {surface}")
    plane = list(axes) if axes else _default_axes(surface, d)
    if len(plane) != 2 or not all(0 <= a < d for a in plane):
        raise _Failure(f"--axes must be two coordinates of the state, 0 ... {d - 1}, got {axes}")
    event = Event(_Coordinate(surface), direction=_DIRECTIONS[direction], terminal=False, max_crossings=crossings)
    y0s = spread_states(sys_, centre, n_members, spread, seed=seed)
    t = time.perf_counter()
    sol = ensemble(sys_, meth, y0s.states, dt, n_steps, events=event, observe="casimirs", out=out, kernel=kernel,
                   progress=progress, metadata={"seed": seed, "spread": spread, "system": entry.name,
                                                "parameters": resolved, "method": method, "surface": surface,
                                                "direction": direction})
    wall = time.perf_counter() - t
    count = np.asarray(sol.events.count)
    click.echo(f"{n_members} members of {entry.name} with {method}, {n_steps} steps of {dt:g} to t = {n_steps * dt:g}: "
               f"{int(count.sum())} crossings of y[{surface}] = 0 ({direction}), {count.mean():.1f} a member "
               f"(at most {crossings}); {wall:.2f} s, compilation included; failed: {sol.failed.size}")
    click.echo(f"  wrote {out}")
    if plot:
        _plot(sol, plane, surface, entry.name, plot)
        click.echo(f"  wrote {plot}")


class _Coordinate:
    """``cond(t, y) = y[index]``, with a name that a store's settings record."""

    def __init__(self, index: int):
        self.index = index
        self.__qualname__ = f"coordinate_{index}"

    def __call__(self, t, y):
        return y[self.index]

    def __eq__(self, other):
        return isinstance(other, _Coordinate) and other.index == self.index

    def __hash__(self):
        return hash(("coordinate", self.index))

    def __repr__(self):
        return f"y[{self.index}]"


def _default_axes(surface: int, d: int) -> list:
    return [a for a in range(d) if a != surface][:2]


def _plot(sol, plane, surface: int, name: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ys = np.asarray(sol.events.ys)
    count = np.asarray(sol.events.count)
    fig, ax = plt.subplots(figsize=(6, 6))
    for i in range(ys.shape[0]):
        pts = ys[i, : count[i]]
        ax.plot(pts[:, plane[0]], pts[:, plane[1]], ".", ms=1.5)
    ax.set_xlabel(f"y[{plane[0]}]")
    ax.set_ylabel(f"y[{plane[1]}]")
    ax.set_title(f"{name}: section y[{surface}] = 0, {ys.shape[0]} members")
    fig.tight_layout()
    atomic_write(path, lambda p: fig.savefig(p, dpi=120, format="png"))
    plt.close(fig)
