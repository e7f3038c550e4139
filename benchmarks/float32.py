"""Float32 error floors over long runs, and what Gauss–Legendre's compensated update buys.

    python benchmarks/float32.py [--quick] [--out benchmarks/results/]

64 members (random states, ``numpy.random.default_rng(SEED)``) run ``lpjax.ensemble`` with
``dtype=float32`` for 10⁶ steps of dt = 0.01 (``--quick``: 10⁵), saving the Casimirs and the
energy every 10⁴ steps. Rows: the largest relative drift over the members of the Casimir and of
the energy at 10⁴, 10⁵ and 10⁶ steps (relative to the largest initial value over the members),
and the throughput (body-steps/s, one timed run after a
compiling one) of

* GL4 on the rigid body with the compensated (Kahan) update (the default) and without it;
* RK4 on the rigid body;
* Moser–Veselov on the rigid body;
* the Suris rest-frame map on the Lagrange top (Casimir ``|a|²``; energy: the map's own
  integral (6.6), which it keeps exactly in exact arithmetic).

The device is whatever JAX runs on (``jax_backend`` in the JSON).
"""

from __future__ import annotations

import time

import _harness as H
import jax.numpy as jnp
import numpy as np

import lpjax
from lpjax.systems import lagrange_top, rigid_body

SEED = 2026
MEMBERS = 64
DT = 0.01
EVERY = 10_000


def _cases():
    """``(name, system, method, kind, observe)``; the system is cast to float32 for the steps by
    ``ensemble(dtype=float32)``, the observables are computed in float64 from the float32 states."""
    rb = rigid_body(jnp.array([1.0, 2.0, 3.0]))
    top = lagrange_top(3, frame="rest")
    suris = lpjax.SurisLagrangeTop()

    def rb_observe(y):
        y = y.astype(jnp.float64)
        return {"casimir": rb.casimirs(y), "energy": rb.energy(y)}

    def top_observe(y):
        y = y.astype(jnp.float64)
        return {"casimir": jnp.sum(y[3:] ** 2), "energy": suris.integral(top, y, jnp.float64(DT))}

    return [
        ("GL4, compensated", rb, lpjax.GaussLegendre(2), "rb", rb_observe),
        ("GL4, plain update", rb, lpjax.GaussLegendre(2, compensated=False), "rb", rb_observe),
        ("RK4", rb, lpjax.RK4(), "rb", rb_observe),
        ("Moser-Veselov", rb, lpjax.MoserVeselov(), "rb", rb_observe),
        ("Suris, Lagrange top", top, suris, "top", top_observe),
    ]


def _states(kind: str) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    if kind == "rb":
        return rng.normal(size=(MEMBERS, 3))
    m, a = 0.3 * rng.normal(size=(MEMBERS, 3)), rng.normal(size=(MEMBERS, 3))
    return np.concatenate([m, a / np.linalg.norm(a, axis=1, keepdims=True)], axis=1)


def _drift(series: np.ndarray) -> np.ndarray:
    """Largest drift over the members at each save, relative to the largest initial value over
    the members (a member's own value can be near zero: the Lagrange top's energy): ``(saves,)``."""
    series = np.asarray(series, np.float64).reshape(series.shape[0], series.shape[1], -1)
    return np.max(np.abs(series - series[:, :1]) / np.max(np.abs(series[:, :1]), axis=0), axis=(0, 2))


def main() -> None:
    args = H.arg_parser(__doc__, "10⁵ steps").parse_args()
    H.start()
    n = 100_000 if args.quick else 1_000_000
    rows = []
    for name, system, method, kind, observe in _cases():
        y0s = _states(kind)
        kw = dict(save_every=EVERY, observe=observe, dtype=np.float32)
        lpjax.ensemble(system, method, y0s, DT, 2 * EVERY, **kw)  # compiles (the same block program)
        t = time.perf_counter()
        sol = lpjax.ensemble(system, method, y0s, DT, n, **kw)
        wall = time.perf_counter() - t
        rows.append(dict(case=name, steps=n, members=MEMBERS, throughput=MEMBERS * n / wall, failed=int(sol.failed.size),
                         casimir_drift=_drift(sol.observables["casimir"]).tolist(),
                         energy_drift=_drift(sol.observables["energy"]).tolist()))
        H.log(f"{name}: drift at the end {rows[-1]['casimir_drift'][-1]:.2e} (Casimir), "
              f"{rows[-1]['energy_drift'][-1]:.2e} (energy), {rows[-1]['throughput']:.3e} body-steps/s")
    at = [k for k in (1, 10, 100) if k * EVERY <= n]
    print(f"\nFloat32 drift, {MEMBERS} members, dt = {DT}, {H.machine_line().replace('float64', 'float32')}")
    H.print_table([("case", -22, "case")]
                  + [(f"C @ {k * EVERY:.0e}", 11, (lambda k: lambda r: f"{r['casimir_drift'][k]:.1e}")(k)) for k in at]
                  + [(f"H @ {k * EVERY:.0e}", 11, (lambda k: lambda r: f"{r['energy_drift'][k]:.1e}")(k)) for k in at]
                  + [("body-steps/s", 13, lambda r: f"{r['throughput']:.3e}")], rows)
    args.out.mkdir(parents=True, exist_ok=True)
    H.write_json(args.out / "float32.json", {"metadata": H.metadata("float32", "quick" if args.quick else "full", [],
                                                                    {}, ""), "rows": rows})


if __name__ == "__main__":
    main()
