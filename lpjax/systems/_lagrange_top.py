"""The n-dimensional Lagrange top (seed 000, sec. 5) in the rest and in the moving frame."""

from __future__ import annotations

from typing import ClassVar, Literal, Optional, final

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._algebra import euclidean, so
from .. import _small as sm
from .._system import AbstractLagrangeTop, LiePoissonSystem
from .._checks import finite_array, positive_vector
from ._heavy_top import _EuclideanCasimirs

__all__ = ["lagrange_top", "LagrangeTopRestHamiltonian", "LagrangeTopMovingHamiltonian"]


@final
class LagrangeTopRestHamiltonian(AbstractLagrangeTop):
    """``H(m, a) = ½<m, m> + <a, p>`` (seed 000, eq. (5.15)); ``p`` is the rest-frame gravity.

    ``alpha`` does not enter H; it is kept for reconstructing the attitude, whose angular
    velocity depends on the inertia (5.1).
    """

    p: Float[Array, " n"]
    alpha: Scalar
    frame: ClassVar[str] = "rest"

    @property
    def n(self) -> int:
        return self.p.shape[0]

    @property
    def gravity(self) -> Float[Array, " n"]:
        return self.p

    def __call__(self, y: Array) -> Scalar:
        n = self.p.shape[0]
        d = n * (n - 1) // 2
        m, a = y[:d], y[d:]
        return 0.5 * jnp.dot(m, m) + jnp.dot(a, self.p)


@final
class LagrangeTopMovingHamiltonian(AbstractLagrangeTop):
    """``H(M, P) = ½<M, Ω> + <P, A>`` with ``A = e_n`` and Ω from (5.7) (seed 000, eqs (4.7), (5.1))."""

    alpha: Scalar
    dim: int = eqx.field(static=True)
    frame: ClassVar[str] = "moving"

    @property
    def n(self) -> int:
        return self.dim

    @property
    def gravity(self) -> Float[Array, " n"]:
        return jnp.zeros(self.n, jnp.result_type(self.alpha)).at[-1].set(1.0)

    def omega(self, M: Float[Array, "n n"]) -> Float[Array, "n n"]:
        """``Ω = M/α + (1 − α)/α · A ∧ (MA)`` (5.7), as a matrix."""
        A = jnp.zeros(self.n, M.dtype).at[-1].set(1.0)
        return M / self.alpha + (1 - self.alpha) / self.alpha * sm.wedge_matrix(A, M @ A)

    def __call__(self, y: Array) -> Scalar:
        g = so(self.n)
        d = self.n * (self.n - 1) // 2
        M = g.hat(y[:d])
        Om = g.vee(self.omega(M), check=False)
        return 0.5 * jnp.dot(y[:d], Om) + y[-1]


def lagrange_top(
    n: int,
    alpha: ArrayLike = 0.5,
    frame: Literal["rest", "moving"] = "rest",
    p: Optional[ArrayLike] = None,
) -> LiePoissonSystem:
    """The n-dimensional Lagrange top on e(n)* = (so(n) ⋉ Rⁿ)*, state ``(M or m, P or a)``.

    * ``frame="rest"``: ``ṁ = a ∧ p``, ``ȧ = m a`` (seed 000, eq. (5.12)), Hamiltonian
      (5.15), bracket (5.13)–(5.14); independent of α. ``p`` (default ``e_n``) is the
      constant gravity vector in the rest frame.
    * ``frame="moving"``: ``Ṁ = [M, Ω] + A ∧ P``, ``Ṗ = −ΩP`` (4.5) with
      ``J = (α/2, …, α/2, 1 − α/2)``, ``A = e_n`` (5.1) and Ω from (5.7); bracket (4.8)–(4.9).

    Arguments:
        n: dimension, ≥ 3.
        alpha: anisotropy α > 0; enters only the moving frame (the rest-frame equations and
            their discrete map (6.5) do not depend on it, the rest-frame attitude does).
    Casimirs returned: ``|a|²`` (rest) or ``|P|²`` (moving), and for n = 3 also ``m·a``
    (``M·P``; see :func:`heavy_top_n`).
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 3:
        raise ValueError(f"lagrange_top needs an integer n >= 3, got {n!r}")
    alpha = positive_vector(jnp.atleast_1d(jnp.asarray(alpha, dtype=float)), 1, "alpha")[0]
    if frame == "rest":
        p = jnp.zeros(n).at[-1].set(1.0) if p is None else finite_array(p, (n,), "p")
        h = LagrangeTopRestHamiltonian(p=p, alpha=alpha)
        sign = 1
    elif frame == "moving":
        if p is not None:
            raise ValueError("p is the rest-frame gravity; in the moving frame gravity is the state P")
        h = LagrangeTopMovingHamiltonian(alpha=alpha, dim=n)
        sign = -1
    else:
        raise ValueError(f"frame must be 'rest' or 'moving', got {frame!r}")
    return LiePoissonSystem(euclidean(n), h, sign, casimirs=_EuclideanCasimirs(n, ("m", "a") if frame == "rest" else ("M", "P")),
                            name=f"lagrange_top_{frame}")
