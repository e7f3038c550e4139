"""The command line's arguments: checks that end in one line (:class:`_Failure`), and the
arguments of a parsed command given again to child processes (:func:`_as_args`)."""

from __future__ import annotations

import json
import os
from typing import Optional

import numpy as np

from ._io import require_matplotlib


class _Failure(Exception):
    """An error to report as one line."""


def _writable_target(path: str, flag: str, suffix: Optional[str] = None) -> None:
    """Check, before any work, that ``path`` can be written (and has ``suffix``)."""
    if suffix and not path.lower().endswith(suffix):
        raise _Failure(f"{flag} {path!r}: expected a {suffix} file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise _Failure(f"{flag} {path!r}: the folder {folder!r} does not exist or is not writable")
    if os.path.isdir(path) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise _Failure(f"{flag} {path!r}: exists and cannot be overwritten")


def _need_matplotlib(who: str) -> None:
    try:
        require_matplotlib(who)
    except ImportError as e:
        raise _Failure(str(e)) from None


def _positive_finite(value: float, flag: str) -> float:
    if not (np.isfinite(value) and value > 0):
        raise _Failure(f"{flag} must be finite and > 0, got {value}")
    return value


def _whole_steps(t1: float, dt: float, most: int = 2**31 - 1) -> int:
    """``t1 / dt`` steps, refused unless whole (to 1e-9 relative): a run never ends short of
    ``--t1`` without a word; the refusal names the two nearest end times."""
    k = t1 / dt
    n = int(round(k))
    if abs(k - n) > 1e-9 * max(1.0, k):
        lo, hi = max(1, int(np.floor(k))), int(np.ceil(k))
        raise _Failure(f"--t1 {t1:g} is not a whole number of steps of --dt {dt:g} ({k:.6g} steps): take --t1 "
                       f"{lo * dt:.12g} ({lo} steps) or --t1 {hi * dt:.12g} ({hi} steps), or a --dt that divides --t1")
    if not 1 <= n <= most:
        raise _Failure(f"--t1/--dt gives {n} steps; it must be between 1 and {most}")
    return n


def _tolerances(rtol: Optional[float], atol: Optional[float]) -> Optional[tuple]:
    """``(rtol, atol)`` of an adaptive run (either given: the other defaults to it), or None."""
    if rtol is None and atol is None:
        return None
    rtol, atol = (atol if rtol is None else rtol), (rtol if atol is None else atol)
    return _positive_finite(rtol, "--rtol"), _positive_finite(atol, "--atol")


def _save_every(n_steps: int, saves: int) -> int:
    """The largest divisor of ``n_steps`` that is at most ``n_steps // saves`` (at least 1): at
    least ``saves`` saves, the last at the end of the run."""
    limit = max(1, n_steps // saves)
    divisors = {d for i in range(1, int(np.sqrt(n_steps)) + 1) if n_steps % i == 0 for d in (i, n_steps // i)}
    return max(d for d in divisors if d <= limit)


def _save_times(t1: float, saves: int) -> list:
    """``saves`` equally spaced save times after the start, the last exactly ``t1``."""
    ts = (np.arange(1, saves + 1) * (t1 / saves)).tolist()
    ts[-1] = t1
    return ts


def _parse_numbers(text: str, flag: str) -> list:
    """Finite numbers separated by commas (or a JSON list)."""
    try:
        value = json.loads(text if text.strip().startswith("[") else f"[{text}]")
    except json.JSONDecodeError:
        raise _Failure(f"{flag} expects numbers separated by commas (or a JSON list), got {text!r}") from None
    if not value or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in value):
        raise _Failure(f"{flag} expects finite numbers, got {text!r}")
    return [float(v) for v in value]


def _parse_y0(text: Optional[str]) -> Optional[list]:
    return None if text is None else _parse_numbers(text, "--y0")


def _x64() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)


def _as_args(ctx, drop: tuple = ()) -> list:
    """The command line that gives ``ctx``'s command its parsed parameters again (without those
    named in ``drop``), for child processes that run the same command."""
    import click

    args = []
    for p in ctx.command.params:
        v = ctx.params.get(p.name)
        if p.name in drop or v is None:
            continue
        if isinstance(p, click.Argument):
            args.append(str(v))
        elif p.is_flag:
            args += [p.opts[0]] if v else p.secondary_opts[:1]
        else:
            args += [x for item in (v if p.multiple else (v,)) for x in (p.opts[0], str(item))]
    return args


def complete_system(ctx, param, incomplete):
    """The shell's completion of a system's name."""
    from ._catalog import SYSTEMS

    names = [n for e in SYSTEMS.values() for n in (e.name, *e.aliases)]
    return [n for n in names if n.startswith(incomplete)]


def complete_method(ctx, param, incomplete):
    """The shell's completion of a method's name."""
    from ._catalog import METHODS

    names = [n for e in METHODS.values() for n in (e.name, *e.aliases)]
    return [n for n in names if n.startswith(incomplete)]


def _outputs_checked(out: str, plot, who: str) -> None:
    """Before any work: the store ``out`` can be made, the picture ``plot`` (if any) written;
    then float64 on."""
    from ._ensemble._validate import check_store_path

    check_store_path(out, "--out")
    if plot:
        _writable_target(plot, "--plot", ".png")
        _need_matplotlib(f"{who} --plot")
    _x64()
