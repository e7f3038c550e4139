"""The Clebsch case of a rigid body in an ideal fluid on e(n)* (seed 000, sec. 7)."""

from __future__ import annotations

import itertools
from typing import Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._algebra import euclidean
from .._system import AbstractClebschFlow, LiePoissonSystem
from .._checks import finite_array
from .._lax import _state, momentum_matrix
from ._heavy_top import _EuclideanCasimirs

__all__ = ["clebsch_case", "clebsch_condition", "clebsch_lax", "ClebschHamiltonian", "ClebschFlowHamiltonian"]


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


def clebsch_condition(B: ArrayLike, C: ArrayLike) -> float:
    """The largest relative residual of the Clebsch condition (seed 000, (7.6)) over the triples
    ``i < j < k``: ``|(b_i − b_j)/c_ij + (b_j − b_k)/c_jk + (b_k − b_i)/c_ki|`` over the sum of
    the three terms' magnitudes (0 for n = 2, and for a triple whose terms all vanish).
    ``C`` needs nonzero off-diagonal entries."""
    b, c = np.asarray(B, float), np.asarray(C, float)
    n, worst = b.shape[0], 0.0
    for i, j, k in itertools.combinations(range(n), 3):
        terms = [(b[p] - b[q]) / c[p, q] for p, q in ((i, j), (j, k), (k, i))]
        scale = sum(abs(t) for t in terms)
        if scale:
            worst = max(worst, abs(sum(terms)) / scale)
    return worst


def _c_from_a(A, b: Array) -> Array:
    """(7.7): ``c_jk = (b_j − b_k)/(a_j − a_k)``, for distinct ``a``."""
    a = finite_array(A, b.shape, "A")
    gaps = a[:, None] - a[None, :]
    if not isinstance(a, jax.core.Tracer) and np.any(np.asarray(gaps)[~np.eye(b.shape[0], dtype=bool)] == 0):
        raise ValueError(f"A must have distinct entries (c_jk = (b_j - b_k)/(a_j - a_k), (7.7)), got {np.asarray(a)}")
    return (b[:, None] - b[None, :]) / jnp.where(gaps == 0, 1, gaps)


def _checked_c(C, b: Array) -> Array:
    """A symmetric ``C`` with nonzero off-diagonal entries that meets (7.6), else ``ValueError``."""
    n = b.shape[0]
    C = finite_array(C, (n, n), "C")
    c = np.asarray(C)
    if not np.allclose(c, c.T):
        raise ValueError("C must be symmetric")
    if np.any(c[~np.eye(n, dtype=bool)] == 0):
        raise ValueError("C must have nonzero off-diagonal entries: the Clebsch condition (7.6) divides by them")
    worst = clebsch_condition(b, c)
    if worst > CLEBSCH_RTOL:
        raise ValueError(f"B and C violate the Clebsch condition (7.6), (b_i - b_j)/c_ij + (b_j - b_k)/c_jk + "
                         f"(b_k - b_i)/c_ki = 0 for every triple: relative residual {worst:.3g} > {CLEBSCH_RTOL:g}; "
                         "build C from A by (7.7) with clebsch_case(B, A=A)")
    return C


CLEBSCH_RTOL = 1e-10  # (7.6) for C given: a sum of three terms, each computed to about 1e-16


def clebsch_case(B: ArrayLike, C: Optional[ArrayLike] = None, *, A: Optional[ArrayLike] = None) -> LiePoissonSystem:
    """Rigid body in an ideal fluid on e(n)*, state ``(M, P)`` (seed 000, eqs (7.1)–(7.3)).

    ``Ṁ = [M, Ω] + P ∧ (BP)``, ``Ṗ = −ΩP`` with ``Ω_jk = c_jk M_jk``; bracket (4.8)–(4.9).
    The system is integrable when the Clebsch condition (7.6) holds, ``c_jk = (b_j − b_k)/(a_j −
    a_k)`` (7.7) for some diagonal ``A``, with the Lax pair ``L(λ) = λA + M + λ⁻¹PPᵀ``,
    ``U(λ) = λB + Ω`` (7.8)–(7.9) (:func:`lpjax.diagnostics.clebsch_lax`).

    Arguments:
        B: the diagonal ``(b_1, …, b_n)``, n ≥ 2.
        C: symmetric (n, n) matrix of the ``c_jk`` (its diagonal is ignored), nonzero off the
            diagonal and meeting (7.6) to a relative residual of ``CLEBSCH_RTOL``
            (:func:`clebsch_condition`), else ``ValueError``.
        A: instead of ``C``, the diagonal ``(a_1, …, a_n)``, distinct: ``C`` by (7.7).

    Neither: the flow ``c_jk = 1`` of (7.12), ``Ṁ = P ∧ (BP)``, ``Ṗ = −MP`` (``A = B``), the one
    Suris' map (7.17) discretizes.

    Casimirs returned: ``|P|²``, and ``M·P`` for n = 3 (see :func:`heavy_top_n`).
    """
    B = jnp.asarray(B)
    if B.ndim != 1 or B.shape[0] < 2:
        raise ValueError(f"B must have shape (n,) with n >= 2, got {B.shape}")
    B = finite_array(B, B.shape, "B")
    n = B.shape[0]
    if C is not None and A is not None:
        raise ValueError("give C or A (C then follows by (7.7)), not both")
    h = ClebschFlowHamiltonian(B)
    if A is not None:
        h = ClebschHamiltonian(B, _c_from_a(A, B)[np.triu_indices(n, 1)])
    elif C is not None:
        h = ClebschHamiltonian(B, _checked_c(C, B)[np.triu_indices(n, 1)])
    return LiePoissonSystem(euclidean(n), h, -1, casimirs=_EuclideanCasimirs(n), name="clebsch_case")


def clebsch_lax(system: LiePoissonSystem, y: Float[Array, " d"], lam: ArrayLike) -> Float[Array, "n n"]:
    """The Lax matrix ``L(λ) = λA + M + λ⁻¹ P Pᵀ`` of the Clebsch case (seed 000, (7.8)–(7.9)),
    with ``L̇ = [L, U]``, ``U(λ) = λB + Ω``: the spectrum of ``L(λ)`` is constant along the
    flow, for every ``λ ≠ 0``.

    ``A`` follows from the system's ``B`` and ``c_jk`` by (7.7), up to a multiple of the
    identity (which shifts the spectrum by a constant): ``a_1 = 0``, ``a_j = −(b_1 − b_j)/c_1j``;
    ``A = B`` for the flow ``c_jk = 1``. Raises ``TypeError`` unless ``system`` is
    :func:`clebsch_case`, ``ValueError`` when its ``c_jk`` violate (7.6) (a Hamiltonian built
    by hand) or for a state of the wrong shape or ``λ = 0``.
    """
    h = getattr(system, "hamiltonian", None)
    if not isinstance(system, LiePoissonSystem) or not isinstance(h, (ClebschHamiltonian, ClebschFlowHamiltonian)):
        raise TypeError(f"clebsch_lax needs lpjax.systems.clebsch_case(...), got {type(system).__name__}")
    y, _, lam = _state(system, y, 0.0, lam)  # the checks of the other Lax matrices
    b = jnp.asarray(h.B, y.dtype)
    n = b.shape[0]
    if isinstance(h, ClebschFlowHamiltonian):
        a = b
    else:
        C = jnp.zeros((n, n), y.dtype).at[np.triu_indices(n, 1)].set(h.c)
        C = C + C.T
        if not isinstance(C, jax.core.Tracer):
            _checked_c(C, b)
        a = jnp.concatenate([jnp.zeros(1, y.dtype), -(b[0] - b[1:]) / C[0, 1:]])
    M, P = momentum_matrix(system, y)
    return lam * jnp.diag(a) + M + jnp.outer(P, P) / lam
