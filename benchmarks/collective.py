"""Collective vs direct Lie–Poisson integrators on the two examples of seed 002, sec. 5.

    python benchmarks/collective.py [--quick] [--out benchmarks/results/]

Systems (seed 002):

* Kida vortex on so(2,1)* (sec. 5.2): ``kida_vortex(eps=0.5, omega=-1)``, initial mu0 with
  ``mu_1 = 1``, ``f_1 = mu_1^2 + mu_2^2 - mu_3^2 = -1/4`` and ``h(mu0) = 1`` (mu_3 < pi/8
  from ``lpjax.systems.kida_initial_state``, the root with ``mu_2 > 0``), t in [0, 1000];
  the paper's step is dt = 0.1 (its Fig. 2);
* heavy top on a movable base, (se(3) x R^3)* (sec. 5.3): ``movable_base_top()`` (the
  paper's parameters and stabilising gain), ``movable_base_mu(top, Omega=(0.1, 0.2, 0.1),
  v=0, Gamma=(cos(pi/3) sin(pi/20), sin(pi/3) sin(pi/20), cos(pi/20)))``, t in [0, 30];
  the paper's step is dt = 0.01 (its Fig. 5).

Methods (all float64 on this machine's CPU):

* ``lpjax.Collective(lpjax.GaussLegendre(2))``: GL4 on the Clebsch-canonized system, mapped
  back by the momentum map (the paper's collective integrator; keeps every Casimir);
* ``lpjax.GaussLegendre(2)`` applied directly to mu (keeps every *quadratic* invariant of
  the flow, so the quadratic Casimirs of both systems, and the top's energy, which is
  quadratic plus linear);
* ``lpjax.RK4()`` on mu (the paper's comparison method);
  the three fixed-step methods via ``lpjax.integrate(system, method, mu0, dt, n_steps,
  save_every=n_steps)``, swept over dt;
* diffrax ``Tsit5`` and ``Kvaerno5`` on ``ODETerm(lambda t, y, args: system.vector_field(y))``,
  adaptive (``PIDController(rtol=tol, atol=tol)``), swept over tol.

Reported per point: relative error of h and the maximum relative error over the Casimirs,
both at the final time; steps; wall time of the 2nd call (median of the 2nd and later calls,
after ``jax.block_until_ready``); compile time; ``ratio`` = time / time(lpjax RK4 at the
paper's dt) measured in the same run (one reference per system).

Compilation: every configuration is compiled ahead of time. All are traced and lowered
(``jax.jit(fn).lower``) first, one after the other; then XLA compiles them two at a time on
a thread pool (XLA compilation runs outside the GIL; on 2 idle cores this roughly halves
the compile phase). ``compile_s`` = trace + lower + XLA compile of that configuration. All
timed runs happen after every compilation has finished. diffrax takes ``tol`` as a runtime argument, so each diffrax
solver is compiled once per system and its compile time is shared by all its rows.

Plot: for each system, the relative error in h and the maximum relative Casimir error
against time (log-log), for the three lpjax methods at the paper's dt and the two diffrax
solvers at tol = 1e-8 (quick: 1e-6), from separate (untimed) runs that save 1000 points.

Output: one fixed-width table per system on stdout, ``collective.json`` and
``collective.png`` in the output directory (written atomically).
"""

from __future__ import annotations

from _harness import (  # first: float64 and the Agg backend
    arg_parser, compile_all, elapsed, loadavg, log, metadata, n_steps, plt, print_table,
    retime_reference, start, time_calls, write_json, write_png,
)

import diffrax
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import scipy

import lpjax
from lpjax.systems import kida_initial_state, kida_vortex, movable_base_mu, movable_base_top

FULL_TOLS = [1e-4, 1e-6, 1e-8, 1e-10]
QUICK_TOLS = [1e-4, 1e-6]
PLOT_TOL = {"full": 1e-8, "quick": 1e-6}  # diffrax tolerance of the plotted trajectories
N_PLOT = 1000  # saved points of the plotted trajectories
MAX_STEPS = 500_000  # diffrax
PLOT_FLOOR = 1e-17  # exact zeros are drawn here on the log axes
EPS = float(np.finfo(np.float64).eps)

METHODS = {  # label -> (integrator, fixed-step?)
    "lpjax coll. GL4": lpjax.Collective(lpjax.GaussLegendre(2)),
    "lpjax GL4": lpjax.GaussLegendre(2),
    "lpjax RK4": lpjax.RK4(),
}
SOLVERS = {"diffrax Tsit5": diffrax.Tsit5(), "diffrax Kvaerno5": diffrax.Kvaerno5()}
STYLES = {  # the paper: collective GL4 solid red, RK4 dashed blue
    "lpjax coll. GL4": dict(color="C3", lw=2.2, ls="-"),
    "lpjax GL4": dict(color="C1", lw=1.0, ls="-"),
    "lpjax RK4": dict(color="C0", lw=1.2, ls="--"),
    "diffrax Tsit5": dict(color="C4", lw=1.0, ls=":"),
    "diffrax Kvaerno5": dict(color="C2", lw=1.0, ls="-."),
}


# ----------------------------------------------------------------------------- problems


def kida_problem():
    sys_ = kida_vortex(0.5, -1.0)
    mu0 = jnp.asarray(kida_initial_state(0.5, -1.0))  # mu1 = 1, f1 = -1/4, h = 1, mu2 > 0
    assert abs(float(sys_.energy(mu0)) - 1.0) < 1e-14
    assert abs(float(sys_.casimirs(mu0)[0]) + 0.25) < 1e-14
    return dict(
        key="kida", title="Kida vortex, so(2,1)*", short="Kida vortex", system=sys_, mu0=mu0, t1=1000.0,
        paper_dt=0.1, full_dts=[0.4, 0.2, 0.1, 0.05], quick_dts=[0.1],
        casimir_names=["f1 = mu1^2 + mu2^2 - mu3^2"],
        description="kida_vortex(eps=0.5, omega=-1); mu0 = kida_initial_state: mu1 = 1, f1 = -1/4, h = 1, mu2 > 0",
    )


def top_problem():
    top = movable_base_top()
    s = np.sin(np.pi / 20)
    gamma = (np.cos(np.pi / 3) * s, np.sin(np.pi / 3) * s, np.cos(np.pi / 20))
    mu0 = movable_base_mu(top, Omega=(0.1, 0.2, 0.1), v=(0.0, 0.0, 0.0), Gamma=gamma)
    return dict(
        key="top", title="heavy top on a movable base, (se(3) x R^3)*", short="movable-base top", system=top, mu0=mu0,
        t1=30.0, paper_dt=0.01, full_dts=[0.04, 0.02, 0.01, 0.005], quick_dts=[0.01],
        casimir_names=["|P|^2", "P.Gamma", "|Gamma|^2"],
        description=("movable_base_top() (paper parameters, rho = 0.9 m^2 l^2 / I1); "
                     "movable_base_mu(Omega=(0.1,0.2,0.1), v=0, Gamma=(cos(pi/3) sin(pi/20), "
                     "sin(pi/3) sin(pi/20), cos(pi/20)))"),
    )


# ----------------------------------------------------------------------------- builders
# Each builder returns (python function to jit, example arguments, kind).


def lpjax_timed(P, method, dt):
    system, n = P["system"], n_steps(P["t1"], dt)

    def solve(y0):
        # throw=False: a step whose Newton iteration misses its tolerance is reported, not raised
        sol = lpjax.integrate(system, method, y0, dt, n, save_every=n, throw=False)
        return sol.ys[-1], sol.stats, sol.result == lpjax.RESULTS.successful

    return solve, (P["mu0"],)


def lpjax_plot(P, method, dt):
    system, n = P["system"], n_steps(P["t1"], dt)
    if n % N_PLOT:
        raise ValueError(f"{n} steps are not a multiple of {N_PLOT}")
    inv_err = invariant_errors_fn(P)

    def solve(y0):
        sol = lpjax.integrate(system, method, y0, dt, n, save_every=n // N_PLOT, throw=False)
        dh, dc = jax.vmap(inv_err)(sol.ys)
        return sol.ts, dh, dc, sol.ys[0], sol.ys[-1], sol.result == lpjax.RESULTS.successful

    return solve, (P["mu0"],)


def _diffrax_solve(P, solver, saveat):
    system = P["system"]
    term = diffrax.ODETerm(lambda t, y, args: system.vector_field(y))

    def run(y0, tol):
        return diffrax.diffeqsolve(
            term, solver, t0=0.0, t1=P["t1"], dt0=None, y0=y0,
            stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
            saveat=saveat, max_steps=MAX_STEPS,
        )

    return run


def diffrax_timed(P, solver):
    run = _diffrax_solve(P, solver, diffrax.SaveAt(t1=True))

    def solve(y0, tol):
        sol = run(y0, tol)
        return sol.ys[-1], sol.stats, sol.result == diffrax.RESULTS.successful

    return solve, (P["mu0"], jnp.asarray(1e-6))


def diffrax_plot(P, solver, plot_tol):
    ts = jnp.linspace(0.0, P["t1"], N_PLOT + 1)
    run = _diffrax_solve(P, solver, diffrax.SaveAt(ts=ts))
    inv_err = invariant_errors_fn(P)

    def solve(y0, tol):
        sol = run(y0, tol)
        dh, dc = jax.vmap(inv_err)(sol.ys)
        return sol.ts, dh, dc, sol.ys[0], sol.ys[-1], sol.result == diffrax.RESULTS.successful

    return solve, (P["mu0"], jnp.asarray(plot_tol))


def invariant_errors_fn(P):
    """``y -> (|h(y) - h0| / |h0|, |C(y) - C0| / |C0|)`` with h0, C0 those of mu0."""
    system = P["system"]
    h0, c0 = P["h0"], P["C0"]
    # a Casimir that is 0 at mu0 is measured absolutely
    scale = np.where(np.abs(c0) > 0, np.abs(c0), 1.0)

    def f(y):
        return (jnp.abs(system.energy(y) - h0) / abs(h0),
                jnp.abs(system.casimirs(y) - c0) / scale)

    return f


# ----------------------------------------------------------------------------- output


COLUMNS = [
    ("method", -18, "method"), ("setting", 11, "setting"), ("steps", 9, "steps"),
    ("rel dh", 10, "rel_err_energy:.2e"), ("max rel dC", 12, "rel_err_casimir:.2e"),
    ("time[ms]", 11, lambda r: f"{r['time_s'] * 1e3:.3f}"), ("ratio", 9, "ratio:.3g"),
    ("compile[s]", 11, lambda r: f"{r['compile_s']:.2f}" + ("*" if r["compile_shared"] else " ")),
    ("note", -4, "note"),
]


def print_results(P, rows, ref_time) -> None:
    print(f"\n{P['title']}: mu0 = {np.array2string(np.asarray(P['mu0']), precision=6)}, "
          f"t in [0, {P['t1']:g}], h0 = {P['h0']:.12g}, "
          f"Casimirs ({', '.join(P['casimir_names'])}) = "
          f"{np.array2string(np.asarray(P['C0']), precision=6)}")
    print_table(COLUMNS, rows, group="method")
    print(f"rel dh = |h(T) - h(0)| / |h(0)|; max rel dC = max over the {len(P['casimir_names'])} Casimir(s) "
          f"of |C(T) - C(0)| / |C(0)|; at T = {P['t1']:g}.")
    print(f"time = median wall time of the 2nd+ call (after block_until_ready), CPU; ratio = "
          f"time / time(lpjax RK4, dt={P['paper_dt']}) = {ref_time * 1e3:.3f} ms in this run.")
    print("compile = trace + lower + XLA compile (ahead of time, 2 at a time); "
          "* = diffrax: one compilation per solver, shared by all tolerances.")


def make_plot(problems, series, path, quick: bool, plot_tol: float) -> None:
    fig, axes = plt.subplots(len(problems), 2, figsize=(13, 4.4 * len(problems) + 0.6), squeeze=False)
    for row, P in zip(axes, problems):
        for ax, key, what in ((row[0], "dh", "relative error in h"),
                              (row[1], "dc", "max relative Casimir error")):
            any_floor = False
            for s in series[P["key"]]:
                t, y = s["ts"][1:], s[key][1:]
                any_floor |= bool(np.any(y < PLOT_FLOOR))
                ax.loglog(t, np.maximum(y, PLOT_FLOOR), label=s["label"], **STYLES[s["method"]])
            ax.axhline(EPS, color="0.6", lw=0.7, ls=":")
            ax.text(t[0], EPS, " float64 eps", va="bottom", fontsize=7, color="0.4")
            if any_floor:
                ax.text(t[0], PLOT_FLOOR, " exact 0 drawn here", va="bottom", fontsize=7, color="0.4")
            ax.set_xlabel("t")
            ax.set_ylabel(what)
            cas = "" if key == "dh" else f"\nover {', '.join(P['casimir_names'])}"
            ax.set_title(f"{P['short']}, t in [0, {P['t1']:g}]: {what}{cas}", fontsize=9)
            ax.grid(True, which="major", alpha=0.35)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    labels = [lab.split(",")[0] for lab in labels]  # dt / tol are in the suptitle
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(
        "Seed 002 sec. 5: collective GL4 vs GL4 on mu vs RK4 (fixed steps, paper's dt: Kida 0.1, "
        f"top 0.01) and diffrax (tol = {plot_tol:g}); float64, "
        f"{'quick' if quick else 'full'} run", fontsize=10)
    fig.tight_layout(rect=(0, 0.035, 1, 1))
    write_png(fig, path, dpi=120)


# ----------------------------------------------------------------------------- main


def make_jobs(problems, plot_tol):
    """Every configuration (timed and plotted), biggest first, so that the two compile threads
    finish together."""
    jobs = []
    for P in problems:
        for name, method in METHODS.items():
            for dt in P["dts"]:
                fn, a = lpjax_timed(P, method, dt)
                jobs.append(dict(P=P, kind="timed", method=name, dt=dt, fn=fn, args=a))
            fn, a = lpjax_plot(P, method, P["paper_dt"])
            jobs.append(dict(P=P, kind="plot", method=name, dt=P["paper_dt"], fn=fn, args=a))
        for name, solver in SOLVERS.items():
            fn, a = diffrax_timed(P, solver)
            jobs.append(dict(P=P, kind="timed", method=name, fn=fn, args=a))
            fn, a = diffrax_plot(P, solver, plot_tol)
            jobs.append(dict(P=P, kind="plot", method=name, fn=fn, args=a))
    weight = {"lpjax coll. GL4": 4, "diffrax Kvaerno5": 3, "lpjax GL4": 2}
    jobs.sort(key=lambda j: -(weight.get(j["method"], 1) * (3 if j["P"]["key"] == "top" else 1)))
    return jobs


def find(jobs, P, kind, method, dt=None):
    return next(j for j in jobs if j["P"] is P and j["kind"] == kind and j["method"] == method
                and (dt is None or j["dt"] == dt))


def time_problem(P, jobs, tols):
    """The timed rows of one system and its reference time."""
    rows = []

    def record(job, setting, args, is_ref=False):
        call = lambda: jax.block_until_ready(job["compiled"](*args))  # noqa: E731
        (yT, stats, ok), st = time_calls(call)
        yT = np.asarray(yT)
        if job["method"] in METHODS:
            extra = {k: np.asarray(v).item() for k, v in stats.items()}
            extra["successful"] = bool(ok)
            inner = getattr(METHODS[job["method"]], "inner", METHODS[job["method"]])
            if isinstance(inner, lpjax.GaussLegendre):
                extra["solver_iterations_run_per_step"] = inner.max_iters
        elif not bool(ok):
            raise RuntimeError(f"{job['method']} failed on {P['key']} at {setting}")
        else:
            extra = {k: int(v) for k, v in stats.items()}
        h, c = P["invariants"](yT)
        dh = abs(float(h) - P["h0"]) / abs(P["h0"])
        scale = np.where(np.abs(P["C0"]) > 0, np.abs(P["C0"]), 1.0)
        dc = np.abs(np.asarray(c) - P["C0"]) / scale
        rows.append({
            "system": P["key"], "method": job["method"], "setting": setting,
            "dt": job.get("dt"), "tol": None if job["method"] in METHODS else float(args[1]),
            "steps": int(extra["num_steps"]), "rel_err_energy": dh, "rel_err_casimir": float(dc.max()),
            "rel_err_casimirs": [float(v) for v in dc],
            "time_s": st["time_s"], "first_call_s": st["first_call_s"],
            "compile_s": float(job["compile_s"]), "compile_shared": job["method"] in SOLVERS,
            "trace_lower_s": float(job["lower_s"]), "xla_compile_s": float(job["xla_compile_s"]),
            "n_timed_calls": st["n_timed_calls"], "is_reference": is_ref, "note": "",
            "final_state": [float(v) for v in yT],
            "extra": dict(extra, time_min_s=st["time_min_s"], timed_calls_s=st["timed_calls_s"]),
        })
        log(f"{P['key']:<5}{job['method']:<18}{setting:>11}  dh={dh:.2e}  dC={dc.max():.2e}"
            f"  time={st['time_s'] * 1e3:.3f} ms")
        return rows[-1], call

    # the reference first (and re-timed at the end: its time is the median of both batches)
    ref_job = find(jobs, P, "timed", "lpjax RK4", P["paper_dt"])
    ref_row, ref_call = record(ref_job, f"dt={P['paper_dt']:g}", ref_job["args"], is_ref=True)
    ref_batch = list(ref_row["extra"]["timed_calls_s"])
    for name in METHODS:
        for dt in P["dts"]:
            job = find(jobs, P, "timed", name, dt)
            if job is not ref_job:
                record(job, f"dt={dt:g}", job["args"])
    for name in SOLVERS:
        job = find(jobs, P, "timed", name)
        for tol in tols:
            record(job, f"tol={tol:.0e}", (job["args"][0], jnp.asarray(tol)))
    ref_time = retime_reference(ref_row, ref_call, ref_batch)
    for r in rows:
        r["ratio"] = r["time_s"] / ref_time
        notes = ["ratio reference"] if r["is_reference"] else []
        ex = r["extra"]
        if ex.get("successful") is False:
            notes.append(f"FAILED: {ex['num_failed_steps']} steps missed the Newton tol")
        if ex.get("num_rejected_steps"):
            notes.append(f"{ex['num_rejected_steps']} rejected")
        if "solver_iterations_run_per_step" in ex:
            notes.append(f"Newton its needed<={ex['max_iterations']} of "
                         f"{ex['solver_iterations_run_per_step']} run, "
                         f"max res {ex['max_residual']:.0e}")
        r["note"] = ", ".join(notes)
    return rows, ref_time


def plot_series(P, jobs, rows, plot_tol):
    """Untimed trajectory runs for the plot."""
    series = []
    for name in list(METHODS) + list(SOLVERS):
        job = find(jobs, P, "plot", name)
        ts, dh, dc, y_first, y_last, ok = (np.asarray(v) for v in job["compiled"](*job["args"]))
        label = (f"{name}, dt={P['paper_dt']:g}" if name in METHODS else f"{name}, tol={plot_tol:g}")
        s = {"method": name, "label": label, "ts": ts, "dh": dh, "dc": dc.max(axis=1)}
        s["summary"] = {
            "label": label, "n_points": int(len(ts)), "successful": bool(ok),
            "max_rel_err_energy": float(dh.max()), "final_rel_err_energy": float(dh[-1]),
            "max_rel_err_casimir": float(dc.max()), "final_rel_err_casimir": float(dc[-1].max()),
            "max_rel_err_casimirs": [float(v) for v in dc.max(axis=0)],
            "initial_state_error": float(np.max(np.abs(y_first - np.asarray(P["mu0"])))),
        }
        if name in METHODS:  # same configuration as the timed run at the paper's dt
            timed = next(r for r in rows if r["method"] == name and r["dt"] == P["paper_dt"])
            s["summary"]["final_state_diff_vs_timed_run"] = float(
                np.max(np.abs(y_last - np.asarray(timed["final_state"]))))
        series.append(s)
    log(f"{P['key']}: plot trajectories done")
    return series


def main() -> None:
    args = arg_parser(__doc__, "smaller sweep (< ~60 s)").parse_args()
    mode = "quick" if args.quick else "full"
    tols = QUICK_TOLS if args.quick else FULL_TOLS
    plot_tol = PLOT_TOL[mode]
    start()
    loads = {"start": loadavg()}

    problems = [kida_problem(), top_problem()]
    for P in problems:
        inv = jax.jit(lambda y, s=P["system"]: (s.energy(y), s.casimirs(y)))
        P["invariants"] = inv
        h0, c0 = inv(P["mu0"])
        P["h0"], P["C0"] = float(h0), np.asarray(c0, dtype=np.float64)
        P["dts"] = P["quick_dts"] if args.quick else P["full_dts"]
        assert P["paper_dt"] in P["dts"]

    # every configuration, compiled ahead of time before anything is timed
    jobs = make_jobs(problems, plot_tol)
    log(f"lowering {len(jobs)} configurations, then compiling them 2 at a time ...")
    t = elapsed()
    compile_all(jobs)
    compile_wall = elapsed() - t
    loads["after_compile"] = loadavg()
    log(f"compiled in {compile_wall:.1f} s (sum of per-job times {sum(j['compile_s'] for j in jobs):.1f} s)")

    # timed runs, one system at a time, then its plotted trajectories
    all_rows, ref_times, series = {}, {}, {}
    for P in problems:
        all_rows[P["key"]], ref_times[P["key"]] = time_problem(P, jobs, tols)
        loads[f"after_{P['key']}"] = loadavg()
        series[P["key"]] = plot_series(P, jobs, all_rows[P["key"]], plot_tol)
    for P in problems:
        print_results(P, all_rows[P["key"]], ref_times[P["key"]])

    meta = metadata("collective vs direct Lie-Poisson integrators (seed 002, sec. 5)", mode,
                    (diffrax, scipy, np, matplotlib), loads,
                    "os.getloadavg() at each phase; other processes on the machine add noise to "
                    "wall times (the compile phase itself runs 2 XLA compile threads)")
    meta.update({
        "compile_wall_s": compile_wall,
        "compile_workers": 2,
        "timing_note": (
            "Times are wall-clock times of CPU runs on this machine (not portable). time_s is "
            "the median over repeated calls after the first one, each ended by "
            "jax.block_until_ready (extra.time_min_s is the fastest); the first call of each "
            "compiled executable is reported as first_call_s and not used. compile_s = wall time "
            "of jax.jit(fn).lower(...) (serial) + .compile() (ahead of time, 2 compilations "
            "running concurrently); diffrax compiles once per solver and system (tol is a runtime "
            "argument), so compile_s is shared by its rows (compile_shared = true)."),
        "ratio_definition": (
            "ratio = time_s / time_s(lpjax RK4 at the paper's dt of that system: Kida 0.1, "
            "top 0.01), measured in the same run; the reference is timed first and again after "
            "the other rows of its system, and its time is the median over both batches"),
        "columns": {
            "rel_err_energy": "|h(mu(T)) - h(mu0)| / |h(mu0)| at the final time T",
            "rel_err_casimir": "max_i |C_i(mu(T)) - C_i(mu0)| / |C_i(mu0)| (system.casimirs)",
            "rel_err_casimirs": "the same, per Casimir",
            "steps": "fixed-step methods: number of steps; diffrax: num_steps (accepted + rejected)",
            "extra.successful": ("lpjax: integrate(..., throw=False).result == successful; False "
                                 "when some step's Newton iteration missed its tolerance within "
                                 "the fixed iteration count (extra.num_failed_steps)"),
            "final_state": "mu at T (Collective: the momentum map of the final canonical state)",
            "compile_s": "trace_lower_s (jax.jit(fn).lower, serial) + xla_compile_s (.compile(), 2 concurrent)",
        },
        "settings": {
            "lpjax": ("lpjax.integrate(system, method, mu0, dt, n_steps, save_every=n_steps) "
                      "under jax.jit; GaussLegendre default settings (Newton, fixed iteration "
                      "count, tol 256 eps); Collective(GaussLegendre(2)) lifts mu0 with "
                      "lpjax's damped Gauss-Newton lift"),
            "diffrax": (f"diffeqsolve(ODETerm(lambda t, y, args: system.vector_field(y)), solver, "
                        f"dt0=None, PIDController(rtol=tol, atol=tol), SaveAt(t1=True), "
                        f"max_steps={MAX_STEPS})"),
            "dts": {P["key"]: P["dts"] for P in problems},
            "tols": tols,
            "plot": (f"lpjax methods at the paper's dt saving every n_steps/{N_PLOT} steps; "
                     f"diffrax at tol={plot_tol:g} with SaveAt(ts=linspace(0, T, {N_PLOT + 1})); "
                     "separate (untimed) executables"),
        },
        "problems": {P["key"]: {
            "description": P["description"], "mu0": [float(v) for v in np.asarray(P["mu0"])],
            "t0": 0.0, "t1": P["t1"], "paper_dt": P["paper_dt"], "h0": P["h0"],
            "casimir_names": P["casimir_names"], "C0": [float(v) for v in P["C0"]],
            "dtype": "float64"} for P in problems},
    })
    doc = {
        "metadata": meta,
        "reference_time_s": ref_times,
        "rows": [r for P in problems for r in all_rows[P["key"]]],
        "plot_series": {k: [s["summary"] for s in v] for k, v in series.items()},
    }
    json_path, png_path = args.out / "collective.json", args.out / "collective.png"
    write_json(json_path, doc)
    make_plot(problems, series, png_path, args.quick, plot_tol)
    loads = meta["loadavg_1_5_15min"]
    print(f"\nwrote {json_path} and {png_path}  (total {meta['total_benchmark_wall_s']:.1f} s; compile phase "
          f"{compile_wall:.1f} s; loadavg start {loads['start']}, end {loads['end']})")


if __name__ == "__main__":
    main()
