"""``integrate``: a fixed-step ``lax.scan`` driver with a save schedule and result codes.

The loop is compiled once per configuration with ``eqx.filter_jit``, as diffrax's
``diffeqsolve`` is: the static parts (the method and its settings, the system's structure and
static fields, ``n_steps``, ``save_every``, ``throw``, shapes and dtypes) key the cache, while
arrays (``y0``, ``dt``, ``t0``, the system's parameters) are traced. A second call with new
array values reuses the compiled code.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Int, PyTree

from ._checks import is_traced, positive_int
from ._integrator import RESULTS, AbstractIntegrator, StepInfo
from ._system import AbstractSystem

__all__ = ["Solution", "integrate"]


class Solution(eqx.Module):
    """Output of :func:`integrate`.

    Attributes:
        ts: save times, shape ``(n_save + 1,)`` with ``n_save = n_steps // save_every``.
        ys: states at ``ts`` (the initial state first), shape ``(n_save + 1, *y0.shape)``.
        result: a :class:`RESULTS` code, the first failure met (or ``successful``).
        gs: attitudes at ``ts`` as a batched :class:`lpjax.groups.SO3` / :class:`lpjax.groups.SOn`
            (``gs.R`` has shape ``(n_save + 1, n, n)``), for methods run with
            ``reconstruct=True`` (see :class:`lpjax.AbstractGroupMap`); otherwise ``None``.
        stats: ``max_residual`` (worst implicit-equation residual at the last iteration of a
            step's solve), ``max_iterations`` and ``mean_iterations`` (most and mean iterations
            per step needed to meet ``tol``), ``num_failed_steps`` and ``num_steps``.
    """

    ts: Float[Array, " T"]
    ys: Float[Array, "T n"]
    result: RESULTS
    stats: dict[str, Any]
    gs: Optional[PyTree] = None


class _Carry(eqx.Module):
    """The scan carry: the method's state and the running result and statistics."""

    state: PyTree
    result: RESULTS
    max_residual: Float[Array, ""]
    max_iterations: Int[Array, ""]
    total_iterations: Int[Array, ""]
    num_failed: Int[Array, ""]

    def update(self, state: PyTree, result: RESULTS, info: StepInfo) -> "_Carry":
        failed = result != RESULTS.successful
        return _Carry(
            state,
            RESULTS.where(self.result == RESULTS.successful, result, self.result),
            jnp.maximum(self.max_residual, info.residual.astype(self.max_residual.dtype)),
            jnp.maximum(self.max_iterations, info.iterations.astype(jnp.int32)),
            self.total_iterations + info.iterations.astype(jnp.int32),
            self.num_failed + failed.astype(jnp.int32),
        )


def _check_inputs(system, method, y0, dt, n_steps, save_every):
    if not isinstance(method, AbstractIntegrator):
        raise TypeError(f"method must be an lpjax integrator (e.g. lpjax.RK4()), got {type(method).__name__}")
    method.check_system(system)
    positive_int(n_steps, "n_steps")
    positive_int(save_every, "save_every")
    if n_steps % save_every:
        raise ValueError(f"n_steps ({n_steps}) must be divisible by save_every ({save_every})")
    if jnp.ndim(dt) != 0:
        raise ValueError(f"dt must be a scalar, got shape {jnp.shape(dt)}")
    if not is_traced(dt):
        dtv = float(dt)
        if not math.isfinite(dtv) or dtv <= 0:
            raise ValueError(f"dt must be finite and > 0, got {dtv}")
    system.check_state(y0)
    if not is_traced(y0) and not np.all(np.isfinite(np.asarray(y0))):
        raise ValueError("y0 must be finite; it contains NaN or inf")


def _group_size(length: int) -> int:
    """The checkpoint group: a divisor of ``length`` within a factor 2 of √length if there is one
    (no remainder loop, so the step is compiled once per level), else ⌊√length⌋."""
    root = math.isqrt(length)
    divisors = [d for d in range(max(1, root // 2), 2 * root + 1) if length % d == 0]
    return min(divisors, key=lambda d: abs(d - root)) if divisors else root


def _checkpointed_scan(f, carry, length: int):
    """``lax.scan(f, carry, None, length)`` whose reverse mode stores O(√length) carries.

    The iterations run in groups of about √length (:func:`_group_size`), each group under
    ``jax.checkpoint``: the backward pass keeps the carry at each group's start and recomputes
    one group at a time (two-level checkpointing; one extra forward sweep). Without
    differentiation the checkpoints cost nothing. ``integrate`` nests two of these (saves, and
    steps within a save), so gradient memory grows as about √n_steps whatever the save
    schedule, besides the saved output itself. Loops shorter than 16 are left plain.
    """
    if length < 16:
        return jax.lax.scan(f, carry, None, length=length)
    group = _group_size(length)
    q, r = divmod(length, group)

    def run_group(c, _):
        return jax.lax.scan(f, c, None, length=group)

    carry, ys = jax.lax.scan(jax.checkpoint(run_group, prevent_cse=False), carry, None, length=q)
    ys = jax.tree.map(lambda a: a.reshape(q * group, *a.shape[2:]), ys)
    if r:
        carry, rest = jax.lax.scan(f, carry, None, length=r)
        ys = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), ys, rest)
    return carry, ys


@eqx.filter_jit
def _integrate(system, method, y0, dt, t0, n_steps: int, save_every: int, throw: bool) -> Solution:
    y0 = eqx.error_if(y0, ~jnp.all(jnp.isfinite(y0)), "y0 must be finite; it contains NaN or inf")
    dt = eqx.error_if(dt, ~(jnp.isfinite(dt) & (dt > 0)), "dt must be finite and > 0")
    rdtype = y0.dtype
    state0 = method.init(system, y0, dt)

    def one_step(carry: _Carry, _):
        state, result, info = method.step(system, carry.state, dt)
        return carry.update(state, result, info), None

    def one_save(carry: _Carry, _):
        carry, _ = _checkpointed_scan(one_step, carry, save_every)
        return carry, method.save(system, carry.state)

    zero = jnp.zeros((), jnp.int32)
    init = _Carry(state0, RESULTS.successful, jnp.zeros((), rdtype), zero, zero, zero)
    n_save = n_steps // save_every
    carry, saved = _checkpointed_scan(one_save, init, n_save)
    saved = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), method.save(system, state0), saved)
    ys, gs = saved
    ts = t0 + dt * save_every * jnp.arange(n_save + 1, dtype=rdtype)
    if throw:
        ys = carry.result.error_if(ys, carry.result != RESULTS.successful)
    stats = {
        "max_residual": carry.max_residual,
        "max_iterations": carry.max_iterations,
        "mean_iterations": carry.total_iterations.astype(rdtype) / n_steps,
        "num_failed_steps": carry.num_failed,
        "num_steps": jnp.asarray(n_steps, jnp.int32),
    }
    return Solution(ts=ts, ys=ys, result=carry.result, stats=stats, gs=gs)


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
    ``save_every`` steps; no ``while_loop``. Compiled once per configuration
    (``eqx.filter_jit`` inside): calls that differ only in array values — ``y0``, ``dt``,
    ``t0``, the system's parameters — reuse the compiled code; a new ``n_steps``,
    ``save_every``, method setting, shape or dtype compiles anew. Works under ``jit``,
    ``vmap`` (over ``y0`` or over system parameters) and ``grad``.

    Bad input raises ``ValueError``/``TypeError`` before tracing (a system outside the
    method's family, a non-scalar or non-positive ``dt``, a non-finite ``y0``); with traced
    ``y0``/``dt``, non-finite or non-positive values raise an ``EquinoxRuntimeError`` at run
    time. With ``throw=True`` a failed step raises once at the end with the
    :class:`RESULTS` message; with ``throw=False`` inspect ``Solution.result``.
    """
    y0 = jnp.asarray(y0)
    _check_inputs(system, method, y0, dt, n_steps, save_every)
    dt = jnp.asarray(dt, dtype=y0.dtype)
    t0 = jnp.asarray(t0, dtype=y0.dtype)
    return _integrate(system, method, y0, dt, t0, int(n_steps), int(save_every), bool(throw))
