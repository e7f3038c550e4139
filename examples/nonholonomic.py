"""Nonholonomic rigid bodies (seed 001): Veselova's problem and the rubber Chaplygin sphere.

    python examples/nonholonomic.py [--steps 10000] [--dt 0.1] [--out examples/output/nonholonomic.png]

Prints the invariant-measure check div(ρf) at random points of the invariant manifold and the
drift of the constraint (ω, γ) = 0 under GL4 and RK4 over the run. It plots γ(t) of the rubber
sphere next to Veselova's problem with inertia I + D (the same trajectory), and the
constraint drift of both methods.
"""

from __future__ import annotations

import argparse
import os

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import lpjax  # noqa: E402
from lpjax.diagnostics import divergence_defect  # noqa: E402
from lpjax.systems import rubber_chaplygin_sphere, veselova  # noqa: E402

I, D = np.array([1.0, 2.0, 3.0]), 0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--dt", type=float, default=0.1)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "output", "nonholonomic.png"))
    args = ap.parse_args()

    ves = veselova(I)
    rng = np.random.default_rng(0)
    g = rng.normal(size=(200, 3))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    xs = jax.vmap(ves.from_velocity)(jnp.asarray(rng.normal(size=(200, 3))), jnp.asarray(g))
    div = jax.jit(jax.vmap(lambda x: divergence_defect(ves, x)))(xs)
    print(f"Veselova: max div(rho f) / (|rho| |df|) at 200 points on the constraint: {float(jnp.max(div)):.1e}")

    x0 = ves.default_state().at[:3].multiply(0.5)
    every = max(1, args.steps // 500)
    runs = {name: lpjax.integrate(ves, m, x0, args.dt, args.steps, save_every=every)
            for name, m in [("GL4", lpjax.GaussLegendre(2)), ("RK4", lpjax.RK4())]}
    drift = {name: np.abs(np.asarray(jax.vmap(ves.constraint)(s.ys)))[:, 0] for name, s in runs.items()}
    for name, d in drift.items():
        print(f"{name}: max |(omega, gamma)| over t <= {args.steps * args.dt:g}: {d.max():.1e}")

    rubber = rubber_chaplygin_sphere(I, D)
    r0 = rubber.default_state()
    n_short = int(round(50 / args.dt))
    a = lpjax.integrate(rubber, lpjax.GaussLegendre(3), r0, args.dt / 4, 4 * n_short, save_every=4)
    b = lpjax.integrate(veselova(I + D), lpjax.GaussLegendre(3), r0, args.dt / 4, 4 * n_short, save_every=4)
    print(f"rubber sphere vs Veselova(I + D), t <= 50: max difference {float(jnp.max(jnp.abs(a.ys - b.ys))):.1e}")

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for k, c in enumerate("rgb"):
        ax1.plot(a.ts, a.ys[:, 3 + k], c, lw=1, label=f"rubber sphere γ{k + 1}")
        ax1.plot(b.ts[::10], b.ys[::10, 3 + k], c + "o", ms=2, label=f"Veselova(I + D) γ{k + 1}")
    ax1.set(xlabel="t", title="the rubber sphere is Veselova with inertia I + D")
    ax1.legend(fontsize=6)
    for name, d in drift.items():
        ax2.semilogy(runs[name].ts, np.maximum(d, 1e-17), label=name)
    ax2.set(xlabel="t", ylabel="|(ω, γ)|", title=f"constraint drift, Veselova, h = {args.dt}")
    ax2.legend()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
