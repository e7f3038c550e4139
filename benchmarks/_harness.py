"""What the benchmark scripts share: float64, timing, ahead-of-time compilation, output.

The scripts import it first (``python benchmarks/<name>.py`` puts this folder on ``sys.path``):
importing it turns on float64 in JAX and the Agg backend of matplotlib.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the scripts plot with this one too)

import equinox  # noqa: E402
import jaxlib  # noqa: E402

import lpjax  # noqa: E402
from lpjax._io import atomic_write, atomic_write_json  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
COMPILE_WORKERS = 2
_t0 = time.perf_counter()


# ----------------------------------------------------------------------------- run


def arg_parser(doc: str, quick_help: str) -> argparse.ArgumentParser:
    """The options every script has: ``--quick`` and ``--out``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results",
                    help="output directory (default: benchmarks/results/)")
    return ap


def start() -> None:
    """Restart the clock of :func:`elapsed` and :func:`log`."""
    global _t0
    _t0 = time.perf_counter()


def elapsed() -> float:
    return time.perf_counter() - _t0


def log(msg: str) -> None:
    print(f"  [{elapsed():6.1f}s] {msg}", file=sys.stderr, flush=True)


def loadavg():
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def n_steps(t1: float, dt: float) -> int:
    n = int(round(t1 / dt))
    if abs(n * dt - t1) > 1e-9 * t1:
        raise ValueError(f"dt = {dt} does not divide t1 = {t1}")
    return n


# ----------------------------------------------------------------------------- timing


def repeat(call, max_repeats: int, budget_s: float):
    """``(last result, wall times, CPU times)`` of repeated ``call()``: at least one call, at
    most ``max_repeats``, stopping once another call would push the total over ``budget_s``."""
    walls, cpus = [], []
    gc.collect()
    gc.disable()
    try:
        while True:
            t, c = time.perf_counter(), time.process_time()
            out = call()
            walls.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
            if len(walls) >= max_repeats or sum(walls) + walls[-1] > budget_s:
                break
    finally:
        gc.enable()
    return out, walls, cpus


def time_calls(call, budget_s: float = 0.5, max_repeats: int = 7, long_call_s: float = math.inf):
    """Time ``call()``, which must end with ``jax.block_until_ready``.

    The first call (JIT compilation on first use, warm-up) is timed on its own as
    ``first_call_s``; then the second and later calls, see :func:`repeat`: ``time_s`` is their
    median and ``time_min_s`` the best of them. A first call longer than ``long_call_s`` is the
    single sample instead (``single_long_call``). Returns ``(result, stats)``.
    """
    gc.collect()
    t, c = time.perf_counter(), time.process_time()
    out = call()
    first, first_cpu = time.perf_counter() - t, time.process_time() - c
    single = first > long_call_s
    if single:
        walls, cpus = [first], [first_cpu]
    else:
        out, walls, cpus = repeat(call, max_repeats, budget_s)
    return out, {
        "time_s": statistics.median(walls),
        "time_min_s": min(walls),
        "first_call_s": first,
        "n_timed_calls": len(walls),
        "single_long_call": single,
        "cpu_over_wall": sum(cpus) / max(sum(walls), 1e-12),
        "timed_calls_s": walls,
    }


def retime_reference(row: dict, call, times) -> float:
    """Time the ratio reference ``call`` again (after the other rows) and set ``row``'s time to
    the median over ``times`` (its first batch) and these calls: robust to a slow first batch."""
    _, more, _ = repeat(call, max_repeats=15, budget_s=0.5)
    times = list(times) + more
    row.update(time_s=statistics.median(times), n_timed_calls=len(times))
    row["extra"].update(time_min_s=min(times), timed_calls_s=times)
    return row["time_s"]


def compile_all(jobs, workers: int = COMPILE_WORKERS) -> None:
    """AOT-compile ``jobs`` (dicts with ``fn``, ``args``); sets ``compiled`` and the times.

    First every job is traced and lowered in this thread, one after the other (Python work
    under the GIL, so not run concurrently: its times stay clean); then XLA compiles the
    lowered modules ``workers`` at a time (outside the GIL), in the order of ``jobs``.
    """
    lowered = []
    for job in jobs:
        t = time.perf_counter()
        lowered.append(jax.jit(job["fn"]).lower(*job["args"]))
        job["lower_s"] = time.perf_counter() - t

    def compile_one(job, low):
        t = time.perf_counter()
        job["compiled"] = low.compile()
        job["xla_compile_s"] = time.perf_counter() - t
        job["compile_s"] = job["lower_s"] + job["xla_compile_s"]

    with ThreadPoolExecutor(workers) as pool:
        for f in [pool.submit(compile_one, j, lo) for j, lo in zip(jobs, lowered)]:
            f.result()


# ----------------------------------------------------------------------------- output


def metadata(benchmark: str, mode: str, modules, loads: dict, load_note: str) -> dict:
    """What ran where: date, versions (lpjax, JAX and ``modules``), machine, git commit, the
    wall time since :func:`start` and the load averages ``loads`` (``end`` is added)."""
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
    except Exception:
        commit = None
    versions = {"python": platform.python_version(), "lpjax": lpjax.__version__, "jax": jax.__version__,
                "jaxlib": jaxlib.__version__, "equinox": equinox.__version__}
    return {
        "benchmark": benchmark,
        "mode": mode,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": versions | {m.__name__: m.__version__ for m in modules},
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "cpu_affinity_count": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "jax_backend": jax.default_backend(),
        "jax_devices": [str(d) for d in jax.devices()],
        "git_commit": commit,
        "total_benchmark_wall_s": elapsed(),
        "loadavg_1_5_15min": dict(loads, end=loadavg(), note=load_note),
    }


def machine_line() -> str:
    return f"float64, {jax.default_backend().upper()}, {os.cpu_count()} CPUs"


def print_table(columns, rows, group: str | None = None) -> None:
    """Print ``rows`` as a fixed-width table between rules.

    ``columns``: ``(header, width, cell)``; ``cell`` is ``"key"`` or ``"key:spec"`` (``row[key]``
    formatted with ``spec``, ``"-"`` for None) or a function of the row that returns the text.
    Right-aligned in ``width``; a negative width left-aligns, after two spaces unless it is the
    first column. A blank line separates runs of rows with different ``row[group]``.
    """

    def line(texts):
        return "".join(f"{t:>{w}}" if w > 0 else ("  " if i else "") + f"{t:<{-w}}"
                       for i, (t, (_, w, _)) in enumerate(zip(texts, columns)))

    def text(row, cell):
        if callable(cell):
            return cell(row)
        key, _, spec = cell.partition(":")
        return "-" if row[key] is None else format(row[key], spec)

    hdr = line([h for h, _, _ in columns])
    print(hdr)
    print("-" * len(hdr))
    for i, r in enumerate(rows):
        if group and i and r[group] != rows[i - 1][group]:
            print()
        print(line([text(r, c) for _, _, c in columns]).rstrip())
    print("-" * len(hdr))


def write_json(path: Path, doc: dict) -> None:
    """Indented JSON, no NaN, written atomically."""
    atomic_write_json(str(path), doc)


def write_png(fig, path: Path, dpi: int) -> None:
    """Save ``fig`` as PNG atomically, then close it."""
    atomic_write(str(path), lambda tmp: fig.savefig(tmp, format="png", dpi=dpi))
    plt.close(fig)
