"""Diagnostics: invariant errors along a solution and empirical orders of convergence."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

__all__ = ["relative_invariant_error", "empirical_order"]


def relative_invariant_error(
    fn: Callable[[Array], Array], ys: Float[Array, "T n"]
) -> Float[Array, "T ..."]:
    """``|fn(y_t) − fn(y_0)| / |fn(y_0)|`` for each saved state (elementwise for vector ``fn``).

    Where ``fn(y_0) == 0`` the absolute error is returned instead.
    """
    ys = jnp.asarray(ys)
    if ys.ndim < 2:
        raise ValueError(f"ys must have shape (T, n), got {ys.shape}")
    vals = jax.vmap(fn)(ys)
    ref = vals[:1]
    scale = jnp.where(ref == 0, 1.0, jnp.abs(ref))
    return jnp.abs(vals - ref) / scale


def empirical_order(dts: ArrayLike, errors: ArrayLike) -> float:
    """Slope of the least-squares line through ``(log dt, log error)``.

    Raises ``ValueError`` for fewer than two points or non-positive/non-finite values.
    """
    dts = np.asarray(dts, dtype=np.float64).ravel()
    errors = np.asarray(errors, dtype=np.float64).ravel()
    if dts.shape != errors.shape or dts.size < 2:
        raise ValueError(
            f"need at least two matching (dt, error) pairs, got {dts.size} and {errors.size}"
        )
    if not (np.all(np.isfinite(dts)) and np.all(np.isfinite(errors))):
        raise ValueError("dts and errors must be finite")
    if np.any(dts <= 0) or np.any(errors <= 0):
        raise ValueError("dts and errors must be > 0 for a log-log fit")
    slope, _ = np.polyfit(np.log(dts), np.log(errors), 1)
    return float(slope)
