"""References for the tests: the closed-form Euler top (public as :mod:`lpjax.exact`, re-exported
here), and the states of a method at one time for several step sizes from one compiled run."""

import jax
import numpy as np

import lpjax
from lpjax.exact import (
    euler_top_energy_casimir as euler_top_energy_casimir,
    euler_top_exact as euler_top_exact,
    euler_top_period as euler_top_period,
)

__all__ = ["euler_top_exact", "euler_top_period", "euler_top_energy_casimir", "states_at"]


def states_at(system, method, y0, dts, T: float, out=lambda sol: sol.ys) -> list:
    """``out(sol)`` at t = ``T`` for each step size in ``dts``, from one compiled program called
    with each ``dt`` (an order test otherwise compiles one program per step count). Every run
    takes ``T / min(dts)`` steps, saved every ``T / max(dts)`` steps, so that t = T is save
    ``T / (dt · save_every)``; the larger steps run on past T. Each dt must divide T and the
    largest dt."""
    dts = np.asarray(dts, dtype=float)
    steps = np.rint(T / dts).astype(int)
    every = int(steps.min())
    if not np.allclose(steps * dts, T, rtol=1e-12) or np.any(steps % every):
        raise ValueError(f"states_at: each dt must divide T = {T} and the largest dt, got {dts}")
    run = jax.jit(lambda dt: out(lpjax.integrate(system, method, y0, dt, int(steps.max()), save_every=every,
                                                 throw=False)))
    return [jax.tree.map(lambda a, i=k // every: np.asarray(a[i]), run(dt)) for dt, k in zip(dts, steps)]
