"""Fitting: parameters of a system, and its initial state, to an observed trajectory, by least
squares through the integrator.

:func:`least_squares` minimises ``½|r(z)|²``, ``r = observe(y(t_obs; z)) − y_obs`` over
``z = (θ, chosen components of y0)``, with optimistix's Levenberg–Marquardt, polishes the
minimum with Gauss–Newton steps until the gradient ``Jᵀr`` vanishes to 1e-10 relative, and
always reports standard errors and the singular values of the sensitivity matrix
``J = ∂r/∂z``. A parameterisation the data cannot identify (a singular value at roundoff) is
flagged with a :class:`FitWarning` naming its null direction, infinite standard errors and a
summary of the combinations the data do fix, not reported as fitted. Observation times may lie
off the grid of steps (one partial step of the method reaches each).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Callable, Optional, Sequence, Union

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from ._checks import invalid_as_nan, refuse_silent_float32
from ._fit_model import Problem, free_components, linearize, minimise, observation_grid
from ._fit_report import FitResult as FitResult, FitWarning as FitWarning
from ._fit_report import goodness_of_fit, largest_entry_positive, moved_by_null, null_mask, null_space_text
from ._integrator import AbstractIntegrator, GaussLegendre
from ._system import AbstractSystem

__all__ = ["least_squares", "FitResult", "FitWarning"]

_GRAD_RTOL = 1e-10  # the minimiser is accepted when |Jᵀr| ≤ this · |J|_F |r|
_BEST_RTOL = 1e-6  # a start whose cost is within this of the best one has reached it
_SPREAD = 0.5  # starts drawn as theta0 · exp(0.5 z) (theta0 + 0.5 z where theta0 = 0)


def _starting_points(theta0: Array, starts, seed: int) -> Array:
    if starts is None:
        return theta0[None]
    if isinstance(starts, (int, np.integer)) and not isinstance(starts, bool):
        if starts < 1:
            raise ValueError(f"least_squares: starts must be a count >= 1 or an array (k, p), got {starts!r}")
        z = np.random.default_rng(seed).standard_normal((int(starts) - 1, theta0.shape[0]))
        t0 = np.asarray(theta0)
        drawn = np.where(t0 == 0, t0 + _SPREAD * z, t0 * np.exp(_SPREAD * z))
        return jnp.concatenate([theta0[None], jnp.asarray(drawn, theta0.dtype)])
    arr = jnp.asarray(starts, theta0.dtype)
    if arr.ndim != 2 or arr.shape[1] != theta0.shape[0] or arr.shape[0] < 1 or not bool(jnp.all(jnp.isfinite(arr))):
        raise ValueError(f"least_squares: starts must be a count >= 1 or a finite array of shape (k, {theta0.shape[0]}), "
                         f"got {getattr(starts, 'shape', starts)!r}")
    return arr


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
    starts: Union[int, ArrayLike, None] = None,
    seed: int = 0,
    fit_y0: Union[bool, Sequence[int], ArrayLike] = False,
) -> FitResult:
    """Fit ``theta`` (and, with ``fit_y0``, the initial state) so that the trajectory of
    ``build(theta)`` from ``y0`` matches ``y_obs``.

    ``build(theta)`` returns a system (differentiable in ``theta``). The model is integrated
    from ``y0`` at t = 0 with ``method`` (default ``GaussLegendre(2)``) and step ``dt``
    (default: the smallest spacing of ``0, t_obs``). ``observe`` is a tuple of observed state
    indices (``None``: the whole state), so ``y_obs`` has shape ``(len(t_obs), len(observe))``.
    ``sigma`` is the noise level of the data (estimated from the residuals if ``None``).

    Observation times (``t_obs``, increasing, ``>= 0``; a time 0 observes ``y0`` itself) need
    not lie on the grid of steps: the model steps with ``dt`` to the last grid point at or
    before each time, then takes one partial step of the method, of size
    ``h = t − k dt < dt``, from there to the time itself (the method started afresh at the grid
    state). That is the method's own step, so its order of accuracy and its structure (a
    Poisson map keeps the Casimirs) carry over; the grid's states are untouched by it, and a
    time on the grid (within 1e-9 dt) is the grid state itself, exactly as without it.

    ``fit_y0``: fit the initial state too, alongside ``theta``: ``True`` (all of it), indices
    of its components, or a boolean mask. ``y0`` is then the start for those components (the
    first observation, say). The fitted components are free coordinates: their Casimirs (the
    rigid body's |M|²) are estimated from the data too, which is right when they are measured
    (M(0) observed with noise); to hold a Casimir or a constraint fixed (the heavy top's
    |Γ| = 1), leave those components out of ``fit_y0``. The fitted parameters are
    ``z = (θ, y0[fit_y0])``; standard errors, singular values and identifiability are over all
    of ``z``, and :class:`FitResult` gives ``theta``/``stderr`` and ``y0``/``y0_stderr`` apart.

    ``starts``: several starting points, run at once under ``vmap``: a count ``k`` (``theta0``
    and ``k − 1`` points ``theta0 · exp(0.5 z)``, ``z`` standard normal from ``seed``; ``0.5 z``
    added where ``theta0`` is 0), or an array ``(k, p)`` of θ (the fitted components of the
    initial state start from ``y0`` in every start). The best one is polished and returned,
    with how many starts reached it. A start whose model integration fails is dropped; if every
    start fails, a ``ValueError`` says so.

    Precision: the fit runs in θ's floating dtype (float64 with JAX's x64 on). With x64 off,
    NumPy or Python float64 input (``theta0``, ``y0``, ``y_obs``, ``starts``) is an error
    saying how to turn x64 on, not a silent float32 fit; pass JAX float32 arrays to ask for one.

    Returns a :class:`FitResult`; ``print`` it for a summary. Warns (:class:`FitWarning`), with
    what to try, when Levenberg–Marquardt did not converge, when the residuals are inconsistent
    with the noise (a local minimum, a wrong model, or a wrong ``sigma``), and when the data do
    not identify the parameters (naming the null directions: the estimate is then one point of
    a family that fits equally well).
    """
    for x, what in ((theta0, "theta0"), (y0, "y0"), (y_obs, "y_obs")):
        refuse_silent_float32(x, "least_squares", what)
    if starts is not None and not isinstance(starts, (int, np.integer)):
        refuse_silent_float32(starts, "least_squares", "starts")
    theta0 = jnp.asarray(theta0, dtype=jnp.result_type(float))
    if theta0.ndim != 1 or not bool(jnp.all(jnp.isfinite(theta0))):
        raise ValueError(f"least_squares: theta0 must be a finite 1-D array, got shape {theta0.shape}")
    theta0s = _starting_points(theta0, starts, seed)
    y0 = jnp.asarray(y0, dtype=theta0.dtype)
    if not bool(jnp.all(jnp.isfinite(y0))):
        raise ValueError("least_squares: y0 must be finite")
    dt, k, off, h = observation_grid(np.asarray(t_obs, dtype=float), dt)
    method = GaussLegendre(2) if method is None else method
    system0 = build(theta0)
    if not isinstance(system0, AbstractSystem):
        raise TypeError(f"least_squares: build(theta) must return an lpjax system, got {type(system0).__name__}")
    system0.check_state(y0)
    free = free_components(fit_y0, y0.shape[0])
    idx = np.arange(y0.shape[0]) if observe is None else np.asarray(observe)
    if idx.ndim != 1 or idx.dtype.kind not in "iu" or np.any(idx < 0) or np.any(idx >= y0.shape[0]):
        raise ValueError(f"least_squares: observe must be a tuple of state indices in [0, {y0.shape[0]}), got {observe!r}")
    y_obs = jnp.asarray(y_obs, dtype=theta0.dtype)
    if y_obs.shape != (len(k), len(idx)):
        raise ValueError(f"least_squares: y_obs must have shape (len(t_obs), number observed) = {(len(k), len(idx))}, "
                         f"got {y_obs.shape}")
    if not bool(jnp.all(jnp.isfinite(y_obs))):
        raise ValueError("least_squares: y_obs must be finite; it contains NaN or inf")
    p, N = theta0.shape[0] + free.size, y_obs.size
    if N < p:
        raise ValueError(f"least_squares: {N} observations cannot determine {p} parameters")
    if sigma is not None and not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"least_squares: sigma must be a finite float > 0 or None, got {sigma!r}")
    problem = Problem(build, method, y0, jnp.asarray(free), y_obs, jnp.asarray(k), jnp.asarray(off),
                      jnp.asarray(h, theta0.dtype), jnp.asarray(idx), theta0.shape[0], dt, max(int(k[-1]), 1))
    z0s = jnp.concatenate([theta0s, jnp.broadcast_to(y0[free], (theta0s.shape[0], free.size))], axis=1)
    with invalid_as_nan():
        return _fit(problem, z0s, max_steps, sigma)


def _fit(problem: Problem, z0s: Array, max_steps: int, sigma: Optional[float]) -> FitResult:
    p, N, n_t = z0s.shape[1], problem.y_obs.size, problem.y_obs.shape[0]
    zs, costs, ok, steps = (np.asarray(a) for a in minimise(z0s, problem, max_steps))
    finite = np.isfinite(costs)
    if not finite.any():
        raise ValueError(f"least_squares: the model integration failed from every starting point ({len(costs)}); "
                         "check theta0, y0 and dt")
    best = int(np.argmin(np.where(finite, costs, np.inf)))
    at_best = int(np.sum(finite & (costs <= costs[best] * (1 + _BEST_RTOL) + np.finfo(costs.dtype).tiny)))
    z = jnp.asarray(zs[best])
    lin = functools.partial(linearize, problem=problem)

    def grad_rel(J, r):
        return float(jnp.linalg.norm(J.T @ r) / (jnp.linalg.norm(J) * jnp.linalg.norm(r) + 1e-300))

    polish = 0
    J, (r, model) = lin(z)
    while grad_rel(J, r) > _GRAD_RTOL and polish < 10:  # Gauss–Newton from near the minimum
        z_new = z - jnp.linalg.lstsq(J, r)[0]
        J_new, (r_new, model_new) = lin(z_new)
        if not bool(jnp.all(jnp.isfinite(r_new))) or float(r_new @ r_new) > float(r @ r):
            break  # a failed integration or no descent: keep the minimiser's point
        z, J, r, model = z_new, J_new, r_new, model_new
        polish += 1
    _, s, Vt = np.linalg.svd(np.asarray(J), full_matrices=False)
    null = null_mask(s)
    identifiable = not null.any()
    rr = float(r @ r)
    sig = float(sigma) if sigma is not None else (math.sqrt(rr / (N - p)) if N > p else float("nan"))
    # σ² (JᵀJ)⁺ over the directions the data fix; a parameter a null direction moves is not fixed
    stderr = sig * np.sqrt(np.sum((Vt[~null] / s[~null, None]) ** 2, axis=0))
    stderr[moved_by_null(Vt, null)] = np.inf
    null_direction = None if identifiable else jnp.asarray(largest_entry_positive(Vt[-1])[0])
    chi2, zmax, corr, reasons = goodness_of_fit(np.asarray(r), n_t, p, sig, sigma is not None)
    converged = bool(ok[best])
    free, q = np.asarray(problem.free), z.shape[0] - problem.p
    y0 = problem.y0.at[problem.free].set(z[problem.p:])
    y0_stderr = np.zeros(y0.shape[0])
    y0_stderr[free] = stderr[problem.p:]
    fit = FitResult(theta=z[: problem.p], cost=0.5 * rr, stderr=jnp.asarray(stderr[: problem.p]), sigma=sig,
                    singular_values=jnp.asarray(s), identifiable=identifiable, null_direction=null_direction,
                    gradient=grad_rel(J, r), iterations=(int(steps[best]), polish), converged=converged,
                    reduced_chi2=chi2, max_standardized_residual=zmax, residual_correlation=corr,
                    consistent=not reasons, starts=len(costs), starts_at_best=at_best, y0=y0,
                    y0_stderr=jnp.asarray(y0_stderr, y0.dtype), fit_y0=tuple(int(i) for i in free),
                    singular_vectors=jnp.asarray(Vt), y_fit=model)
    if not converged:
        warnings.warn(f"least_squares: Levenberg-Marquardt did not converge within max_steps={max_steps} "
                      f"(best of {len(costs)} starts); raise max_steps, or try starts= or a closer theta0",
                      FitWarning, stacklevel=3)
    if not identifiable:
        names = fit.names()
        warnings.warn(f"least_squares: the data do not identify the parameters: moving them along the null direction "
                      f"{null_space_text(Vt[null], names)} leaves the residuals unchanged (singular value "
                      f"{s[-1]:.2g} of {s[0]:.2g}), so the estimate is one point of a family that fits equally well, "
                      f"not the parameters; fix a parameter or reparameterise (print the result for the "
                      f"combinations the data do fix)", FitWarning, stacklevel=3)
    if reasons:
        noisy_y0 = ", or a noisy y0 (if it is measured too, try fit_y0=True)" if q == 0 else ""
        warnings.warn("least_squares: the fit is inconsistent with the noise: " + "; ".join(reasons) + ". "
                      "It may be a local minimum (try starts=16, or a theta0 closer to the data), a model that "
                      f"cannot describe the data, a wrong sigma{noisy_y0}", FitWarning, stacklevel=3)
    return fit
