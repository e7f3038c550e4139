"""Work–precision benchmark on the free rigid body: lpjax vs diffrax, scipy and numba.

    python benchmarks/rigid_body.py [--quick] [--out benchmarks/results/]

Problem: Euler top ``dM/dt = M x (I^-1 M)``, inertia (1, 2, 3), M0 = (1, 0.5, 0.8),
t in [0, 100]; error measured at t = 100 against the closed-form Jacobi-elliptic
solution ``lpjax.exact.euler_top_exact``.

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

Before the sweep, ``lpjax.integrate`` itself (GL4, dt = 0.01, 10 000 steps, every step
saved, no ``jax.jit`` on the user side) is called twice: the first call traces, compiles
and runs; the second, with a new ``y0`` of the same shape, reuses the compiled code.

Output: a fixed-width table on stdout, ``rigid_body.json`` and ``rigid_body.png`` in the
output directory (written atomically).
"""

from __future__ import annotations

import time

from _harness import (  # first: float64 and the Agg backend
    arg_parser, elapsed, loadavg, log, machine_line, metadata, n_steps, plt, print_table,
    retime_reference, start, time_calls, write_json, write_png,
)

import diffrax
import jax
import jax.numpy as jnp
import matplotlib
import numba
import numpy as np
import scipy
from scipy.integrate import solve_ivp

import lpjax
from lpjax.exact import euler_top_energy_casimir, euler_top_exact
from lpjax.systems import rigid_body

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

INTEGRATE_Y0S = (M0, np.array([0.8, -0.6, 0.9]))  # first and second call of lpjax.integrate
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


# ----------------------------------------------------------------------------- runners
# Each returns (final state, steps, nfev or None, timing stats, extra, the timed call).


def run_lpjax(system, method, dt: float):
    n = n_steps(T1, dt)

    @jax.jit
    def solve(y0):
        sol = lpjax.integrate(system, method, y0, dt, n, save_every=n)
        return sol.ys[-1], sol.stats

    call = lambda y0=jnp.asarray(M0): jax.block_until_ready(solve(y0))  # noqa: E731
    (yT, stats), st = time_calls(call)
    extra = {k: np.asarray(v).item() for k, v in stats.items()}
    if hasattr(method, "max_iters"):
        extra["solver"] = f"{method.solver}, early_exit={method.early_exit}, max_iters={method.max_iters}"
    return np.asarray(yT), n, 4 * n if isinstance(method, lpjax.RK4) else None, st, extra, call


def run_diffrax(system, solver, tol: float):
    term = diffrax.ODETerm(lambda t, y, args: system.vector_field(y))

    @jax.jit
    def solve(y0):
        sol = diffrax.diffeqsolve(
            term, solver, t0=0.0, t1=T1, dt0=None, y0=y0,
            stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
            saveat=diffrax.SaveAt(t1=True), max_steps=500_000,
        )
        return sol.ys[-1], sol.stats, sol.result == diffrax.RESULTS.successful

    call = lambda y0=jnp.asarray(M0): jax.block_until_ready(solve(y0))  # noqa: E731
    (yT, stats, ok), st = time_calls(call)
    if not bool(ok):
        raise RuntimeError(f"diffrax {type(solver).__name__} failed at tol={tol}")
    extra = {k: int(v) for k, v in stats.items()}
    return np.asarray(yT), extra["num_steps"], None, st, extra, call


def _numpy_rhs(t, M):
    w0, w1, w2 = M[0] / INERTIA[0], M[1] / INERTIA[1], M[2] / INERTIA[2]
    return np.array([M[1] * w2 - M[2] * w1, M[2] * w0 - M[0] * w2, M[0] * w1 - M[1] * w0])


def run_scipy(tol: float):
    call = lambda: solve_ivp(_numpy_rhs, (0.0, T1), M0, method="DOP853", rtol=tol, atol=tol)  # noqa: E731
    sol, st = time_calls(call)
    if not sol.success:
        raise RuntimeError(f"scipy DOP853 failed at tol={tol}: {sol.message}")
    steps = len(sol.t) - 1
    return sol.y[:, -1].copy(), steps, sol.nfev, st, {"nfev": int(sol.nfev), "num_accepted_steps": steps}, call


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
    n = n_steps(T1, dt)
    call = lambda: _numba_rk4(M0, INERTIA, dt, n)  # noqa: E731
    yT, st = time_calls(call)
    return yT, n, 4 * n, st, {}, call


def integrate_first_vs_second(system) -> dict:
    """Wall time of ``lpjax.integrate``'s first call (trace + compile + run) and of a second
    call with a new ``y0`` (same shape), without ``jax.jit`` on the user side; both end with
    ``jax.block_until_ready``. XLA compilations are counted with ``jax.monitoring``."""
    method, dt, n = lpjax.GaussLegendre(2), 0.01, 10_000
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, *a, **k: compiles.append(event) if event == COMPILE_EVENT else None)
    out = {"call": "lpjax.integrate(rigid_body(I), GaussLegendre(2), y0, 0.01, 10000) (save_every=1)"}
    for which, y0 in zip(("first", "second"), INTEGRATE_Y0S):
        n_before = len(compiles)
        t = time.perf_counter()
        sol = jax.block_until_ready(lpjax.integrate(system, method, y0, dt, n))
        out[f"{which}_call_s"] = time.perf_counter() - t
        out[f"{which}_call_xla_compilations"] = len(compiles) - n_before
        out[f"{which}_y0"] = y0.tolist()
        out[f"{which}_err_M"] = float(np.max(np.abs(np.asarray(sol.ys[-1]) - euler_top_exact(INERTIA, y0, [T1])[0])))
    out["first_over_second"] = out["first_call_s"] / out["second_call_s"]
    log(f"lpjax.integrate GL4 dt=0.01 10000 steps: first call {out['first_call_s']:.3f} s, "
        f"second (new y0) {out['second_call_s'] * 1e3:.2f} ms")
    return out


# ----------------------------------------------------------------------------- output

COLUMNS = [
    ("method", -16, "method"), ("setting", 11, "setting"), ("steps", 8, "steps"), ("nfev", 9, "nfev"),
    ("max|dM|", 10, "err_M:.2e"), ("rel dC", 10, "rel_err_casimir:.2e"), ("rel dE", 10, "rel_err_energy:.2e"),
    ("time[ms]", 10, lambda r: f"{r['time_s'] * 1e3:.3f}"), ("ratio", 9, "ratio:.3g"),
    ("compile[s]", 11, "compile_s:.2f"), ("note", -4, "note"),
]
STYLES = {
    "lpjax GL2": ("C0", "o"),
    "lpjax GL4": ("C1", "o"),
    "lpjax GL6": ("C2", "o"),
    "lpjax RK4": ("C3", "s"),
    "numba RK4": ("C7", "s"),
    "diffrax Tsit5": ("C4", "^"),
    "diffrax Kvaerno5": ("C5", "v"),
    "scipy DOP853": ("C6", "D"),
}


def make_plot(rows, path, title: str) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    methods = list(dict.fromkeys(r["method"] for r in rows if not r["is_reference"]))
    for ax, key, ylabel in (
        (axes[0], "err_M", "max |M(100) - M_exact(100)|"),
        (axes[1], "rel_err_casimir", "relative Casimir error |ΔC| / C,  C = |M|²"),
    ):
        for m in methods:
            pts = [r for r in rows if r["method"] == m and not r["is_reference"]]
            color, marker = STYLES.get(m, ("k", "x"))
            dashed = m.startswith("numba") or m.startswith("scipy")
            ax.loglog([r["time_s"] for r in pts], [max(r[key], PLOT_FLOOR) for r in pts], marker=marker,
                      color=color, ls="--" if dashed else "-", label=m, ms=5)
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
    write_png(fig, path, dpi=130)


def describe(mode: str, load_start) -> dict:
    return {
        **metadata("rigid_body work-precision", mode, (diffrax, scipy, np, numba, matplotlib),
                   {"start": load_start}, "other processes on the machine add noise to wall times"),
        "problem": {
            "system": "free rigid body (Euler top), dM/dt = M x (I^-1 M)",
            "inertia": INERTIA.tolist(),
            "M0": M0.tolist(),
            "t0": 0.0,
            "t1": T1,
            "reference": "lpjax.exact.euler_top_exact (Jacobi elliptic functions)",
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
            "integrate_first_vs_second_call": (
                "lpjax.integrate called directly (no user jax.jit) before the sweep: wall time of "
                "the first call (trace + compile + run) and of a second call with a new y0 of the "
                "same shape, each ended by jax.block_until_ready; *_xla_compilations counts "
                "backend compilations during the call (jax.monitoring); *_err_M is the error at "
                "t = 100 against lpjax.exact"),
        },
        "settings": {
            "lpjax GaussLegendre": "defaults: " + ", ".join(
                f"{k}={getattr(lpjax.GaussLegendre(), k)!r}" for k in
                ("solver", "max_iters", "early_exit", "predictor", "compensated")) + ", tol=256 eps",
            "diffrax": "PIDController(rtol=tol, atol=tol), dt0=None, SaveAt(t1=True), max_steps=500000",
            "scipy": "solve_ivp(method='DOP853', rtol=tol, atol=tol), NumPy RHS",
            "numba": "hand-written fixed-step RK4 loop, @njit",
        },
    }


# ----------------------------------------------------------------------------- main


def main() -> None:
    args = arg_parser(__doc__, "smaller sweep (~40 s)").parse_args()
    mode = "quick" if args.quick else "full"
    dts, tols = (QUICK_DTS, QUICK_TOLS) if args.quick else (FULL_DTS, FULL_TOLS)
    start()
    load_start = loadavg()
    system = rigid_body(jnp.asarray(INERTIA))
    exact = euler_top_exact(INERTIA, M0, np.array([0.0, T1]))[-1]
    E0, C0 = euler_top_energy_casimir(INERTIA, M0)
    # the JAX system's invariants agree with the independent NumPy ones
    assert abs(float(system.energy(jnp.asarray(M0))) - E0) < 1e-14
    assert abs(float(system.casimirs(jnp.asarray(M0))[0]) - C0) < 1e-14
    integrate_calls = integrate_first_vs_second(system)  # first: nothing of it is compiled yet

    rows = []

    def record(method, setting, res, is_reference=False):
        yT, steps, nfev, st, extra, _ = res
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
            "time_s": st["time_s"],
            "first_call_s": st["first_call_s"],
            "compile_s": None if method.startswith("scipy") else max(st["first_call_s"] - st["time_s"], 0.0),
            "n_timed_calls": st["n_timed_calls"],
            "at_roundoff": err < ROUNDOFF_FLOOR,
            "is_reference": is_reference,
            "note": "",
            "final_state": [float(v) for v in yT],
            "extra": dict(extra, time_min_s=st["time_min_s"]),
        })
        log(f"{method:<16} {setting:>11}  err={err:.2e}  time={st['time_s'] * 1e3:.3f} ms")
        return rows[-1]

    # the common timing reference: compiled and timed first, re-timed at the end
    ref = run_lpjax(system, lpjax.RK4(), REF_DT)
    ref_row = record("lpjax RK4", f"dt={REF_DT}", ref, is_reference=True)
    for name, method in (("lpjax GL2", lpjax.GaussLegendre(1)), ("lpjax GL4", lpjax.GaussLegendre(2)),
                         ("lpjax GL6", lpjax.GaussLegendre(3)), ("lpjax RK4", lpjax.RK4())):
        for dt in dts:
            record(name, f"dt={dt:g}", run_lpjax(system, method, dt))
    for dt in dts:
        record("numba RK4", f"dt={dt:g}", run_numba(dt))
    for name, solver in (("diffrax Tsit5", diffrax.Tsit5()), ("diffrax Kvaerno5", diffrax.Kvaerno5())):
        for tol in tols:
            record(name, f"tol={tol:.0e}", run_diffrax(system, solver, tol))
    for tol in tols:
        record("scipy DOP853", f"tol={tol:.0e}", run_scipy(tol))

    ref_time = retime_reference(ref_row, ref[-1], ref[3]["timed_calls_s"])
    ref_row["compile_s"] = max(ref_row["first_call_s"] - ref_time, 0.0)
    for r in rows:
        r["ratio"] = r["time_s"] / ref_time
        ex = r["extra"]
        notes = ["ratio reference"] if r["is_reference"] else []
        if r["at_roundoff"]:
            notes.append("err at roundoff")
        if ex.get("num_rejected_steps"):
            notes.append(f"{ex['num_rejected_steps']} rejected")
        if "max_iterations" in ex and r["method"].startswith("lpjax GL"):
            notes.append(f"{ex['solver'].split(',')[0]} its/step: mean {ex['mean_iterations']:.1f}, "
                         f"max {ex['max_iterations']}")
        r["note"] = ", ".join(notes)

    print(f"\nRigid body work-precision, inertia {INERTIA.tolist()}, M0 {M0.tolist()}, "
          f"t in [0, {T1:g}] ({mode} sweep), {machine_line()}")
    print_table(COLUMNS, rows, group="method")
    print(f"time = median wall time of the 2nd+ call (after block_until_ready), CPU; "
          f"ratio = time / time(lpjax RK4, dt={REF_DT}) = {ref_time * 1e3:.3f} ms in this run.")
    print("compile = first-call wall time minus the steady-state time (JIT; numba: first-call "
          "compile). rel dC, rel dE: |X(T) - X(0)| / |X(0)| for |M|^2 and energy at t = 100.")
    ic = integrate_calls
    print(f"\n{ic['call']}, no user jax.jit, blocked with jax.block_until_ready:\n"
          f"  first call  (trace + compile + run)  {ic['first_call_s']:9.3f} s  "
          f"({ic['first_call_xla_compilations']} XLA compilations, err at t=100 {ic['first_err_M']:.1e})\n"
          f"  second call (new y0, same shapes)    {ic['second_call_s']:9.3f} s  "
          f"({ic['second_call_xla_compilations']} XLA compilations, err at t=100 {ic['second_err_M']:.1e})\n"
          f"  first / second = {ic['first_over_second']:.0f}")

    meta = describe(mode, load_start)
    total = meta["total_benchmark_wall_s"]
    doc = {"metadata": meta, "reference_time_s": ref_time, "total_benchmark_wall_s": total,
           "integrate_first_vs_second_call": integrate_calls, "rows": rows}
    write_json(args.out / "rigid_body.json", doc)
    make_plot(rows, args.out / "rigid_body.png",
              f"Free rigid body, I = (1, 2, 3), M0 = (1, 0.5, 0.8), t ∈ [0, 100]; "
              f"float64 CPU wall times on this machine ({mode} sweep)")
    print(f"\nwrote {args.out / 'rigid_body.json'} and {args.out / 'rigid_body.png'}  (total {total:.1f} s)")


if __name__ == "__main__":
    main()
