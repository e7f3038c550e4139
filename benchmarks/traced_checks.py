"""What the checks of traced systems cost: the run-time check of declared family data, and the
splitting's pieces on so(4) with exact and Cayley flows.

1. A system built inside ``jax.jit`` from traced parameters has its declared data (the free
   rigid body's mass tensor, the Lagrange top's alpha and gravity, the Clebsch flow's B) checked
   in the program: the gradient identity at 4 random states, with ``eqx.error_if`` gating the
   initial state. Timed: a jitted 1000-step run with the check against the same run with it
   switched off, interleaved (median of per-round ratios), with the initial state an argument of
   the jitted function and a constant closed over by it.
2. ``LiePoissonSplitting`` on ``rigid_body_n([1, 1.5, 2.2, 3.1])`` (so(4)): the default 12
   pieces with ``flow="exact"`` and ``"cayley"``, and ``for_system``'s 6, per step (2000 steps).
3. The structural reading of a Hamiltonian (:func:`lpjax._structure.monomials`), done once per
   trace of a splitting whose system is traced.

Run: ``python benchmarks/traced_checks.py`` (writes ``benchmarks/results/traced_checks.json``).
"""

from __future__ import annotations

import statistics
import time

import _harness as H  # noqa: I001  (float64 on, first)
import jax
import jax.numpy as jnp
import numpy as np

import lpjax
import lpjax._integrate as integrate_module
from lpjax._structure import monomials
from lpjax.systems import clebsch_case, heavy_top, lagrange_top, rigid_body, rigid_body_n


def _best(call, repeats: int) -> float:
    jax.block_until_ready(call())
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - t)
    return min(times)


def guard_cost(rounds: int, n: int) -> list:
    cases = [
        ("MoserVeselov, rigid body", lambda p: rigid_body(p), jnp.array([1.0, 1.5, 2.2]), lpjax.MoserVeselov(),
         jnp.array([0.4, -0.8, 1.5])),
        ("SurisClebsch, Clebsch case", lambda p: clebsch_case(p), jnp.array([0.5, 1.2, 2.0]), lpjax.SurisClebsch(),
         jnp.array([0.3, -0.2, 0.5, 0.4, 0.1, 0.9])),
        ("SurisLagrangeTop, Lagrange top", lambda p: lagrange_top(3, p), jnp.asarray(0.5), lpjax.SurisLagrangeTop(),
         jnp.array([0.3, -0.2, 0.5, 0.0, 0.6, 0.8])),
    ]
    rows, real = [], integrate_module.guarded
    for name, make, params, method, y0 in cases:
        for start in ("argument", "constant"):  # y0 passed to the jitted function, or closed over by it
            fns = {}
            for checked in (True, False):
                integrate_module.guarded = real if checked else (lambda family, system, x: x)
                if start == "argument":
                    f = jax.jit(lambda p, y: lpjax.integrate(make(p), method, y, 0.01, n).ys[-1])
                else:
                    f = jax.jit(lambda p, y=None: lpjax.integrate(make(p), method, y0, 0.01, n).ys[-1])
                fns[checked] = f
                jax.block_until_ready(f(params, y0))  # compiled with (or without) the check
            integrate_module.guarded = real
            ratios, times = [], {True: [], False: []}
            for _ in range(rounds):
                for checked in (True, False):
                    times[checked].append(_best(lambda: fns[checked](params, y0), 20))
                ratios.append(times[True][-1] / times[False][-1])
            rows.append({"case": name, "y0": start, "n_steps": n, "checked_s": min(times[True]),
                         "unchecked_s": min(times[False]), "ratio_median": statistics.median(ratios)})
            H.log(f"{name:32s} y0 {start:8s} {n} steps: checked {min(times[True]) * 1e6:8.1f} us, unchecked "
                  f"{min(times[False]) * 1e6:8.1f} us, median ratio {statistics.median(ratios):.4f}")
    return rows


def so4_splitting(n: int) -> list:
    system = rigid_body_n(jnp.array([1.0, 1.5, 2.2, 3.1]))
    y0 = jnp.asarray(0.5 * np.random.default_rng(0).normal(size=6))
    rows = []
    for name, method in [("default pieces, exact", lpjax.LiePoissonSplitting(flow="exact")),
                         ("default pieces, cayley", lpjax.LiePoissonSplitting(flow="cayley")),
                         ("for_system, exact", lpjax.LiePoissonSplitting.for_system(system, "exact")),
                         ("for_system, cayley", lpjax.LiePoissonSplitting.for_system(system, "cayley"))]:
        t = _best(lambda: lpjax.integrate(system, method, y0, 0.01, n).ys, 7)
        rows.append({"case": name, "pieces": len(method.pieces or ()) or 12, "us_per_step": t / n * 1e6})
        H.log(f"so(4) {name:24s} {t / n * 1e6:8.2f} us a step")
    return rows


def reading_time() -> list:
    rows = []
    for name, system in [("rigid_body", rigid_body(jnp.array([1.0, 2.0, 3.0]))),
                         ("rigid_body_n(4)", rigid_body_n(jnp.array([1.0, 1.5, 2.2, 3.1]))),
                         ("heavy_top", heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)),
                         ("clebsch_case", clebsch_case(jnp.array([0.5, 1.2, 2.0])))]:
        d = system.algebra.dim
        t = _best(lambda: monomials(system.energy, d, jnp.float64), 5)
        rows.append({"system": name, "ms": t * 1e3})
        H.log(f"monomials of {name:16s} {t * 1e3:6.2f} ms")
    return rows


def main() -> None:
    args = H.arg_parser(__doc__, "fewer rounds").parse_args()
    H.start()
    loads = {"start": H.loadavg()}
    guard = guard_cost(3 if args.quick else 15, 1000)
    so4 = so4_splitting(2000)
    reading = reading_time()
    meta = H.metadata("traced_checks", "quick" if args.quick else "full", [], loads, "")
    meta["notes"] = {
        "guard": ("jax.jit over the system's parameters of integrate(system(p), method, y0, 0.01, 1000).ys[-1], "
                  "y0 an argument of the jitted function or a constant it closes over; checked: lpjax's default "
                  "(the check gates y0); unchecked: the run-time check of declared data switched off "
                  "(lpjax._integrate.guarded replaced by the identity); best of 20 calls each per round, "
                  "rounds interleaved; ratio_median: the median of per-round ratios"),
        "so4": "integrate(rigid_body_n([1, 1.5, 2.2, 3.1]), method, y0, 0.01, 2000), best of 7",
        "reading": "lpjax._structure.monomials(system.energy, d, float64), best of 5 (concrete arrays)",
    }
    H.write_json(args.out / "traced_checks.json", {"metadata": meta, "guard": guard, "so4_splitting": so4,
                                                   "structure_reading": reading})
    H.log(f"wrote {args.out / 'traced_checks.json'}")


if __name__ == "__main__":
    main()
