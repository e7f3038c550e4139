"""Parameter validation shared by the model zoo."""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike


def positive_vector(x: ArrayLike, size: Optional[int], name: str) -> Array:
    """``x`` as a float array of shape ``(size,)`` with positive finite entries.

    Concrete input is checked eagerly (``ValueError``); traced input with ``eqx.error_if``.
    """
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    if x.ndim != 1 or (size is not None and x.shape[0] != size):
        want = f"({size},)" if size is not None else "(n,)"
        raise ValueError(f"{name} must have shape {want}, got {x.shape}")
    bad = ~jnp.all(jnp.isfinite(x) & (x > 0))
    if isinstance(bad, jax.core.Tracer):
        return eqx.error_if(x, bad, f"{name} must be finite and > 0")
    if bool(bad):
        raise ValueError(f"{name} must be finite and > 0, got {x}")
    return x


def finite_array(x: ArrayLike, shape: tuple, name: str) -> Array:
    """``x`` as a float array of the given shape with finite entries."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {x.shape}")
    bad = ~jnp.all(jnp.isfinite(x))
    if isinstance(bad, jax.core.Tracer):
        return eqx.error_if(x, bad, f"{name} must be finite")
    if bool(bad):
        raise ValueError(f"{name} must be finite, got {x}")
    return x
