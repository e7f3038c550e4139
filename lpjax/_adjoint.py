"""Loops whose reverse mode stores O(√n) carries: checkpointed groups of steps, differentiated
by JAX, by a hand-written discrete adjoint of the whole step, or by the method's own adjoint of
its step (:class:`lpjax.AbstractSteppedAdjoint`)."""

from __future__ import annotations

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp

__all__ = ["loop", "stepped_scan"]


def _group_size(length: int) -> int:
    """The checkpoint group: a divisor of ``length`` within a factor 2 of √length if there is one
    (no remainder loop, so the step is compiled once per level), else ⌊√length⌋."""
    root = math.isqrt(length)
    divisors = [d for d in range(max(1, root // 2), 2 * root + 1) if length % d == 0]
    return min(divisors, key=lambda d: abs(d - root)) if divisors else root


def loop(f, dyn, carry, length: int, discrete: bool, stepped=None, in_sweep: bool = False):
    """``lax.scan`` of ``f(dyn, ·) -> (carry, out)`` over ``length`` iterations, whose reverse mode
    stores O(√length) carries.

    The iterations run in groups of about √length (:func:`_group_size`). The backward pass keeps
    the carry at each group's start and recomputes one group at a time (two-level
    checkpointing; one extra forward sweep). Each group is ``jax.checkpoint``-ed
    (``discrete=False``: JAX differentiates the loop, forward and reverse mode), a
    :func:`_adjoint_scan` (``discrete=True``: the discrete adjoint, reverse mode only; ``in_sweep``:
    its parameter cotangent formed in the sweep) or, given
    ``stepped = (f_res, f_lin, f_vjp, f_params, throw, linear_seed, f_seed)``, a :func:`stepped_scan` (the method's adjoint of its
    step, reverse mode only; when the loop's entering states and residuals take at most
    :data:`KEEP_BYTES`, the run keeps them and the backward pass recomputes nothing). Without
    differentiation none costs anything. Loops shorter than 16 are one group.
    """
    if stepped is not None:
        discrete = True

        def run(c, n, keep=False):
            return stepped_scan((f,) + tuple(stepped), n, dyn, c, keep)

        if length * _step_bytes(stepped[0], dyn, carry) <= KEEP_BYTES:
            return run(carry, length, True)
    elif discrete:
        def run(c, n):
            return _adjoint_scan(f, n, dyn, c, in_sweep)
    else:
        def run(c, n):
            return jax.lax.scan(lambda c, _: f(dyn, c), c, None, length=n, unroll=n == 1)
    if length < 16:
        return run(carry, length)
    group = _group_size(length)
    q, r = divmod(length, group)
    if r:  # the last group takes the remainder: every step then runs inside a loop of >= 2 steps,
        q -= 1  # compiled alike in any run (a run split in pieces stays bit-identical)

    def run_group(c, _):
        return run(c, group)

    carry, ys = jax.lax.scan(run_group if discrete else jax.checkpoint(run_group, prevent_cse=False), carry, None, length=q)
    ys = jax.tree.map(lambda a: a.reshape(q * group, *a.shape[2:]), ys)
    if r:
        carry, rest = run(carry, group + r)
        ys = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), ys, rest)
    return carry, ys


KEEP_BYTES = 2**20
"""Per trajectory (a batch under ``vmap`` keeps its size times as much): a loop with its own
adjoint of a step whose entering states and residuals fit keeps them in its run rather than
recomputing them in the backward pass. Measured (10⁴ steps of the rigid body, gradient in the
inertia over the forward run): the splitting (24 bytes a step) 4.3 recomputed, 3.1 kept; its
exact flow 5.7 and 4.8; Moser–Veselov 2.7 and 1.5."""


def _step_bytes(f_res, dyn, carry) -> int:
    """What a step keeps for the backward pass: its entering state and residuals, in bytes."""
    c1, res = jax.eval_shape(f_res, dyn, carry)
    return _nbytes((c1.state, res))


def _nbytes(tree) -> int:
    """The bytes of the arrays (or shapes) of ``tree``."""
    return sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(tree))


def _run_outside(backward, f, length: int, dyn, carry, keep=None):
    """``lax.scan`` of ``f(dyn, ·)`` over ``length`` iterations, whose reverse mode is
    ``backward(dyn, carry, wanted, cotangents) -> (ct_dyn, ct_carry)`` (``wanted``: which leaves of
    ``dyn`` are differentiated, so that a gradient in the initial state alone forms no parameter
    cotangent).

    The loop runs outside the ``custom_vjp``, on values JAX does not differentiate, and
    :func:`_attach` hands its result on with the adjoint: run inside the ``custom_vjp`` the same
    loop compiled to twice the time (Moser–Veselov, 10⁴ steps: 12.5 ms against 6.7 ms). Integer
    outputs (result codes, counters) carry no tangent, so that JAX does not differentiate what
    reads them (``eqx.error_if`` on the result code).

    ``keep``: ``f_res(dyn, c) -> (carry, residuals)``, the step keeping what the backward pass
    needs; the loop then runs it (its outputs ``None``), and ``backward`` gets each step's
    entering state and residuals as a fifth argument."""
    fixed = jax.lax.stop_gradient(dyn)
    if keep is None:
        run, kept = jax.lax.scan(lambda c, _: f(fixed, c), jax.lax.stop_gradient(carry), None, length=length), None
    else:
        def forward(c, _):
            c1, res = keep(fixed, c)
            return c1, (c.state, res)

        end, kept = _chunked_scan(forward, jax.lax.stop_gradient(carry), length)
        run = (end, None)
    out = _attach(backward, dyn, carry, run, kept)
    return jax.tree.map(lambda a: a if eqx.is_inexact_array(a) else jax.lax.stop_gradient(a), out)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _attach(backward, dyn, carry, result, kept):
    """``result`` (the loop run from ``carry``, keeping ``kept`` for the backward pass), with
    ``backward`` as its reverse mode."""
    return result


def _is_primal(x):
    return isinstance(x, jax.custom_derivatives.CustomVJPPrimal)


def _attach_fwd(backward, dyn, carry, result, kept):
    # symbolic_zeros: the leaves come as (value, perturbed)
    wanted = jax.tree.map(lambda p: p.perturbed and eqx.is_inexact_array(p.value), dyn, is_leaf=_is_primal)
    dyn, carry, result, kept = jax.tree.map(lambda p: p.value, (dyn, carry, result, kept), is_leaf=_is_primal)
    return result, (dyn, carry, wanted, kept)


def _instantiate(ct):
    zero = jax.custom_derivatives.SymbolicZero
    return jax.tree.map(lambda z: jnp.zeros(z.shape, z.dtype) if isinstance(z, zero) else z, ct,
                        is_leaf=lambda z: isinstance(z, zero))


def _attach_bwd(backward, residuals, cotangents):
    dyn, carry, wanted, kept = residuals
    cotangents = _instantiate(cotangents)
    ct_dyn, ct_carry = backward(dyn, carry, wanted, cotangents) if kept is None else backward(
        dyn, carry, wanted, cotangents, kept)
    return ct_dyn, ct_carry, None, None


_attach.defvjp(_attach_fwd, _attach_bwd, symbolic_zeros=True)


def _inexact(tree):
    return eqx.filter(tree, eqx.is_inexact_array)


def _adjoint_scan(f, length: int, dyn, carry, in_sweep: bool):
    """``lax.scan`` of ``f(dyn, ·) -> (carry, out)`` with a hand-written discrete adjoint.

    The backward pass recomputes the loop keeping the ``length`` carries ``c_k``, then runs the
    adjoint recursion ``λ_k = (∂f/∂c)(c_k)ᵀ (λ_{k+1}, out̄_k)`` backwards in a ``lax.scan``. The
    parameter cotangent ``Σ_k (∂f/∂dyn)(c_k)ᵀ (λ_{k+1}, out̄_k)`` is summed in the same sweep
    (``in_sweep``: one vector–Jacobian product per step in both) or formed afterwards for all
    ``k`` at once under ``vmap``. Measured (CPU, 10⁴ steps, all system arrays and y0, gradient
    over forward): over single steps, in the sweep against ``vmap``, 3.7 against 7.4 (Suris map)
    and 14.4 against 13.5 (RK4, heavy top: about even); over saves one step apart ``vmap`` is the
    faster, 3.8 against 14.9 (Suris map). Same gradient as JAX's, to roundoff; no forward mode.
    """
    return _run_outside(functools.partial(_adjoint_scan_bwd, f, length, in_sweep), f, length, dyn, carry)


def _adjoint_scan_bwd(f, length, in_sweep, dyn, carry0, wanted, cotangents):
    ct_carry, ct_outs = _inexact(cotangents)
    _, carries = jax.lax.scan(lambda c, _: (f(dyn, c)[0], c), carry0, None, length=length)
    dyn_float, dyn_other = eqx.partition(dyn, wanted)

    def vjp(c, ct_out, lam, wrt_dyn):  # one iteration's inexact outputs as a function of (dyn, carry) floats
        c_float, c_other = eqx.partition(c, eqx.is_inexact_array)

        def local(d, cf):
            return _inexact(f(eqx.combine(d, dyn_other), eqx.combine(cf, c_other)))

        if wrt_dyn:
            return jax.vjp(local, dyn_float, c_float)[1]((lam, ct_out))
        return None, jax.vjp(lambda cf: local(dyn_float, cf), c_float)[1]((lam, ct_out))[0]

    params = bool(jax.tree.leaves(dyn_float))
    if params and in_sweep:
        def back_with_dyn(acc, xs):
            lam, ct_dyn = acc
            d, lam = vjp(*xs, lam, True)
            return (lam, jax.tree.map(jnp.add, ct_dyn, d)), None

        zero = jax.tree.map(jnp.zeros_like, dyn_float)
        (lam0, ct_dyn), _ = jax.lax.scan(back_with_dyn, (ct_carry, zero), (carries, ct_outs), reverse=True)
        return ct_dyn, lam0

    def back(lam, xs):
        return vjp(*xs, lam, False)[1], lam

    lam0, lams = jax.lax.scan(back, ct_carry, (carries, ct_outs), reverse=True)
    if not params:
        return None, lam0
    ct_dyn = jax.vmap(lambda c, ct_out, lam: vjp(c, ct_out, lam, True)[0])(carries, ct_outs, lams)
    return jax.tree.map(lambda a: jnp.sum(a, axis=0), ct_dyn), lam0


def stepped_scan(fs, length: int, dyn, carry, keep: bool = False):
    """``lax.scan`` of ``f(dyn, ·) -> (carry, None)`` whose reverse mode is the method's own
    adjoint of a step. ``fs = (f, f_res, f_lin, f_vjp, f_params, throw, linear_seed, f_seed)``: ``f_res(dyn, c) ->
    (carry, residuals)`` is the step keeping what ``f_lin(dyn, state, residuals) -> lin``
    needs, ``lin`` what ``f_vjp(dyn, state, lin, ct_state, robust) -> (ct_state, seed, ok)``
    needs (``robust``: the fast or the robust solve), and ``f_params(dyn, seed) -> ct_dyn`` a
    step's parameter cotangent; ``linear_seed``: ``f_params`` is linear in the seed, so the seeds
    are summed and ``f_params`` runs once; ``f_seed(dyn, state, lin, ct_new_state) -> seed``, or
    None: each step's seed formed after the sweep for all the steps at once, not in it. The backward pass recomputes the loop once (without the
    statistics), keeping each step's entering state and residuals, runs ``f_lin`` over all the
    steps at once (``vmap``), ``f_vjp`` backwards (again with the robust solve if a step's fast
    one failed), then ``f_params`` over all the steps at once (not at all for a gradient in the
    initial state alone) and sums. A step whose robust adjoint solve fails too makes every
    cotangent NaN, and with ``throw`` raises.

    Why batched: on CPU a sequential loop's cost is mostly the number of kernels per iteration,
    so work that does not depend on the cotangent is moved out of the sweep. Measured (10⁴
    steps, gradient over forward, all arrays and y0): Moser–Veselov 4.5 with the Legendre
    equation's Jacobian formed and solved in the sweep, 3.8 with the step's Jacobian formed
    batched and one matrix–vector product per step. ``keep``: the run keeps each step's entering
    state and residuals, and the backward pass does not recompute them."""
    return _run_outside(functools.partial(_stepped_bwd, fs, length), fs[0], length, dyn, carry, fs[1] if keep else None)


_ADJOINT_FAILED = ("the adjoint equations of a step did not converge: the gradient is not reliable (NaN with "
                   "throw=False). Reduce dt, raise max_iters, or use adjoint='direct'")


_SMALL = 512  # bytes: XLA's CPU runtime runs a loop body's kernels one after the other, without the cost of
# tracking their dependencies, when every buffer they use is at most this large (or there are at most 8)


def _chunked_scan(f, carry, length: int):
    """``lax.scan(f, carry, None, length)``, run as a scan over chunks of a scan of as many steps
    as keep their outputs within :data:`_SMALL` bytes. Measured (Kahan–Li 6 of the rigid body's
    splitting, 10⁴ steps keeping each state): 7.2 ms as one scan writing a buffer of 100 states,
    2.6 ms in chunks of 16, against 2.4 ms without keeping them."""
    chunk = min(length, _SMALL // max(_nbytes(jax.eval_shape(lambda c: f(c, None)[1], carry)), 1))
    if chunk < 2 or chunk == length:
        return jax.lax.scan(f, carry, None, length=length)
    q, r = divmod(length, chunk)
    carry, ys = jax.lax.scan(lambda c, _: jax.lax.scan(f, c, None, length=chunk), carry, None, length=q)
    ys = jax.tree.map(lambda a: a.reshape(q * chunk, *a.shape[2:]), ys)
    if r:
        carry, rest = jax.lax.scan(f, carry, None, length=r)
        ys = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), ys, rest)
    return carry, ys


def _stepped_bwd(fs, length, dyn, carry0, wanted, cotangents, kept=None):
    _, f_res, _, _, f_params, throw, linear_seed, _ = fs
    ct_carry = cotangents[0]
    params = any(jax.tree.leaves(wanted))
    if kept is None:
        def forward(c, _):  # (the statistics are not recomputed: XLA drops what only they need)
            c1, res = f_res(dyn, c)
            return eqx.tree_at(lambda c: c.state, c, c1.state), (c.state, res)

        lam, ok, ct_dyn = _group_bwd(fs, dyn, _chunked_scan(forward, carry0, length)[1], ct_carry.state, params)
    else:  # the run kept every step
        lam, ok, ct_dyn = _kept_bwd(fs, dyn, kept, ct_carry.state, params, length)
    if params and linear_seed:  # the seeds' sum: the parameter cotangent formed once
        ct_dyn = f_params(dyn, ct_dyn)
    if params:
        ct_dyn = jax.tree.map(lambda a: jnp.where(ok, a, jnp.nan), ct_dyn)
    lam = jax.tree.map(lambda a: jnp.where(ok, a, jnp.nan), lam)
    if throw:
        lam = eqx.error_if(lam, ~ok, _ADJOINT_FAILED)
    return ct_dyn, eqx.tree_at(lambda c: c.state, ct_carry, lam)  # (the statistics pass through)


def _kept_bwd(fs, dyn, kept, lam, params: bool, length: int):
    """:func:`_group_bwd` over the kept steps in groups of about √length (as recomputed), the
    last group first. (Larger groups were faster for the splitting's exact flow, 3.7 forward
    runs against 4.8, but XLA's CPU runtime deadlocked on some sizes: DEP, 10⁴ steps in groups
    of 1000 or 3360, not of 100, 500 or 2000.)"""
    group = length if length < 16 else _group_size(length)
    q, r = divmod(length, group)
    head = jax.tree.map(lambda a: a[:q * group].reshape(q, group, *a.shape[1:]), kept)
    shape = jax.eval_shape(lambda: _group_bwd(fs, dyn, jax.tree.map(lambda a: a[0], head), lam, params)[2])
    total, ok = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shape), jnp.asarray(True)
    if r:
        lam, ok, total = _group_bwd(fs, dyn, jax.tree.map(lambda a: a[q * group:], kept), lam, params)

    def back(acc, one_group):
        lam, ok, total = acc
        lam, ok1, part = _group_bwd(fs, dyn, one_group, lam, params)
        return (lam, ok & ok1, jax.tree.map(jnp.add, total, part)), None

    return jax.lax.scan(back, (lam, ok, total), head, reverse=True)[0]


def _group_bwd(fs, dyn, kept, lam, params: bool):
    """``(λ, ok, parameter cotangent, the seeds' sum if they are linear, or None)`` of the steps
    whose entering states and residuals are ``kept``, from the cotangent ``lam`` of the state
    after them."""
    _, _, f_lin, f_vjp, f_params, _, linear_seed, f_seed = fs
    states, res = kept
    lins = jax.vmap(lambda state, r: f_lin(dyn, state, r))(states, res)

    batched = params and f_seed is not None  # the seeds formed after the sweep, from the cotangents that entered
    total = params and linear_seed and not batched  # the seeds summed in the sweep
    if total:
        shape = jax.eval_shape(lambda: f_vjp(dyn, states[0], jax.tree.map(lambda a: a[0], lins), lam, False))
        zero = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), shape[1])

    def sweep(robust: bool):
        def back(acc, xs):
            lam, ok, summed = acc
            lam1, seed, ok1 = f_vjp(dyn, xs[0], xs[1], lam, robust)
            if batched:
                return (lam1, ok & ok1, None), lam
            if total:
                return (lam1, ok & ok1, jax.tree.map(jnp.add, summed, seed)), None
            return (lam1, ok & ok1, None), seed

        return jax.lax.scan(back, (lam, jnp.asarray(True), zero if total else None), (states, lins), reverse=True)

    fast = sweep(False)  # a group with a step whose fast adjoint solve failed is redone robustly
    (lam, ok, summed), seeds = jax.lax.cond(fast[0][1], lambda: fast, lambda: sweep(True))
    if batched:
        seeds = jax.vmap(lambda state, lin, ct: f_seed(dyn, state, lin, ct))(states, lins, seeds)
        if linear_seed:
            return lam, ok, jax.tree.map(lambda a: jnp.sum(a, axis=0), seeds)
    if not params or total:
        return lam, ok, summed
    return lam, ok, jax.tree.map(lambda a: jnp.sum(a, axis=0), jax.vmap(lambda seed: f_params(dyn, seed))(seeds))
