"""The basin of the upright top on a movable base: which gains ρ keep it up (seed 002).

The controlled-Lagrangian (kinetic shaping) control of the heavy top on a movable base makes the
upright equilibrium linearly stable exactly for 0 < ρ < ρc = m²l²/I₁ (seed 002 claims 0.9 ρc
stabilises; ``lpjax.systems.movable_base_top`` documents the linearisation). For each gain of a
sweep, an ensemble of tops started near upright (a tilt up to 5°, spin up to 0.5 rad/s, the base
at rest) runs with a terminal event on the tilt: Γ₃ = cos 30° downwards, the top has fallen. The
fraction that fell, against ρ / ρc, with ρc marked (each member's fall located by GL4's own
partial step).

    python examples/upright_top_basin.py [--n 512] [--t1 10] [--out basin.png]
"""

from __future__ import annotations

import argparse
import math
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import lpjax  # noqa: E402
from lpjax.systems import movable_base_mu, movable_base_rho_c, movable_base_top  # noqa: E402

FELL = lpjax.Event(lambda t, y: y[8] - math.cos(math.radians(30.0)), direction=-1)  # Γ₃ below cos 30°


def near_upright(system, n: int, rng) -> np.ndarray:
    tilt, azimuth = np.radians(5.0) * np.sqrt(rng.random(n)), 2 * np.pi * rng.random(n)
    gammas = np.stack([np.sin(tilt) * np.cos(azimuth), np.sin(tilt) * np.sin(azimuth), np.cos(tilt)], 1)
    omegas = 0.5 * rng.uniform(-1, 1, size=(n, 3))
    return np.stack([np.asarray(movable_base_mu(system, jnp.asarray(o), jnp.zeros(3), jnp.asarray(g)))
                     for o, g in zip(omegas, gammas)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--t1", type=float, default=10.0)
    ap.add_argument("--out", default="basin.png")
    args = ap.parse_args()

    rho_c = float(movable_base_rho_c())
    ratios = np.array([0.2, 0.4, 0.6, 0.8, 0.9, 0.95, 0.99, 1.01, 1.05, 1.2, 1.5, 2.0, 4.0])
    dt, method = 0.005, lpjax.GaussLegendre(2)
    n_steps = int(round(args.t1 / dt))
    y0s = near_upright(movable_base_top(), args.n, np.random.default_rng(0))  # μ₀ does not depend on ρ
    fell, t = [], time.perf_counter()
    for r in ratios:
        sol = lpjax.ensemble(movable_base_top(r * rho_c), method, y0s, dt, n_steps, events=FELL, progress=False)
        down = np.asarray(sol.result) == sol.result_names.index("event_occurred")
        fell.append(down.mean())
        when = f", median fall at t = {np.median(sol.stats['t_final'][down]):.2f}" if down.any() else ""
        print(f"rho = {r:4.2f} rho_c: {100 * down.mean():5.1f}% fell{when}; failed: {sol.failed.size}")
    print(f"{len(ratios)} gains x {args.n} tops x {n_steps} steps in {time.perf_counter() - t:.1f} s")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.semilogx(ratios, fell, "o-", color="k")
    ax.set_xticks([0.2, 0.5, 1.0, 2.0, 4.0], ["0.2", "0.5", "1", "2", "4"])
    ax.minorticks_off()
    ax.axvline(1.0, color="C3", ls="--", label=f"ρc = m²l²/I₁ = {rho_c:.4f}")
    ax.axvline(0.9, color="C0", ls=":", label="seed 002's gain, 0.9 ρc")
    ax.set_xlabel("ρ / ρc")
    ax.set_ylabel(f"fraction fallen by t = {args.t1:g}")
    ax.set_title("upright top on a movable base, tilt ≤ 5°, |Ω| ≤ 0.5")
    ax.legend(loc="center left")
    fig.tight_layout()
    fig.savefig(args.out, dpi=130)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
