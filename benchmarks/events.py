"""Events and Poincaré sections in ensembles: what a section and a terminal event cost, and
lpjax's events against diffrax's ``Event`` with Tsit5 under ``vmap`` at the same event-time error.

    python benchmarks/events.py [--quick] [--out benchmarks/results/]

* **Section.** 10⁴ heavy tops (I = (1, 2, 3), χ = e₃, mgl = 1, M ~ 0.7·N(0, 1)³, Γ uniform on the
  sphere), GL4, dt = 0.01, 5000 steps, native kernel: the run alone, and with the section
  Γ₁ = 0 upwards with room for K = 1, 5 and 50 crossings (``--quick``: 2000 tops, 1000 steps).
* **Terminal events.** 4096 free rigid bodies (I = (1, 2, 3)), M₀ = s·(1, 0.5, 0.3) with s
  log-spaced over [1, 10], so that their first M₂ = 0 downwards falls over a decade of times;
  GL4, dt = 0.002, to the last member's event: with the terminal event, against the same
  members run to that time without it (native kernel), the members in the order of their falls
  and shuffled; beside it, the members' own lengths (mean over longest fall time), the cost if
  each member cost its own steps alone.
* **Against diffrax.** 4096 of those rigid bodies (``--quick``: 256): lpjax's terminal event
  (native kernel) at its cheapest setting whose worst event-time error, against the exact Euler
  top, is at most 1e-8 (GL4, GL6 and GL8 each at the largest of their dt that reaches it, and
  adaptive GL6 at the loosest tolerance that does), against ``diffeqsolve(ODETerm, Tsit5(),
  PIDController(rtol, atol), event=Event(..., optimistix.Newton))`` under ``jax.vmap``, its
  tolerance the loosest of 1e-6 … 1e-12 whose worst event-time error is at most lpjax's.

Times are the median of the calls after a compiling one. Writes ``benchmarks/results/events.json``.
"""

from __future__ import annotations

import _harness as H  # noqa: I001  (float64 on, first)
import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from scipy.optimize import brentq

import lpjax
from lpjax.exact import euler_top_exact
from lpjax.systems import heavy_top, rigid_body

INERTIA = np.array([1.0, 2.0, 3.0])
TOP = heavy_top(jnp.asarray(INERTIA), jnp.array([0.0, 0.0, 1.0]), 1.0)
RB = rigid_body(jnp.asarray(INERTIA))
FALL = lpjax.Event(lambda t, y: y[1], direction=-1)
GL4, GL6 = lpjax.GaussLegendre(2), lpjax.GaussLegendre(3)  # (the same objects in every call: ensemble's
# preparation is remembered for them, as a sweep over initial states finds it)


def tops(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    m, a = 0.7 * rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    return np.concatenate([m, a / np.linalg.norm(a, axis=1, keepdims=True)], axis=1)


def bodies(n: int) -> np.ndarray:
    return np.array([1.0, 0.5, 0.3]) * np.geomspace(1.0, 10.0, n)[:, None]


def exact_fall(m0: np.ndarray) -> float:
    """The first time M₂ of the exact Euler top crosses 0 downwards."""
    t = np.linspace(0.0, 20.0 / np.linalg.norm(m0), 20001)
    m2 = euler_top_exact(INERTIA, m0, t)[:, 1]
    k = int(np.flatnonzero((m2[:-1] > 0) & (m2[1:] <= 0))[0])
    return brentq(lambda s: euler_top_exact(INERTIA, m0, s)[1], t[k], t[k + 1], xtol=1e-15, rtol=1e-15)


def timed(call) -> dict:
    _, stats = H.time_calls(call, budget_s=4.0, max_repeats=3)
    return stats


def section_rows(n: int, steps: int) -> list:
    y0s = tops(n)
    rows = []
    base = timed(lambda: lpjax.ensemble(TOP, GL4, y0s, 0.01, steps, kernel="native",
                                        progress=False).final_state)
    rows.append(dict(kind="section", K=0, time_s=base["time_s"], ratio=1.0, mean_crossings=0.0))
    H.log(f"section: {n} tops x {steps} steps alone {base['time_s']:.3f} s")
    for K in (1, 5, 50):
        event = lpjax.Event(lambda t, y: y[3], direction=1, terminal=False, max_crossings=K)
        out = {}

        def call():
            out["sol"] = lpjax.ensemble(TOP, GL4, y0s, 0.01, steps, kernel="native",
                                        progress=False, events=event)
            return out["sol"].final_state

        s = timed(call)
        mean = float(np.mean(out["sol"].events.count))
        rows.append(dict(kind="section", K=K, time_s=s["time_s"], ratio=s["time_s"] / base["time_s"],
                         mean_crossings=mean))
        H.log(f"section K = {K}: {s['time_s']:.3f} s, {s['time_s'] / base['time_s']:.2f}x, {mean:.2f} crossings a top")
    return rows


def terminal_rows(n: int) -> list:
    """The terminal event against the same members run to the end, with the members in the order
    of their falls (the dearest first) and shuffled (each chunk then runs to its last fall)."""
    rows = []
    for order in ("by fall", "shuffled"):
        m0s = bodies(n)
        t_end = exact_fall(m0s[0]) * 1.01  # the slowest member (the smallest spin) falls last
        if order == "shuffled":
            m0s = np.random.default_rng(1).permutation(m0s)
        steps = int(np.ceil(t_end / 0.002))
        out = {}

        def with_event():
            out["sol"] = lpjax.ensemble(RB, GL4, m0s, 0.002, steps, kernel="native", progress=False, events=FALL)
            return out["sol"].final_state

        ev = timed(with_event)
        alone = timed(lambda: lpjax.ensemble(RB, GL4, m0s, 0.002, steps, kernel="native",
                                             progress=False).final_state)
        times = out["sol"].stats["t_final"]
        spread = float(times.max() / times.min())
        work = float(times.mean() / times.max())  # the members' own lengths, as a fraction of running all to the end
        H.log(f"terminal ({order}): {n} bodies, falls over {spread:.1f}x in time, {steps} steps: with the event "
              f"{ev['time_s']:.3f} s, to the end {alone['time_s']:.3f} s ({ev['time_s'] / alone['time_s']:.2f}x; "
              f"the members' own lengths {work:.2f})")
        rows.append(dict(kind="terminal", order=order, members=n, steps=steps, spread=spread,
                         time_event_s=ev["time_s"], time_to_end_s=alone["time_s"],
                         ratio=ev["time_s"] / alone["time_s"], own_lengths=work))
    return rows


FIXED = {"GL4": (GL4, (0.05, 0.02, 0.01, 0.005)), "GL6": (GL6, (0.1, 0.07, 0.05, 0.02)),
         "GL8": (lpjax.GaussLegendre(4), (0.2, 0.14, 0.1, 0.05))}


def diffrax_rows(n: int, target: float = 1e-8) -> list:
    """lpjax's terminal event at the cheapest setting whose worst event-time error is at most
    ``target``: for GL4, GL6 and GL8 the largest dt of theirs (:data:`FIXED`) that reaches it,
    and adaptive GL6 at the loosest tolerance of 1e-8 … 1e-12; diffrax Tsit5 at the loosest
    tolerance whose error is at most lpjax's."""
    m0s = bodies(n)
    exact = np.array([exact_fall(m) for m in m0s])
    t_end = float(exact.max()) * 1.01
    out, tried = {}, []
    for name, (method, dts) in FIXED.items():
        for dt in dts:
            steps = int(np.ceil(t_end / dt))

            def ours():
                out["sol"] = lpjax.ensemble(RB, method, m0s, dt, steps, kernel="native", progress=False,
                                            events=FALL)
                return out["sol"].final_state

            mine = timed(ours)
            err = float(np.max(np.abs(out["sol"].stats["t_final"] - exact)))
            H.log(f"lpjax {name} at dt = {dt}: event-time error {err:.2e}, {mine['time_s']:.4f} s")
            if err <= target:
                tried.append(dict(method=name, dt=dt, time_s=mine["time_s"], error=err))
                break
    for tol in (1e-8, 1e-9, 1e-10, 1e-11, 1e-12):  # the adaptive ensemble (GL6), its tolerance likewise
        def adaptive():
            out["sol"] = lpjax.ensemble(RB, GL6, m0s, None, t1=t_end, kernel="native",
                                        controller=lpjax.PIDController(tol, tol), progress=False, events=FALL)
            return out["sol"].final_state

        mine = timed(adaptive)
        err = float(np.max(np.abs(out["sol"].stats["t_reached"] - exact)))
        H.log(f"lpjax adaptive GL6 at {tol:g}: event-time error {err:.2e}, {mine['time_s']:.4f} s")
        if err <= target:
            tried.append(dict(method="GL6 adaptive", tol=tol, time_s=mine["time_s"], error=err))
            break
    best = min(tried, key=lambda r: r["time_s"])
    mine, err = {"time_s": best["time_s"]}, best["error"]
    term = diffrax.ODETerm(lambda t, y, args: RB.vector_field(y))
    event = diffrax.Event(lambda t, y, args, **kw: y[1], optx.Newton(1e-13, 1e-13))

    def solve(tol):
        @jax.jit
        def run(y0s):
            return jax.vmap(lambda y0: diffrax.diffeqsolve(
                term, diffrax.Tsit5(), 0.0, t_end, 0.01, y0, event=event, max_steps=100_000,
                stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol)).ts[-1])(y0s)
        return run

    for tol in (1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12):
        run = solve(tol)
        peer_err = float(np.max(np.abs(np.asarray(run(jnp.asarray(m0s))) - exact)))
        H.log(f"diffrax Tsit5 at {tol:g}: event-time error {peer_err:.2e} (lpjax {err:.2e})")
        if peer_err <= err:
            peer = timed(lambda: jax.block_until_ready(run(jnp.asarray(m0s))))
            H.log(f"against diffrax: lpjax {mine['time_s']:.4f} s, diffrax {peer['time_s']:.4f} s "
                  f"({mine['time_s'] / peer['time_s']:.3f}x)")
            return [dict(kind="diffrax", members=n, lpjax_tried=tried, lpjax_best=best,
                         lpjax_time_s=mine["time_s"], lpjax_error=err, peer_tol=tol, peer_error=peer_err,
                         peer_time_s=peer["time_s"], ratio=mine["time_s"] / peer["time_s"])]
    return [dict(kind="diffrax", members=n, lpjax_tried=tried, lpjax_best=best, lpjax_error=err,
                 peer="no tolerance reached lpjax's error")]


def main() -> None:
    args = H.arg_parser(__doc__, "2000 tops x 1000 steps, 1024 and 256 bodies").parse_args()
    H.start()
    loads = {"start": H.loadavg()}
    quick = args.quick
    rows = section_rows(2000 if quick else 10_000, 1000 if quick else 5000)
    rows += terminal_rows(1024 if quick else 4096) + diffrax_rows(256 if quick else 4096)
    loads["end"] = H.loadavg()
    doc = {"metadata": H.metadata("events", "quick" if quick else "full", [diffrax, optx], loads, ""), "rows": rows}
    H.write_json(args.out / ("events_quick.json" if quick else "events.json"), doc)


if __name__ == "__main__":
    main()
