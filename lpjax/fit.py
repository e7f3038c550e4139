"""Fitting: parameters of a system to an observed trajectory, by least squares through the integrator.

:func:`least_squares` minimises ``½|r(θ)|²``, ``r = observe(y(t_obs; θ)) − y_obs``, with
optimistix's Levenberg–Marquardt, polishes the minimum with Gauss–Newton steps until the
gradient ``Jᵀr`` vanishes to 1e-10 relative, and always reports standard errors and the
singular values of the sensitivity matrix ``J = ∂r/∂θ``. A parameterisation the data cannot
identify (a singular value at roundoff) is flagged with its null direction and infinite standard
errors, not reported as fitted.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Optional, Sequence, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float

from ._integrate import integrate
from ._integrator import RESULTS, AbstractIntegrator, GaussLegendre
from ._system import AbstractSystem

__all__ = ["least_squares", "FitResult"]

_GRAD_RTOL = 1e-10  # the minimiser is accepted when |Jᵀr| ≤ this · |J|_F |r|
_IDENTIFIABLE_RTOL = 1e-8  # a singular value below this · the largest is a null direction


@final
class FitResult(eqx.Module):
    """Output of :func:`least_squares`.

    Attributes:
        theta: the estimate.
        cost: ``½|r|²`` at ``theta``.
        stderr: ``σ sqrt(diag((JᵀJ)⁻¹))``; ``inf`` everywhere when not identifiable.
        sigma: the noise level used (given, or ``sqrt(|r|² / (N − p))``).
        singular_values: of the sensitivity matrix ``J = ∂r/∂θ`` (``N × p``), largest first.
        identifiable: ``False`` when the smallest singular value is below 1e-8 of the largest.
        null_direction: the right singular vector of the smallest singular value (unit norm) when
            not identifiable, else ``None``.
        gradient: ``|Jᵀr| / (|J|_F |r|)`` at ``theta`` (≤ 1e-10 at an accepted minimum).
        iterations: Levenberg–Marquardt steps, then Gauss–Newton polishing steps.
    """

    theta: Float[Array, " p"]
    cost: float
    stderr: Float[Array, " p"]
    sigma: float
    singular_values: Float[Array, " p"]
    identifiable: bool
    null_direction: Optional[Float[Array, " p"]]
    gradient: float
    iterations: tuple[int, int]


def _observation_steps(t_obs: np.ndarray, dt: Optional[float]) -> tuple[float, np.ndarray]:
    if t_obs.ndim != 1 or t_obs.size < 1:
        raise ValueError(f"least_squares: t_obs must be a 1-D array of observation times, got shape {t_obs.shape}")
    if not np.all(np.isfinite(t_obs)):
        raise ValueError("least_squares: t_obs must be finite; it contains NaN or inf")
    if t_obs[0] <= 0 or np.any(np.diff(t_obs) <= 0):
        raise ValueError("least_squares: t_obs must be strictly increasing and > 0 (y0 is the state at t = 0)")
    if dt is None:
        dt = float(np.min(np.diff(np.concatenate([[0.0], t_obs]))))
    if isinstance(dt, bool) or not isinstance(dt, (int, float, np.floating)) or not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"least_squares: dt must be a finite float > 0, got {dt!r}")
    k = np.rint(t_obs / dt)
    off = np.abs(t_obs / dt - k)
    if np.any(off > 1e-9) or np.any(k < 1):
        i = int(np.argmax(off))
        raise ValueError(f"least_squares: t_obs must lie on the grid of steps dt = {dt!r} (within 1e-9 dt); "
                         f"t_obs[{i}] = {t_obs[i]!r} is {off[i]:.3g} dt off it")
    return float(dt), k.astype(int)


@final
class _Problem(eqx.Module):
    """Everything the residual needs; module-level functions of it are compiled once per
    configuration (the same ``build`` and method, shapes and ``dt``), not once per call."""

    build: Callable = eqx.field(static=True)
    method: AbstractIntegrator
    y0: Array
    y_obs: Array
    k: Array
    idx: Array
    dt: float = eqx.field(static=True)
    n_steps: int = eqx.field(static=True)


def _residual(theta: Array, problem: _Problem) -> Array:
    sol = integrate(problem.build(theta), problem.method, problem.y0, problem.dt, problem.n_steps, throw=False,
                    adjoint="direct")  # differentiated by jax.jacfwd
    r = (sol.ys[problem.k][:, problem.idx] - problem.y_obs).reshape(-1)
    return eqx.error_if(r, sol.result != RESULTS.successful, "least_squares: the model integration failed")


_residual_jit = eqx.filter_jit(_residual)
_jacobian = eqx.filter_jit(jax.jacfwd(_residual))


def least_squares(
    build: Callable[[Array], AbstractSystem],
    theta0: ArrayLike,
    y0: ArrayLike,
    t_obs: ArrayLike,
    y_obs: ArrayLike,
    *,
    observe: Optional[Sequence[int]] = None,
    method: Optional[AbstractIntegrator] = None,
    dt: Optional[float] = None,
    sigma: Optional[float] = None,
    max_steps: int = 200,
) -> FitResult:
    """Fit ``theta`` so that the trajectory of ``build(theta)`` from ``y0`` matches ``y_obs``.

    ``build(theta)`` returns a system (differentiable in ``theta``). The model is integrated
    from ``y0`` at t = 0 with ``method`` (default ``GaussLegendre(2)``) and step ``dt``
    (default: the smallest spacing of ``0, t_obs``); every time in ``t_obs`` must be a whole
    number of steps (within 1e-9 dt), anything else is an error. ``observe`` is a tuple of
    observed state indices (``None``: the whole state), so ``y_obs`` has shape
    ``(len(t_obs), len(observe))``. ``sigma`` is the noise level of the data (estimated from
    the residuals if ``None``). Returns a :class:`FitResult`.
    """
    theta0 = jnp.asarray(theta0, dtype=jnp.result_type(float))
    if theta0.ndim != 1 or not bool(jnp.all(jnp.isfinite(theta0))):
        raise ValueError(f"least_squares: theta0 must be a finite 1-D array, got shape {theta0.shape}")
    y0 = jnp.asarray(y0, dtype=theta0.dtype)
    if not bool(jnp.all(jnp.isfinite(y0))):
        raise ValueError("least_squares: y0 must be finite")
    t_np = np.asarray(t_obs, dtype=float)
    dt, k = _observation_steps(t_np, dt)
    method = GaussLegendre(2) if method is None else method
    system0 = build(theta0)
    if not isinstance(system0, AbstractSystem):
        raise TypeError(f"least_squares: build(theta) must return an lpjax system, got {type(system0).__name__}")
    system0.check_state(y0)
    idx = np.arange(y0.shape[0]) if observe is None else np.asarray(observe)
    if idx.ndim != 1 or idx.dtype.kind not in "iu" or np.any(idx < 0) or np.any(idx >= y0.shape[0]):
        raise ValueError(f"least_squares: observe must be a tuple of state indices in [0, {y0.shape[0]}), got {observe!r}")
    y_obs = jnp.asarray(y_obs, dtype=theta0.dtype)
    if y_obs.shape != (len(k), len(idx)):
        raise ValueError(f"least_squares: y_obs must have shape (len(t_obs), number observed) = {(len(k), len(idx))}, "
                         f"got {y_obs.shape}")
    if not bool(jnp.all(jnp.isfinite(y_obs))):
        raise ValueError("least_squares: y_obs must be finite; it contains NaN or inf")
    p, N = theta0.shape[0], y_obs.size
    if N < p:
        raise ValueError(f"least_squares: {N} observations cannot determine {p} parameters")
    if sigma is not None and not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"least_squares: sigma must be a finite float > 0 or None, got {sigma!r}")
    problem = _Problem(build, method, y0, y_obs, jnp.asarray(k), jnp.asarray(idx), dt, int(k[-1]))
    sol = optx.least_squares(_residual, optx.LevenbergMarquardt(rtol=1e-12, atol=1e-14), theta0, args=problem,
                             max_steps=max_steps, throw=False)
    theta = sol.value
    lm_steps = int(sol.stats["num_steps"])
    jac = functools.partial(_jacobian, problem=problem)
    res = functools.partial(_residual_jit, problem=problem)

    def grad_rel(J, r):
        return float(jnp.linalg.norm(J.T @ r) / (jnp.linalg.norm(J) * jnp.linalg.norm(r) + 1e-300))

    polish = 0
    J, r = jac(theta), res(theta)
    while grad_rel(J, r) > _GRAD_RTOL and polish < 10:  # Gauss–Newton from near the minimum
        theta = theta - jnp.linalg.lstsq(J, r)[0]
        J, r = jac(theta), res(theta)
        polish += 1
    U, s, Vt = jnp.linalg.svd(J, full_matrices=False)
    identifiable = bool(s[-1] > _IDENTIFIABLE_RTOL * s[0])
    rr = float(r @ r)
    sig = float(sigma) if sigma is not None else (math.sqrt(rr / (N - p)) if N > p else float("nan"))
    if identifiable:
        stderr = sig * jnp.sqrt(jnp.sum((Vt / s[:, None]) ** 2, axis=0))
        null = None
    else:
        stderr = jnp.full((p,), jnp.inf)
        null = Vt[-1] * jnp.sign(Vt[-1][jnp.argmax(jnp.abs(Vt[-1]))])
    return FitResult(theta=theta, cost=0.5 * rr, stderr=stderr, sigma=sig, singular_values=s,
                     identifiable=identifiable, null_direction=null, gradient=grad_rel(J, r),
                     iterations=(lm_steps, polish))
