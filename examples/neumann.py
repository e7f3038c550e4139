"""The Neumann system on S² as the smallest leaf of the Clebsch flow, with Adler's map (seed 000, sec. 7).

    python examples/neumann.py [--dt 0.05] [--steps 4000] [--out examples/output/neumann.png]

State (M, P) on e(3)* with P = x, M = x ∧ p (lpjax.systems.neumann); flow (7.12),
Hamiltonian (7.13) H = ½|p|² − ½<x, Bx> on the leaf, i.e. ẋ = p, ṗ = Bx − (|p|² + <x, Bx>) x.
Compared at the same step: Suris' map (7.17) (= Adler's discretization on this leaf),
Gauss–Legendre (2 stages) and RK4 on e(3)*, and RK4 on the same equations written in
Cartesian coordinates (x, p) ∈ R⁶. Plotted against time: |x|² − 1, <x, p> (identically 0
in e(3)* coordinates, where p = −Mx/|x|²), the leaf defect (identically 0 for Cartesian
states, where M = x ∧ p), the energy error and the largest error of Uhlenbeck's integrals
F_k = x_k² − Σ_{j≠k} (x_j p_k − x_k p_j)² / (b_k − b_j); and the path of x on the sphere.
H and F_k = P_k² − Σ_{j≠k} M_jk² / (b_k − b_j) are quadratic in (M, P), so Gauss–Legendre keeps
them to roundoff; Adler's map keeps the leaf and |x|² to roundoff but H and F_k only to O(dt).
"""

from __future__ import annotations

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import lpjax  # noqa: E402
from lpjax.systems import neumann, neumann_coordinates, neumann_state  # noqa: E402


class NeumannCartesian(lpjax.AbstractSystem):
    """ẋ = p, ṗ = Bx − (|p|² + <x, Bx>) x on R^{2n}, y = (x, p); the sphere is not built in."""

    B: jax.Array

    def vector_field(self, y):
        n = self.B.shape[0]
        x, p = y[:n], y[n:]
        return jnp.concatenate([p, self.B * x - (p @ p + x @ (self.B * x)) * x])

    def energy(self, y):
        n = self.B.shape[0]
        x, p = y[:n], y[n:]
        return 0.5 * (p @ p) - 0.5 * x @ (self.B * x)

    def check_state(self, y):
        if jnp.shape(y) != (2 * self.B.shape[0],):
            raise ValueError(f"state must have shape ({2 * self.B.shape[0]},), got {jnp.shape(y)}")

    def casimirs(self, y):
        return jnp.zeros((0,), jnp.asarray(y).dtype)


def uhlenbeck(B, x, p):
    """F_k = x_k² − Σ_{j≠k} (x_j p_k − x_k p_j)² / (b_k − b_j), for x, p of shape (T, n)."""
    L = x[:, :, None] * p[:, None, :] - p[:, :, None] * x[:, None, :]
    diff = B[None, :] - B[:, None]  # b_k − b_j at [j, k]
    np.fill_diagonal(diff, np.inf)
    return x**2 - np.sum(L**2 / diff, axis=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dt", type=float, default=0.05)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--out", default=os.path.join("examples", "output", "neumann.png"))
    args = ap.parse_args()

    B = np.array([-0.5, 0.3, 1.2])
    system = neumann(B)
    x0 = np.array([0.6, -0.3, 0.5])
    x0 /= np.linalg.norm(x0)
    p0 = np.array([0.2, 0.9, -0.4])
    p0 -= (x0 @ p0) * x0
    y0 = neumann_state(x0, p0)
    n = B.size
    save_every = max(1, args.steps // 1000)
    n_steps = args.steps - args.steps % save_every
    energy = jax.jit(lambda ys: jax.vmap(system.energy)(ys))

    runs = [
        ("Adler / Suris (7.17)", system, lpjax.SurisClebsch(), y0),
        ("Gauss–Legendre 2", system, lpjax.GaussLegendre(2), y0),
        ("RK4 on e(3)*", system, lpjax.RK4(), y0),
        ("RK4 Cartesian", NeumannCartesian(jnp.asarray(B)), lpjax.RK4(), jnp.concatenate([x0, p0])),
    ]
    fig = plt.figure(figsize=(16, 8.5))
    axes = [fig.add_subplot(2, 3, i + 1) for i in range(5)]
    ax3 = fig.add_subplot(2, 3, 6, projection="3d")
    titles = ["| |x|² − 1 |", "|<x, p>|", "leaf defect (relative 3-form)", "|H − H(0)|", "max_k |F_k − F_k(0)|"]
    E0 = float(system.energy(y0))
    F0 = uhlenbeck(B, x0[None], p0[None])[0]
    rows = []
    for name, sys_, method, y_init in runs:
        t0 = time.perf_counter()
        sol = lpjax.integrate(sys_, method, y_init, args.dt, n_steps, save_every=save_every)
        ys = np.asarray(sol.ys)
        seconds = time.perf_counter() - t0
        ts = np.asarray(sol.ts)
        if isinstance(sys_, NeumannCartesian):
            x, p = ys[:, :n], ys[:, n:]
            M = x[:, :, None] * p[:, None, :] - p[:, :, None] * x[:, None, :]
            y_leaf = np.concatenate([M[(slice(None), *np.triu_indices(n, 1))], x], axis=1)  # (x ∧ p, x)
        else:
            x, p = (np.asarray(a) for a in neumann_coordinates(ys, check=False))
            y_leaf = ys
        errs = [
            np.abs(np.sum(x * x, axis=1) - 1.0),
            np.abs(np.sum(x * p, axis=1)),
            np.asarray(system.leaf_defect(y_leaf)),
            np.abs(np.asarray(energy(jnp.asarray(y_leaf))) - E0),
            np.max(np.abs(uhlenbeck(B, x, p) - F0), axis=1),
        ]
        for ax, e, title in zip(axes, errs, titles):
            ax.semilogy(ts[1:], np.maximum(e[1:], 1e-17), label=name)
            ax.set_title(title)
        if name.startswith("Adler"):
            ax3.plot(*x.T, lw=0.4)
        rows.append((name, [e.max() for e in errs], seconds))
    for ax in axes:
        ax.set_xlabel("t")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    u, v = np.mgrid[0 : 2 * np.pi : 40j, 0 : np.pi : 20j]
    ax3.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.85", lw=0.3)
    ax3.set_title("x(t) on the sphere, Adler's map")
    fig.suptitle(f"Neumann system on S², B = diag{tuple(B.tolist())}, dt = {args.dt}, T = {n_steps * args.dt:g}")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, args.out)

    head = ["||x|²−1|", "|<x,p>|", "leaf def.", "|ΔH|", "max|ΔF_k|"]
    print(f"max errors over t ∈ [0, {n_steps * args.dt:g}], dt = {args.dt}")
    print(f"{'method':22s} " + " ".join(f"{h:>10s}" for h in head) + f" {'time/s':>7s}")
    for name, vals, seconds in rows:
        print(f"{name:22s} " + " ".join(f"{v:10.2e}" for v in vals) + f" {seconds:7.1f}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
