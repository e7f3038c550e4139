"""Chaos indicators in ensembles: what MEGNO's tangent vector costs over the run without it, and
lpjax's largest Lyapunov exponent against a vmapped diffrax Tsit5 on the variational equations
at the same error.

    python benchmarks/chaos.py [--quick] [--out benchmarks/results/]

* **A MEGNO map.** 256 × 256 heavy tops (I = (1, 2, 3), χ = e₃, mgl = 1) on a grid of the
  plane (M₁, M₂) with M₃ = 0.3 and Γ = (0, 0.6, 0.8), GL4, dt = 0.01, 10⁴ steps, native kernel:
  with ``observe=lpjax.MEGNO()`` against the same ensemble without it (``--quick``: 64 × 64,
  2000 steps).
* **Against diffrax.** 1024 of those tops, λ₁ at T = 20 (one tangent vector, renormalised every
  10 steps for lpjax, every 0.1 time units for diffrax). The error of each is its largest
  against scipy DOP853 (rtol = atol = 1e-12) on the variational equations for 16 of the tops,
  from the same tangent direction. lpjax: the fastest of GL4, GL6 and GL8, each at the largest
  of its dt (:data:`FIXED`) whose error is at most 1e-6; diffrax: ``diffeqsolve(Tsit5,
  PIDController)`` on the 12 variational equations under ``jax.vmap``, at the loosest tolerance
  of 1e-6 … 1e-12 whose error is at most lpjax's.

Times are the median of the calls after a compiling one. Writes ``benchmarks/results/chaos.json``.
"""

from __future__ import annotations

import _harness as H  # noqa: I001  (float64 on, first)
import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

import lpjax
from lpjax.systems import heavy_top

INERTIA, CHI = np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.0, 1.0])
TOP = heavy_top(jnp.asarray(INERTIA), jnp.asarray(CHI), 1.0)
GL4 = lpjax.GaussLegendre(2)
MEGNO = lpjax.MEGNO()


def grid(n: int) -> np.ndarray:
    m1, m2 = np.meshgrid(np.linspace(-2.0, 2.0, n), np.linspace(-2.0, 2.0, n))
    return np.stack([m1.ravel(), m2.ravel(), np.full(n * n, 0.3), np.zeros(n * n), np.full(n * n, 0.6),
                     np.full(n * n, 0.8)], axis=1)


def timed(call) -> dict:
    _, stats = H.time_calls(call, budget_s=4.0, max_repeats=3)
    return stats


def map_rows(n: int, steps: int) -> list:
    y0s = grid(n)
    plain = timed(lambda: lpjax.ensemble(TOP, GL4, y0s, 0.01, steps, kernel="native", progress=False).final_state)
    out = {}

    def with_megno():
        out["sol"] = lpjax.ensemble(TOP, GL4, y0s, 0.01, steps, kernel="native", progress=False, observe=MEGNO)
        return out["sol"].final_state

    megno = timed(with_megno)
    y = out["sol"].observables["megno"][:, -1]
    H.log(f"MEGNO map {n} x {n}, {steps} steps: alone {plain['time_s']:.2f} s, with MEGNO {megno['time_s']:.2f} s "
          f"({megno['time_s'] / plain['time_s']:.2f}x); <Y> < 2.5 on {np.mean(y < 2.5):.0%} of the grid")
    return [dict(kind="megno map", members=n * n, steps=steps, time_plain_s=plain["time_s"],
                 time_megno_s=megno["time_s"], ratio=megno["time_s"] / plain["time_s"],
                 fraction_regular=float(np.mean(y < 2.5)))]


def _variational(t, z):
    M, G, dM, dG = z[:3], z[3:6], z[6:9], z[9:]
    om, dom = M / INERTIA, dM / INERTIA
    return np.concatenate([np.cross(M, om) + np.cross(G, CHI), np.cross(G, om),
                           np.cross(dM, om) + np.cross(M, dom) + np.cross(dG, CHI), np.cross(dG, om) + np.cross(G, dom)])


def _dop853(y0, v0, T, every=0.1) -> float:
    z, total = np.concatenate([y0, v0]), 0.0
    for _ in range(int(round(T / every))):
        z = solve_ivp(_variational, (0.0, every), z, method="DOP853", rtol=1e-12, atol=1e-12).y[:, -1]
        n = np.linalg.norm(z[6:])
        total, z[6:] = total + np.log(n), z[6:] / n
    return total / T


def diffrax_rows(n: int, T: float = 20.0, target: float = 1e-6) -> list:
    y0s = grid(32)[np.random.default_rng(0).choice(32 * 32, n, replace=n > 1024)]
    v0 = np.linalg.qr(np.random.default_rng(63).normal(size=(6, 6)))[0][:, 0]  # (Lyapunov's first direction)
    ref = np.array([_dop853(y, v0, T) for y in y0s[:16]])
    out, tried = {}, []
    for name, (method, dts) in FIXED.items():
        for dt in dts:
            def ours():
                out["sol"] = lpjax.ensemble(TOP, method, y0s, dt, int(round(T / dt)), kernel="native", progress=False,
                                            observe=LYAP)
                return out["sol"].final_state

            mine = timed(ours)
            err = float(np.max(np.abs(out["sol"].observables["lyapunov"][:16, -1, 0] - ref)))
            H.log(f"lpjax {name} at dt = {dt}: lambda_1 error {err:.2e}, {mine['time_s']:.4f} s")
            if err <= target:
                tried.append(dict(method=name, dt=dt, time_s=mine["time_s"], error=err))
                break
    best = min(tried, key=lambda r: r["time_s"])
    mine, err, dt = {"time_s": best["time_s"]}, best["error"], f"{best['method']} {best['dt']}"
    term = diffrax.ODETerm(lambda t, z, args: jnp.asarray(_jax_variational(z)))
    saves = diffrax.SaveAt(ts=jnp.linspace(0.0, 0.1, 2)[1:])

    def solve(tol):
        @jax.jit
        def run(y0s):
            def one(y0):
                def leg(z, _):
                    sol = diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, 0.1, 0.01, z, saveat=saves, max_steps=10_000,
                                              stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol))
                    z = sol.ys[-1]
                    n = jnp.linalg.norm(z[6:])
                    return z.at[6:].set(z[6:] / n), jnp.log(n)

                _, logs = jax.lax.scan(leg, jnp.concatenate([y0, jnp.asarray(v0)]), None, length=int(round(T / 0.1)))
                return jnp.sum(logs) / T
            return jax.vmap(one)(y0s)
        return run

    for tol in (1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12):
        run = solve(tol)
        lam = np.asarray(run(jnp.asarray(y0s)))
        peer_err = float(np.max(np.abs(lam[:16] - ref)))
        H.log(f"diffrax Tsit5 at {tol:g}: lambda_1 error {peer_err:.2e} (lpjax {err:.2e})")
        if peer_err <= err:
            peer = timed(lambda: jax.block_until_ready(run(jnp.asarray(y0s))))
            H.log(f"against diffrax: lpjax {mine['time_s']:.4f} s, diffrax {peer['time_s']:.4f} s "
                  f"({mine['time_s'] / peer['time_s']:.3f}x)")
            return [dict(kind="diffrax", members=n, T=T, lpjax_tried=tried, lpjax_best=best, lpjax_time_s=mine["time_s"],
                         lpjax_error=err,
                         peer_tol=tol, peer_error=peer_err, peer_time_s=peer["time_s"],
                         ratio=mine["time_s"] / peer["time_s"])]
    return [dict(kind="diffrax", members=n, lpjax_tried=tried, lpjax_best=best, lpjax_error=err,
                 peer="no tolerance reached lpjax's error")]


LYAP = lpjax.Lyapunov(k=1, every=10, on_leaf=False)
FIXED = {"GL4": (GL4, (0.05, 0.04, 0.02, 0.01, 0.005)), "GL6": (lpjax.GaussLegendre(3), (0.1, 0.05, 0.025, 0.01)),
         "GL8": (lpjax.GaussLegendre(4), (0.25, 0.2, 0.1, 0.05))}


def _jax_variational(z):
    I, chi = jnp.asarray(INERTIA), jnp.asarray(CHI)
    M, G, dM, dG = z[:3], z[3:6], z[6:9], z[9:]
    om, dom = M / I, dM / I
    return jnp.concatenate([jnp.cross(M, om) + jnp.cross(G, chi), jnp.cross(G, om),
                            jnp.cross(dM, om) + jnp.cross(M, dom) + jnp.cross(dG, chi),
                            jnp.cross(dG, om) + jnp.cross(G, dom)])


def main() -> None:
    args = H.arg_parser(__doc__, "64 x 64 tops x 2000 steps, 256 tops against diffrax").parse_args()
    H.start()
    loads = {"start": H.loadavg()}
    quick = args.quick
    rows = map_rows(64 if quick else 256, 2000 if quick else 10_000) + diffrax_rows(256 if quick else 1024)
    loads["end"] = H.loadavg()
    doc = {"metadata": H.metadata("chaos", "quick" if quick else "full", [diffrax], loads, ""), "rows": rows}
    H.write_json(args.out / ("chaos_quick.json" if quick else "chaos.json"), doc)


if __name__ == "__main__":
    main()
