"""The member program of a stochastic ensemble (the member contract, :mod:`lpjax._member`): each
member draws its own Wiener increments, counter-based (:mod:`lpjax._noise`), from its key
``jax.random.fold_in(key, j)``, ``j`` its index in the ensemble, and the step.

A member needs its index, which no other member program does: the kernels give it as one more
column of the member's initial state (exact in floating point up to 2⁵³ members in float64,
2²⁴ in float32), appended by the ensemble layer (:func:`indexed_states`) and taken off by
:meth:`StochasticMember.init`. The increments, and so the paths, are then the same in every
kernel, for any chunking, process count or resume.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int, UInt32

from ._integrator import RESULTS, AbstractStochasticIntegrator
from ._integrator._implicit import collecting_statistics
from ._member import AbstractMember, Carry, carry_summary, steps
from ._noise import increments, member_key
from ._system import StochasticLiePoissonSystem

__all__ = ["StochasticMember", "indexed_states", "is_indexed", "is_stochastic", "MAX_MEMBERS"]

MAX_MEMBERS = {np.dtype(np.float64): 2**53, np.dtype(np.float32): 2**24}  # members whose index a float column holds


def is_stochastic(system, method, brownian, key, who: str = "integrate") -> bool:
    """Whether a call of :func:`lpjax.integrate` (or of ``who``) is a stochastic run, and then
    a consistent one (an ensemble takes no ``brownian``)."""
    noisy = isinstance(system, StochasticLiePoissonSystem)
    stochastic = isinstance(method, AbstractStochasticIntegrator)
    if not (noisy or stochastic or brownian is not None or key is not None):
        return False
    if not noisy:
        raise TypeError(f"{who}: a Brownian path, a key or a stochastic method ({type(method).__name__}) takes a "
                        f"StochasticLiePoissonSystem, got {type(system).__name__}")
    if not stochastic:
        raise TypeError(f"{who}: {system.name} has noise: it takes a stochastic method (lpjax.StochasticMidpoint(), "
                        f"lpjax.NoiseSplitting(drift_method)), got {type(method).__name__}")
    if (brownian is None) == (key is None):
        raise ValueError(f"{who}: a stochastic run takes its increments from key=jax.random.key(...) or from "
                         "brownian= (a diffrax Brownian path): exactly one of them")
    return True


def is_indexed(member) -> bool:
    """Whether ``member``'s initial states carry the member's index as a last column."""
    return isinstance(member, StochasticMember)


def indexed_states(y0s, members) -> Any:
    """``y0s`` (``(N, d)``) with the members' indices ``members`` (``(N,)``, at most
    :data:`MAX_MEMBERS` of the dtype: a float holds them exactly) as a last column."""
    y0s = jnp.asarray(y0s) if isinstance(y0s, jax.Array) else np.asarray(y0s)
    xp = jnp if isinstance(y0s, jax.Array) else np
    top = int(np.max(members)) if isinstance(members, np.ndarray) and members.size else len(members) - 1
    if top >= MAX_MEMBERS[np.dtype(y0s.dtype)]:
        raise ValueError(f"ensemble: member {top} of a stochastic ensemble in {np.dtype(y0s.dtype)}: its index would "
                         f"not be exact in a {np.dtype(y0s.dtype)} column (at most {MAX_MEMBERS[np.dtype(y0s.dtype)]} "
                         "members); run it in float64")
    return xp.concatenate([y0s, xp.asarray(members, y0s.dtype)[:, None]], axis=1)


@final
class _NoiseCarry(eqx.Module):
    inner: Carry  # the state, the running result and statistics (as a fixed-step member's)
    words: UInt32[Array, "2"]  # the member's key
    n: Int[Array, ""]  # steps taken: the increments' counter


@final
class StochasticMember(AbstractMember):
    """A fixed-step member of a stochastic ensemble (see the module): ``words`` is the run's key
    (its two uint32 words), ``method`` a stochastic method. ``folded=False`` (one run of
    :func:`lpjax.integrate`): the initial state has no index column and ``words`` is the member's
    own key; with a diffrax Brownian ``path`` the increments are that path's instead."""

    static: Any = eqx.field(static=True)
    method: Any
    dt: Any
    n_steps: int = eqx.field(static=True)
    save_every: int = eqx.field(static=True)
    observe_fn: Callable
    words: Optional[UInt32[Array, "2"]]
    stats: bool = eqx.field(static=True, default=True)
    folded: bool = eqx.field(static=True, default=True)
    path: Any = None

    sorts: ClassVar[bool] = False
    replay: ClassVar[str] = "written"  # (every step tested: no replay)

    @property
    def replays(self) -> bool:
        return False

    @property
    def dtype(self):
        return jnp.result_type(self.dt)

    def system(self, dyn_m):
        return eqx.combine(dyn_m, self.static)

    def init(self, dyn_m, y0):
        y = y0[:-1] if self.folded else y0
        state = self.method.init(self.system(dyn_m), y, self.dt)
        base = Carry.start(state, y.dtype)
        base = eqx.tree_at(lambda c: c.result, base,
                           RESULTS.where(jnp.all(jnp.isfinite(y)), RESULTS.successful, RESULTS.invalid_initial_state))
        words = member_key(self.words, y0[-1].astype(jnp.uint32)) if self.folded else self.words
        return _NoiseCarry(base, words, jnp.zeros((), base.num_failed.dtype))

    def step(self, dyn_m, carry: _NoiseCarry) -> _NoiseCarry:
        system = self.system(dyn_m)
        if self.path is None:
            dW = increments(carry.words, carry.n, self.dt, system.n_noise, self.dtype)
        else:
            t = carry.n.astype(self.dtype) * self.dt
            dW = jnp.asarray(self.path.evaluate(t, t + self.dt), self.dtype)
        with collecting_statistics(self.stats):  # (at trace time)
            state, result, info = self.method.step(system, carry.inner.state, self.dt, dW)
        return _NoiseCarry(carry.inner.update(state, result, info), carry.words, carry.n + 1)

    def advance(self, dyn_m, carry, step=None):
        return steps(step or self.step, dyn_m, carry, self.save_every)

    def observe(self, dyn_m, carry):
        system = self.system(dyn_m)
        return self.observe_fn(system, self.method.observe(system, carry.inner.state))

    def summary(self, dyn_m, carry):
        return carry_summary(self.method, self.system(dyn_m), carry.inner, self.n_steps, self.stats)

    def finished(self, dyn_m, carry):
        return None
