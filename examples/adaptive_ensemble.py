"""An adaptive ensemble: heavy tops spinning at rates over two decades, each with its own steps.

Every member runs Gauss–Legendre (GL6) under its own PID controller, stepping exactly onto the
save times; the fixed-step ensemble beside it must take, for every member, the step its fastest
member needs. Prints the steps each member took, the time of both runs and the largest drift of
the Casimirs |Γ|² and M·Γ (which Gauss–Legendre keeps whatever the step sizes). The fixed
step here is the fastest member's smallest count, not a step of equal error:
``benchmarks/adaptive.py`` compares the two at equal worst-member error.

    python examples/adaptive_ensemble.py [--n 2000] [--t1 20] [--tol 1e-10]
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import lpjax  # noqa: E402
from lpjax.systems import heavy_top  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--t1", type=float, default=20.0)
    ap.add_argument("--tol", type=float, default=1e-10)
    args = ap.parse_args()

    top = heavy_top(jnp.array([1.0, 1.0, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
    rng = np.random.default_rng(0)
    size = np.exp(rng.uniform(np.log(0.1), np.log(10.0), args.n))  # |M| log-uniform over [0.1, 10]
    M, G = rng.normal(size=(args.n, 3)), rng.normal(size=(args.n, 3))
    y0s = np.concatenate([M * (size / np.linalg.norm(M, axis=1))[:, None], G / np.linalg.norm(G, axis=1)[:, None]], 1)

    ts = np.linspace(0.0, args.t1, 5)[1:]
    controller = lpjax.PIDController(rtol=args.tol, atol=args.tol)
    run = lambda: lpjax.ensemble(top, lpjax.GaussLegendre(3), y0s, None, t1=args.t1, ts=ts,  # noqa: E731
                                 controller=controller, observe="casimirs")
    run()  # compiles
    t = time.perf_counter()
    sol = run()
    adaptive_s = time.perf_counter() - t
    steps = np.asarray(sol.stats["num_accepted_steps"])
    rejected = np.asarray(sol.stats["num_rejected_steps"])
    print(f"{args.n} heavy tops, |M| in [0.1, 10], GL6 to t = {args.t1} at rtol = atol = {args.tol:g} "
          f"({sol.settings['kernel']} kernel)")
    print(f"  accepted steps per member: min {steps.min()}, median {int(np.median(steps))}, max {steps.max()}; "
          f"rejected: {rejected.sum()} in all; failed members: {sol.failed.size}")
    c = np.asarray(sol.observables["casimirs"])
    print(f"  largest Casimir drift: {np.max(np.abs(c - c[:, :1])):.1e}")

    n_fixed = int(steps.max())  # the fastest member's count, for everyone
    fixed = lambda: lpjax.ensemble(top, lpjax.GaussLegendre(3), y0s, args.t1 / n_fixed, n_fixed)  # noqa: E731
    fixed()
    t = time.perf_counter()
    fixed()
    fixed_s = time.perf_counter() - t
    print(f"  adaptive: {adaptive_s:.2f} s; fixed steps of t1/{n_fixed} for every member: {fixed_s:.2f} s")


if __name__ == "__main__":
    main()
