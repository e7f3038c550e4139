"""The Lie–Poisson splitting's two flows for each piece, exact (trigonometric) and Cayley: their
errors and their cost, for the splitting and its Kahan–Li compositions of orders 6 and 8.

    python benchmarks/splitting_flows.py [--quick] [--out benchmarks/results/]

* Error: the free rigid body, I = (1, 2, 3), M₀ = (1, 0.5, 0.8), to t = 100, against the
  closed form (``lpjax.exact.euler_top_exact``, scipy's ``ellipj``), max |M − M_exact| at
  t = 100, at dt = 0.1 and 0.02 for the splitting, 0.1 and 0.05 for Kahan–Li 6, 0.25 and 0.2
  for Kahan–Li 8 (at smaller steps the compositions' errors are roundoff); ``ratio`` is the
  Cayley flow's error over the exact flow's.
* Cost in the native ensemble kernel: 10⁴ rigid bodies (M ~ N(0, 1)³), 1000 steps of 0.02,
  ns per member and step (median of timed calls after a compiling one).
* Cost of one trajectory under XLA: ``integrate`` of M₀ for 10⁴ steps of 0.02, µs a step.

Writes ``benchmarks/results/splitting_flows.json``.
"""

from __future__ import annotations

import _harness as H  # noqa: I001  (float64 on, first)
import jax
import jax.numpy as jnp
import numpy as np

import lpjax
from lpjax.exact import euler_top_exact
from lpjax.systems import rigid_body

INERTIA, M0, T1 = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.5, 0.8]), 100.0
SCHEMES = {"splitting": None, "Kahan-Li 6": "kahan-li6", "Kahan-Li 8": "kahan-li8"}
DTS = {"splitting": (0.1, 0.02), "Kahan-Li 6": (0.1, 0.05), "Kahan-Li 8": (0.25, 0.2)}  # above roundoff


def method(scheme, flow: str):
    inner = lpjax.LiePoissonSplitting.for_system(rigid_body(INERTIA), flow=flow)
    return inner if scheme is None else lpjax.Composition(inner, scheme)


def error(scheme, flow: str, dt: float) -> float:
    n = H.n_steps(T1, dt)
    sol = lpjax.integrate(rigid_body(INERTIA), method(scheme, flow), jnp.asarray(M0), dt, n, save_every=n)
    return float(np.max(np.abs(np.asarray(sol.ys[-1]) - euler_top_exact(INERTIA, M0, np.array([T1]))[-1])))


def native_ns(scheme, flow: str, n_members: int, steps: int) -> float:
    y0s = np.random.default_rng(0).normal(size=(n_members, 3))
    system, m = rigid_body(INERTIA), method(scheme, flow)

    def call():
        return jax.block_until_ready(lpjax.ensemble(system, m, y0s, 0.02, steps, kernel="native", progress=False)
                                     .final_state)

    _, stats = H.time_calls(call, budget_s=3.0, max_repeats=5)
    return stats["time_s"] / (n_members * steps) * 1e9


def xla_us(scheme, flow: str, steps: int) -> float:
    system, m = rigid_body(INERTIA), method(scheme, flow)

    def call():
        return jax.block_until_ready(lpjax.integrate(system, m, jnp.asarray(M0), 0.02, steps, save_every=steps).ys)

    _, stats = H.time_calls(call, budget_s=2.0, max_repeats=7)
    return stats["time_s"] / steps * 1e6


def main() -> None:
    args = H.arg_parser(__doc__, "10³ members, 10³ trajectory steps").parse_args()
    H.start()
    loads = {"start": H.loadavg()}
    members, traj = (1000, 1000) if args.quick else (10_000, 10_000)
    rows = []
    for name, scheme in SCHEMES.items():
        for dt in DTS[name]:
            exact, cayley = error(scheme, "exact", dt), error(scheme, "cayley", dt)
            rows.append(dict(kind="error", scheme=name, dt=dt, exact=exact, cayley=cayley, ratio=cayley / exact))
            H.log(f"{name}, dt {dt}: error exact {exact:.3e}, Cayley {cayley:.3e} ({cayley / exact:.3g}x)")
    for name in ("splitting", "Kahan-Li 6"):
        scheme = SCHEMES[name]
        ns = {flow: native_ns(scheme, flow, members, 1000) for flow in ("exact", "cayley")}
        us = {flow: xla_us(scheme, flow, traj) for flow in ("exact", "cayley")}
        rows.append(dict(kind="cost", scheme=name, native_ns_per_member_step=ns, xla_us_per_step=us))
        H.log(f"{name}: native {ns['exact']:.3g} ns (exact) vs {ns['cayley']:.3g} ns (Cayley) a member-step; "
              f"one trajectory under XLA {us['exact']:.3g} us vs {us['cayley']:.3g} us a step")
    loads["end"] = H.loadavg()
    doc = {"metadata": H.metadata("splitting_flows", "quick" if args.quick else "full", [], loads, ""),
           "inertia": INERTIA.tolist(), "M0": M0.tolist(), "t1": T1, "members": members, "rows": rows}
    H.write_json(args.out / ("splitting_flows_quick.json" if args.quick else "splitting_flows.json"), doc)


if __name__ == "__main__":
    main()
