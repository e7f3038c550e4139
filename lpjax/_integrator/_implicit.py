"""The one implicit-solve kernel that every implicit method uses.

``implicit_solve(residual, z0, args, update, ...)`` finds ``z`` with ``residual(z, args) = 0``:

* a fixed number ``max_iters`` of updates ``z ← z − update(r, z)``, ``r = residual(z, args)``
  (``lax.scan``, no ``while_loop``: under ``vmap`` every lane does the same work, and GPUs
  like it that way). ``update`` is the method's linear solve: a frozen-Jacobian inverse
  (simplified Newton), a preconditioner (fixed point) or :func:`newton_update`;
* one meaning of ``tol``, a mixed absolute/relative test on the updates, as in optimistix
  and diffrax: with ``e = max_i |Δz_i| / (atol + rtol |z_i|)`` (``rtol = atol = tol``; ``|z_i|``
  or a larger reference magnitude the method gives, such as ``|y|`` for stage increments) for the
  last update and the observed contraction rate ``θ`` of the last two, the solve has converged
  when the estimated remaining error ``θ/(1 − θ) · e`` (``e`` itself if ``θ ≥ ½``) is ≤ 1
  (Hairer & Wanner, IV.8; diffrax's ``VeryChord``). ``tol=None`` is 256 machine epsilons of
  ``z``'s dtype. Otherwise the step reports ``RESULTS.implicit_solve_failed``;
* ``jax.lax.custom_root`` around the iteration, so ``jax.grad`` differentiates the exact root
  by the implicit function theorem (a dense solve with the Jacobian of ``residual``) and not
  through the iterations. This is the only module that calls ``custom_root``.

:class:`AbstractImplicitMethod` validates ``max_iters`` and ``tol`` for every implicit method.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, PyTree

from .._checks import optional_tol, positive_int
from ._base import RESULTS, AbstractIntegrator, StepInfo

__all__ = ["AbstractImplicitMethod", "implicit_solve", "newton_update", "default_tol"]

Residual = Callable[[Array, Any], Array]


class AbstractImplicitMethod(AbstractIntegrator):
    """An integrator whose step solves implicit equations with :func:`implicit_solve`.

    ``max_iters`` (a positive integer) is the fixed number of iterations; ``tol`` (a finite
    float > 0, or ``None`` for 256 machine epsilons) is the mixed tolerance on the last update.
    Both are validated here, once for every implicit method.
    """

    max_iters: eqx.AbstractVar[int]
    tol: eqx.AbstractVar[Optional[float]]

    def __check_init__(self):
        name = type(self).__name__
        positive_int(self.max_iters, f"{name}: max_iters")
        optional_tol(self.tol, f"{name}: tol")


def default_tol(dtype) -> float:
    return 256 * float(np.finfo(dtype).eps)


def newton_update(residual: Residual, args) -> Callable[[Array, Array], Array]:
    """Full Newton: ``Δz = J(z)⁻¹ r`` with the Jacobian of ``residual`` at the current iterate."""

    def update(r, z):
        J = jax.jacfwd(residual)(z, args)
        return jnp.linalg.solve(J.reshape(r.size, z.size), r.reshape(-1)).reshape(z.shape)

    return update


def _tangent_solve(g, r):
    """Solve the linearised equations ``g(x) = r`` densely (IFT gradients; small systems)."""
    J = jax.jacfwd(g)(jnp.zeros_like(r))
    m = r.size
    return jnp.linalg.solve(J.reshape(m, m), r.reshape(m)).reshape(r.shape)


def _iterate(g, z0, update, max_iters: int, tol: float, unroll: bool, scale):
    """``max_iters`` updates; returns ``z`` and the aux ``(iterations, error)``.

    ``error`` estimates the scaled error of the returned iterate from the last two updates
    (Hairer & Wanner, *Solving ODEs II*, IV.8; diffrax's ``VeryChord``): with the scaled
    update size ``e_k = max_i |Δz_i| / (atol + rtol |z_i|)`` and the observed contraction
    rate ``θ = e_k / e_{k−1}``, the error left after the last update is about
    ``θ/(1 − θ) · e_k``; it is ``e_k`` itself when ``θ ≥ ½`` (slow, stalled or diverging) or
    after a single iteration. ``iterations`` counts the updates made up to the first whose
    estimate was ≤ 1 (``max_iters + 1`` if none was).
    """

    def body(carry, k):
        z, first, e_prev, _ = carry
        r = g(z)
        dz = update(r, z)
        z = z - dz
        e = jnp.max(jnp.abs(dz) / (tol + tol * jnp.maximum(jnp.abs(z), scale)))
        theta = jnp.where(jnp.isfinite(e_prev), e / e_prev, 1.0)
        est = jnp.where(theta < 0.5, e * theta / (1 - theta), e)
        first = jnp.where((est <= 1) & (first > max_iters), k + 1, first)
        return (z, first, e, est), None

    init = (z0, jnp.asarray(max_iters + 1, jnp.int32), jnp.full((), jnp.inf, z0.dtype), jnp.zeros((), z0.dtype))
    ks = jnp.arange(max_iters, dtype=jnp.int32)
    (z, first, _, err), _ = jax.lax.scan(body, init, ks, unroll=unroll)
    # custom_root's JVP rule mishandles integer aux outputs: carry the count as a float
    return z, (first.astype(z.dtype), err)


def implicit_solve(
    residual: Residual,
    z0: PyTree,
    args: Any,
    update: Callable[[Array, Array], Array],
    *,
    max_iters: int,
    tol: Optional[float],
    implicit_diff: bool = True,
    unroll: bool = True,
    scale: ArrayLike = 0.0,
) -> tuple[Array, Any, StepInfo]:
    """Solve ``residual(z, args) = 0`` from ``z0``; returns ``(z, result, info)``.

    ``residual`` is a module-level function of ``(z, args)``; ``update(r, z)`` returns the
    correction ``Δz`` for the residual ``r`` at ``z``. ``scale`` (broadcastable to ``z``) is
    a magnitude that the relative part of the test uses where it exceeds ``|z|``: the state
    ``y`` for stage increments ``Z``, whose stage values ``y + Z`` carry roundoff relative to
    ``|y|``. ``implicit_diff=False`` differentiates through the unrolled iterations instead
    (for testing the implicit gradient).
    """
    tol = default_tol(z0.dtype) if tol is None else tol

    def g(z):
        return residual(z, args)

    def solve(g_, z_init):
        return _iterate(g_, z_init, update, max_iters, tol, unroll, jax.lax.stop_gradient(scale))

    if implicit_diff:
        z, aux = jax.lax.custom_root(g, z0, solve, _tangent_solve, has_aux=True)
    else:
        z, aux = solve(g, z0)
    first, err = jax.lax.stop_gradient(aux)
    # the residual at the returned root (for Runge–Kutta stages XLA shares it with the update)
    res = jnp.max(jnp.abs(g(jax.lax.stop_gradient(z))))
    result = RESULTS.where(err <= 1, RESULTS.successful, RESULTS.implicit_solve_failed)
    iterations = jnp.minimum(first.astype(jnp.int32), max_iters)
    return z, result, StepInfo(res, iterations)
