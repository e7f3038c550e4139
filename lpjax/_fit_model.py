"""The model behind :func:`lpjax.fit.least_squares`: its parameter vector ``z = (θ, free
components of y0)``, the observation times on (or off) the step grid, and the residual
``observe(y(t_obs; z)) − y_obs`` with its minimisation by Levenberg–Marquardt."""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence, Union, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike

from ._integrate import integrate
from ._integrator import RESULTS, AbstractIntegrator

__all__ = ["observation_grid", "free_components", "Problem", "predict", "residual", "minimise", "linearize"]

_ON_GRID = 1e-9  # a time within this many steps of the grid is on it
_SOLVER = optx.LevenbergMarquardt(rtol=1e-12, atol=1e-14)


def observation_grid(t_obs: np.ndarray, dt: Optional[float]) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """``(dt, k, off, h)``: each time ``t_obs[i] = k[i] dt + hᵢ``, ``k[i]`` the last grid point at
    or before it; ``off`` indexes the times off the grid (``h = t_obs[off] − k[off] dt`` in
    ``(0, dt)``); a time within 1e-9 dt of the grid is on it. Default ``dt``: the smallest
    spacing of ``0, t_obs``."""
    if t_obs.ndim != 1 or t_obs.size < 1:
        raise ValueError(f"least_squares: t_obs must be a 1-D array of observation times, got shape {t_obs.shape}")
    if not np.all(np.isfinite(t_obs)):
        raise ValueError("least_squares: t_obs must be finite; it contains NaN or inf")
    if t_obs[0] < 0 or np.any(np.diff(t_obs) <= 0):
        raise ValueError("least_squares: t_obs must be strictly increasing and >= 0 (y0 is the state at t = 0)")
    if dt is None:
        gaps = np.diff(np.concatenate([[0.0], t_obs]))
        dt = float(np.min(gaps[gaps > 0]))
    if isinstance(dt, bool) or not isinstance(dt, (int, float, np.floating)) or not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"least_squares: dt must be a finite float > 0, got {dt!r}")
    dt = float(dt)
    k = np.rint(t_obs / dt)
    on = np.abs(t_obs / dt - k) <= _ON_GRID
    k = np.where(on, k, np.floor(t_obs / dt)).astype(int)
    off = np.flatnonzero(~on)
    return dt, k, off, t_obs[off] - k[off] * dt


def free_components(fit_y0: Union[bool, Sequence[int], ArrayLike], n: int) -> np.ndarray:
    """The indices of ``y0`` to fit: ``False`` none, ``True`` all, indices, or a boolean mask."""
    if isinstance(fit_y0, (bool, np.bool_)):
        return np.arange(n) if fit_y0 else np.zeros(0, int)
    arr = np.asarray(fit_y0)
    if arr.dtype == bool and arr.shape == (n,):
        return np.flatnonzero(arr)
    if (arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu") or np.any(arr < 0) or np.any(arr >= n)
            or len(np.unique(arr)) != arr.size):
        raise ValueError(f"least_squares: fit_y0 must be True, False, distinct indices of y0 in [0, {n}) or a boolean "
                         f"mask of shape ({n},), got {fit_y0!r}")
    return np.sort(arr.astype(int))


@final
class Problem(eqx.Module):
    """Everything the residual needs; module-level functions of it are compiled once per
    configuration (the same ``build`` and method, shapes, ``dt`` and which times are off the
    grid), not once per call."""

    build: Callable = eqx.field(static=True)
    method: AbstractIntegrator
    y0: Array  # the given initial state; its ``free`` components are replaced by z[p:]
    free: Array
    y_obs: Array
    k: Array  # per observation, the last grid point at or before its time
    off: Array  # the observations off the grid
    h: Array  # and their partial steps
    idx: Array  # the observed components
    p: int = eqx.field(static=True)
    dt: float = eqx.field(static=True)
    n_steps: int = eqx.field(static=True)


def _partial_step(system, method: AbstractIntegrator, y: Array, h: Array) -> tuple[Array, Array]:
    """One step of ``method`` of size ``h`` from the state ``y`` (the method started afresh at
    ``y``): its own order of accuracy, and a Poisson map for a Poisson method."""
    state, started = method.init_or_fail(system, y, h)
    state, result, _ = method.step(system, state, h)
    return method.observe(system, state), (started == RESULTS.successful) & (result == RESULTS.successful)


def predict(z: Array, problem: Problem) -> tuple[Array, Array]:
    """``(y(t_obs; z), whether every step succeeded)``: ``n_steps`` steps of ``dt`` from the
    initial state, then, for each time off the grid, one partial step from the last grid point
    at or before it."""
    theta = z[: problem.p]
    y0 = problem.y0.at[problem.free].set(z[problem.p:])
    system = problem.build(theta)
    sol = integrate(system, problem.method, y0, problem.dt, problem.n_steps, throw=False,
                    adjoint="direct")  # differentiated by jax.jacfwd
    ys, ok = sol.ys[problem.k], sol.result == RESULTS.successful
    if problem.off.shape[0]:
        # one at a time (lax.map): it compiles in about half the time of vmap's batched step
        y_off, ok_off = jax.lax.map(lambda a: _partial_step(system, problem.method, *a), (ys[problem.off], problem.h))
        ys, ok = ys.at[problem.off].set(y_off), ok & jnp.all(ok_off)
    return ys, ok


def _residual_and_model(z: Array, problem: Problem) -> tuple[Array, tuple[Array, Array]]:
    ys, ok = predict(z, problem)
    model = ys[:, problem.idx]
    r = jnp.where(ok, (model - problem.y_obs).reshape(-1), jnp.nan)
    return r, (r, model)


def residual(z: Array, problem: Problem) -> Array:
    """``observe(y(t_obs; z)) − y_obs``, flattened; NaN where the integration failed (so that one
    failing start of a batch does not stop the others: Levenberg–Marquardt rejects the step)."""
    return _residual_and_model(z, problem)[0]


@eqx.filter_jit
def minimise(z0s: Array, problem: Problem, max_steps: int):
    """Levenberg–Marquardt from every row of ``z0s`` at once (``vmap``; one start runs
    without it, which compiles faster)."""

    def one(z0):
        sol = optx.least_squares(residual, _SOLVER, z0, args=problem, max_steps=max_steps, throw=False)
        r = residual(sol.value, problem)
        return sol.value, 0.5 * jnp.sum(r * r), sol.result == optx.RESULTS.successful, sol.stats["num_steps"]

    if z0s.shape[0] == 1:
        return jax.tree.map(lambda a: a[None], one(z0s[0]))
    return jax.vmap(one)(z0s)


#: ``(J, (r, model))`` at ``z``: the Jacobian of the residual, the residual and the model at
#: ``t_obs`` (``observe(y(t_obs; z))``), in one compiled function.
linearize = eqx.filter_jit(jax.jacfwd(_residual_and_model, has_aux=True))
