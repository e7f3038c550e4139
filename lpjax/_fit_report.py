"""What :func:`lpjax.fit.least_squares` reports: :class:`FitResult` (estimates, standard
errors, identifiability, goodness of fit) and its printed summary, and :class:`FitWarning`."""

from __future__ import annotations

import math
from typing import Optional, Sequence, final

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float

__all__ = ["FitResult", "FitWarning", "goodness_of_fit", "null_space_text", "combination", "null_mask",
           "IDENTIFIABLE_RTOL", "moved_by_null", "largest_entry_positive"]

_FLAG_P = 1e-6  # a goodness-of-fit figure this improbable under Gaussian noise flags the fit
IDENTIFIABLE_RTOL = 1e-8  # a singular value below this · the largest is a null direction


class FitWarning(UserWarning):
    """A fit that did not converge, whose residuals are inconsistent with the noise, or that the
    data do not identify."""


@final
class FitResult(eqx.Module):
    """Output of :func:`least_squares`. ``print(result)`` shows :meth:`summary`.

    The parameter vector of the fit is ``z = (θ, y0[fit_y0])``: ``singular_values``,
    ``singular_vectors`` and ``null_direction`` are over all of it (over θ alone when no
    component of the initial state is fitted).

    Attributes:
        theta: the estimate of θ.
        cost: ``½|r|²`` at the estimate.
        stderr: of θ, ``σ sqrt(diag((JᵀJ)⁺))``; when the fit is not identifiable, ``inf`` for
            every parameter that a null direction moves (all of them, in the usual case).
        sigma: the noise level used (given, or ``sqrt(|r|² / (N − p))``).
        singular_values: of the sensitivity matrix ``J = ∂r/∂z`` (``N × p``), largest first.
        singular_vectors: the right singular vectors, one per row, in the same order: the
            combinations ``v · z`` the data fix, each to ``σ / s`` (a standard error).
        identifiable: ``False`` when the smallest singular value is below 1e-8 of the largest.
        null_direction: the right singular vector of the smallest singular value (unit norm,
            largest entry positive) when not identifiable, else ``None``.
        gradient: ``|Jᵀr| / (|J|_F |r|)`` at the estimate (≤ 1e-10 at an accepted minimum).
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
        y0: the initial state: the given one with its fitted components (``fit_y0``) estimated.
        y0_stderr: their standard errors; 0 for the components given, not fitted.
        fit_y0: the indices of the fitted components of ``y0`` (empty when none).
        y_fit: the model at the estimate, ``observe(y(t_obs))``, shaped as ``y_obs``.
    """

    theta: Float[Array, " p"]
    cost: float
    stderr: Float[Array, " p"]
    sigma: float
    singular_values: Float[Array, " q"]
    identifiable: bool
    null_direction: Optional[Float[Array, " q"]]
    gradient: float
    iterations: tuple[int, int]
    converged: bool
    reduced_chi2: Optional[float]
    max_standardized_residual: float
    residual_correlation: float
    consistent: bool
    starts: int
    starts_at_best: int
    y0: Float[Array, " n"]
    y0_stderr: Float[Array, " n"]
    fit_y0: tuple[int, ...]
    singular_vectors: Float[Array, "q q"]
    y_fit: Float[Array, "T m"]

    def names(self, theta_names: Optional[Sequence[str]] = None) -> list[str]:
        """The names of the entries of ``z``: ``theta_names`` (default ``θ[0]``, ``θ[1]``, …),
        then ``y0[i]`` for each fitted component."""
        p = self.theta.shape[0]
        names = [f"θ[{i}]" for i in range(p)] if theta_names is None else [str(n) for n in theta_names]
        if len(names) != p:
            raise ValueError(f"FitResult: theta_names must name the {p} entries of theta, got {len(names)}")
        return names + [f"y0[{i}]" for i in self.fit_y0]

    def summary(self, theta_names: Optional[Sequence[str]] = None) -> str:
        """The estimates with standard errors, and, for a fit the data do not identify, which
        combinations of the parameters the data fix (with their standard errors) and along which
        directions they do not."""
        names = self.names(theta_names)
        z = np.concatenate([np.asarray(self.theta), np.asarray(self.y0)[list(self.fit_y0)]])
        se = np.concatenate([np.asarray(self.stderr), np.asarray(self.y0_stderr)[list(self.fit_y0)]])
        s, V = np.asarray(self.singular_values), np.asarray(self.singular_vectors)
        verdict = "converged" if self.converged else "NOT converged"
        lines = [f"least-squares fit ({verdict}; {'consistent' if self.consistent else 'INCONSISTENT'} with the "
                 f"noise): cost {self.cost:.6g}, sigma {self.sigma:.3g}, singular values "
                 + ", ".join(f"{v:.3g}" for v in s)]
        width = max(len(n) for n in names)
        for name, value, err in zip(names, z, se):
            lines.append(f"  {name:>{width}} = {value:.8g} ± {err:.3g}"
                         + ("   (not fixed by the data)" if not np.isfinite(err) else ""))
        if not self.identifiable:
            free, combos, errs = _fixed_combinations(s, V, self.sigma)
            free_names = [n for n, f in zip(names, free) if f]
            lines.append("NOT IDENTIFIABLE: the data leave the parameters free along "
                         + null_space_text(V[null_mask(s)], names) + "; the values above are one point of a family "
                         "that fits equally well.")
            lines.append(f"The data fix these combinations of {', '.join(free_names)} (to first order about the "
                         "estimate):")
            for w, err in zip(combos, errs):
                lines.append(f"  {combination(w, free_names)} = {float(w @ z[free]):.8g} ± {err:.3g}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def null_mask(s: np.ndarray) -> np.ndarray:
    return ~(s > IDENTIFIABLE_RTOL * s[0])


def moved_by_null(V: np.ndarray, null: np.ndarray) -> np.ndarray:
    """The parameters (a mask over the columns of ``V``) that a null direction moves."""
    return np.any(np.abs(V[null]) > 1e-6, axis=0)


def largest_entry_positive(rows: np.ndarray) -> np.ndarray:
    """Each row of ``rows`` times the sign of its largest entry (a direction's sign fixed)."""
    rows = np.atleast_2d(rows)
    return rows * np.sign(rows[np.arange(len(rows)), np.argmax(np.abs(rows), axis=1)])[:, None]


def _fixed_combinations(s: np.ndarray, V: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(free, W, stderr)``: the parameters a null direction moves (a mask), and the
    combinations ``w · z[free]`` of them that the data do fix (rows of ``W``: an orthonormal basis
    of the directions among them orthogonal to the null space, chosen uncorrelated), with their
    standard errors from ``σ² (JᵀJ)⁺``, best fixed first."""
    null = null_mask(s)
    free = moved_by_null(V, null)
    cov = sigma**2 * (V[~null].T / s[~null] ** 2) @ V[~null]
    n_null = int(null.sum())
    basis = np.linalg.svd(V[null][:, free], full_matrices=True)[2][n_null:].T
    lam, E = np.linalg.eigh(basis.T @ cov[np.ix_(free, free)] @ basis)
    W = largest_entry_positive((basis @ E).T)
    return free, W, np.sqrt(np.maximum(lam, 0.0))


def combination(v: np.ndarray, names: Sequence[str]) -> str:
    """``v · z`` written out: ``0.21·θ[0] − 0.58·θ[1]`` (entries below 1e-6 of the largest left out)."""
    big = np.abs(v) > 1e-6 * np.max(np.abs(v))
    terms = [f"{'−' if c < 0 else '+'} {abs(c):.4g}·{n}" for c, n, b in zip(v, names, big) if b]
    text = " ".join(terms)
    return text[2:] if text.startswith("+") else "−" + text[2:]


def null_space_text(null: np.ndarray, names: Sequence[str]) -> str:
    """The null directions, one per row, as ``(θ[0]: 0.21, θ[1]: 0.58, …)`` (largest entry positive)."""
    null = largest_entry_positive(null)
    null = np.where(np.abs(null) > 1e-8, null, 0.0)  # roundoff shown as 0
    return " and ".join("(" + ", ".join(f"{n}: {c:.4g}" for n, c in zip(names, v)) + ")" for v in null)


def goodness_of_fit(r: np.ndarray, n_t: int, p: int, sig: float, sigma_given: bool):
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
