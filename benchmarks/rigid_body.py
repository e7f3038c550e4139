"""Work–precision benchmark on the free rigid body: lpjax vs diffrax, scipy and numba.

    python benchmarks/rigid_body.py [--quick] [--out benchmarks/results/]

Problem: Euler top ``dM/dt = M x (I^-1 M)``, inertia (1, 2, 3), M0 = (1, 0.5, 0.8),
t in [0, 100]; error measured at t = 100 against the closed-form Jacobi-elliptic
solution ``tests.reference.euler_top_exact``.

Methods (all float64 on this machine's CPU):

* lpjax GL2 / GL4 / GL6 (``GaussLegendre(1/2/3)``, default settings) and lpjax RK4,
  fixed steps, swept over ``dt``;
* diffrax Tsit5 and Kvaerno5, adaptive (``PIDController``, rtol = atol), on the same JAX
  vector field ``system.vector_field``;
* scipy ``solve_ivp(method="DOP853")``, adaptive, with a NumPy right-hand side;
* a hand-written numba RK4 loop (fixed steps): this machine's practical limit for RK4.

Timing: every JAX variant is jitted once per configuration; the first call (compile +
run) is timed separately, and the reported time is the wall time of the second and later
calls after ``jax.block_until_ready`` (median of up to 7 calls, fewer for slow ones).
``ratio`` = time / time(lpjax RK4, dt = 0.01) measured in the same run, so every row
shares one reference.

Output: a fixed-width table on stdout, ``rigid_body.json`` and ``rigid_body.png`` in the
output directory (written atomically).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import lpjax  # noqa: E402
from lpjax.systems import rigid_body  # noqa: E402
from tests.reference import euler_top_energy_casimir, euler_top_exact  # noqa: E402

INERTIA = np.array([1.0, 2.0, 3.0])
M0 = np.array([1.0, 0.5, 0.8])
T1 = 100.0
REF_DT = 0.01  # the common timing reference: lpjax RK4 with this step

FULL_DTS = [0.2, 0.1, 0.05, 0.025, 0.0125]
FULL_TOLS = [1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12]
QUICK_DTS = [0.1, 0.025]
QUICK_TOLS = [1e-6, 1e-10]

ROUNDOFF_FLOOR = 1e-13  # errors below this are at roundoff / reference accuracy
PLOT_FLOOR = 1e-17  # exact zeros are drawn here on the log axes

MAX_REPEATS = 7
REPEAT_BUDGET_S = 0.5


# ----------------------------------------------------------------------------- timing


def timed_repeats(fn, max_repeats: int = MAX_REPEATS, budget_s: float = REPEAT_BUDGET_S):
    """Wall times of repeated ``fn()`` calls: at least one, at most ``max_repeats``,
    stopping once another call would push the total over ``budget_s``."""
    times = []
    gc.collect()
    gc.disable()
    try:
        while True:
            t = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t)
            if len(times) >= max_repeats or sum(times) + times[-1] > budget_s:
                break
    finally:
        gc.enable()
    return out, times


def time_calls(fn, compiled: bool):
    """Time ``fn()``: the first call separately, then the median of the later calls.

    Returns ``(result, run_s, first_s, n_repeats, min_s, times)``. At least one call after
    the first is timed; more (up to ``MAX_REPEATS``) while their total stays under
    ``REPEAT_BUDGET_S``. ``compiled=False`` (no JIT) still discards the first call.
    """
    gc.collect()
    t = time.perf_counter()
    fn()
    first = time.perf_counter() - t
    out, times = timed_repeats(fn)
    return out, statistics.median(times), first, len(times), min(times), times


# ----------------------------------------------------------------------------- runners


def n_steps_for(dt: float) -> int:
    n = int(round(T1 / dt))
    if abs(n * dt - T1) > 1e-9 * T1:
        raise ValueError(f"dt = {dt} does not divide T1 = {T1}")
    return n


def run_lpjax(system, method, dt: float, keep_fn: bool = False):
    n = n_steps_for(dt)
    y0 = jnp.asarray(M0)

    @jax.jit
    def solve(y0):
        sol = lpjax.integrate(system, method, y0, dt, n, save_every=n)
        return sol.ys[-1], sol.stats

    fn = lambda: jax.block_until_ready(solve(y0))  # noqa: E731
    (yT, stats), run, first, reps, tmin, times = time_calls(fn, compiled=True)
    extra = {k: np.asarray(v).item() for k, v in stats.items()}
    extra["time_min_s"] = tmin
    if hasattr(method, "max_iters"):
        extra["solver_iterations_run_per_step"] = method.max_iters
    if keep_fn:
        extra["_fn"], extra["_times"] = fn, times
    return np.asarray(yT), run, first, reps, n, extra


def run_diffrax(system, solver, tol: float):
    term = diffrax.ODETerm(lambda t, y, args: system.vector_field(y))
    controller = diffrax.PIDController(rtol=tol, atol=tol)
    y0 = jnp.asarray(M0)

    @jax.jit
    def solve(y0):
        sol = diffrax.diffeqsolve(
            term,
            solver,
            t0=0.0,
            t1=T1,
            dt0=None,
            y0=y0,
            stepsize_controller=controller,
            saveat=diffrax.SaveAt(t1=True),
            max_steps=500_000,
        )
        return sol.ys[-1], sol.stats, sol.result == diffrax.RESULTS.successful

    fn = lambda: jax.block_until_ready(solve(y0))  # noqa: E731
    (yT, stats, ok), run, first, reps, tmin, _ = time_calls(fn, compiled=True)
    if not bool(ok):
        raise RuntimeError(f"diffrax {type(solver).__name__} failed at tol={tol}")
    extra = {k: int(v) for k, v in stats.items()}
    extra["time_min_s"] = tmin
    return np.asarray(yT), run, first, reps, extra["num_steps"], extra


def _numpy_rhs(t, M):
    w0, w1, w2 = M[0] / INERTIA[0], M[1] / INERTIA[1], M[2] / INERTIA[2]
    return np.array([M[1] * w2 - M[2] * w1, M[2] * w0 - M[0] * w2, M[0] * w1 - M[1] * w0])


def run_scipy(tol: float):
    fn = lambda: solve_ivp(_numpy_rhs, (0.0, T1), M0, method="DOP853", rtol=tol, atol=tol)  # noqa: E731
    sol, run, first, reps, tmin, _ = time_calls(fn, compiled=False)
    if not sol.success:
        raise RuntimeError(f"scipy DOP853 failed at tol={tol}: {sol.message}")
    extra = {"nfev": int(sol.nfev), "num_accepted_steps": int(len(sol.t) - 1), "time_min_s": tmin}
    return sol.y[:, -1].copy(), run, first, reps, len(sol.t) - 1, extra


@numba.njit(cache=False, fastmath=False)
def _numba_rk4(M0, inertia, dt, n):
    m0, m1, m2 = M0[0], M0[1], M0[2]
    i0, i1, i2 = 1.0 / inertia[0], 1.0 / inertia[1], 1.0 / inertia[2]
    h2 = 0.5 * dt
    h6 = dt / 6.0
    for _ in range(n):
        # k1
        a0, a1, a2 = m0, m1, m2
        k10 = a1 * a2 * i2 - a2 * a1 * i1
        k11 = a2 * a0 * i0 - a0 * a2 * i2
        k12 = a0 * a1 * i1 - a1 * a0 * i0
        # k2
        a0, a1, a2 = m0 + h2 * k10, m1 + h2 * k11, m2 + h2 * k12
        k20 = a1 * a2 * i2 - a2 * a1 * i1
        k21 = a2 * a0 * i0 - a0 * a2 * i2
        k22 = a0 * a1 * i1 - a1 * a0 * i0
        # k3
        a0, a1, a2 = m0 + h2 * k20, m1 + h2 * k21, m2 + h2 * k22
        k30 = a1 * a2 * i2 - a2 * a1 * i1
        k31 = a2 * a0 * i0 - a0 * a2 * i2
        k32 = a0 * a1 * i1 - a1 * a0 * i0
        # k4
        a0, a1, a2 = m0 + dt * k30, m1 + dt * k31, m2 + dt * k32
        k40 = a1 * a2 * i2 - a2 * a1 * i1
        k41 = a2 * a0 * i0 - a0 * a2 * i2
        k42 = a0 * a1 * i1 - a1 * a0 * i0
        m0 += h6 * (k10 + 2.0 * k20 + 2.0 * k30 + k40)
        m1 += h6 * (k11 + 2.0 * k21 + 2.0 * k31 + k41)
        m2 += h6 * (k12 + 2.0 * k22 + 2.0 * k32 + k42)
    out = np.empty(3)
    out[0], out[1], out[2] = m0, m1, m2
    return out


def run_numba(dt: float):
    n = n_steps_for(dt)
    fn = lambda: _numba_rk4(M0, INERTIA, dt, n)  # noqa: E731
    yT, run, first, reps, tmin, _ = time_calls(fn, compiled=True)
    return yT, run, first, reps, n, {"time_min_s": tmin}


# ----------------------------------------------------------------------------- output


def atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; use the usual mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def fmt_e(x, width=9):
    return f"{x:{width}.2e}" if x is not None else " " * (width - 1) + "-"


def print_table(rows, ref_time) -> None:
    hdr = (
        f"{'method':<16}{'setting':>11}{'steps':>8}{'nfev':>9}"
        f"{'max|dM|':>10}{'rel dC':>10}{'rel dE':>10}"
        f"{'time[ms]':>10}{'ratio':>9}{'compile[s]':>11}  note"
    )
    print(hdr)
    print("-" * len(hdr))
    last = None
    for r in rows:
        if last is not None and r["method"] != last:
            print()
        last = r["method"]
        comp = f"{r['compile_s']:11.2f}" if r["compile_s"] is not None else f"{'n/a':>11}"
        nfev = f"{r['nfev']:9d}" if r["nfev"] is not None else f"{'-':>9}"
        print(
            f"{r['method']:<16}{r['setting']:>11}{r['steps']:8d}{nfev}"
            f" {fmt_e(r['err_M'])} {fmt_e(r['rel_err_casimir'])} {fmt_e(r['rel_err_energy'])}"
            f"{r['time_s'] * 1e3:10.3f}{r['ratio']:9.3g}{comp}  {r['note']}"
        )
    print("-" * len(hdr))
    print(
        f"time = median wall time of the 2nd+ call (after block_until_ready), CPU; "
        f"ratio = time / time(lpjax RK4, dt={REF_DT}) = {ref_time * 1e3:.3f} ms in this run."
    )
    print(
        "compile = first-call wall time minus the steady-state time (JIT; numba: first-call "
        "compile). rel dC, rel dE: |X(T) - X(0)| / |X(0)| for |M|^2 and energy at t = 100."
    )


def make_plot(rows, path: Path, title: str) -> None:
    styles = {
        "lpjax GL2": ("C0", "o"),
        "lpjax GL4": ("C1", "o"),
        "lpjax GL6": ("C2", "o"),
        "lpjax RK4": ("C3", "s"),
        "numba RK4": ("C7", "s"),
        "diffrax Tsit5": ("C4", "^"),
        "diffrax Kvaerno5": ("C5", "v"),
        "scipy DOP853": ("C6", "D"),
    }
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    methods = list(dict.fromkeys(r["method"] for r in rows if not r.get("is_reference")))
    for ax, key, ylabel in (
        (axes[0], "err_M", "max |M(100) - M_exact(100)|"),
        (axes[1], "rel_err_casimir", "relative Casimir error |ΔC| / C,  C = |M|²"),
    ):
        for m in methods:
            pts = [r for r in rows if r["method"] == m and not r.get("is_reference")]
            x = [r["time_s"] for r in pts]
            y = [max(r[key], PLOT_FLOOR) for r in pts]
            color, marker = styles.get(m, ("k", "x"))
            dashed = m.startswith("numba") or m.startswith("scipy")
            ax.loglog(x, y, marker=marker, color=color, ls="--" if dashed else "-", label=m, ms=5)
        if any(r[key] < PLOT_FLOOR for r in rows):
            ax.axhline(PLOT_FLOOR, color="0.7", lw=0.8, ls=":")
        ax.set_xlabel("wall time of 2nd call [s] (CPU, this machine)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", alpha=0.35)
    axes[0].axhline(ROUNDOFF_FLOOR, color="0.5", lw=0.8, ls="--")
    axes[0].text(axes[0].get_xlim()[0], ROUNDOFF_FLOOR, " roundoff/ref. floor", va="bottom", fontsize=7)
    if any(r["rel_err_casimir"] < PLOT_FLOOR for r in rows):
        axes[1].text(axes[1].get_xlim()[0], PLOT_FLOOR, " exact 0 drawn here", va="bottom", fontsize=7)
    axes[0].set_title("Error in M at t = 100 vs wall time")
    axes[1].set_title("Casimir |M|² drift at t = 100 vs wall time")
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=130)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def metadata(quick: bool) -> dict:
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip() or None
    except Exception:
        commit = None
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    import equinox
    import jaxlib

    return {
        "benchmark": "rigid_body work-precision",
        "mode": "quick" if quick else "full",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": {
            "python": platform.python_version(),
            "lpjax": lpjax.__version__,
            "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "equinox": equinox.__version__,
            "diffrax": diffrax.__version__,
            "scipy": scipy.__version__,
            "numpy": np.__version__,
            "numba": numba.__version__,
            "matplotlib": matplotlib.__version__,
        },
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "cpu_affinity_count": affinity,
        "jax_backend": jax.default_backend(),
        "jax_devices": [str(d) for d in jax.devices()],
        "git_commit": commit,
        "problem": {
            "system": "free rigid body (Euler top), dM/dt = M x (I^-1 M)",
            "inertia": INERTIA.tolist(),
            "M0": M0.tolist(),
            "t0": 0.0,
            "t1": T1,
            "reference": "tests.reference.euler_top_exact (Jacobi elliptic functions)",
            "dtype": "float64",
        },
        "timing_note": (
            "Times are wall-clock times of CPU runs on this machine (not portable). "
            "time_s is the median over repeated calls after the first one, each ended by "
            "jax.block_until_ready (extra.time_min_s is the fastest of those calls); "
            "compile_s = first-call time minus time_s "
            "(each JAX configuration is jitted once; numba compiles on its first call)."
        ),
        "ratio_definition": (
            f"ratio = time_s / time_s(lpjax RK4, dt={REF_DT}) measured in the same run; "
            "one common reference for every row"
        ),
        "columns": {
            "err_M": "max_i |M_i(t1) - M_exact_i(t1)|",
            "rel_err_casimir": "|C(M(t1)) - C(M0)| / C(M0), C = |M|^2",
            "rel_err_energy": "|E(M(t1)) - E(M0)| / E(M0), E = 1/2 sum M_i^2 / I_i",
            "steps": "fixed: number of steps; diffrax: accepted + rejected steps; scipy: accepted steps",
            "nfev": "right-hand-side evaluations where exactly known (RK4: 4 per step; scipy: nfev)",
            "at_roundoff": f"err_M < {ROUNDOFF_FLOOR:g}: at roundoff / reference accuracy",
        },
        "settings": {
            "lpjax GaussLegendre": "default: solver='newton', max_iters=8, tol=256 eps",
            "diffrax": "PIDController(rtol=tol, atol=tol), dt0=None, SaveAt(t1=True), max_steps=500000",
            "scipy": "solve_ivp(method='DOP853', rtol=tol, atol=tol), NumPy RHS",
            "numba": "hand-written fixed-step RK4 loop, @njit",
        },
    }


# ----------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sweep (~40 s)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"),
                    help="output directory (default: benchmarks/results/)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dts = QUICK_DTS if args.quick else FULL_DTS
    tols = QUICK_TOLS if args.quick else FULL_TOLS

    t_start = time.perf_counter()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    system = rigid_body(jnp.asarray(INERTIA))
    exact = euler_top_exact(INERTIA, M0, np.array([0.0, T1]))[-1]
    E0, C0 = euler_top_energy_casimir(INERTIA, M0)
    # the JAX system's invariants agree with the independent NumPy ones
    assert abs(float(system.energy(jnp.asarray(M0))) - E0) < 1e-14
    assert abs(float(system.casimirs(jnp.asarray(M0))[0]) - C0) < 1e-14

    rows = []

    def record(method, setting, res, nfev=None, is_reference=False):
        yT, run, first, reps, steps, extra = res
        E, C = euler_top_energy_casimir(INERTIA, yT)
        err = float(np.max(np.abs(yT - exact)))
        rows.append({
            "method": method,
            "setting": setting,
            "steps": int(steps),
            "nfev": None if nfev is None else int(nfev),
            "err_M": err,
            "rel_err_casimir": float(abs(C - C0) / C0),
            "rel_err_energy": float(abs(E - E0) / E0),
            "time_s": float(run),
            "first_call_s": float(first),
            "compile_s": None if method.startswith("scipy") else float(max(first - run, 0.0)),
            "n_timed_calls": int(reps),
            "at_roundoff": err < ROUNDOFF_FLOOR,
            "is_reference": is_reference,
            "note": "",
            "final_state": [float(v) for v in yT],
            "extra": extra,
        })
        print(f"  [{time.perf_counter() - t_start:6.1f}s] {method:<16} {setting:>11}  "
              f"err={err:.2e}  time={run * 1e3:.3f} ms", file=sys.stderr, flush=True)

    # the common timing reference: compiled and timed first, re-timed at the end, and
    # its time is the median over both batches (robust to a slow first batch)
    ref_res = run_lpjax(system, lpjax.RK4(), REF_DT, keep_fn=True)
    ref_fn, ref_times = ref_res[-1].pop("_fn"), ref_res[-1].pop("_times")
    record("lpjax RK4", f"dt={REF_DT}", ref_res, nfev=4 * n_steps_for(REF_DT), is_reference=True)

    lp_methods = [
        ("lpjax GL2", lpjax.GaussLegendre(1)),
        ("lpjax GL4", lpjax.GaussLegendre(2)),
        ("lpjax GL6", lpjax.GaussLegendre(3)),
        ("lpjax RK4", lpjax.RK4()),
    ]
    for name, method in lp_methods:
        for dt in dts:
            nfev = 4 * n_steps_for(dt) if name.endswith("RK4") else None
            record(name, f"dt={dt:g}", run_lpjax(system, method, dt), nfev=nfev)
    for dt in dts:
        record("numba RK4", f"dt={dt:g}", run_numba(dt), nfev=4 * n_steps_for(dt))
    for name, solver in (("diffrax Tsit5", diffrax.Tsit5()), ("diffrax Kvaerno5", diffrax.Kvaerno5())):
        for tol in tols:
            record(name, f"tol={tol:.0e}", run_diffrax(system, solver, tol))
    for tol in tols:
        res = run_scipy(tol)
        record("scipy DOP853", f"tol={tol:.0e}", res, nfev=res[-1]["nfev"])

    _, more = timed_repeats(ref_fn, max_repeats=15, budget_s=0.5)
    ref_times = ref_times + more
    ref_row = next(r for r in rows if r["is_reference"])
    ref_row["time_s"] = ref_time = statistics.median(ref_times)
    ref_row["n_timed_calls"] = len(ref_times)
    ref_row["compile_s"] = max(ref_row["first_call_s"] - ref_time, 0.0)
    ref_row["extra"]["time_min_s"] = min(ref_times)
    ref_row["extra"]["timed_calls_s"] = ref_times
    for r in rows:
        r["ratio"] = r["time_s"] / ref_time
        notes = []
        if r["is_reference"]:
            notes.append("ratio reference")
        if r["at_roundoff"]:
            notes.append("err at roundoff")
        ex = r["extra"]
        if "num_rejected_steps" in ex and ex["num_rejected_steps"]:
            notes.append(f"{ex['num_rejected_steps']} rejected")
        if "max_iterations" in ex and r["method"].startswith("lpjax GL"):
            notes.append(f"Newton its needed<={ex['max_iterations']} of "
                         f"{ex['solver_iterations_run_per_step']} run")
        r["note"] = ", ".join(notes)

    # table: reference row first, then by method in sweep order
    print()
    print(f"Rigid body work-precision, inertia {INERTIA.tolist()}, M0 {M0.tolist()}, "
          f"t in [0, {T1:g}] ({'quick' if args.quick else 'full'} sweep), float64, "
          f"{jax.default_backend().upper()}, {os.cpu_count()} CPUs")
    print_table(rows, ref_time)

    total = time.perf_counter() - t_start
    doc = {"metadata": metadata(args.quick), "reference_time_s": ref_time,
           "total_benchmark_wall_s": total, "rows": rows}
    doc["metadata"]["total_benchmark_wall_s"] = total
    doc["metadata"]["loadavg_1_5_15min"] = {
        "start": list(load_start) if load_start else None,
        "end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "note": "other processes on the machine add noise to wall times",
    }
    json_path = out / "rigid_body.json"
    atomic_write_bytes(json_path, (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode())
    png_path = out / "rigid_body.png"
    make_plot(rows, png_path,
              f"Free rigid body, I = (1, 2, 3), M0 = (1, 0.5, 0.8), t ∈ [0, 100]; "
              f"float64 CPU wall times on this machine ({'quick' if args.quick else 'full'} sweep)")
    print(f"\nwrote {json_path} and {png_path}  (total {total:.1f} s)")


if __name__ == "__main__":
    main()
