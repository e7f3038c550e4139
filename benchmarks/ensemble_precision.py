"""Ensemble work against precision: high-order lpjax methods on 10⁴ members to t = 100.

    python benchmarks/ensemble_precision.py [--quick] [--out benchmarks/results/]

Problems (float64, CPU, one run): N = 10⁴ (10³ with ``--quick``) members to t = 100,

* free rigid bodies, I = (1, 2, 3), random M0 of unit norm, against the exact Euler top
  (``lpjax.exact``);
* heavy (Lagrange) tops, I = (1, 1, 0.5), χ = e3, mgl = 1, random M0 (normal) and Γ0 (unit),
  against GL12 at dt = 0.0125, itself checked against scipy ``solve_ivp(DOP853, rtol = atol =
  1e-13)`` on 16 members (the largest difference is reported).

Methods, each over a ladder of fixed steps, every member's error at t = 100 (the largest):
Gauss–Legendre of orders 8, 10 and 12; the explicit splitting (``LiePoissonSplitting``, its
default Cayley flow and its exact one) composed by Kahan–Li 6 and 8 and Sofroniou–Spaletta 10,
by Blanes–Moan S10, and processed (``Processed``, Blanes 6 and Blanes–Casas–Murua 8). Each runs
in the native kernel, the default on CPU; the cheapest run of each goal also in the scan kernel.

Reported per problem and goal (largest error ≤ 1e-6, ≤ 1e-10): the cheapest run of each method,
and the ratio of the best to Sofroniou–Spaletta 10 of the splitting (the issue's reference).
Times: the median of the second and later calls of ``lpjax.ensemble`` (compile apart).
"""

from __future__ import annotations

import json
from pathlib import Path

import _harness as H
import jax
import jax.numpy as jnp
import numpy as np
import scipy
from scipy.integrate import solve_ivp

import lpjax
from lpjax.exact import euler_top_exact
from lpjax.systems import heavy_top, rigid_body

GOALS = (1e-6, 1e-10)
T1 = 100.0
REFERENCE = "Composition(splitting, sofroniou-spaletta10)"


def _problems(N: int):
    rng = np.random.default_rng(11)
    I = np.array([1.0, 2.0, 3.0])
    m = rng.normal(size=(N, 3))
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    rb = dict(name="rigid body", system=rigid_body(jnp.asarray(I)), y0s=m,
              exact=np.stack([euler_top_exact(I, y, T1) for y in m]))
    ht_sys = heavy_top(jnp.array([1.0, 1.0, 0.5]), jnp.array([0.0, 0.0, 1.0]), 1.0)
    g = rng.normal(size=(N, 3))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    y0s = np.concatenate([rng.normal(size=(N, 3)), g], axis=1)
    ref = lpjax.ensemble(ht_sys, lpjax.GaussLegendre(6), jnp.asarray(y0s), 0.0125, H.n_steps(T1, 0.0125))
    exact = np.asarray(ref.final_state)
    f = jax.jit(lambda y: ht_sys.vector_field(y))
    dop = np.stack([solve_ivp(lambda t, y: np.asarray(f(jnp.asarray(y))), (0.0, T1), y, method="DOP853", rtol=1e-13,
                              atol=1e-13).y[:, -1] for y in y0s[:16]])
    check = float(np.max(np.abs(dop - exact[:16])))
    H.log(f"heavy tops: GL12 dt=0.0125 against DOP853 on 16 members: {check:.1e}")
    ht = dict(name="heavy top", system=ht_sys, y0s=y0s, exact=exact, reference_check=check)
    return [rb, ht]


def _methods(system):
    """``(label, method, steps)``: the ladder of fixed steps ``T1/n``, a factor √2 apart (the heavy
    tops, whose fastest members spin about 8 rad/s, from n = 200)."""
    first = 50 if system.algebra.dim == 3 else 200
    ladder = tuple(T1 / n for n in (first * np.sqrt(2.0) ** np.arange(12)).round().astype(int) if T1 / n * n == T1)
    out = [(f"GL{2 * s}", lpjax.GaussLegendre(s), ladder) for s in (4, 5, 6)]
    for flow, tag in (("auto", ""), ("exact", " exact")):
        split = lpjax.LiePoissonSplitting.for_system(system, flow)
        out += [(f"Composition(splitting{tag}, {k})", lpjax.Composition(split, k), ladder)
                for k in ("kahan-li6", "kahan-li8", "sofroniou-spaletta10", "blanes-moan-s10")]
        out += [(f"Processed(splitting{tag}, {k})", lpjax.Processed(split, k), ladder)
                for k in ("blanes6", "blanes-casas-murua8")]
    return out


def _run(P, label, method, dt, kernel):
    n = H.n_steps(T1, dt)
    y0s = jnp.asarray(P["y0s"])
    sol, st = H.time_calls(lambda: jax.block_until_ready(lpjax.ensemble(P["system"], method, y0s, dt, n, kernel=kernel)
                                                         .final_state), budget_s=2.0, max_repeats=3)
    err = float(np.max(np.abs(np.asarray(sol) - P["exact"])))
    err = err if np.isfinite(err) else None
    H.log(f"{P['name']}: {label} dt={dt:g} [{kernel}] err {err if err is None else f'{err:.1e}'}  "
          f"{st['time_s'] * 1e3:.1f} ms")
    return dict(problem=P["name"], method=label, dt=dt, kernel=kernel, error=err, time_s=st["time_s"],
                first_call_s=st["first_call_s"])


def _best(rows, problem, goal, kernel="native"):
    """The cheapest run per method that meets ``goal``, cheapest first."""
    best = {}
    for r in rows:
        if r["problem"] == problem and r["kernel"] == kernel and r["error"] is not None and r["error"] <= goal:
            if r["method"] not in best or r["time_s"] < best[r["method"]]["time_s"]:
                best[r["method"]] = r
    return sorted(best.values(), key=lambda r: r["time_s"])


def _at_goal(rows, problem, goal):
    """Per method, the time at exactly ``goal``: log-log interpolation between the two steps of
    its ladder whose errors bracket it (the ladder's own steps are a factor √2 apart), cheapest
    first."""
    out = []
    for m in dict.fromkeys(r["method"] for r in rows if r["problem"] == problem):
        pts = sorted(((r["dt"], r["error"], r["time_s"]) for r in rows if r["problem"] == problem and r["method"] == m
                      and r["kernel"] == "native" and r["error"] is not None), reverse=True)
        for (_, ea, ta), (_, eb, tb) in zip(pts, pts[1:]):
            if ea > goal >= eb:
                f = np.log(goal / ea) / np.log(eb / ea)
                out.append(dict(method=m, time_s=float(ta * (tb / ta) ** f)))
                break
    return sorted(out, key=lambda r: r["time_s"])


def _summaries(rows, problems) -> list:
    out = []
    for problem in problems:
        for goal in GOALS:
            best, at_goal = _best(rows, problem, goal), _at_goal(rows, problem, goal)
            ref = next((r for r in best if r["method"] == REFERENCE), None)
            ref_at = next((r for r in at_goal if r["method"] == REFERENCE), None)
            out.append(dict(problem=problem, goal=goal, best=best[0] if best else None, reference=ref,
                            ratio=best[0]["time_s"] / ref["time_s"] if best and ref else None,
                            cheapest=[dict(method=r["method"], dt=r["dt"], error=r["error"], time_s=r["time_s"])
                                      for r in best],
                            at_goal=at_goal,
                            ratio_at_goal=at_goal[0]["time_s"] / ref_at["time_s"] if at_goal and ref_at else None,
                            scan=_best(rows, problem, goal, "scan")[:3]))
    return out


def main() -> None:
    ap = H.arg_parser(__doc__, "10³ members")
    ap.add_argument("--summarize", type=Path, help="only summarize the rows of this JSON again (no runs)")
    args = ap.parse_args()
    if args.summarize:
        doc = json.loads(args.summarize.read_text())
        doc["summary"] = _summaries(doc["rows"], ("rigid body", "heavy top"))
        H.write_json(args.summarize, doc)
        return
    H.start()
    N = 1000 if args.quick else 10_000
    problems = _problems(N)
    rows = []
    for P in problems:
        for label, method, ladder in _methods(P["system"]):
            last = None
            for dt in ladder:
                row = _run(P, label, method, dt, "native")
                rows.append(row)
                err = row["error"]
                if err is not None and (err <= 0.1 * min(GOALS) or (last is not None and 1e-8 > err > 0.5 * last)):
                    break  # finer steps only cost more (below the goals, or at the floor of roundoff)
                last = err
        for goal in GOALS:
            for r in _best(rows, P["name"], goal)[:3]:  # the three cheapest again in the scan kernel
                method = dict((m[0], m[1]) for m in _methods(P["system"]))[r["method"]]
                rows.append(_run(P, r["method"], method, r["dt"], "scan"))
    summary = _summaries(rows, [P["name"] for P in problems])

    print(f"\nEnsemble work against precision, {N} members to t = {T1:g}, {H.machine_line()}")
    for s in summary:
        print(f"\n{s['problem']}, largest error <= {s['goal']:g} (native kernel):")
        H.print_table([("method", -50, "method"), ("dt", 8, "dt:g"), ("error", 10, "error:.1e"),
                       ("time[ms]", 10, lambda r: f"{r['time_s'] * 1e3:.1f}")], s["cheapest"])
        ratio = "-" if s["ratio"] is None else f"{s['ratio']:.3f}"
        at = "-" if s["ratio_at_goal"] is None else f"{s['ratio_at_goal']:.3f} ({s['at_goal'][0]['method']})"
        print(f"best / {REFERENCE}: {ratio}; interpolated to the goal: {at}")
        for r in s["scan"]:
            print(f"  scan kernel: {r['method']} dt={r['dt']:g}: {r['time_s'] * 1e3:.1f} ms")
    args.out.mkdir(parents=True, exist_ok=True)
    H.write_json(args.out / ("ensemble_precision_quick.json" if args.quick else "ensemble_precision.json"), {
        "metadata": H.metadata("ensemble_precision", "quick" if args.quick else "full", [scipy], {}, ""),
        "members": N, "t1": T1, "heavy_top_reference_check": problems[1]["reference_check"],
        "rows": rows, "summary": summary})
    _plot(rows, summary, args.out / ("ensemble_precision_quick.png" if args.quick else "ensemble_precision.png"))


def _plot(rows, summary, path):
    fig, axes = H.plt.subplots(1, 2, figsize=(14, 6))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    for ax, problem in zip(axes, ("rigid body", "heavy top")):
        for i, m in enumerate(methods):
            pts = sorted((r["time_s"], r["error"]) for r in rows if r["problem"] == problem and r["method"] == m
                         and r["kernel"] == "native" and r["error"] is not None)
            if pts:
                ax.loglog(*zip(*pts), "o-" if m.startswith(("GL", "Processed")) else "s--", ms=3, color=f"C{i % 10}",
                          label=m, alpha=0.9 if "exact" not in m else 0.5)
        for goal in GOALS:
            ax.axhline(goal, color="k", lw=0.5, ls=":")
        ax.set_xlabel("wall time of lpjax.ensemble, 2nd call [s]")
        ax.set_ylabel(f"largest member error at t = {T1:g}")
        ax.set_title(f"{problem}: native kernel")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    H.write_png(fig, path, dpi=100)


if __name__ == "__main__":
    main()
