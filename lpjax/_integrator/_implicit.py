"""The one implicit-solve kernel that every implicit method uses.

``implicit_solve(residual, z0, args, update, ...)`` finds ``z`` with ``residual(z, args) = 0``:

* at most ``max_iters`` updates ``z ← z − update(r, z)``, ``r = residual(z, args)``: all of
  them (``lax.scan``: under ``vmap`` every lane does the same work, as GPUs like it), or, with
  ``early_exit``, until converged (``lax.while_loop``). ``update`` is the method's linear
  solve: a frozen-Jacobian inverse (simplified Newton), a preconditioner (fixed point) or
  :func:`newton_update`;
* one meaning of ``tol``, a mixed absolute/relative test on the updates, as in optimistix
  and diffrax: with ``e = max_i |Δz_i| / (1 + |z_i|)`` (``|z_i|`` or a larger reference
  magnitude the method gives, such as ``|y|`` for stage increments) for the last update and
  the observed contraction rate ``θ`` of the last two, the solve is accepted when the estimated
  remaining error ``θ/(1 − θ) · e`` (``e`` itself if ``θ ≥ ½``) is ≤ ``tol`` (Hairer & Wanner,
  IV.8; diffrax's ``VeryChord``). ``tol=None`` is 256 machine epsilons of ``z``'s dtype.
  Otherwise the step reports ``RESULTS.implicit_solve_failed`` (``RESULTS.nonfinite_state``
  when the iterate is not finite);
* with ``early_exit`` the iteration stops once it has converged to roundoff or stalls, not as
  soon as ``tol`` is met (see :func:`_iterate`); otherwise exactly ``max_iters`` updates run;
* ``jax.lax.custom_root`` around the iteration, so ``jax.grad`` differentiates the exact root
  by the implicit function theorem (a dense solve with the Jacobian of ``residual``) and not
  through the iterations. This is the only module that calls ``custom_root``.

:class:`AbstractImplicitMethod` validates ``max_iters`` and ``tol`` for every implicit method.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import contextvars
from typing import Any, Callable, Iterator, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
import numpy as np
from jaxtyping import Array, ArrayLike, PyTree

from .. import _small as sm
from .._checks import optional_tol, positive_int
from ._base import RESULTS, AbstractIntegrator, AbstractSteppedAdjoint, StepInfo, finiteness_deferred

__all__ = ["AbstractImplicitMethod", "AbstractRootStepAdjoint", "implicit_solve", "newton_update", "default_tol",
           "root_step_jacobian", "root_step_vjp", "collecting_statistics"]

Residual = Callable[[Array, Any], Array]

_STATISTICS = contextvars.ContextVar("lpjax_collecting_statistics", default=True)


@contextlib.contextmanager
def collecting_statistics(on: bool) -> Iterator[None]:
    """Within ``collecting_statistics(False)`` (at trace time) a solve computes no statistics: no
    residual at the root (a residual evaluation a step) and the step's :class:`StepInfo` is the
    static zeros of an explicit step, which the running statistics skip. The result code is
    computed as ever. :func:`lpjax.ensemble` runs so unless asked for ``stats=True``."""
    token = _STATISTICS.set(bool(on))
    try:
        yield
    finally:
        _STATISTICS.reset(token)


class AbstractImplicitMethod(AbstractIntegrator):
    """An integrator whose step solves implicit equations with :func:`implicit_solve`.

    ``max_iters`` (a positive integer) is the fixed number of iterations; ``tol`` (a finite
    float > 0, or ``None`` for 256 machine epsilons) is the mixed tolerance on the updates;
    ``early_exit`` stops the iteration once converged instead of always running ``max_iters``.
    ``max_iters`` and ``tol`` are validated here, once for every implicit method.
    """

    max_iters: eqx.AbstractVar[int]
    tol: eqx.AbstractVar[Optional[float]]
    early_exit: eqx.AbstractVar[bool]

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
        return sm.solve_small(J.reshape(r.size, z.size), r.reshape(-1), pivot=True).reshape(z.shape)

    return update


def _tangent_solve(g, r):
    """Solve the linearised equations ``g(x) = r`` densely (IFT gradients; small systems)."""
    J = jax.jacfwd(g)(jnp.zeros_like(r))
    m = r.size
    return jnp.linalg.solve(J.reshape(m, m), r.reshape(m)).reshape(r.shape)


TANGENT_ITERS = 30  # at most, for the tangent solve inside the kernels (it stops at roundoff)


def _preconditioned_tangent_solve(update, z0, g, r, x0, scale=0.0):
    """``g(x) = r`` (``g`` linear: the residual's linearization at the root) by Richardson's
    iteration preconditioned with the method's own update at ``z0`` (its approximate inverse of
    the residual's Jacobian): ``x ← x − update(g(x) − r, z0)``, from ``x0``, until the error
    left, estimated as the iterate's (``θ/(1 − θ)·|Δx|``, θ the observed contraction), is below
    roundoff of ``x`` (at most :data:`TANGENT_ITERS` trips). One linearized residual and one
    update a trip, where a dense solve forms the whole Jacobian (``m`` linearized residuals and
    an ``m × m`` elimination: a GL4 tangent ten times the step's cost)."""
    eps = jnp.finfo(r.dtype).eps

    def going(c):
        _, _, done, it = c
        return (it < TANGENT_ITERS) & ~done

    def body(c):
        x, e_prev, _, it = c
        dx = update(g(x) - r, z0)
        x = x - dx
        e = jnp.max(jnp.abs(dx))
        bound = eps * jnp.maximum(jnp.max(jnp.abs(x)), scale)
        done = jnp.where(jnp.isfinite(e_prev) & (2 * e < e_prev), e * e <= bound * (e_prev - e), e <= bound)
        return x, e, done, it + 1

    init = (x0, jnp.full((), jnp.inf, r.dtype), jnp.asarray(False), jnp.zeros((), jnp.int32))
    return jax.lax.while_loop(going, body, init)[0]


def _forward_root(residual: Residual, z0, args, solve, update):
    """``solve(g, z0)`` (``g = residual(·, args)``, returning ``(z, aux)``) with a forward-mode
    rule for the ensemble kernels (:func:`lpjax._small.entrywise_solves`), where tangents are
    pushed forward and never pulled back: the root's tangent ``ż`` solves the linearized
    equations ``∂_z R ż = −∂_args R · args_dot`` by :func:`_preconditioned_tangent_solve`, started
    from the tangent of the guess ``z0``. A method's guess is a function of its state (GL's
    stages extrapolated from the last step), so that tangent predicts ``ż`` as ``z0`` predicts
    ``z``, and the iteration starts where the solve of ``z`` does. What ``update``, ``solve``'s
    tolerances and scales close over only steers the iteration, not the root: their tangents are
    dropped (as ``custom_root`` drops them)."""
    dyn, static = eqx.partition(args, lambda a: isinstance(a, jax.Array))

    def residual_at(d):
        return lambda z: residual(z, eqx.combine(d, static))

    solve_c, solve_consts = jax.closure_convert(lambda z, d: solve(residual_at(d), z), z0, dyn)
    update_c, update_consts = jax.closure_convert(update, z0, z0)

    @jax.custom_jvp
    def root(z, d, s_consts, u_consts):
        return solve_c(z, d, *s_consts)

    @root.defjvp
    def root_jvp(primals, tangents):
        z_guess, d, _, u_consts = primals
        z_guess_dot, d_dot = tangents[:2]
        z, aux = root(*primals)
        rhs = jax.jvp(lambda d_: residual(z, eqx.combine(d_, static)), (d,), (d_dot,))[1]
        g = jax.linearize(residual_at(d), z)[1]
        scale = functools.reduce(jnp.maximum, [jnp.max(jnp.abs(t)) for t in jax.tree.leaves(d_dot)
                                               if t.dtype != jax.dtypes.float0], 0.0)
        z_dot = _preconditioned_tangent_solve(lambda r, w: update_c(r, w, *u_consts), z_guess, g, -rhs, z_guess_dot,
                                              scale)
        return (z, aux), (z_dot, jax.tree.map(jnp.zeros_like, aux))

    return root(z0, dyn, solve_consts, update_consts)


def _iterate(g, z0, update, max_iters: int, tol: float, unroll: bool, scale, early_exit: bool,
             fallback=None, fallback_iters: int = 0):
    """Up to ``max_iters`` updates; returns ``z`` and the aux ``(iterations, error)``.

    With the relative update size ``e_k = max_i |Δz_i| / (1 + max(|z_i|, scale_i))`` (without
    ``early_exit``, ``z`` is the iterate before the last two updates) and the
    observed contraction rate ``θ = e_k / e_{k−1}``, the error left after the last update is
    about ``θ/(1 − θ) · e_k``, or ``e_k`` itself when ``θ ≥ ½`` or after a single update
    (Hairer & Wanner, *Solving ODEs II*, IV.8; diffrax's ``VeryChord``). The solve is accepted
    when it is ≤ ``tol``, tested without dividing (``below``); ``error`` is 0 when accepted, 2
    when not, NaN when the last update is not finite.

    With ``early_exit`` the loop (a ``while_loop``) runs until the estimate is at roundoff
    (≤ ε of the dtype), or is accepted (≤ ``tol``) and the updates stop shrinking (``θ ≥ 1``:
    a roundoff floor; above ``tol`` a growing update may be a passing oscillation of a fixed
    point iteration, which goes on), as GNI codes iterate to
    machine precision: stopping at ``tol`` instead leaves an error of one sign in every step,
    which drifts the invariants linearly (measured: 1.3e-9 in the Casimir of the rigid body
    after 10⁶ GL4 steps, against 7e-14). ``iterations`` is then the number of updates made.
    Without ``early_exit`` all ``max_iters`` updates run (a ``scan`` of the updates alone: no
    size, no test) and ``iterations`` is ``max_iters``, the updates made; whether they met
    ``tol`` is judged once, after the loop, from the sizes of the last two.

    With a ``fallback`` (a function of the iterate that returns another update, such as a
    simplified Newton update with the Jacobian there) the first phase also stops once the
    contraction estimate ``θ`` reaches ½ after two updates, and if it ended unaccepted, up to
    ``fallback_iters`` updates of ``fallback(z)`` follow (from ``z0`` if the first phase
    diverged to non-finite values), in a ``while_loop`` that makes no iteration at all when the
    first phase was accepted (under ``vmap``: when every lane's was). ``iterations`` is then the
    sum of both phases' updates.
    """
    eps = float(jnp.finfo(z0.dtype).eps)

    def below(e, e_prev, bound):
        """``estimate(e, e_prev) <= bound`` without dividing (it runs at every update):
        ``θ = e/e_prev < ½`` and ``e²/(e_prev − e) <= bound``, or else ``e <= bound``."""
        fast = jnp.isfinite(e_prev) & (2 * e < e_prev)
        return jnp.where(fast, e * e <= bound * (e_prev - e), e <= bound)

    def make_body(update, limit, switch):
        def body(carry):
            k, z, first, e_prev, _, _ = carry
            r = g(z)
            dz = update(r, z)
            z = z - dz
            e = sm.max_entry(jnp.abs(dz) / (1 + jnp.maximum(jnp.abs(z), scale)))
            met = below(e, e_prev, tol)
            first = jnp.where(met & (first > limit), k + 1, first)
            shrinking = jnp.isfinite(e_prev) & (e < e_prev)  # θ < 1
            done = below(e, e_prev, eps) | (met & ~shrinking)
            if switch:  # θ ≥ ½ after two updates: the fallback converges faster
                done = done | (~met & (k >= 1) & ~(2 * e < e_prev))
            return k + 1, z, first, e, e_prev, done
        return body

    body = make_body(update, max_iters, fallback is not None and early_exit)

    inf = jnp.full((), jnp.inf, z0.dtype)
    init = (jnp.zeros((), jnp.int32), z0, jnp.asarray(max_iters + 1, jnp.int32), inf, inf, jnp.asarray(False))
    if early_exit:
        k, z, _, e, e_prev, _ = jax.lax.while_loop(lambda c: (c[0] < max_iters) & ~c[5], body, init)
        iterations = k
    else:  # the updates alone, then the last two with their sizes: the test once, after the loop
        plain = max_iters - min(2, max_iters)
        z, _ = jax.lax.scan(lambda z, _: (z - update(g(z), z), None), z0, None, length=plain, unroll=unroll)
        # the sizes relative to the iterate before the last two updates (the same to first order
        # in the updates: one division per entry, not two)
        inv_w = 1 / (1 + jnp.maximum(jnp.abs(z), scale))

        def sized(carry, _):  # (z, e of the last update, e of the one before)
            z, e, _ = carry
            dz = update(g(z), z)
            return (z - dz, sm.max_entry(jnp.abs(dz) * inv_w), e), None

        # a loop of its own (two short passes over a chunk in the native kernel, not one long one)
        (z, e, e_prev), _ = jax.lax.scan(sized, (z, inf, inf), None, length=min(2, max_iters), unroll=unroll)
        iterations = jnp.asarray(max_iters, jnp.int32)
    if fallback is not None:
        z, iterations, e, e_prev = _fall_back(g, z0, z, iterations, e, e_prev, below, tol, eps, make_body,
                                              fallback, fallback_iters)
    # the verdict as an error: 0 accepted, 2 not, NaN where the last update is not finite (no
    # division); custom_root's JVP rule mishandles integer aux outputs: the count as a float
    verdict = jnp.where(below(e, e_prev, tol), 0, 2).astype(z.dtype) + (e - e)
    return z, (iterations.astype(z.dtype), verdict)


def _fall_back(g, z0, z, iterations, e, e_prev, below, tol, eps, make_body, fallback, fallback_iters):
    """The second phase of :func:`_iterate`: a ``while_loop`` that runs at most once, and not at
    all when the first phase was accepted; inside, up to ``fallback_iters`` updates of
    ``fallback(start)``, then the state of whichever phase is accepted (the second if both)."""

    def second(carry):
        z, iterations, e, e_prev, _ = carry
        start = jnp.where(jnp.all(jnp.isfinite(z)), z, z0)
        body = make_body(fallback(start), fallback_iters, False)
        inf = jnp.full((), jnp.inf, e.dtype)
        init = (jnp.zeros((), jnp.int32), start, jnp.asarray(fallback_iters + 1, jnp.int32), inf, inf,
                jnp.asarray(False))
        k, z2, _, e2, e2_prev, _ = jax.lax.while_loop(lambda c: (c[0] < fallback_iters) & ~c[5], body, init)
        return z2, iterations + k, e2, e2_prev, jnp.asarray(True)

    accepted = below(e, e_prev, tol)
    init = (z, iterations, e, e_prev, accepted)
    z, iterations, e, e_prev, _ = jax.lax.while_loop(lambda c: ~c[4], second, init)
    return z, iterations, e, e_prev


def implicit_solve(
    residual: Residual,
    z0: PyTree,
    args: Any,
    update: Callable[[Array, Array], Array],
    *,
    max_iters: int,
    tol: Optional[float],
    implicit_diff: bool = True,
    early_exit: bool = False,
    unroll: bool = True,
    scale: ArrayLike = 0.0,
    fallback: Optional[Callable[[Array], Callable[[Array, Array], Array]]] = None,
    fallback_iters: int = 0,
) -> tuple[Array, Any, StepInfo]:
    """Solve ``residual(z, args) = 0`` from ``z0``; returns ``(z, result, info)``.

    ``residual`` is a module-level function of ``(z, args)``; ``update(r, z)`` returns the
    correction ``Δz`` for the residual ``r`` at ``z``. ``scale`` (broadcastable to ``z``) is
    a magnitude that the relative part of the test uses where it exceeds ``|z|``: the state
    ``y`` for stage increments ``Z``, whose stage values ``y + Z`` carry roundoff relative to
    ``|y|``. ``early_exit=True`` stops at convergence to roundoff (a ``while_loop``: under
    ``vmap`` every lane then iterates as long as the slowest, each keeping its own result);
    ``False`` runs exactly ``max_iters`` updates. ``implicit_diff=False`` differentiates through the unrolled
    iterations instead (for testing the implicit gradient; it implies ``early_exit=False``).
    ``fallback(z)`` returns a second update, used for up to ``fallback_iters`` more updates
    when the first does not converge or contracts by less than ½ (see :func:`_iterate`; not
    with ``implicit_diff=False``, whose unrolled iterations must be reverse-differentiable).
    """
    tol = default_tol(z0.dtype) if tol is None else tol

    def g(z):
        return residual(z, args)

    def solve(g_, z_init):
        return _iterate(g_, z_init, update, max_iters, tol, unroll, jax.lax.stop_gradient(scale),
                        early_exit and implicit_diff, fallback if implicit_diff else None, fallback_iters)

    if implicit_diff and sm.entrywise():
        z, aux = _forward_root(residual, z0, args, solve, update)
    elif implicit_diff:
        z, aux = jax.lax.custom_root(g, z0, solve, _tangent_solve, has_aux=True)
    else:
        z, aux = solve(g, z0)
    first, err = jax.lax.stop_gradient(aux)
    # a non-finite iterate (a NaN member, an overflow) is a non-finite state, not a solver failure
    result = RESULTS.where(err <= 1, RESULTS.successful, RESULTS.implicit_solve_failed)
    if not finiteness_deferred():  # (deferred: a non-finite iterate fails err <= 1, and the caller replays)
        result = RESULTS.where(jnp.isfinite(err) & jnp.all(jnp.isfinite(z)), result, RESULTS.nonfinite_state)
    if not _STATISTICS.get():
        return z, result, StepInfo.explicit(z.dtype)
    # the residual at the returned root (for Runge–Kutta stages XLA shares it with the update)
    res = sm.max_entry(jnp.abs(g(jax.lax.stop_gradient(z))))
    iterations = jnp.minimum(first.astype(jnp.int32), max_iters + (fallback_iters if fallback is not None else 0))
    return z, result, StepInfo(res, iterations)


def root_step_vjp(residual: Callable, update: Callable, z: Array, inputs: PyTree, ct_out: PyTree):
    """The discrete adjoint of a step ``out = update(z, inputs)`` whose ``z`` solves
    ``residual(z, inputs) = 0`` (a small ``z``): with ``(ẑ, ū) = (∂update/∂(z, inputs))ᵀ ct_out``,
    ``λ`` solves ``(∂residual/∂z)ᵀ λ = ẑ`` (Gauss–Jordan elimination, written out) and the
    inputs' cotangent is ``ū − (∂residual/∂inputs)ᵀ λ``. Returns ``(ct_inputs, converged)``."""
    _, update_vjp = jax.vjp(update, z, inputs)
    ct_z, ct_inputs = update_vjp(ct_out)
    J = jax.jacfwd(residual)(z, inputs)
    lam = sm.gauss_jordan(J.reshape(z.size, z.size).T, ct_z.reshape(-1, 1)).reshape(z.shape)
    _, residual_vjp = jax.vjp(lambda inputs: residual(z, inputs), inputs)
    ct_inputs = jax.tree.map(lambda a, b: a - b, ct_inputs, residual_vjp(lam)[0])
    return ct_inputs, jnp.all(jnp.isfinite(lam))


def root_step_jacobian(residual: Callable, update: Callable, z: Array, state: PyTree) -> Array:
    """The Jacobian ``∂out/∂state = ∂update/∂state − ∂update/∂z (∂residual/∂z)⁻¹ ∂residual/∂state``
    (the implicit function theorem, both raveled) of a step ``out = update(z, state)`` whose ``z``
    solves ``residual(z, state) = 0``: small dense matrices, formed for many steps at once
    (``vmap``) so that the backward sweep is one matrix–vector product per step."""
    flat, unravel = ravel_pytree(state)

    def both(z, flat):
        s = unravel(flat)
        return residual(z, s), ravel_pytree(update(z, s))[0]

    (Rz, Rs), (Uz, Us) = jax.jacfwd(both, (0, 1))(z, flat)
    return Us - Uz @ sm.gauss_jordan(Rz.reshape(z.size, z.size), Rs.reshape(z.size, -1))


class AbstractRootStepAdjoint(AbstractSteppedAdjoint):
    """A step ``state₁ = update(x, state, p)`` whose ``x`` solves ``residual(x, state, p) = 0``
    (a small system; ``p = (system's inexact arrays, the method's, dt)``), with the discrete
    adjoint of the implicit function theorem: the step's Jacobian ``∂state₁/∂state`` formed for
    a whole checkpoint group at once (:func:`root_step_jacobian`), one matrix–vector product per
    step in the sweep (exact: ``robust`` changes nothing), and the parameters' cotangents from
    the transposed equation (:func:`root_step_vjp`), again for the whole group at once.
    :meth:`step_residuals` keeps ``x``."""

    @abc.abstractmethod
    def root_functions(self, system, dt) -> tuple[Callable, Callable, PyTree]:
        """``(residual, update, p)``: the step's equation and its update as functions of
        ``(x, state, p)``, and ``p``."""

    def step_linearize(self, system, dt, state, x):
        residual, update, p = self.root_functions(system, dt)
        return x, root_step_jacobian(lambda x, s: residual(x, s, p), lambda x, s: update(x, s, p), x, state)

    def step_vjp(self, system, dt, state, linearization, ct_state, robust: bool = False):
        x, jac = linearization
        flat, unravel = ravel_pytree(ct_state)
        lam = jnp.sum(jac * flat[:, None], axis=0)
        return unravel(lam), (state, x, ct_state), jnp.all(jnp.isfinite(lam))

    def parameter_vjp(self, system, dt, seed):
        state, x, ct = seed
        residual, update, p = self.root_functions(system, dt)
        return root_step_vjp(lambda x, p: residual(x, state, p), lambda x, p: update(x, state, p), x, p, ct)[0]
