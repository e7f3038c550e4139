"""Work against precision: lpjax Gauss–Legendre and Moser–Veselov against diffrax on long runs.

    python benchmarks/work_precision.py [--quick] [--out benchmarks/results/]

Problems (float64, CPU, one run; every method at its defaults):

* the free rigid body, I = (1, 2, 3), M0 = (1, 0.5, 0.8), to t = 1000, against the exact Euler
  top in Jacobi elliptic functions (``lpjax.exact``);
* the heavy (Lagrange) top, I = (1, 1, 0.5), χ = e3, mgl = 1, to t = 100, against scipy
  ``solve_ivp(DOP853, rtol = atol = 1e-13)``.

Runs: lpjax ``GaussLegendre(s)`` for s = 1…6 (GL2…GL12), ``Composition`` of implicit midpoint
(GL2) by Kahan & Li's schemes of orders 6 and 8, and ``MoserVeselov`` with its Kahan–Li order-8
composition (rigid body), and ``LiePoissonSplitting`` (its default Cayley flow and its exact
flow) with its Kahan–Li, Sofroniou–Spaletta 10 and Blanes–Moan S10 compositions and its
processed forms (Blanes 6, Blanes–Casas–Murua 8), over a range of fixed steps; diffrax ``Tsit5``, ``Dopri5``, ``Dopri8`` with ``PIDController(rtol = atol
= tol)`` over a range of tolerances. For each: the error of the state at the end time, the
relative drift of the Casimir (|M|², or |Γ|² and M·Γ) and of the energy at the end time, and the
wall time of the second call after ``block_until_ready`` (median of several; compile apart).

An ensemble goal: 10⁴ rigid bodies to t = 100, ``lpjax.ensemble`` (GL8, and the splitting with
its default Cayley flow composed by Kahan–Li 6 and 8) against diffrax Tsit5 under ``vmap`` with a PID controller, every
member's error against the exact Euler top.

Reported: the ratio table of lpjax's cheapest run to diffrax's cheapest run for three goals
(end error ≤ 1e-6; ≤ 1e-10; ≤ 1e-6 with the Casimir and the energy within 1e-12), the cost of a
GL4 step against a Tsit5 step at the same fixed dt = 0.1 with GL4's mean iterations per step,
and the Casimir and energy drift of GL4 after 10⁷ steps (10⁶ with ``--quick``) with and without
compensated summation. Plots: end error, Casimir drift and energy drift against time.
"""

from __future__ import annotations

import _harness as H
import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import scipy
from scipy.integrate import solve_ivp

import lpjax
from lpjax.exact import euler_top_exact
from lpjax.systems import heavy_top, rigid_body

GOALS = [("end error <= 1e-6", 1e-6, None), ("end error <= 1e-10", 1e-10, None),
         ("end error <= 1e-6, Casimir and energy <= 1e-12", 1e-6, 1e-12)]
DIFFRAX = {"Tsit5": diffrax.Tsit5, "Dopri5": diffrax.Dopri5, "Dopri8": diffrax.Dopri8}


def _problems(quick: bool):
    I = np.array([1.0, 2.0, 3.0])
    M0 = np.array([1.0, 0.5, 0.8])
    rb = dict(name="rigid body", system=rigid_body(jnp.asarray(I)), y0=M0, t1=1000.0,
              exact=euler_top_exact(I, M0, np.array([1000.0]))[0], mv=True)
    ht_sys = heavy_top(jnp.array([1.0, 1.0, 0.5]), jnp.array([0.0, 0.0, 1.0]), 1.0)
    g = np.array([0.0, np.sin(0.4), np.cos(0.4)])
    y0 = np.concatenate([[0.3, 0.2, 2.0], g])
    f = jax.jit(lambda y: ht_sys.vector_field(y))
    ref = solve_ivp(lambda t, y: np.asarray(f(jnp.asarray(y))), (0.0, 100.0), y0, method="DOP853", rtol=1e-13, atol=1e-13)
    ht = dict(name="heavy top", system=ht_sys, y0=y0, t1=100.0, exact=ref.y[:, -1], mv=False)
    # about the same resolution on both sides: steps a factor 1.25–2 apart, tolerances a factor √10
    dts = [0.5, 0.2, 0.1, 0.05] if quick else [1.0, 0.8, 0.5, 0.4, 0.25, 0.2, 0.1, 0.05, 0.025, 0.0125]
    tols = [1e-6, 1e-9, 1e-12] if quick else [10.0 ** (-k / 2) for k in range(10, 29)]
    return [rb, ht], dts, tols


def _errors(P, yT):
    s, y0 = P["system"], jnp.asarray(P["y0"])
    rel = lambda fn: float(jnp.max(jnp.abs(fn(yT) - fn(y0)) / jnp.abs(fn(y0))))  # noqa: E731
    return dict(error=float(np.max(np.abs(np.asarray(yT) - P["exact"]))), casimir=rel(s.casimirs),
                energy=rel(lambda y: jnp.atleast_1d(s.energy(y))))


def _lpjax_row(P, label, method, dt):
    n = int(round(P["t1"] / dt))
    fn = jax.jit(lambda y0: lpjax.integrate(P["system"], method, y0, dt, n, save_every=n, throw=False))
    sol, stats = H.time_calls(lambda: jax.block_until_ready(fn(jnp.asarray(P["y0"]))))
    ok = bool(sol.result == lpjax.RESULTS.successful)
    extra = {"mean_iterations": float(sol.stats["mean_iterations"])} if "mean_iterations" in sol.stats else {}
    return dict(problem=P["name"], method=label, setting=f"dt={dt:g}", steps=n, ok=ok, **_errors(P, sol.ys[-1]),
                **stats, **extra)


def _diffrax_row(P, name, tol):
    term = diffrax.ODETerm(lambda t, y, args: P["system"].vector_field(y))
    ctrl = diffrax.PIDController(rtol=tol, atol=tol)

    @jax.jit
    def fn(y0):
        sol = diffrax.diffeqsolve(term, DIFFRAX[name](), 0.0, P["t1"], 0.01, y0, stepsize_controller=ctrl,
                                  max_steps=2_000_000, throw=False)
        return sol.ys[-1], sol.stats["num_accepted_steps"], sol.result == diffrax.RESULTS.successful

    (yT, steps, ok), stats = H.time_calls(lambda: jax.block_until_ready(fn(jnp.asarray(P["y0"]))))
    return dict(problem=P["name"], method=f"diffrax {name}", setting=f"tol={tol:g}", steps=int(steps), ok=bool(ok),
                **_errors(P, yT), **stats)


def _ratios(rows, problem):
    out = []
    for goal, err, inv in GOALS:
        def meets(r):
            return r["ok"] and r["error"] <= err and (inv is None or max(r["casimir"], r["energy"]) <= inv)

        best = {}
        for side in ("lpjax", "diffrax"):
            cands = [r for r in rows if r["problem"] == problem and r["method"].startswith(side) and meets(r)]
            best[side] = min(cands, key=lambda r: r["time_s"]) if cands else None
        lp, dx = best["lpjax"], best["diffrax"]
        out.append(dict(problem=problem, goal=goal,
                        lpjax=f"{lp['method']} {lp['setting']}: {lp['time_s'] * 1e3:.2f} ms" if lp else "none",
                        diffrax=f"{dx['method']} {dx['setting']}: {dx['time_s'] * 1e3:.2f} ms" if dx else "none",
                        ratio=lp["time_s"] / dx["time_s"] if lp and dx else None))
    return out


def _step_cost(n: int):
    """GL4 (default fixed point, and Newton) and Tsit5 at the same fixed dt = 0.1 on the rigid body:
    time per step and GL4's updates per step."""
    system, y0, dt = rigid_body(jnp.array([1.0, 2.0, 3.0])), jnp.array([1.0, 0.5, 0.8]), 0.1
    term = diffrax.ODETerm(lambda t, y, args: system.vector_field(y))
    ts = jax.jit(lambda y: diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, n * dt, dt, y, max_steps=n + 1,
                                               stepsize_controller=diffrax.ConstantStepSize()).ys[-1])
    _, s_ts = H.time_calls(lambda: jax.block_until_ready(ts(y0)))
    out = dict(steps=n, dt=dt, tsit5_step_us=s_ts["time_s"] / n * 1e6)
    for key, method in (("gl4", lpjax.GaussLegendre(2)), ("gl4_newton", lpjax.GaussLegendre(2, solver="newton"))):
        gl = jax.jit(lambda y: lpjax.integrate(system, method, y, dt, n, save_every=n))
        sol, s_gl = H.time_calls(lambda: jax.block_until_ready(gl(y0)))
        out.update({f"{key}_step_us": s_gl["time_s"] / n * 1e6, f"{key}_over_tsit5": s_gl["time_s"] / s_ts["time_s"],
                    f"{key}_mean_iterations": float(sol.stats["mean_iterations"]),
                    f"{key}_max_iterations": int(sol.stats["max_iterations"])})
    return out


def _compensation(n: int):
    system, y0 = rigid_body(jnp.array([1.0, 2.0, 3.0])), jnp.array([1.0, 0.5, 0.8])
    out = []
    for comp in (False, True):
        sol = lpjax.integrate(system, lpjax.GaussLegendre(2, compensated=comp), y0, 0.1, n, save_every=n // 100)
        C = np.asarray(jax.vmap(system.casimirs)(sol.ys))[:, 0]
        E = np.asarray(jax.vmap(system.energy)(sol.ys))
        out.append(dict(compensated=comp, steps=n, casimir_drift=float(np.max(np.abs(C / C[0] - 1))),
                        energy_drift=float(np.max(np.abs(E / E[0] - 1)))))
    return out


def _ensemble_goal(quick: bool) -> dict:
    """N rigid bodies (I = (1, 2, 3), random M0 of unit norm) to t = 100: the largest error of a
    member against the exact Euler top, ``lpjax.ensemble`` (native kernel on this CPU) against
    diffrax Tsit5 under ``vmap`` with a PID controller; the cheapest run of each with error
    ≤ 1e-6 and their ratio (the goal of the card's use: a batched run to a set accuracy)."""
    N, t1, goal = (1000 if quick else 10_000), 100.0, 1e-6
    I = np.array([1.0, 2.0, 3.0])
    rng = np.random.default_rng(7)
    y0s = rng.normal(size=(N, 3))
    y0s /= np.linalg.norm(y0s, axis=1, keepdims=True)
    exact = np.stack([euler_top_exact(I, y, t1) for y in y0s])
    system = rigid_body(jnp.asarray(I))
    split = lpjax.LiePoissonSplitting.for_system(system)
    rows = []
    lp_methods = [("GL8", lpjax.GaussLegendre(4), (1.0, 0.5, 0.25)),
                  ("Composition(splitting, kahan-li6)", lpjax.Composition(split, "kahan-li6"), (0.4, 0.2, 0.1)),
                  ("Composition(splitting, kahan-li8)", lpjax.Composition(split, "kahan-li8"), (1.0, 0.5, 0.25))]
    for label, method, dts in lp_methods:
        for dt in dts:
            n = int(round(t1 / dt))
            sol, st = H.time_calls(lambda: lpjax.ensemble(system, method, y0s, dt, n), budget_s=2.0)
            err = float(np.max(np.abs(np.asarray(sol.final_state) - exact)))
            rows.append(dict(method=f"lpjax {label}", setting=f"dt={dt:g}", error=err, time_s=st["time_s"],
                             kernel=sol.settings["kernel"], ok=not sol.failed.size))
            H.log(f"ensemble N={N}: lpjax {label} dt={dt:g} err {err:.1e} {st['time_s'] * 1e3:.1f} ms")
    term = diffrax.ODETerm(lambda t, y, args: system.vector_field(y))
    for tol in (1e-7, 1e-8, 1e-9, 1e-10):
        ctrl = diffrax.PIDController(rtol=tol, atol=tol)
        fn = jax.jit(jax.vmap(lambda y: diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, t1, 0.01, y, stepsize_controller=ctrl,
                                                            max_steps=200_000).ys[-1]))
        yT, st = H.time_calls(lambda: jax.block_until_ready(fn(jnp.asarray(y0s))), budget_s=2.0)
        err = float(np.max(np.abs(np.asarray(yT) - exact)))
        rows.append(dict(method="diffrax Tsit5 vmap", setting=f"tol={tol:g}", error=err, time_s=st["time_s"], ok=True))
        H.log(f"ensemble N={N}: diffrax Tsit5 tol={tol:g} err {err:.1e} {st['time_s'] * 1e3:.1f} ms")
    best = {}
    for side in ("lpjax", "diffrax"):
        ok = [r for r in rows if r["method"].startswith(side) and r["ok"] and r["error"] <= goal]
        best[side] = min(ok, key=lambda r: r["time_s"]) if ok else None
    ratio = best["lpjax"]["time_s"] / best["diffrax"]["time_s"] if best["lpjax"] and best["diffrax"] else None
    return dict(members=N, t1=t1, goal=goal, rows=rows, best=best, ratio=ratio)


def _plot(rows, path):
    methods = list(dict.fromkeys(r["method"] for r in rows))
    colors = {m: f"C{i}" for i, m in enumerate(methods)}
    fig, axes = H.plt.subplots(2, 3, figsize=(15, 8.5))
    for i, problem in enumerate(("rigid body", "heavy top")):
        for j, (key, label) in enumerate((("error", "end error"), ("casimir", "rel. Casimir drift"),
                                          ("energy", "rel. energy drift"))):
            ax = axes[i, j]
            for method in dict.fromkeys(r["method"] for r in rows if r["problem"] == problem):
                pts = sorted((r["time_s"], max(r[key], 1e-17)) for r in rows
                             if r["problem"] == problem and r["method"] == method and r["ok"] and r[key] is not None)
                if pts:
                    ax.loglog(*zip(*pts), "o-" if method.startswith("lpjax") else "s--", ms=3, color=colors[method],
                              label=method)
            ax.set_xlabel("wall time of the 2nd call [s]")
            ax.set_ylabel(label)
            ax.set_title(f"{problem}: {label}")
            ax.grid(True, which="both", alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    H.write_png(fig, path, dpi=100)


def main() -> None:
    args = H.arg_parser(__doc__, "fewer steps and tolerances, 10⁶ steps for the compensation run").parse_args()
    H.start()
    problems, dts, tols = _problems(args.quick)
    rows = []
    for P in problems:
        methods = [(f"lpjax GL{2 * s}", lpjax.GaussLegendre(s)) for s in (1, 2, 3, 4, 5, 6)]
        methods += [(f"lpjax Composition(GL2, {k})", lpjax.Composition(lpjax.GaussLegendre(1), k))
                    for k in ("kahan-li6", "kahan-li8")]
        for flow, tag in (("auto", ""), ("exact", " exact")):
            split = lpjax.LiePoissonSplitting.for_system(P["system"], flow)
            methods += [(f"lpjax LiePoissonSplitting{tag}", split)] + [
                (f"lpjax Composition(splitting{tag}, {k})", lpjax.Composition(split, k))
                for k in ("kahan-li6", "kahan-li8", "sofroniou-spaletta10", "blanes-moan-s10")] + [
                (f"lpjax Processed(splitting{tag}, {k})", lpjax.Processed(split, k))
                for k in ("blanes6", "blanes-casas-murua8")]
        if P["mv"]:
            methods.append(("lpjax MoserVeselov", lpjax.MoserVeselov()))
            methods.append(("lpjax Composition(MV, kahan-li8)",
                            lpjax.Composition(lpjax.MoserVeselov(early_exit=True), "kahan-li8")))
        for label, method in methods:
            for dt in dts:
                rows.append(_lpjax_row(P, label, method, dt))
                H.log(f"{P['name']}: {label} dt={dt:g}  err {rows[-1]['error']:.1e}  {rows[-1]['time_s'] * 1e3:.2f} ms")
        for name in DIFFRAX:
            for tol in tols:
                rows.append(_diffrax_row(P, name, tol))
                H.log(f"{P['name']}: diffrax {name} tol={tol:g}  err {rows[-1]['error']:.1e}  {rows[-1]['time_s'] * 1e3:.2f} ms")
    ratios = [r for P in problems for r in _ratios(rows, P["name"])]
    ens = _ensemble_goal(args.quick)
    step = _step_cost(10_000)
    comp = _compensation(1_000_000 if args.quick else 10_000_000)

    print(f"\nWork against precision, {H.machine_line()}")
    H.print_table([("problem", -11, "problem"), ("method", -20, "method"), ("setting", -11, "setting"),
                   ("steps", 8, "steps"), ("end error", 11, "error:.2e"), ("Casimir", 10, "casimir:.1e"),
                   ("energy", 10, "energy:.1e"), ("time[ms]", 10, lambda r: f"{r['time_s'] * 1e3:.3f}"),
                   ("ok", 4, lambda r: "" if r["ok"] else "FAIL")], rows, group="method")
    print("\nCheapest run per goal (time of the 2nd call), lpjax against diffrax, same run:")
    H.print_table([("problem", -11, "problem"), ("goal", -48, "goal"), ("lpjax", -34, "lpjax"),
                   ("diffrax", -34, "diffrax"), ("ratio", 7, lambda r: "-" if r["ratio"] is None else f"{r['ratio']:.2f}")],
                  ratios)
    print(f"\nEnsemble: {ens['members']} rigid bodies to t = {ens['t1']:g}, cheapest with every member's error <= "
          f"{ens['goal']:g}:")
    for side in ("lpjax", "diffrax"):
        b = ens["best"][side]
        print(f"  {side}: " + (f"{b['method']} {b['setting']}: {b['time_s'] * 1e3:.1f} ms (error {b['error']:.1e})" if b
                               else "none"))
    print(f"  ratio lpjax / diffrax: {ens['ratio']:.3f}" if ens["ratio"] is not None else "  ratio: -")
    for key, label in (("gl4", "GL4 (default)"), ("gl4_newton", "GL4 solver='newton'")):
        print(f"{label} step / Tsit5 step at dt = 0.1 (rigid body, {step['steps']} steps): {step[key + '_step_us']:.3f} us"
              f" / {step['tsit5_step_us']:.3f} us = {step[key + '_over_tsit5']:.2f}; updates per step: mean "
              f"{step[key + '_mean_iterations']:.2f}, max {step[key + '_max_iterations']}")
    for c in comp:
        print(f"GL4 dt = 0.1, {c['steps']:.0e} steps, compensated={c['compensated']}: Casimir drift "
              f"{c['casimir_drift']:.2e}, energy drift {c['energy_drift']:.2e}")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [{k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in r.items()} for r in rows]
    H.write_json(args.out / "work_precision.json", {
        "metadata": H.metadata("work_precision", "quick" if args.quick else "full", [diffrax, scipy], {}, ""),
        "rows": rows, "ratios": ratios, "ensemble": ens, "step_cost": step, "compensated_summation": comp})
    _plot(rows, args.out / "work_precision.png")


if __name__ == "__main__":
    main()
