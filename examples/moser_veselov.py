"""Moser–Veselov discrete rigid body on so(4)*: invariants against time, next to RK4.

    python examples/moser_veselov.py [--dt 0.1] [--steps 20000] [--out examples/output/moser_veselov.png]
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
from lpjax.diagnostics import relative_invariant_error  # noqa: E402
from lpjax.systems import rigid_body_n  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dt", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--out", default=os.path.join("examples", "output", "moser_veselov.png"))
    args = ap.parse_args()

    system = rigid_body_n(jnp.array([0.5, 1.0, 1.5, 2.0]))
    y0 = jnp.array([1.0, 0.3, -0.5, 0.2, 0.8, -0.4])
    save_every = max(1, args.steps // 1000)
    n_steps = args.steps - args.steps % save_every
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), sharex=True)
    labels = ("energy", "tr(M²)", "tr(M⁴)")
    for name, method in [("Moser–Veselov", lpjax.MoserVeselov()), ("RK4", lpjax.RK4())]:
        sol = lpjax.integrate(system, method, y0, args.dt, n_steps, save_every=save_every)
        errs = [np.asarray(relative_invariant_error(system.energy, sol.ys))]
        errs += list(np.asarray(relative_invariant_error(system.casimirs, sol.ys)).T)
        for ax, e, lab in zip(axes, errs, labels):
            ax.semilogy(sol.ts[1:], np.maximum(e[1:], 1e-17), label=name)
            ax.set_title(f"relative error of {lab}")
        print(f"{name:14s} max rel. error: " + ", ".join(f"{lab} {e.max():.2e}" for lab, e in zip(labels, errs)))
    for ax in axes:
        ax.set_xlabel("t")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"Free rigid body on so(4)*, J = (0.5, 1, 1.5, 2), dt = {args.dt}")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
