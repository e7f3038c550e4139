"""Chaos indicators (``observe=`` of :func:`lpjax.integrate` and :func:`lpjax.ensemble`): functions
of tangent vectors that a member propagates beside its state by the method's own linearized
step (:mod:`lpjax._tangent_members`).

* :class:`Lyapunov` (``k`` vectors; Benettin et al. 1980): every ``every`` steps, a modified
  Gram–Schmidt QR of the ``k × d`` observed tangents (unrolled: every kernel runs it),
  ``λ_i(t) = (1/t) Σ log R_ii``.
* :class:`MEGNO` (one vector; Cincotta & Simó 2000, in its form for a map sampled at ``t_n``:
  Cincotta, Giordano & Simó 2003): ``Y(t) = (2/t) Σ_{t_n ≤ t} t_n log(‖δ_n‖/‖δ_{n−1}‖)`` and its
  running mean ``⟨Y⟩(t) = (1/t) Σ Y(t_n) h_n``: ⟨Y⟩ → 2 on a torus, ≈ λt/2 where chaotic.
* :class:`FLI` (one vector; Froeschlé, Lega & Gonczi 1997): ``max_{n} log ‖δ_n‖``.
"""

from __future__ import annotations

import abc
from typing import ClassVar, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = ["AbstractIndicator", "FLI", "Lyapunov", "MEGNO", "is_indicator"]


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
