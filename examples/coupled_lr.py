"""Seed 001, Theorem 3.3: a ball on two balls (the spherical support), unreduced, is an L+R system.

The body ``g_0 ∈ SO(3)`` touches two balls with fixed centres, one rubber (no slip, no twist),
one marble (no slip): ``coupled_lr`` integrates the whole system on SO(3)³ with the reactions of
the constraints, ``reduce`` maps it to ``(k, γ_1, γ_2)``, and that is the trajectory of
``spherical_support`` (``lplusr`` with D_i = I_i/r_i², T_i = I_i or 0). Prints the largest
difference, the constraint residual and the drift of the Noether law (3.19).

    python examples/coupled_lr.py [--t1 20] [--dt 0.01]
"""

from __future__ import annotations

import argparse

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import lpjax  # noqa: E402
from lpjax.systems import coupled_lr  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--t1", type=float, default=20.0)
    parser.add_argument("--dt", type=float, default=0.01)
    args = parser.parse_args()
    balls = np.array([[0.3, 0.5], [0.5, 0.8]])  # (inertia I_i, radius r_i)
    contacts = np.array([[0.0, 0.0, 1.0], [0.6, 0.0, 0.8]])
    system = coupled_lr(jnp.array([1.0, 1.4, 2.1]), contacts, balls[:, 0], balls[:, 1], b=jnp.array([1.0, jnp.inf]))
    x0 = system.state(jnp.array([0.7, -0.4, 1.1]))
    steps = round(args.t1 / args.dt)
    sol = lpjax.integrate(system, lpjax.GaussLegendre(3), x0, args.dt, steps, save_every=max(1, steps // 100))
    reduced = system.reduce(sol.ys)
    ref = lpjax.integrate(system.reduced, lpjax.GaussLegendre(3), reduced[0], args.dt, steps,
                          save_every=max(1, steps // 100)).ys
    spatial = jnp.stack([system.spatial_momentum(y) for y in sol.ys])
    print(f"reduced coupled trajectory - lplusr trajectory: {float(jnp.max(jnp.abs(reduced - ref))):.2e}")
    print(f"largest constraint residual:                    "
          f"{max(float(jnp.max(jnp.abs(system.constraints(y)))) for y in sol.ys):.2e}")
    print(f"drift of the spatial momentum (3.19):           {float(jnp.max(jnp.abs(spatial - spatial[:1]))):.2e}")
    print(f"D = {np.asarray(system.reduced.D)}, T = {np.asarray(system.reduced.T)}")


if __name__ == "__main__":
    main()
