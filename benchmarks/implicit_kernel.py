"""The implicit kernel against optimistix: GL4 stage equations on the rigid body.

    python benchmarks/implicit_kernel.py [--quick] [--out benchmarks/results/]

The same Gauss–Legendre step (s = 2, the stage residual of ``lpjax.GaussLegendre``), with its
stage equations solved three ways, on one trajectory of the Euler top (I = (1, 2, 3),
M0 = (1, 0.5, 0.8), dt = 0.01, 10⁴ steps), each inside one jitted ``lax.scan``:

* lpjax's kernel (``lpjax/_integrator/_implicit.py``): simplified Newton with a frozen
  Jacobian inverted once per step (``solver="newton"``), and the default fixed-point
  iteration, both from the stage predictor and stopping at roundoff (``early_exit``),
  ``custom_root`` for gradients;
* ``optimistix.root_find`` with ``optimistix.Newton`` (lineax LU each iteration) and with
  ``optimistix.Chord`` (frozen Jacobian), ``rtol = atol = 1e-13``, ``max_steps = 6``: a
  ``while_loop`` that stops when converged.

Time: the second call after ``block_until_ready`` (median and best of several), compile time
apart, as a ratio to lpjax's kernel in the same run. The end states are compared too.
"""

from __future__ import annotations

import _harness as H
import jax
import jax.numpy as jnp
import optimistix as optx

import lpjax
from lpjax._integrator.gauss_legendre import _combine, _stage_fields, _stage_residual
from lpjax.systems import rigid_body

SYSTEM = rigid_body(jnp.array([1.0, 2.0, 3.0]))
M0 = jnp.array([1.0, 0.5, 0.8])
DT = 0.01
GL4 = lpjax.GaussLegendre(2, solver="newton")


def _optx_run(solver, n: int):
    A, b, c = GL4.tableau

    def step(y, _):
        Z0 = DT * jnp.asarray(c)[:, None] * SYSTEM.vector_field(y)[None, :]
        sol = optx.root_find(lambda Z, _: _stage_residual(Z, (SYSTEM, y, DT, A)), solver, Z0,
                             max_steps=6, throw=False)
        return y + DT * _combine(b, _stage_fields(SYSTEM.vector_field, y, sol.value))[0], None

    return jax.jit(lambda y0: jax.lax.scan(step, y0, None, length=n)[0])


def _lpjax_run(n: int, method=GL4):
    return jax.jit(lambda y0: lpjax.integrate(SYSTEM, method, y0, DT, n, save_every=n).ys[-1])


def main() -> None:
    args = H.arg_parser(__doc__, "1000 steps instead of 10⁴").parse_args()
    H.start()
    n = 1000 if args.quick else 10_000
    runs = [("lpjax kernel, simplified Newton", _lpjax_run(n)),
            ("lpjax kernel, fixed point (default)", _lpjax_run(n, lpjax.GaussLegendre(2))),
            ("optimistix Newton + lineax", _optx_run(optx.Newton(rtol=1e-13, atol=1e-13), n)),
            ("optimistix Chord + lineax", _optx_run(optx.Chord(rtol=1e-13, atol=1e-13), n))]
    rows, ref = [], None
    for name, fn in runs:
        y, stats = H.time_calls(lambda fn=fn: jax.block_until_ready(fn(M0)), budget_s=2.0)
        ref = y if ref is None else ref
        rows.append({"solver": name, **stats, "max_diff_to_lpjax": float(jnp.max(jnp.abs(y - ref)))})
    for r in rows:
        r["ratio"] = r["time_s"] / rows[0]["time_s"]
    print(f"GL4 stage solves, rigid body, {n} steps of {DT}, {H.machine_line()}")
    H.print_table([("solver", -42, "solver"), ("time", 10, "time_s:.4f"), ("ratio", 8, "ratio:.2f"),
                   ("first call", 12, "first_call_s:.2f"), ("|Δy| vs lpjax", 15, "max_diff_to_lpjax:.1e")], rows)
    H.write_json(args.out / "implicit_kernel.json",
                 {"metadata": H.metadata("implicit_kernel", "quick" if args.quick else "full", [optx], {}, ""),
                  "steps": n, "dt": DT, "rows": rows})


if __name__ == "__main__":
    main()
