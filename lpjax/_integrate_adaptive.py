"""``integrate`` through the ensembles' member programs: with a controller, one trajectory run
by the adaptive member (:class:`lpjax._adaptive.AdaptiveMember`), the same program and so the
same steps, and its gradient by the discrete adjoint over the accepted steps (:func:`solve`);
with events, the event members (:func:`run_member`).

The forward run is a ``lax.scan`` over the save times of the member's ``step`` (a ``while`` of
attempts up to the next save time), as an ensemble's scan kernel runs it. Under reverse mode
the run also writes each accepted step's size and the method's state after it to a tape of
``max_steps + 1`` states, and the backward pass runs back over the accepted steps: the
cotangent of the state is pulled through one step of the method at a time (``jax.vjp`` of the
accepted map, of its recorded size), the system's arrays' cotangents summed on the way, and the
saves' cotangents added where they were taken. The step sizes are constants of that
derivative: the derivative is of the map the run made, and differs from that of the whole
adaptive run (whose steps move with the parameters) by about the tolerance. Rejected attempts
do not enter it.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from ._adaptive import AdaptiveMember
from ._integrator import RESULTS
from ._integrator._error_estimates import step_and_error
from ._member import innermost

__all__ = ["run_member", "solve"]


def _run(member, dyn, y0, taped: bool):
    """``(ys, carry, tape, accepted at each save)`` of a member program from ``y0``: a
    ``lax.scan`` over its saves; ``taped`` (an adaptive member): with the tape of its accepted
    steps (else the last two are None)."""
    carry = member.init(dyn, y0)
    first = member.observe(dyn, carry)
    tape = None
    if taped:
        states = jax.tree.map(lambda a: jnp.zeros((member.max_steps + 1, *a.shape), a.dtype).at[0].set(a), carry.state)
        tape = (states, jnp.zeros((member.max_steps,), member.dtype))

    def one_save(ct, _):
        c, tape = ct
        c, tape = member.step_taped(dyn, c, tape) if taped else (member.advance(dyn, c), None)
        return (c, tape), (member.observe(dyn, c), c.accepted if taped else None)

    n_save = member.n_steps // member.save_every
    (carry, tape), (saved, accepted) = jax.lax.scan(one_save, (carry, tape), None, length=n_save)
    ys = jax.tree.map(lambda f, s: jnp.concatenate([f[None], s]), first, saved)
    return ys, carry, tape, None if accepted is None else jnp.concatenate([jnp.zeros((1,), accepted.dtype), accepted])


def _outputs(member, dyn, ys, carry, throw: bool):
    _, _, stats = member.summary(dyn, carry)
    if throw:  # (here, where no tangent of the result code is traced)
        ys = carry.result.error_if(ys, carry.result != RESULTS.successful)
    return ys, carry.result, stats, carry.state


@eqx.filter_custom_vjp
def _solve(diff, member, throw):
    dyn, y0 = diff
    ys, carry, _, _ = _run(member, dyn, y0, False)
    return _outputs(member, dyn, ys, carry, throw)


@_solve.def_fwd
def _solve_fwd(perturbed, diff, member, throw):
    dyn, y0 = diff
    ys, carry, tape, save_at = _run(member, dyn, y0, True)
    return _outputs(member, dyn, ys, carry, throw), (tape, save_at, carry.accepted)


@_solve.def_bwd
def _solve_bwd(residuals, grad_obj, perturbed, diff, member, throw):
    (states, hs), save_at, n_accepted = residuals
    dyn, y0 = diff
    ct_ys = grad_obj[0]
    ct_ys = jnp.zeros((save_at.shape[0], *y0.shape), y0.dtype) if ct_ys is None else ct_ys
    method = member.method
    zero_dyn = jax.tree.map(jnp.zeros_like, dyn)

    def observe_ct(k, state):  # the saves taken after k accepted steps, pulled back to the state
        ct = jnp.sum(jnp.where((save_at == k)[:, None], ct_ys.reshape(save_at.shape[0], -1), 0), axis=0)
        _, vjp = jax.vjp(lambda d, s: method.observe(member.system(d), s), dyn, state)
        return vjp(ct.reshape(y0.shape))

    def back(j, gl):  # the accepted step k = n − j, from states[k − 1] to states[k]
        g, lam = gl
        k = n_accepted - j
        at = lambda i: jax.tree.map(lambda b: b[i], states)  # noqa: E731
        g_obs, lam_obs = observe_ct(k, at(k))
        lam = jax.tree.map(jnp.add, lam, lam_obs)
        _, vjp = jax.vjp(lambda d, s: step_and_error(method, member.system(d), s, hs[k - 1], member.estimate,
                                                        member.extrapolate)[0], dyn, at(k - 1))
        g_step, lam = vjp(lam)
        return jax.tree.map(lambda a, b, c: a + b + c, g, g_obs, g_step), lam

    lam0 = jax.tree.map(jnp.zeros_like, jax.tree.map(lambda b: b[0], states))
    g, lam = jax.lax.fori_loop(0, n_accepted, back, (zero_dyn, lam0))
    g_obs, lam_obs = observe_ct(0, jax.tree.map(lambda b: b[0], states))
    lam = jax.tree.map(jnp.add, lam, lam_obs)
    _, vjp = jax.vjp(lambda d, y: member.init(d, y).state, dyn, y0)
    g_init, g_y0 = vjp(lam)
    grads = (jax.tree.map(lambda a, b, c: a + b + c, g, g_obs, g_init), g_y0)
    return jax.tree.map(lambda gr, p: gr if p else None, grads, perturbed)


@eqx.filter_jit
def solve(member: AdaptiveMember, dyn, y0, throw: bool):
    """``(ys at 0 and the save times, result code, statistics, the method's final state)`` of
    one adaptive run of ``member`` from ``y0`` (``dyn``: the system's arrays); ``throw``: a
    failed run raises (``eqx.error_if``) with its result's message."""
    return _solve((dyn, y0), member, throw)


@eqx.filter_jit
def run_member(member, dyn, y0, throw: bool):
    """One run of a member program (an event member: no gradient through its search) from
    ``y0``, as :func:`lpjax.integrate` returns it: ``(ys at the saves, the carry at the end, its
    summary)``; ``throw``: a failed run (other than a terminal event) raises with its result's
    message."""
    ys, carry, _, _ = _run(member, dyn, y0, False)
    result = innermost(carry).result
    if throw:
        ys = result.error_if(ys, (result != RESULTS.successful) & (result != RESULTS.event_occurred))
    return ys, carry, member.summary(dyn, carry)
