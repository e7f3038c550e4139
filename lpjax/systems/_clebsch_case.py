"""The Clebsch case of a rigid body in an ideal fluid on e(n)* (seed 000, sec. 7)."""

from __future__ import annotations

from typing import Optional, final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._algebra import euclidean
from .._system import AbstractClebschFlow, LiePoissonSystem
from .._checks import finite_array
from ._heavy_top import _PNorm

__all__ = ["clebsch_case", "ClebschHamiltonian", "ClebschFlowHamiltonian"]


def _split(B: Array, y: Array) -> tuple[Array, Array]:
    d = B.shape[0] * (B.shape[0] - 1) // 2
    return y[:d], y[d:]


@final
class ClebschHamiltonian(eqx.Module):
    """``H(M, P) = ½ Σ_{j<k} c_jk M_jk² − ½ Σ_k b_k P_k²`` (seed 000, eq. (7.1)).

    ``c`` holds the upper-triangle ``c_jk``; with all ``c_jk = 1`` use :class:`ClebschFlowHamiltonian`.
    """

    B: Float[Array, " n"]
    c: Float[Array, " d"]

    def __call__(self, y: Array) -> Scalar:
        M, P = _split(self.B, y)
        return 0.5 * jnp.dot(self.c * M, M) - 0.5 * jnp.dot(self.B * P, P)


@final
class ClebschFlowHamiltonian(AbstractClebschFlow):
    """``H(M, P) = ½<M, M> − ½<P, BP>``: the flow ``c_jk = 1`` (seed 000, eqs (7.12)–(7.13))."""

    B: Float[Array, " n"]

    def __call__(self, y: Array) -> Scalar:
        M, P = _split(self.B, y)
        return 0.5 * jnp.dot(M, M) - 0.5 * jnp.dot(self.B * P, P)


def clebsch_case(B: ArrayLike, C: Optional[ArrayLike] = None) -> LiePoissonSystem:
    """Rigid body in an ideal fluid on e(n)*, state ``(M, P)`` (seed 000, eqs (7.1)–(7.3)).

    ``Ṁ = [M, Ω] + P ∧ (BP)``, ``Ṗ = −ΩP`` with ``Ω_jk = c_jk M_jk``; bracket (4.8)–(4.9).

    Arguments:
        B: the diagonal ``(b_1, …, b_n)``, n ≥ 2.
        C: symmetric (n, n) matrix of the ``c_jk`` (its diagonal is ignored); ``None`` is the
            flow ``c_jk = 1`` of (7.12), ``Ṁ = P ∧ (BP)``, ``Ṗ = −MP``, the one Suris' map
            (7.17) discretizes. The Clebsch condition (7.6) is not enforced.
    Casimirs returned: ``|P|²``.
    """
    B = jnp.asarray(B)
    if B.ndim != 1 or B.shape[0] < 2:
        raise ValueError(f"B must have shape (n,) with n >= 2, got {B.shape}")
    B = finite_array(B, B.shape, "B")
    n = B.shape[0]
    h = ClebschFlowHamiltonian(B)
    if C is not None:
        C = finite_array(C, (n, n), "C")
        if not np.allclose(np.asarray(C), np.asarray(C).T):
            raise ValueError("C must be symmetric")
        h = ClebschHamiltonian(B, C[np.triu_indices(n, 1)])
    return LiePoissonSystem(euclidean(n), h, -1, casimirs=_PNorm(n), name="clebsch_case")
