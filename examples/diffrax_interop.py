"""The heavy top both ways: lp.integrate, and diffrax.diffeqsolve with lpjax's solvers.

    python examples/diffrax_interop.py

A diffrax script switches from Tsit5 to lpjax.diffrax.GaussLegendre(2) by changing the
solver (with constant steps it takes lp.integrate's steps and computes no error estimate); the Casimirs |Γ|² and M·Γ then stay at roundoff over the run, where Tsit5 drifts.
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

import diffrax as dfx  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import lpjax  # noqa: E402
import lpjax.diffrax as ldx  # noqa: E402
from lpjax.systems import heavy_top  # noqa: E402


def main() -> None:
    top = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
    y0 = jnp.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386])
    n, dt = 20_000, 0.01
    term = dfx.ODETerm(lambda t, y, args: top.vector_field(y))
    saveat = dfx.SaveAt(t0=True, steps=True)

    def casimir_drift(ys):
        ys = ys[jnp.all(jnp.isfinite(ys), axis=1)]
        return float(jnp.max(jnp.abs(jax.vmap(top.casimirs)(ys) - top.casimirs(y0)[None])))

    runs = {
        "lp.integrate, GL4": lpjax.integrate(top, lpjax.GaussLegendre(2), y0, dt, n).ys,
        "diffeqsolve, lpjax.diffrax.GaussLegendre(2)": dfx.diffeqsolve(
            term, ldx.GaussLegendre(2), 0.0, n * dt, dt, y0, saveat=saveat, max_steps=n).ys,
        "diffeqsolve, Tsit5 (same steps)": dfx.diffeqsolve(
            term, dfx.Tsit5(), 0.0, n * dt, dt, y0, saveat=saveat, max_steps=n).ys,
        "diffeqsolve, LiePoissonTerm + Collective": dfx.diffeqsolve(
            ldx.LiePoissonTerm(top), ldx.Collective(), 0.0, n * dt, dt, y0, saveat=saveat, max_steps=n).ys,
    }
    for name, ys in runs.items():
        print(f"{name:45s} max Casimir drift over t <= {n * dt:g}: {casimir_drift(ys):.1e}")


if __name__ == "__main__":
    main()
