""":func:`lpjax.integrate` for a stochastic Lie–Poisson system: fixed steps, each with its Wiener
increments, drawn from a counter-based key or read from a Brownian path.

* ``key=``: the increments of step ``n`` are ``√dt z``, ``z`` standard normals from the
  Threefry block of the key at the counter ``n`` (:mod:`lpjax._noise`): any step's increments
  are known without the others, and member ``j`` of an ensemble run with ``key`` is this run
  with ``jax.random.fold_in(key, j)``.
* ``brownian=``: any diffrax ``AbstractBrownianPath`` (such as ``VirtualBrownianTree``) of shape
  ``(m,)``: the increments are ``W((n + 1)dt) − W(n dt)``, so that one path can be run at several
  step sizes (convergence studies).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from ._checks import as_numbers, cast_floats, error_if, run_dtype
from ._integrator import RESULTS
from ._member import Carry
from ._noise import increments, key_words
from ._schedule import fixed_schedule
from ._solution import Solution

__all__ = ["integrate_sde"]


def integrate_sde(system, method, y0, dt, n_steps, save_every, throw: bool, dtype, brownian, key, adjoint: str,
                  extras: dict):
    """The stochastic branch of :func:`lpjax.integrate` (see there, and the module); ``extras``:
    the options it refuses, by name."""
    given = [name for name, v in extras.items() if v is not None]
    if given or adjoint != "auto" or isinstance(y0, Solution):
        given += (["adjoint"] if adjoint != "auto" else []) + (["a Solution as y0"] if isinstance(y0, Solution) else [])
        raise ValueError(f"integrate: a stochastic run has fixed steps from t = 0 and JAX's own gradients; it takes no "
                         f"{', '.join(given)}")
    if not isinstance(y0, jax.Array):
        y0 = as_numbers(y0, "integrate: y0")
    rdtype = run_dtype(dtype, y0, "integrate")
    y0 = jnp.asarray(y0, rdtype)
    system, method = cast_floats((system, method), rdtype)
    save_every = 1 if save_every is None else save_every
    fixed_schedule(dt, n_steps, save_every, "integrate")
    method.check_system(system)
    system.check_state(y0)
    m = system.n_noise
    if brownian is not None:
        shape = jax.eval_shape(lambda: brownian.evaluate(0.0, dt))
        if shape.shape != (m,):
            raise ValueError(f"integrate: the Brownian path's increments have shape {shape.shape}, the system's {m} noise "
                             f"fields need ({m},)")
        source: Any = brownian
    else:
        source = key_words(key)
    ys, carry = _run(system, method, y0, jnp.asarray(dt, rdtype), source, int(n_steps), int(save_every))
    n = int(n_steps)
    stats = {"max_residual": carry.max_residual, "max_iterations": carry.max_iterations,
             "mean_iterations": carry.total_iterations.astype(rdtype) / n, "num_failed_steps": carry.num_failed,
             "num_steps": jnp.asarray(n, carry.num_failed.dtype)}
    ts = jnp.asarray(dt, rdtype) * save_every * jnp.arange(n // int(save_every) + 1, dtype=rdtype)
    if throw:
        ys = carry.result.error_if(ys, carry.result != RESULTS.successful)
    return Solution(ts=ts, ys=ys, result=carry.result, stats=stats, state=carry.state)


@eqx.filter_jit
def _run(system, method, y0, dt, source, n_steps: int, save_every: int):
    y0 = error_if(y0, ~jnp.all(jnp.isfinite(y0)), "integrate: y0 must be finite; it contains NaN or inf")
    dt = error_if(dt, ~(jnp.isfinite(dt) & (dt > 0)), "integrate: dt must be finite and > 0")
    m = system.n_noise

    def dW(n):
        if isinstance(source, jax.Array):
            return increments(source, n, dt, m, y0.dtype)
        t = n.astype(y0.dtype) * dt
        return jnp.asarray(source.evaluate(t, t + dt), y0.dtype)

    def step(carry, n):
        state, result, info = method.step(system, carry.state, dt, dW(n))
        return carry.update(state, result, info), None

    def save(carry, k):
        carry, _ = jax.lax.scan(step, carry, k * save_every + jnp.arange(save_every))
        return carry, method.observe(system, carry.state)

    carry0 = Carry.start(method.init(system, y0, dt), y0.dtype)
    carry, ys = jax.lax.scan(save, carry0, jnp.arange(n_steps // save_every))
    return jnp.concatenate([y0[None], ys]), carry

