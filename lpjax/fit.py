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
import warnings
from typing import Callable, Optional, Sequence, Union, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float

from ._checks import invalid_as_nan
from ._integrate import integrate
from ._integrator import RESULTS, AbstractIntegrator, GaussLegendre
from ._system import AbstractSystem

__all__ = ["least_squares", "FitResult", "FitWarning"]

_GRAD_RTOL = 1e-10  # the minimiser is accepted when |Jᵀr| ≤ this · |J|_F |r|
_IDENTIFIABLE_RTOL = 1e-8  # a singular value below this · the largest is a null direction
_FLAG_P = 1e-6  # a goodness-of-fit figure this improbable under Gaussian noise flags the fit
_BEST_RTOL = 1e-6  # a start whose cost is within this of the best one has reached it
_SPREAD = 0.5  # starts drawn as theta0 · exp(0.5 z) (theta0 + 0.5 z where theta0 = 0)
_SOLVER = optx.LevenbergMarquardt(rtol=1e-12, atol=1e-14)


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
        iterations: Levenberg–Marquardt steps (of the best start), then Gauss–Newton polishing steps.
        converged: Levenberg–Marquardt's own verdict for the best start (its step tolerances met
            within ``max_steps``).
        reduced_chi2: ``|r|² / (σ² (N − p))`` for a given ``sigma`` (≈ 1 ± sqrt(2/(N − p)) for a
            model that fits); ``None`` when ``sigma`` is estimated (it would be 1 by construction).
        max_standardized_residual: ``max |rᵢ| / σ`` (below ≈ 5 for up to 10⁵ Gaussian residuals).
        residual_correlation: lag-1 correlation of the residuals in time, ``Σ rₜ·rₜ₊₁ / Σ |rₜ|²``
            (≈ 0 ± 1/sqrt(N) for white noise; near 1 when the model misses the trajectory).
        consistent: ``False`` when any of the three figures is inconsistent with Gaussian noise of
            level σ at the 1e-6 level (then :func:`least_squares` warns, with what to try).
        starts: the number of starting points run.
        starts_at_best: how many of them reached the best cost (within 1e-6 relative).
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
    converged: bool
    reduced_chi2: Optional[float]
    max_standardized_residual: float
    residual_correlation: float
    consistent: bool
    starts: int
    starts_at_best: int


class FitWarning(UserWarning):
    """A fit that did not converge, or whose residuals are inconsistent with the noise."""


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
    """``observe(y(t_obs; θ)) − y_obs``, flattened; NaN where the integration failed (so that one
    failing start of a batch does not stop the others: Levenberg–Marquardt rejects the step)."""
    sol = integrate(problem.build(theta), problem.method, problem.y0, problem.dt, problem.n_steps, throw=False,
                    adjoint="direct")  # differentiated by jax.jacfwd
    r = (sol.ys[problem.k][:, problem.idx] - problem.y_obs).reshape(-1)
    return jnp.where(sol.result == RESULTS.successful, r, jnp.nan)


@eqx.filter_jit
def _minimise(theta0s: Array, problem: _Problem, max_steps: int):
    """Levenberg–Marquardt from every row of ``theta0s`` at once (``vmap``; one start runs
    without it, which compiles faster)."""

    def one(theta0):
        sol = optx.least_squares(_residual, _SOLVER, theta0, args=problem, max_steps=max_steps, throw=False)
        r = _residual(sol.value, problem)
        return sol.value, 0.5 * jnp.sum(r * r), sol.result == optx.RESULTS.successful, sol.stats["num_steps"]

    if theta0s.shape[0] == 1:
        return jax.tree.map(lambda a: a[None], one(theta0s[0]))
    return jax.vmap(one)(theta0s)


_residual_jit = eqx.filter_jit(_residual)
_jacobian = eqx.filter_jit(jax.jacfwd(_residual))


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


def _goodness_of_fit(r: np.ndarray, n_t: int, p: int, sig: float, sigma_given: bool):
    """``(reduced χ², max standardized residual, lag-1 correlation, reasons it is inconsistent)``."""
    from scipy import stats  # 0.3 s to import: not at ``import lpjax``

    N = r.size
    dof = N - p
    rr = float(r @ r)
    reasons = []
    chi2 = rr / (sig**2 * dof) if sigma_given and dof > 0 else None
    if chi2 is not None and min(stats.chi2.sf(chi2 * dof, dof), stats.chi2.cdf(chi2 * dof, dof)) < _FLAG_P:
        reasons.append(f"reduced chi2 {chi2:.3g} for {dof} degrees of freedom (expected 1 +- {math.sqrt(2 / dof):.2g})")
    zmax = float(np.max(np.abs(r)) / sig) if sig > 0 else float("inf") * (rr > 0)
    zlim = float(stats.norm.isf(_FLAG_P / (2 * N)))
    if zmax > zlim:
        reasons.append(f"largest standardized residual {zmax:.3g} (expected below {zlim:.2g} for {N} residuals)")
    rt = r.reshape(n_t, -1)
    corr = float(np.sum(rt[1:] * rt[:-1]) / rr) if n_t > 1 and rr > 0 else 0.0
    clim = float(stats.norm.isf(_FLAG_P)) / math.sqrt(max(N - rt.shape[1], 1))
    if corr > clim:
        reasons.append(f"residuals correlated in time (lag-1 correlation {corr:.2g}, expected below {clim:.2g})")
    return chi2, zmax, corr, reasons


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
) -> FitResult:
    """Fit ``theta`` so that the trajectory of ``build(theta)`` from ``y0`` matches ``y_obs``.

    ``build(theta)`` returns a system (differentiable in ``theta``). The model is integrated
    from ``y0`` at t = 0 with ``method`` (default ``GaussLegendre(2)``) and step ``dt``
    (default: the smallest spacing of ``0, t_obs``); every time in ``t_obs`` must be a whole
    number of steps (within 1e-9 dt), anything else is an error. ``observe`` is a tuple of
    observed state indices (``None``: the whole state), so ``y_obs`` has shape
    ``(len(t_obs), len(observe))``. ``sigma`` is the noise level of the data (estimated from
    the residuals if ``None``).

    ``starts``: several starting points, run at once under ``vmap``: a count ``k`` (``theta0``
    and ``k − 1`` points ``theta0 · exp(0.5 z)``, ``z`` standard normal from ``seed``; ``0.5 z``
    added where ``theta0`` is 0), or an array ``(k, p)``. The best one is polished and
    returned, with how many starts reached it. A start whose model integration fails is
    dropped; if every start fails, a ``ValueError`` says so.

    Returns a :class:`FitResult`. Warns (:class:`FitWarning`), with what to try, when
    Levenberg–Marquardt did not converge or the residuals are inconsistent with the noise:
    a local minimum, a wrong model, or a wrong ``sigma``.
    """
    theta0 = jnp.asarray(theta0, dtype=jnp.result_type(float))
    if theta0.ndim != 1 or not bool(jnp.all(jnp.isfinite(theta0))):
        raise ValueError(f"least_squares: theta0 must be a finite 1-D array, got shape {theta0.shape}")
    theta0s = _starting_points(theta0, starts, seed)
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
    with invalid_as_nan():
        return _fit(problem, theta0s, max_steps, sigma)


def _fit(problem: _Problem, theta0s: Array, max_steps: int, sigma: Optional[float]) -> FitResult:
    p, N, n_t = theta0s.shape[1], problem.y_obs.size, problem.y_obs.shape[0]
    thetas, costs, ok, steps = (np.asarray(a) for a in _minimise(theta0s, problem, max_steps))
    finite = np.isfinite(costs)
    if not finite.any():
        raise ValueError(f"least_squares: the model integration failed from every starting point ({len(costs)}); "
                         "check theta0, y0 and dt")
    best = int(np.argmin(np.where(finite, costs, np.inf)))
    at_best = int(np.sum(finite & (costs <= costs[best] * (1 + _BEST_RTOL) + np.finfo(costs.dtype).tiny)))
    theta = jnp.asarray(thetas[best])
    jac = functools.partial(_jacobian, problem=problem)
    res = functools.partial(_residual_jit, problem=problem)

    def grad_rel(J, r):
        return float(jnp.linalg.norm(J.T @ r) / (jnp.linalg.norm(J) * jnp.linalg.norm(r) + 1e-300))

    polish = 0
    J, r = jac(theta), res(theta)
    while grad_rel(J, r) > _GRAD_RTOL and polish < 10:  # Gauss–Newton from near the minimum
        theta_new = theta - jnp.linalg.lstsq(J, r)[0]
        J_new, r_new = jac(theta_new), res(theta_new)
        if not bool(jnp.all(jnp.isfinite(r_new))) or float(r_new @ r_new) > float(r @ r):
            break  # a failed integration or no descent: keep the minimiser's point
        theta, J, r = theta_new, J_new, r_new
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
    chi2, zmax, corr, reasons = _goodness_of_fit(np.asarray(r), n_t, p, sig, sigma is not None)
    converged = bool(ok[best])
    if not converged:
        warnings.warn(f"least_squares: Levenberg-Marquardt did not converge within max_steps={max_steps} "
                      f"(best of {len(costs)} starts); raise max_steps, or try starts= or a closer theta0",
                      FitWarning, stacklevel=3)
    if reasons:
        warnings.warn("least_squares: the fit is inconsistent with the noise: " + "; ".join(reasons) + ". "
                      "It may be a local minimum (try starts=16, or a theta0 closer to the data), a model that "
                      "cannot describe the data, or a wrong sigma", FitWarning, stacklevel=3)
    return FitResult(theta=theta, cost=0.5 * rr, stderr=stderr, sigma=sig, singular_values=s,
                     identifiable=identifiable, null_direction=null, gradient=grad_rel(J, r),
                     iterations=(int(steps[best]), polish), converged=converged, reduced_chi2=chi2,
                     max_standardized_residual=zmax, residual_correlation=corr, consistent=not reasons,
                     starts=len(costs), starts_at_best=at_best)
