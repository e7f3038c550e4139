"""A MEGNO chaos map of the heavy top, with the Lagrange top's integrable map beside it.

Left: the asymmetric heavy top (I = (1, 2, 3), χ = e₃, mgl = 1) on the level set of the energy
E = 1.5 and the Casimirs |Γ|² = 1, M·Γ = 0.3, started on its section Γ₁ = 0 crossed upwards:
each grid point (Γ₂, M₁) fixes the state (Γ₃ and M₂, M₃ solve |Γ| = 1, M·Γ = 0.3 and the energy,
the first of the four roots that crosses upwards; points with none are left blank). MEGNO's ⟨Y⟩
after T = 100 (GL4, dt = 0.02): near 2 on the tori (0 on a stable periodic orbit), growing like
λt/2 in the chaotic sea. Right: the Lagrange top (e(3)*, rest frame) under Suris' integrable
map, on a grid of (m₁, a₂) with the other entries fixed (|a| = 1): no ⟨Y⟩ grows.

    python examples/chaos_map.py [--n 200] [--t1 100] [--out chaos_map.png]
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import lpjax  # noqa: E402
from lpjax.systems import heavy_top, lagrange_top  # noqa: E402

INERTIA, MGL, C, ENERGY = np.array([1.0, 2.0, 3.0]), 1.0, 0.3, 1.5


def on_section(g2: float, m1: float):
    """The state with Γ₁ = 0, Γ₂ = g2, M₁ = m1 on the level set, crossing Γ₁ = 0 upwards (None
    where there is none)."""
    if abs(g2) >= 1:
        return None
    for g3 in (-np.sqrt(1 - g2 * g2), np.sqrt(1 - g2 * g2)):
        # M₃ = (C − M₂ g2)/g3; the energy is quadratic in M₂
        a = 0.5 / INERTIA[1] + 0.5 * (g2 / g3) ** 2 / INERTIA[2]
        b = -C * g2 / (g3 * g3 * INERTIA[2])
        c = 0.5 * m1 * m1 / INERTIA[0] + 0.5 * (C / g3) ** 2 / INERTIA[2] + MGL * g3 - ENERGY
        disc = b * b - 4 * a * c
        if disc < 0:
            continue
        for m2 in ((-b + np.sqrt(disc)) / (2 * a), (-b - np.sqrt(disc)) / (2 * a)):
            m3 = (C - m2 * g2) / g3
            if g2 * m3 / INERTIA[2] - g3 * m2 / INERTIA[1] > 0:  # Γ̇₁ > 0
                return np.array([m1, m2, m3, 0.0, g2, g3])
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="grid points a side")
    ap.add_argument("--t1", type=float, default=100.0)
    ap.add_argument("--out", default="chaos_map.png")
    args = ap.parse_args()
    n, dt = args.n, 0.02
    n_steps = int(round(args.t1 / dt))

    reach = np.sqrt(2 * INERTIA[0] * (ENERGY + MGL))  # the largest |M₁| the energy allows
    g2s, m1s = np.linspace(-1.0, 1.0, n), np.linspace(-reach, reach, n)
    states = [on_section(g2, m1) for m1 in m1s for g2 in g2s]
    found = np.array([s is not None for s in states])
    y0s = np.array([s for s in states if s is not None])
    top = heavy_top(jnp.asarray(INERTIA), jnp.array([0.0, 0.0, 1.0]), MGL)
    t = time.perf_counter()
    sol = lpjax.ensemble(top, lpjax.GaussLegendre(2), y0s, dt, n_steps, observe=lpjax.MEGNO(), kernel="native")
    wall = time.perf_counter() - t
    heavy = np.full(n * n, np.nan)
    heavy[found] = sol.observables["megno"][:, -1]
    c = np.stack([np.sum(y0s[:, 3:] ** 2, 1) - 1, np.sum(y0s[:, :3] * y0s[:, 3:], 1) - C,
                  np.asarray(jax.vmap(top.energy)(jnp.asarray(y0s))) - ENERGY])
    print(f"heavy top: {len(y0s)} members on the level set (|constraint| <= {np.max(np.abs(c)):.1e}), GL4 dt = {dt} to "
          f"t = {args.t1}: <Y> <= 2.5 on {np.mean(heavy[found] <= 2.5):.0%} in {wall:.1f} s; failed: {sol.failed.size}")

    lt = lagrange_top(3, 0.5, "rest", p=jnp.array([0.0, 0.2, 1.0]))
    m1, a2 = np.meshgrid(np.linspace(-1.5, 1.5, n), np.linspace(-0.9, 0.9, n))
    base = np.array([0.0, 0.3, 0.2, 0.3, 0.0, 0.0])
    ys = np.tile(base, (n * n, 1))
    ys[:, 0], ys[:, 4] = m1.ravel(), a2.ravel()
    ys[:, 5] = np.sqrt(1 - ys[:, 3] ** 2 - ys[:, 4] ** 2)  # |a| = 1
    t = time.perf_counter()
    lag = lpjax.ensemble(lt, lpjax.SurisLagrangeTop(), ys, 0.05, int(round(args.t1 / 0.05)), observe=lpjax.MEGNO(),
                         kernel="native")
    y_lag = lag.observables["megno"][:, -1]
    print(f"Lagrange top (Suris): {n * n} members, <Y> in [{y_lag.min():.2f}, {y_lag.max():.2f}], within 2 +- 0.5 "
          f"on {np.mean(np.abs(y_lag - 2) <= 0.5):.0%}, above 3 on none: {not np.any(y_lag > 3)}; "
          f"{time.perf_counter() - t:.1f} s")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), constrained_layout=True)
    style = dict(origin="lower", aspect="auto", cmap="magma", vmin=0.0, vmax=8.0)
    im = axes[0].imshow(heavy.reshape(n, n), extent=(g2s[0], g2s[-1], m1s[0], m1s[-1]), **style)
    axes[0].set(xlabel="Γ₂", ylabel="M₁", title=f"heavy top, E = {ENERGY}, M·Γ = {C}: MEGNO ⟨Y⟩ at t = {args.t1:g}")
    axes[1].imshow(y_lag.reshape(n, n), extent=(-1.5, 1.5, -0.9, 0.9), **style)
    axes[1].set(xlabel="m₁", ylabel="a₂", title="Lagrange top, Suris' integrable map: ⟨Y⟩ ≤ 3")
    fig.colorbar(im, ax=axes, label="⟨Y⟩ (2: torus; growing: chaos)", shrink=0.9)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
