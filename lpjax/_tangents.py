"""Chaos indicators from the tangent dynamics of the method itself.

A member with an indicator carries tangent vectors beside its state, and each step propagates
them by the method's own linearized step: the JVP of ``method.step`` at the step's state
(through an implicit solve by the implicit function theorem, the solve's own tangent rule), so
the tangents are those of the discrete map the ensemble actually runs, not of the ODE. The
tangents are tangents of the method's state (a Clebsch lift, a predictor, stage guesses); they
are measured, orthonormalised and reported in the observed coordinates (the state that
:func:`lpjax.integrate` saves), through the JVP of ``method.observe``, and every linear
combination that measures them there is applied to the state tangents as well.

* :class:`Lyapunov` (``k`` vectors; Benettin et al. 1980): every ``every`` steps, a modified
  Gram–Schmidt QR of the ``k × d`` observed tangents (unrolled: every kernel runs it),
  ``λ_i(t) = (1/t) Σ log R_ii``.
* :class:`MEGNO` (one vector; Cincotta & Simó 2000, in its form for a map sampled every ``h``:
  Cincotta, Giordano & Simó 2003): ``Y(N) = (2/N) Σ_{n ≤ N} n log(‖δ_n‖/‖δ_{n−1}‖)`` and its
  running mean ``⟨Y⟩(N) = (1/N) Σ_{n ≤ N} Y(n)``: ⟨Y⟩ → 2 on a torus, ≈ λt/2 where chaotic.
* :class:`FLI` (one vector; Froeschlé, Lega & Gonczi 1997): ``max_{n ≤ N} log ‖δ_n‖``.

:class:`TangentMember` adds an indicator to a fixed-step member program
(:class:`lpjax._member.FixedMember`) through the member contract, so that every kernel runs it;
the indicator's values are its observable, kept at the saves.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree

from ._integrator._implicit import collecting_statistics
from ._member import AbstractMember, FixedMember
from ._small import solve_small

__all__ = ["AbstractIndicator", "FLI", "Lyapunov", "MEGNO", "TangentMember", "is_indicator"]


def _scaled(tangents, coefficients):
    """``Σ_i c_i t_i`` over the leading (tangent) axis of a pytree of tangents."""
    return jax.tree.map(lambda a: jnp.tensordot(coefficients, a, axes=1), tangents)


def _orthonormalised(W: Float[Array, "k d"], tangents):
    """Modified Gram–Schmidt on the rows of ``W`` (the observed tangents), the same combinations
    applied to ``tangents`` (the state tangents, leading axis ``k``): ``(log R_ii, W', tangents')``
    with ``W'`` orthonormal. Unrolled over ``k`` (no LAPACK: every kernel runs it)."""
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
    return jnp.stack(logs), jnp.stack(rows), jax.tree.map(lambda *a: jnp.stack(a), *states)


class AbstractIndicator(eqx.Module):
    """A chaos indicator (``observe=`` of :func:`lpjax.ensemble`): a function of the tangent
    vectors that a member propagates beside its state (see the module). Its running sums are
    an array of :meth:`size` entries, zeros at the start."""

    every: eqx.AbstractVar[int]
    on_leaf: eqx.AbstractVar[bool]

    @abc.abstractmethod
    def n_tangents(self, d: int, r: int) -> int:
        """Tangent vectors for a state of size ``d`` with ``r`` Casimirs (0: not on the leaf)."""

    @abc.abstractmethod
    def size(self, d: int, r: int) -> int:
        """Entries of the running sums."""

    @abc.abstractmethod
    def update(self, acc: Array, logs: Float[Array, " k"], t: Float[Array, ""], h: Float[Array, ""]) -> Array:
        """The sums after the renormalisation at time ``t``, ``h`` after the last one (``logs``: each
        vector's log R_ii since then)."""

    @abc.abstractmethod
    def values(self, acc: Array, t: Float[Array, ""]) -> dict:
        """What a save keeps, at time ``t`` (> 0)."""

    def casimir_count(self, system, y) -> int:
        """The Casimirs whose level set the tangents stay on (0 unless ``on_leaf``)."""
        return jax.eval_shape(system.casimirs, y).shape[0] if self.on_leaf else 0

    def __call__(self, system, y) -> dict:
        """What a save keeps, as zeros of its shapes (how an ensemble lays out its observables)."""
        d, r = y.shape[0], self.casimir_count(system, y)
        return jax.tree.map(jnp.zeros_like, self.values(jnp.ones((self.size(d, r),), y.dtype), jnp.ones((), y.dtype)))


@final
class Lyapunov(AbstractIndicator):
    """The ``k`` largest finite-time Lyapunov exponents by Benettin's method: ``k`` tangent
    vectors, orthonormalised every ``every`` steps (the saves must fall on multiples of
    ``every``). Saved as ``lyapunov`` ``(k,)``: ``λ_i(t) = (1/t) Σ log R_ii``, in Gram–Schmidt's
    order (the largest first, at long times).

    ``on_leaf=True``: the tangents start on the level set of the system's Casimirs (its
    symplectic leaf, for a Lie–Poisson system; see :func:`_on_leaf`), which the method's map
    keeps, so the Casimir directions are not reported; ``k`` defaults to the leaf's dimension
    ``d − r``. ``on_leaf=False``: they start anywhere; ``k`` defaults to ``d``."""

    k: Optional[int] = eqx.field(static=True, default=None)
    every: int = eqx.field(static=True, default=10)
    on_leaf: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        if self.k is not None and (isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1):
            raise ValueError(f"Lyapunov: k must be a positive int or None (every exponent), got {self.k!r}")
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"Lyapunov: every must be a positive int (steps between QRs), got {self.every!r}")

    def n_tangents(self, d: int, r: int) -> int:
        if self.k is not None and self.k > d - r:
            where = f"the leaf has {d - r} dimensions ({d} entries, {r} Casimirs)" if r else f"the state has {d} entries"
            raise ValueError(f"Lyapunov: k = {self.k} exponents, but {where}")
        return self.k or d - r

    def size(self, d: int, r: int) -> int:
        return self.n_tangents(d, r)

    def update(self, acc, logs, t, h):
        return acc + logs

    def values(self, acc, t):
        return {"lyapunov": acc / t}


@final
class MEGNO(AbstractIndicator):
    """The mean exponential growth factor of nearby orbits (Cincotta & Simó 2000) of one tangent
    vector, renormalised every step: saved as ``megno`` (⟨Y⟩) and ``megno_y`` (Y). ``on_leaf``:
    the vector starts on the Casimirs' level set (as :class:`Lyapunov`'s)."""

    on_leaf: bool = eqx.field(static=True, default=True)
    every: ClassVar[int] = 1

    def n_tangents(self, d: int, r: int) -> int:
        return 1

    def size(self, d: int, r: int) -> int:
        return 3  # Σ n log r_n, Σ Y(n), Y(N)

    def update(self, acc, logs, t, h):  # Y(t) = (2/t) Σ t_n log r_n, ⟨Y⟩(t) = (1/t) Σ Y(t_n) h_n
        s = acc[0] + t * logs[0]
        y = 2.0 * s / t
        return jnp.stack([s, acc[1] + y * h, y])

    def values(self, acc, t):
        return {"megno": acc[1] / t, "megno_y": acc[2]}


@final
class FLI(AbstractIndicator):
    """The fast Lyapunov indicator (Froeschlé, Lega & Gonczi 1997) of one tangent vector: the
    largest ``log ‖δ_n‖`` so far (``‖δ_0‖ = 1``), saved as ``fli``. ``on_leaf``: the vector
    starts on the Casimirs' level set (as :class:`Lyapunov`'s)."""

    on_leaf: bool = eqx.field(static=True, default=True)
    every: ClassVar[int] = 1

    def n_tangents(self, d: int, r: int) -> int:
        return 1

    def size(self, d: int, r: int) -> int:
        return 2  # log ‖δ_N‖, its largest so far

    def update(self, acc, logs, t, h):
        total = acc[0] + logs[0]
        return jnp.stack([total, jnp.maximum(acc[1], total)])

    def values(self, acc, t):
        return {"fli": acc[1]}


def is_indicator(observe) -> bool:
    return isinstance(observe, AbstractIndicator)


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
    DDt = jax.vmap(lambda e: jax.jvp(observe, (state,), (up(e),))[1])(jnp.eye(d, dtype=W.dtype))
    return jax.vmap(lambda w: up(solve_small(DDt, w)))(W)


def _renormalised(indicator, method, system, state, tangents, acc, t, h):
    """The tangents at ``state`` orthonormalised (in the observed coordinates, back onto the leaf
    first where the indicator keeps it and has more than one vector), and the indicator's sums
    updated at time ``t``, ``h`` after the last renormalisation."""
    def observe(s):
        return method.observe(system, s)

    W = jax.vmap(lambda u: jax.jvp(observe, (state,), (u,))[1])(tangents)
    if indicator.n_tangents(W.shape[1], 0) > 1 and indicator.casimir_count(system, W[0]):
        # back onto the leaf: a method keeps its Casimirs to roundoff (or, a collective one, to its order), and
        # Gram-Schmidt would let that leak stand in for the most contracting direction
        off = W - _on_leaf(system, observe(state), W)
        tangents = jax.tree.map(jnp.subtract, tangents, _lifted(observe, state, off))
        W = W - off
    logs, _, tangents = _orthonormalised(W, tangents)
    return tangents, indicator.update(acc, logs, t, h)


@final
class _TangentCarry(eqx.Module):
    inner: Any  # the fixed-step member's carry
    tangents: PyTree  # the method state's tangents, leading axis k
    n: Int[Array, ""]  # steps taken
    acc: Array  # the indicator's running sums


@final
class TangentMember(AbstractMember):
    """A fixed-step member program (``inner``) with an indicator's tangent vectors (see the
    module). Its observable is the indicator's values; a step is tested (no replay)."""

    inner: FixedMember
    indicator: AbstractIndicator
    with_state: bool = eqx.field(static=True, default=False)  # observe the state too, as "state" (integrate's)

    sorts: ClassVar[bool] = False
    replay: ClassVar[str] = "written"  # (the fused kernel's summary: no finiteness flag for a replay)

    def __check_init__(self):
        every = self.indicator.every
        if self.inner.save_every % every:
            raise ValueError(f"{type(self.indicator).__name__}: the saves ({self.inner.save_every} steps apart) must "
                             f"fall on the orthonormalisations (every {every} steps): make save_every a multiple of "
                             f"{every}")

    @property
    def method(self):
        return self.inner.method

    @property
    def replays(self) -> bool:
        return False

    @property
    def n_steps(self) -> int:
        return self.inner.n_steps

    @property
    def save_every(self) -> int:
        return self.inner.save_every

    @property
    def dtype(self):
        return self.inner.dtype

    def system(self, dyn_m):
        return self.inner.system(dyn_m)

    def _observed(self, system, state, tangents):
        """The tangents in the observed coordinates, ``(k, d)``."""
        def one(t):
            return jax.jvp(lambda s: self.method.observe(system, s), (state,), (t,))[1]
        return jax.vmap(one)(tangents)

    def init(self, dyn_m, y0):
        c = self.inner.init(dyn_m, y0)
        system, d = self.system(dyn_m), y0.shape[0]
        r = self.indicator.casimir_count(system, y0)
        V = jnp.asarray(_directions(d, np.dtype(self.dtype)))
        V = (_on_leaf(system, self.method.observe(system, c.state), V) if r else V)[: self.indicator.n_tangents(d, r)]
        tangents = _lifted(lambda s: self.method.observe(system, s), c.state, V)
        _, _, tangents = _orthonormalised(self._observed(system, c.state, tangents), tangents)
        return _TangentCarry(c, tangents, jnp.zeros((), c.num_failed.dtype),
                             jnp.zeros((self.indicator.size(d, r),), self.dtype))

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
        step = step or self.step
        return jax.lax.scan(lambda c, _: (step(dyn_m, c), None), carry, None, length=self.save_every)[0]

    def observe(self, dyn_m, carry):
        t = jnp.maximum(carry.n, 1).astype(self.dtype) * self.inner.dt  # (at the start: the sums' zeros)
        values = self.indicator.values(carry.acc, t)
        return {"state": self.inner.observe(dyn_m, carry.inner), **values} if self.with_state else values

    def summary(self, dyn_m, carry):
        return self.inner.summary(dyn_m, carry.inner)

    def finished(self, dyn_m, carry):
        return None
