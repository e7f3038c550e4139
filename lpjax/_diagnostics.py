"""Diagnostics: invariant errors along a solution and empirical orders of convergence."""

from __future__ import annotations

from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

__all__ = ["relative_invariant_error", "empirical_order", "poisson_defect", "divergence_defect", "measure_defect"]


def relative_invariant_error(
    fn: Callable[[Array], Array], ys: Float[Array, "T n"]
) -> Float[Array, "T ..."]:
    """``|fn(y_t) − fn(y_0)| / |fn(y_0)|`` for each saved state (elementwise for vector ``fn``).

    Where ``fn(y_0) == 0`` the absolute error is returned instead.
    """
    ys = jnp.asarray(ys)
    if ys.ndim < 2:
        raise ValueError(f"ys must have shape (T, n), got {ys.shape}")
    return _relative_error(fn, ys)


@eqx.filter_jit
def _relative_error(fn, ys):
    """One compiled program (eagerly, ``vmap(fn)`` would compile each of its operations)."""
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


def poisson_defect(method, system, y: ArrayLike, dt: float) -> float:
    """``max |DΦ Π(y) DΦᵀ − Π(Φ(y))|`` for one step ``Φ`` of ``method`` (by ``jacfwd``).

    ``Π`` is the Lie–Poisson tensor of ``system`` (``algebra.poisson_tensor(·, sign)``), so
    the defect vanishes (to roundoff) exactly when the one-step map is a Poisson map.
    """
    from ._system import LiePoissonSystem

    if not isinstance(system, LiePoissonSystem):
        raise TypeError(f"poisson_defect needs a LiePoissonSystem, got {type(system).__name__}")
    method.check_system(system)
    y = jnp.asarray(y)
    system.check_state(y)
    dt = jnp.asarray(dt, y.dtype)

    def phi(x):
        state, _, _ = method.step(system, method.init(system, x, dt), dt)
        return method.observe(system, state)

    P = lambda x: system.algebra.poisson_tensor(x, system.sign)  # noqa: E731

    @jax.jit
    def defect(x):
        D = jax.jacfwd(phi)(x)
        return jnp.max(jnp.abs(D @ P(x) @ D.T - P(phi(x))))

    return float(defect(y))


@eqx.filter_jit  # one program: eagerly, autodiff compiles each of its operations
def divergence_defect(system, x: Float[Array, " m"]) -> Float[Array, ""]:
    """``|div(ρ f)| / (|ρ| max|∂f|)`` at ``x`` by autodiff (``div(ρf) = ρ tr ∂f + ∇ρ·f``), for a
    system with an invariant density ``system.density`` (seed 001): zero to roundoff where ρ
    is an invariant density of ``f``. Test it at points on the invariant manifold (on the
    constraint, |γ| = 1): off it the value depends on how ``f`` is extended. Vmappable over ``x``.
    """
    x = jnp.asarray(x)
    Df, f = jax.jacfwd(lambda z: (system.vector_field(z),) * 2, has_aux=True)(x)
    rho, grad_rho = jax.value_and_grad(system.density)(x)
    div = rho * jnp.trace(Df) + jnp.dot(grad_rho, f)  # div(ρf) = ρ div f + ∇ρ·f: one Jacobian
    return jnp.abs(div) / (jnp.abs(rho) * jnp.max(jnp.abs(Df)))


@eqx.filter_jit
def measure_defect(method, system, x: Float[Array, " m"], dt) -> Float[Array, ""]:
    """``|ρ(Φ(x)) det DΦ(x) / ρ(x) − 1|`` for one step ``Φ`` of ``method``: how far the
    one-step map is from preserving the invariant measure ρ dx. Vmappable over ``x``."""
    x = jnp.asarray(x)
    dt = jnp.asarray(dt, x.dtype)

    def phi(z):
        state, _, _ = method.step(system, method.init(system, z, dt), dt)
        return method.observe(system, state)

    y, D = phi(x), jax.jacfwd(phi)(x)
    return jnp.abs(system.density(y) * jnp.linalg.det(D) / system.density(x) - 1)
