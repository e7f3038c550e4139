"""``integrate``: a fixed-step ``lax.scan`` driver with a save schedule and result codes."""

from __future__ import annotations

import math
from typing import Any, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, Scalar

from ._integrator import RESULTS, AbstractGroupMap, AbstractIntegrator
from ._system import AbstractSystem

__all__ = ["Solution", "integrate"]


class Solution(eqx.Module):
    """Output of :func:`integrate`.

    Attributes:
        ts: save times, shape ``(n_save + 1,)`` with ``n_save = n_steps // save_every``.
        ys: states at ``ts`` (the initial state first), shape ``(n_save + 1, *y0.shape)``.
        result: a :class:`RESULTS` code, the first failure met (or ``successful``).
        gs: attitudes ``g`` at ``ts``, shape ``(n_save + 1, n, n)``, for methods run with
            ``reconstruct=True`` (see :class:`lpjax.AbstractGroupMap`); otherwise ``None``.
        stats: ``max_residual`` (worst final implicit-solver residual over all steps),
            ``max_iterations`` (most iterations any step needed to reach ``tol``),
            ``num_failed_steps`` and ``num_steps``.
    """

    ts: Float[Array, " T"]
    ys: Float[Array, "T n"]
    result: RESULTS
    stats: dict[str, Any]
    gs: Optional[Float[Array, "T n n"]] = None


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_inputs(system, method, y0, dt, n_steps, save_every):
    if not isinstance(method, AbstractIntegrator):
        raise TypeError(f"method must be an lpjax integrator (e.g. lpjax.RK4()), got {type(method).__name__}")
    method.check_system(system)
    for name, v in (("n_steps", n_steps), ("save_every", save_every)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive Python integer, got {v!r}")
    if n_steps % save_every:
        raise ValueError(
            f"n_steps ({n_steps}) must be divisible by save_every ({save_every})"
        )
    if jnp.ndim(dt) != 0:
        raise ValueError(f"dt must be a scalar, got shape {jnp.shape(dt)}")
    if _is_concrete(dt):
        dtv = float(dt)
        if not math.isfinite(dtv) or dtv <= 0:
            raise ValueError(f"dt must be finite and > 0, got {dtv}")
    system.check_state(y0)
    if _is_concrete(y0) and not np.all(np.isfinite(np.asarray(y0))):
        raise ValueError("y0 must be finite; it contains NaN or inf")


def integrate(
    system: AbstractSystem,
    method: AbstractIntegrator,
    y0: ArrayLike,
    dt: ArrayLike,
    n_steps: int,
    save_every: int = 1,
    throw: bool = True,
    t0: float = 0.0,
) -> Solution:
    """Integrate ``system`` with ``method`` for ``n_steps`` fixed steps of size ``dt``.

    One ``lax.scan`` over ``n_steps // save_every`` saves, each an inner scan of
    ``save_every`` steps; no ``while_loop``. Works under ``jit``, ``vmap`` (over ``y0`` or
    over system parameters) and ``grad``. Bad input raises ``ValueError``/``TypeError``
    before tracing; with traced ``y0``/``dt``, non-finite or non-positive values raise an
    ``EquinoxRuntimeError`` at run time. With ``throw=True`` a failed step raises once at
    the end with the :class:`RESULTS` message; with ``throw=False`` inspect
    ``Solution.result``.
    """
    y0 = jnp.asarray(y0)
    _check_inputs(system, method, y0, dt, n_steps, save_every)
    dt = jnp.asarray(dt, dtype=y0.dtype)
    if not _is_concrete(y0):
        y0 = eqx.error_if(y0, ~jnp.all(jnp.isfinite(y0)), "y0 must be finite; it contains NaN or inf")
    if not _is_concrete(dt):
        dt = eqx.error_if(dt, ~(jnp.isfinite(dt) & (dt > 0)), "dt must be finite and > 0")

    state0 = method.init(system, y0, dt)
    rdtype = y0.dtype
    with_attitude = isinstance(method, AbstractGroupMap) and method.reconstruct

    def observe(state):
        y = method.observe(system, state)
        return (y, method.attitude(system, state)) if with_attitude else (y, None)

    def one_step(carry, _):
        state, result, max_res, max_it, n_fail = carry
        state, step_result, info = method.step(system, state, dt)
        failed = step_result != RESULTS.successful
        result = RESULTS.where(result == RESULTS.successful, step_result, result)
        carry = (
            state,
            result,
            jnp.maximum(max_res, info.residual.astype(rdtype)),
            jnp.maximum(max_it, info.iterations.astype(jnp.int32)),
            n_fail + failed.astype(jnp.int32),
        )
        return carry, None

    def one_save(carry, _):
        carry, _ = jax.lax.scan(one_step, carry, None, length=save_every)
        return carry, observe(carry[0])

    init = (
        state0,
        RESULTS.successful,
        jnp.zeros((), rdtype),
        jnp.zeros((), jnp.int32),
        jnp.zeros((), jnp.int32),
    )
    n_save = n_steps // save_every
    (state, result, max_res, max_it, n_fail), (ys, gs) = jax.lax.scan(one_save, init, None, length=n_save)
    y_start, g_start = observe(state0)
    ys = jnp.concatenate([y_start[None], ys], axis=0)
    if with_attitude:
        gs = jnp.concatenate([g_start[None], gs], axis=0)
    ts = t0 + dt * save_every * jnp.arange(n_save + 1, dtype=rdtype)
    if throw:
        ys = result.error_if(ys, result != RESULTS.successful)
    stats = {
        "max_residual": max_res,
        "max_iterations": max_it,
        "num_failed_steps": n_fail,
        "num_steps": jnp.asarray(n_steps, jnp.int32),
    }
    return Solution(ts=ts, ys=ys, result=result, stats=stats, gs=gs)
