"""Lax matrices of Suris' integrable maps (seed 000, Theorems 7, 9, 10) and their spectral invariants.

Each builder takes ``(system, y, dt, lam)`` with ``ε = dt`` the step of the matching map in
:mod:`lpjax` (``SurisLagrangeTop``, ``SurisClebsch``) and returns the Lax matrix ``L(λ)`` of
the state ``y``. Along an orbit of the map the matrices are similar, ``L_{k+1}(λ) =
V_k⁻¹(λ) L_k(λ) V_k(λ)``, so the coefficients of ``det(μI − L(λ))`` (:func:`lax_invariants`)
are integrals of the map. With ``dt = 0`` each builder returns the continuous-time Lax
matrix: (5.17) rest frame, (5.9) moving frame, (7.15) Clebsch flow.

Two of the printed formulas are exact only on the level sets ``|a| = 1`` (Theorem 7) and
``|P| = 1`` (Theorem 10) of the Casimir; the forms below hold on every level set and reduce to
the printed ones there (``docs/errata.md``, "Theorem 7" and "Theorem 10").
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from ._algebra import rotation_frame
from ._checks import finite_scalar
from ._system import AbstractLiePoissonSystem, ClebschFlowFamily, LagrangeTopFamily, guarded

__all__ = ["suris_lagrange_lax", "suris_clebsch_lax", "lax_invariants", "charpoly"]


def _state(system: AbstractLiePoissonSystem, y: ArrayLike, dt: ArrayLike, lam: ArrayLike):
    y = jnp.asarray(y)
    system.check_state(y)
    dt = finite_scalar(dt, "dt")
    lam = finite_scalar(lam, "lam")
    if not isinstance(lam, jax.core.Tracer) and np.asarray(lam) == 0:
        raise ValueError("lam must be nonzero: L(λ) has a λ⁻¹ term")
    dtype = jnp.result_type(y, dt, lam)
    return y.astype(dtype), dt.astype(dtype), lam.astype(dtype)


def momentum_matrix(system: AbstractLiePoissonSystem, y: Float[Array, " d"]) -> tuple[Float[Array, "n n"], Float[Array, " r"]]:
    """``(M, P)`` of a state on (so(n) ⋉ (Rⁿ)^k)*: the momentum's skew matrix (whatever the
    algebra's basis, :func:`lpjax._algebra.rotation_frame`) and the advected vectors."""
    frame = rotation_frame(system.algebra)
    g, y = frame.algebra, frame.momentum_in(y)
    return g.hat(y[: g.dim]), y[g.dim :]


def _twisted(m: Float[Array, "n n"], col: Float[Array, " n"]) -> Float[Array, "n+1 n+1"]:
    """``[[m, col], [colᵀ, 0]]``: the shape of (5.9), (5.17), (6.14), (6.24)."""
    return jnp.block([[m, col[:, None]], [col[None, :], jnp.zeros((1, 1), m.dtype)]])


def suris_lagrange_lax(
    system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: ArrayLike, lam: ArrayLike
) -> Float[Array, "n+1 n+1"]:
    r"""Lax matrix of Suris' Lagrange-top map with step ``ε = dt`` (seed 000, Theorems 7 and 9).

    The frame follows the system (``lagrange_top(n, frame=...)``); ``y = (vee(m), a)``
    (rest) or ``(vee(M), P)`` (moving), ``vee`` the row-major upper triangle.

    * Rest frame, map (6.5), Theorem 7, (6.14)::

          ℓ_k(λ) = [[m_k, λ b_k − λ⁻¹ p], [λ b_kᵀ − λ⁻¹ pᵀ, 0]],
          b_k = (I − (ε/2) m_k) a_k + (ε²/4) |a_k|² p,

      with ``|a_k|²`` in the ``p`` term, which (6.15) omits: the printed form is exact only on
      ``|a| = 1`` (``docs/errata.md``, "Theorem 7: the Lax matrix off the unit leaf").
    * Moving frame, map (6.19)–(6.20), Theorem 9, (6.24) with ``A = e_n``::

          L_k(λ) = [[M_k, λ B_k − λ⁻¹ P_k], [λ B_kᵀ − λ⁻¹ P_kᵀ, 0]],
          B_k = (I + (ε/2) M_k) A + (ε²/4) P_k,

      exact as printed (6.26) and independent of α; ``U(λ)`` in ``V_k`` of (6.25) must be
      symmetric (``docs/errata.md``, "Theorem 9: the symmetric U(λ)").

    ``dt = 0`` gives the continuous Lax matrices (5.17) and (5.9). ``lam`` is a nonzero
    scalar. Raises ``TypeError`` for a system other than ``lagrange_top`` and
    ``ValueError`` for a state of the wrong shape or a non-scalar ``dt``/``lam``.
    """
    LagrangeTopFamily().check(system, "suris_lagrange_lax", "needs")
    y, eps, lam = _state(system, y, dt, lam)
    y = guarded(LagrangeTopFamily(), system, y)
    h = system.hamiltonian
    n = h.n
    m, v = momentum_matrix(system, y)
    eye = jnp.eye(n, dtype=y.dtype)
    if h.frame == "rest":
        p = jnp.asarray(h.gravity, y.dtype)
        b = (eye - 0.5 * eps * m) @ v + 0.25 * eps**2 * jnp.dot(v, v) * p  # (6.15), corrected
        return _twisted(m, lam * b - p / lam)  # (6.14)
    A = jnp.asarray(h.gravity, y.dtype)
    B = (eye + 0.5 * eps * m) @ A + 0.25 * eps**2 * v  # (6.26)
    return _twisted(m, lam * B - v / lam)  # (6.24)


def suris_clebsch_lax(
    system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: ArrayLike, lam: ArrayLike
) -> Float[Array, "n n"]:
    r"""Lax matrix of Suris' map (7.17) for the Clebsch flow ``c_jk = 1`` (seed 000, Theorem 10).

    For ``y = (vee(M), P)`` and ``B = diag(b)`` of ``clebsch_case(b)``, ``ε = dt``::

        L_k(λ) = K⁻¹ (λB + M_k + λ⁻¹ 𝒫_k),   K = I + (ε²/4) |P_k|² B,
        𝒫_k = (I + (ε/2) M_k) P_k P_kᵀ (I − (ε/2) M_k)                       (7.20),

    with ``|P_k|²`` in ``K``, which (7.19) omits, and the same factor in ``𝒬_k`` (7.21) and
    ``ℛ_k`` (7.23): the printed forms are exact only on ``|P| = 1`` (``docs/errata.md``,
    "Theorem 10: the Lax matrix off the unit leaf").

    ``dt = 0`` gives the continuous Lax matrix (7.15). ``lam`` is a nonzero scalar. Raises
    ``TypeError`` unless ``system`` is ``lpjax.systems.clebsch_case(B)`` with ``C=None``, and
    ``ValueError`` for a state of the wrong shape or a non-scalar ``dt``/``lam``.
    """
    ClebschFlowFamily().check(system, "suris_clebsch_lax", "needs")
    y, eps, lam = _state(system, y, dt, lam)
    y = guarded(ClebschFlowFamily(), system, y)
    b = jnp.asarray(system.hamiltonian.B, y.dtype)
    n = b.shape[0]
    M, P = momentum_matrix(system, y)
    eye = jnp.eye(n, dtype=y.dtype)
    Pc = (eye + 0.5 * eps * M) @ jnp.outer(P, P) @ (eye - 0.5 * eps * M)  # (7.20)
    K = 1 + 0.25 * eps**2 * jnp.dot(P, P) * b  # the diagonal of K in (7.19), corrected
    return (lam * jnp.diag(b) + M + Pc / lam) / K[:, None]


def charpoly(L: Float[Array, "N N"]) -> Float[Array, " N"]:
    """``(c_1, …, c_N)`` with ``det(μI − L) = μᴺ + c_1 μᴺ⁻¹ + … + c_N`` (Faddeev–LeVerrier).

    ``S_1 = I``, ``c_k = −tr(L S_k)/k``, ``S_{k+1} = L S_k + c_k I``: only matrix products
    and traces, so it is smooth in ``L`` (unlike coefficients rebuilt from eigenvalues) and
    works under ``jit``, ``vmap`` and ``grad``. Meant for the small matrices here (N ≲ 10).
    """
    L = jnp.asarray(L)
    if L.ndim != 2 or L.shape[0] != L.shape[1]:
        raise ValueError(f"charpoly needs a square matrix, got shape {L.shape}")
    N = L.shape[0]
    eye = jnp.eye(N, dtype=L.dtype)
    S, cs = eye, []
    for k in range(1, N + 1):
        LS = L @ S
        c = -jnp.trace(LS) / k
        cs.append(c)
        S = LS + c * eye
    return jnp.stack(cs)


def lax_invariants(
    lax_fn: Callable[[Array, Array], Array], y: Float[Array, " d"], lams: ArrayLike
) -> Float[Array, "K N"]:
    """Coefficients of ``det(μI − L(y, λ))`` at each ``λ`` in ``lams`` (seed 000, after Theorem 7).

    ``lax_fn(y, lam)`` returns the ``N × N`` Lax matrix, e.g.
    ``lambda y, lam: suris_lagrange_lax(system, y, dt, lam)``. Returns shape
    ``(len(lams), N)``: row ``i`` is :func:`charpoly` of ``L(y, lams[i])`` (the leading 1
    omitted). If ``L`` is isospectral along a map or flow, every entry is one of its
    integrals. Differentiable and ``jit``-able; ``vmap`` over ``y`` for a trajectory::

        inv = jax.vmap(lambda y: lax_invariants(f, y, lams))(sol.ys)        # (T, K, N)
        drift = jnp.max(jnp.abs(inv - inv[0]), axis=-1) / jnp.max(jnp.abs(inv[0]), axis=-1)

    Compare per λ against the largest coefficient, as above, rather than entry by entry:
    for the Lagrange-top matrices (5.9), (5.17), (6.14), (6.24), ``diag(I, −1) L diag(I, −1)
    = −Lᵀ``, so the spectrum is symmetric under ``μ ↦ −μ`` and every odd-index coefficient
    vanishes identically (it comes out as roundoff).

    Raises ``ValueError`` unless ``lams`` is a non-empty 1-D array (a scalar counts as one)
    and ``lax_fn`` returns a square matrix; ``TypeError`` if ``lax_fn`` is not callable.
    """
    if not callable(lax_fn):
        raise TypeError(f"lax_fn must be callable (y, lam) -> matrix, got {type(lax_fn).__name__}")
    lams = jnp.atleast_1d(jnp.asarray(lams))
    if lams.ndim != 1 or lams.shape[0] == 0:
        raise ValueError(f"lams must be a non-empty 1-D array of spectral parameters, got shape {lams.shape}")
    y = jnp.asarray(y)
    return jax.vmap(lambda lam: charpoly(lax_fn(y, lam)))(lams)
