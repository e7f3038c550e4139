"""Members with a chaos indicator's tangent vectors (:mod:`lpjax._tangents`), through the member
contract, so that every kernel (scan, entries, fused, native) runs them.

Each step propagates the tangents by the method's own linearized step: the JVP of
``method.step`` at the step's state (through an implicit solve by the implicit function
theorem, the solve's own tangent rule), so the tangents are those of the discrete map the
ensemble actually runs, not of the ODE. They are tangents of the method's state (a Clebsch
lift, a predictor, stage guesses); they are measured, orthonormalised and reported in the
observed coordinates (the state that :func:`lpjax.integrate` saves), through the JVP of
``method.observe``, and every linear combination that measures them there is applied to the
state tangents as well. :class:`TangentMember` wraps a fixed-step member program,
:class:`AdaptiveTangentMember` an adaptive one; the indicator's values are their observable.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree

from ._adaptive import AdaptiveMember
from ._integrator import RESULTS
from ._integrator._error_estimates import step_and_error
from ._integrator._implicit import collecting_statistics
from ._member import AbstractWrappedMember, FixedMember, steps
from ._small import solve_small
from ._tangents import AbstractIndicator

__all__ = ["AbstractTangentMember", "AdaptiveTangentMember", "TangentMember", "with_indicator"]


def _orthonormalised(W: Float[Array, "k d"], tangents):
    """Modified Gram–Schmidt on the rows of ``W`` (the observed tangents), the same combinations
    applied to ``tangents`` (the state tangents, leading axis ``k``): ``(log R_ii, tangents')``,
    the new tangents' observed images orthonormal. Unrolled over ``k`` (no LAPACK: every kernel
    runs it)."""
    k = W.shape[0]
    rows, states, logs = [], [], []
    for i in range(k):
        w, s = W[i], jax.tree.map(lambda a: a[i], tangents)
        for q, qs in zip(rows, states):
            c = jnp.dot(q, w)
            w, s = w - c * q, jax.tree.map(lambda a, b: a - c * b, s, qs)
        n = jnp.sqrt(jnp.dot(w, w))
        rows.append(w / n)
        states.append(jax.tree.map(lambda a: a / n, s))
        logs.append(jnp.log(n))
    return jnp.stack(logs), jax.tree.map(lambda *a: jnp.stack(a), *states)


def _directions(d: int, dtype) -> np.ndarray:
    """``d`` orthonormal directions in ``R^d`` that lie along no axis (the QR of a fixed random
    matrix, rows): an axis can be a symmetry's direction, whose exponent is 0."""
    q, _ = np.linalg.qr(np.random.default_rng(63).normal(size=(d, d)))
    return q.T.astype(dtype)


def _on_leaf(system, y, V: Float[Array, "m d"]) -> Float[Array, "m d"]:
    """The directions ``V`` projected onto the tangent space of the level set of the system's
    Casimirs at ``y``: ``v − Gᵀ(G Gᵀ)⁻¹ G v``, ``G`` their gradients (``r × d``). For a Lie–Poisson
    system at a regular point this is the tangent space of the coadjoint orbit, ``{ad*_ξ μ}``,
    for any algebra whose Casimirs :meth:`~lpjax.AbstractSystem.casimirs` returns (a user's own
    algebra: give the system its Casimirs, ``LiePoissonSystem(..., casimirs=...)``); for a
    nonholonomic system, the level set of the invariants it declares there."""
    G = jax.jacfwd(system.casimirs)(y)
    return V - (G.T @ solve_small(G @ G.T, G @ V.T)).T


def _lifted(observe, state, W: Float[Array, "k d"]):
    """Tangents of the method's ``state`` whose observed images are the rows of ``W``: the
    least-norm ones, ``u = Dᵀ(D Dᵀ)⁻¹ w`` with ``D`` the derivative of ``observe`` at ``state``
    (``w`` itself where the state is what is observed; a Clebsch lift's tangent, orthogonal to
    the fibre, for a collective method). Leading axis ``k``."""
    _, back = jax.vjp(observe, state)
    d = W.shape[1]
    up = lambda w: back(w)[0]  # noqa: E731
    DDt = _observed(observe, state, jax.vmap(up)(jnp.eye(d, dtype=W.dtype)))
    return jax.vmap(lambda w: up(solve_small(DDt, w)))(W)


def _observed(observe, state, tangents) -> Float[Array, "k d"]:
    """The tangents (of the method's ``state``, leading axis ``k``) in the observed coordinates."""
    return jax.vmap(lambda u: jax.jvp(observe, (state,), (u,))[1])(tangents)


def _started(indicator, method, system, state, d: int, dtype):
    """``(tangents, sums)`` at the start from ``state``: the indicator's vectors, on the leaf where
    it keeps to it, lifted to the method's state and orthonormalised; the sums' zeros."""
    def observe(s):
        return method.observe(system, s)

    y = observe(state)
    r = indicator.casimir_count(system, y)
    V = jnp.asarray(_directions(d, np.dtype(dtype)))
    V = (_on_leaf(system, y, V) if r else V)[: indicator.n_tangents(d, r)]
    tangents = _lifted(observe, state, V)
    _, tangents = _orthonormalised(_observed(observe, state, tangents), tangents)
    return tangents, jnp.zeros((indicator.size(d, r),), dtype)


def _renormalised(indicator, method, system, state, tangents, acc, t, h):
    """The tangents at ``state`` orthonormalised (in the observed coordinates, back onto the leaf
    first where the indicator keeps it and has more than one vector), and the indicator's sums
    updated at time ``t``, ``h`` after the last renormalisation."""
    def observe(s):
        return method.observe(system, s)

    W = _observed(observe, state, tangents)
    y = observe(state)
    if W.shape[0] > 1 and indicator.casimir_count(system, y):
        # back onto the leaf: a method keeps its Casimirs to roundoff (or, a collective one, to its order), and
        # Gram-Schmidt would let that leak stand in for the most contracting direction
        off = W - _on_leaf(system, y, W)
        tangents = jax.tree.map(jnp.subtract, tangents, _lifted(observe, state, off))
        W = W - off
    logs, tangents = _orthonormalised(W, tangents)
    return tangents, indicator.update(acc, logs, t, h)


class AbstractTangentMember(AbstractWrappedMember):
    """A member program with an indicator's tangent vectors around an ``inner`` one (see the
    module): its observable is the indicator's values (``with_state``: and the state, as
    ``"state"``, which :func:`lpjax.integrate` keeps)."""

    indicator: eqx.AbstractVar[AbstractIndicator]
    with_state: eqx.AbstractVar[bool]

    @abc.abstractmethod
    def time(self, carry):
        """The time the indicator's sums are at (> 0 at the start: their zeros)."""

    def observe(self, dyn_m, carry):
        values = self.indicator.values(carry.acc, self.time(carry))
        return {"state": self.inner.observe(dyn_m, carry.inner), **values} if self.with_state else values

    def summary(self, dyn_m, carry):
        return self.inner.summary(dyn_m, carry.inner)

    def finished(self, dyn_m, carry):
        return None


@final
class _TangentCarry(eqx.Module):
    inner: Any  # the fixed-step member's carry
    tangents: PyTree  # the method state's tangents, leading axis k
    n: Int[Array, ""]  # steps taken
    acc: Array  # the indicator's running sums


@final
class TangentMember(AbstractTangentMember):
    """A fixed-step member program (``inner``) with an indicator's tangent vectors (see the
    module), orthonormalised every ``indicator.every`` steps."""

    inner: FixedMember
    indicator: AbstractIndicator
    with_state: bool = eqx.field(static=True, default=False)

    sorts: ClassVar[bool] = False

    def __check_init__(self):
        every = self.indicator.every
        if self.inner.save_every % every:
            raise ValueError(f"{type(self.indicator).__name__}: the saves ({self.inner.save_every} steps apart) must "
                             f"fall on the orthonormalisations (every {every} steps): make save_every a multiple of "
                             f"{every}")

    @property
    def save_every(self) -> int:
        return self.inner.save_every

    def time(self, carry):  # (of the last orthonormalisation, which the sums are at: a save, or a terminal event's step)
        every = self.indicator.every
        return jnp.maximum(carry.n // every * every, 1).astype(self.dtype) * self.inner.dt

    def init(self, dyn_m, y0):
        c = self.inner.init(dyn_m, y0)
        tangents, acc = _started(self.indicator, self.method, self.system(dyn_m), c.state, y0.shape[0], self.dtype)
        return _TangentCarry(c, tangents, jnp.zeros((), c.num_failed.dtype), acc)

    def step(self, dyn_m, carry: _TangentCarry) -> _TangentCarry:
        system, dt = self.system(dyn_m), self.inner.dt

        def stepped(s):
            with collecting_statistics(self.inner.stats):  # (at trace time)
                state, result, info = self.method.step(system, s, dt)
            return state, (result, info)

        def one(t):
            return jax.jvp(stepped, (carry.inner.state,), (t,), has_aux=True)

        state, tangents, (result, info) = jax.vmap(one, out_axes=(None, 0, None))(carry.tangents)
        inner = carry.inner.update(state, result, info)
        n = carry.n + 1

        def renormalised(tangents, acc):
            t = n.astype(self.dtype) * dt
            return _renormalised(self.indicator, self.method, system, state, tangents, acc, t, self.indicator.every * dt)

        if self.indicator.every == 1:
            tangents, acc = renormalised(tangents, carry.acc)
        else:
            tangents, acc = jax.lax.cond(n % self.indicator.every == 0, renormalised, lambda t, a: (t, a), tangents,
                                         carry.acc)
        return _TangentCarry(inner, tangents, n, acc)

    def advance(self, dyn_m, carry, step=None):
        return steps(step or self.step, dyn_m, carry, self.save_every)


@final
class _AdaptiveTangentCarry(eqx.Module):
    inner: Any  # the adaptive member's carry
    tangents: PyTree
    acc: Array
    t: Float[Array, ""]  # the time of the last accepted step carried (of the sums)


@final
class AdaptiveTangentMember(AbstractTangentMember):
    """An adaptive member program (``inner``) with an indicator's tangent vectors: each accepted
    step of size ``h`` from a state carries them by the JVP of that accepted step (its size held
    fixed, as the discrete adjoint holds it: with step doubling, the two half steps the run goes
    on from), and they are orthonormalised after every accepted step (whatever ``every``). The
    accepted step is computed again under the JVP (its primal is not kept from the attempt)."""

    inner: AdaptiveMember
    indicator: AbstractIndicator
    with_state: bool = eqx.field(static=True, default=False)

    sorts: ClassVar[bool] = True  # (by the inner member's predicted cost)
    save_every: ClassVar[int] = 1

    def time(self, carry):
        return jnp.where(carry.t > 0, carry.t, 1.0)

    def step_estimate(self, dyn_m, y0):
        return self.inner.step_estimate(dyn_m, y0)

    def init(self, dyn_m, y0):
        c = self.inner.init(dyn_m, y0)
        return _AdaptiveTangentCarry(c, *_started(self.indicator, self.method, self.system(dyn_m), c.state, y0.shape[0],
                                                  self.dtype), jnp.zeros((), self.dtype))

    def until_save(self, dyn_m, carry: _AdaptiveTangentCarry, tape, record):
        """:meth:`AdaptiveMember.until_save <lpjax._adaptive.AdaptiveMember.until_save>` with the
        tangents carried over each accepted step before ``record`` sees it (events around this
        member: a terminal event's step has carried them)."""
        system, inner = self.system(dyn_m), self.inner

        def both(before, after, tapes):
            def accepted(tangents, acc, _):
                h = after.t - before.t

                def stepped(s):
                    return step_and_error(inner.method, system, s, h, inner.estimate, inner.extrapolate)[0]

                tangents = jax.vmap(lambda u: jax.jvp(stepped, (before.state,), (u,))[1])(tangents)
                return (*_renormalised(self.indicator, inner.method, system, after.state, tangents, acc, after.t, h),
                        after.t)

            took = (after.accepted > before.accepted) & (after.result == RESULTS.successful)
            mine = jax.lax.cond(took, accepted, lambda *kept: kept, *tapes[0])
            after, theirs = record(before, after, tapes[1])
            return after, (mine, theirs)

        c, (mine, tape) = inner.until_save(dyn_m, carry.inner, ((carry.tangents, carry.acc, carry.t), tape), both)
        return _AdaptiveTangentCarry(c, *mine), tape

    def step(self, dyn_m, carry: _AdaptiveTangentCarry) -> _AdaptiveTangentCarry:
        return self.until_save(dyn_m, carry, None, lambda before, after, tape: (after, tape))[0]

    def advance(self, dyn_m, carry, step=None):
        return (step or self.step)(dyn_m, carry)


def with_indicator(member, indicator: AbstractIndicator, with_state: bool = False):
    """``member`` (a fixed-step or adaptive member program) with ``indicator``'s tangents."""
    if isinstance(member, AdaptiveMember):
        return AdaptiveTangentMember(member, indicator, with_state)
    return TangentMember(member, indicator, with_state)
