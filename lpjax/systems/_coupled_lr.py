"""Seed 001 unreduced: coupled LR systems on G^{r+1} (secs 3–4) and the L+R geodesic flow (sec. 2).

The seed's formulas are lost; these are rebuilt from its theorems and re-derived from the
Lagrange–d'Alembert principle (``docs/seeds/seed001.md``, "The coupled systems, rebuilt").
"""

from __future__ import annotations

from typing import Optional, final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from .._algebra import semidirect
from .._algebra._base import defining_blocks
from .._checks import as_float, float_vector, positive_vector
from .._system import AbstractSystem, LiePoissonSystem
from .._system._nonholonomic import NonholonomicSystem
from ._nonholonomic import lplusr

__all__ = ["CoupledLRSystem", "coupled_lr", "lplusr_geodesic", "LPlusRMetric"]


@final
class CoupledLRSystem(AbstractSystem):
    r"""A body ``g_0 ∈ SO(n)`` with a left-invariant metric ``I`` coupled to r bodies
    ``g_i ∈ SO(n)`` with bi-invariant metrics ``ε_i`` by right-invariant (space-frame) constraints
    (seed 001, (3.1)–(3.3), and for r > 1 (4.1)–(4.2)):

    ``L = ½⟨Iω_0, ω_0⟩ + Σ_i ½ε_i⟨Ω_i, Ω_i⟩``, ``pr_{𝔳_i}(Ω_0 + a_i Ω_i) = 0`` and, where
    ``b_i`` is given, ``pr_{𝔥_i}(Ω_0 − b_i Ω_i) = 0``, with ``Ω = ġg⁻¹`` the space angular
    velocities, ``𝔳_i = e_i ∧ Rⁿ`` and ``𝔥_i = so(n)_{e_i}`` for fixed unit vectors ``e_i``. For
    balls of inertia ``ε_i`` and radius ``a_i`` touching a unit ball at ``e_i`` (seed 001, sec. 5)
    these are no slip and, with ``b_i = 1``, no twist.

    In space the constraints read ``Ω_i = A_i Ω_0`` (on 𝔳_i, and on 𝔥_i where ``b_i`` is given),
    ``A_i = −pr_{𝔳_i}/a_i + pr_{𝔥_i}/b_i``. Lagrange–d'Alembert gives reactions
    ``m_i' = λ_i`` and ``m_0' = −Σ_i A_i λ_i`` on the space momenta; in the body frame of
    ``g_0`` (``γ_i = g_0ᵀe_i``, ``A_{γ_i}`` the same operator at γ_i):

    ``M_0' = [M_0, ω_0] − Σ_i A_{γ_i} λ_i``, ``λ_i/ε_i = A_{γ_i} ω_0'`` (the constraints
    differentiated), ``g_0' = g_0 ω̂_0``, ``g_i' = Ω̂_i g_i`` with ``Ω_i = m_i/ε_i``,
    ``m_i' = Ad_{g_0} λ_i``.

    State ``(g_0, M_0, g_1, m_1, …, g_r, m_r)``: each ``g`` as its n² entries (row-major), ``M_0``
    the body momentum and ``m_i`` the space momenta in so(n)'s coordinates. Reduction
    (Theorem 3.3, :meth:`reduce`): ``k = M_0 + Σ_i A_{γ_i} Ad_{g_0⁻¹} m_i`` and ``γ_i`` solve the L+R
    system ``lplusr(I, D, T)`` with ``D_i = ε_i/a_i²``, ``T_i = ε_i/b_i²`` (0 without the twist
    constraint): ``Ad_{g_0} k = m_0 + Σ_i A_i m_i`` is constant (3.19).
    """

    reduced: NonholonomicSystem  # lplusr(I, D, T): the algebra, I and the projections pr(γ)
    eps: Float[Array, " r"]
    a: Float[Array, " r"]
    b_inv: Float[Array, " r"]  # 1/b_i, 0 without the twist constraint
    directions: Float[Array, "r n"]
    name: str = eqx.field(static=True, default="coupled_lr")

    @property
    def r(self) -> int:
        return self.reduced.r

    @property
    def n(self) -> int:
        return self.reduced.n

    @property
    def size(self) -> int:
        return (self.r + 1) * (self.n**2 + self.reduced.algebra.dim)

    def _split(self, x):
        n2, d = self.n**2, self.reduced.algebra.dim
        parts = x.reshape(self.r + 1, n2 + d)
        return parts[:, :n2].reshape(-1, self.n, self.n), parts[:, n2:]

    def _A(self, gammas: Float[Array, "r n"]) -> Float[Array, "r d d"]:
        """``A_γ = −pr(γ)/a + (1 − pr(γ))/b`` in so(n)'s coordinates, for each γ_i."""
        eye = jnp.eye(self.reduced.algebra.dim, dtype=gammas.dtype)
        prs = jnp.stack([self.reduced._pr(gammas[i]) for i in range(self.r)])
        return -prs / self.a[:, None, None] + (eye[None] - prs) * self.b_inv[:, None, None]

    def _ad(self, g, x):
        """``Ad_g x = vee(g x̂ gᵀ)``."""
        alg = self.reduced.algebra
        return alg.vee(g @ alg.hat(x) @ g.T, check=False)

    def vector_field(self, x: Float[Array, " s"]) -> Float[Array, " s"]:
        alg = self.reduced.algebra
        gs, ps = self._split(x)
        g0, M0 = gs[0], ps[0]
        I = self.reduced.inertia.astype(x.dtype)
        om0 = jnp.linalg.solve(I, M0)
        A = self._A(self.directions @ g0)
        rhs = alg.bracket(M0, om0)
        IinvA = jnp.linalg.solve(I, jnp.concatenate(list(A), axis=0).T)  # (d, r·d): I⁻¹A_j side by side
        d = alg.dim
        blocks = jnp.concatenate([A[i] @ IinvA for i in range(self.r)], axis=0)  # [A_i I⁻¹ A_j]
        K = blocks + jnp.diag(jnp.repeat(1.0 / self.eps, d))
        lam = jnp.linalg.solve(K, jnp.concatenate([A[i] @ jnp.linalg.solve(I, rhs) for i in range(self.r)]))
        lam = lam.reshape(self.r, d)
        dM0 = rhs - jnp.einsum("ijk,ik->j", A, lam)
        out = [(g0 @ alg.hat(om0)).reshape(-1), dM0]
        for i in range(self.r):
            out += [(alg.hat(ps[i + 1] / self.eps[i]) @ gs[i + 1]).reshape(-1), self._ad(g0, lam[i])]
        return jnp.concatenate(out)

    def energy(self, x: Float[Array, " s"]) -> Scalar:
        """``½⟨M_0, ω_0⟩ + Σ_i |m_i|²/(2ε_i)``: on the constraints, the reduced ``½⟨k, ω_0⟩``."""
        gs, ps = self._split(x)
        om0 = jnp.linalg.solve(self.reduced.inertia.astype(x.dtype), ps[0])
        return 0.5 * jnp.dot(ps[0], om0) + 0.5 * jnp.sum(jnp.sum(ps[1:] ** 2, axis=1) / self.eps)

    def casimirs(self, x: Float[Array, " s"]) -> Float[Array, " q"]:
        """None are known: the flow is not Hamiltonian."""
        return jnp.zeros((0,), x.dtype)

    def check_state(self, x: Array) -> None:
        float_vector(x, self.size, self.name)

    def constraints(self, x: Float[Array, " s"]) -> Float[Array, " c"]:
        """``pr_{𝔳_i}(Ω_0 + a_iΩ_i)`` and ``pr_{𝔥_i}(Ω_0 − b_iΩ_i)/b_i²`` (0 without the twist
        constraint), in space: zero along a motion."""
        gs, ps = self._split(x)
        Om0 = self._ad(gs[0], jnp.linalg.solve(self.reduced.inertia.astype(x.dtype), ps[0]))
        eye = jnp.eye(self.reduced.algebra.dim, dtype=x.dtype)
        out = []
        for i in range(self.r):
            pr, Om = self.reduced._pr(self.directions[i]), ps[i + 1] / self.eps[i]
            out += [pr @ (Om0 + self.a[i] * Om), self.b_inv[i] * ((eye - pr) @ (self.b_inv[i] * Om0 - Om))]
        return jnp.concatenate(out)

    def reduce(self, x: Float[Array, "... s"]) -> Float[Array, "... m"]:
        """Theorem 3.3: the state ``(k, γ_1, …, γ_r)`` of :attr:`reduced` (``lplusr``)."""
        if x.ndim > 1:
            return jnp.stack([self.reduce(row) for row in x])
        gs, ps = self._split(x)
        gammas = self.directions @ gs[0]
        A = self._A(gammas)
        k = ps[0] + sum(A[i] @ self._ad(gs[0].T, ps[i + 1]) for i in range(self.r))
        return jnp.concatenate([k, gammas.reshape(-1)])

    def spatial_momentum(self, x: Float[Array, " s"]) -> Float[Array, " d"]:
        """``Ad_{g_0} k = m_0 + Σ_i A_i m_i``, the linear conservation law (3.19)."""
        gs, _ = self._split(x)
        return self._ad(gs[0], self.reduce(x)[: self.reduced.algebra.dim])

    def state(self, omega: ArrayLike, g0: Optional[ArrayLike] = None) -> Float[Array, " s"]:
        """The state on the constraints with body angular velocity ``ω_0``, attitude ``g_0``
        (default I), the other bodies at ``g_i = I`` and without spin about ``e_i``."""
        alg, n = self.reduced.algebra, self.n
        om = as_float(omega, "omega")
        g0 = jnp.eye(n, dtype=om.dtype) if g0 is None else as_float(g0, "g0")
        Om0 = self._ad(g0, om)
        ms = self.eps[:, None] * (self._A(self.directions) @ Om0)
        parts = [g0.reshape(-1), self.reduced.inertia.astype(om.dtype) @ om]
        for i in range(self.r):
            parts += [jnp.eye(n, dtype=om.dtype).reshape(-1), ms[i]]
        return jnp.concatenate(parts)


def coupled_lr(inertia: ArrayLike, directions: ArrayLike, eps: ArrayLike, a: ArrayLike,
               b: Optional[ArrayLike] = None, n: int = 3) -> CoupledLRSystem:
    """The (r+1)-coupled LR system of seed 001, (3.1)–(3.3) and (4.1)–(4.2), on SO(n)^{r+1}
    (:class:`CoupledLRSystem`). ``inertia`` as for :func:`lplusr`; ``directions`` the r unit
    vectors e_i (rows); ``eps``, ``a`` the r positive ε_i and a_i; ``b``: the twist couplings b_i
    (``None`` or ``inf`` entries: no twist constraint). Balls of inertia I_i and radius r_i on the
    unit ball: ``eps = I_i``, ``a = r_i``, ``b = 1`` for rubber contacts (reducing to
    ``spherical_support``)."""
    e = as_float(directions, "directions")
    e = e.reshape(-1, e.shape[-1]) if e.ndim else e
    if e.ndim != 2 or e.shape[1] != n or not np.allclose(np.linalg.norm(np.asarray(e), axis=1), 1.0, atol=1e-12):
        raise ValueError(f"coupled_lr: directions must be unit vectors in R^{n} (rows), got {np.asarray(e)!r}")
    r = e.shape[0]
    eps = positive_vector(jnp.atleast_1d(as_float(eps, "eps")), r, "eps")
    a = positive_vector(jnp.atleast_1d(as_float(a, "a")), r, "a")
    b = jnp.full(r, jnp.inf, eps.dtype) if b is None else jnp.atleast_1d(as_float(b, "b"))
    if b.shape != (r,) or not np.all(np.asarray(b) > 0):
        raise ValueError(f"coupled_lr: b must be {r} values > 0 (inf: no twist constraint), got {np.asarray(b)!r}")
    b_inv = 1.0 / b
    reduced = lplusr(inertia, eps / a**2, eps * b_inv**2, n)
    return CoupledLRSystem(reduced, eps, a, b_inv, e)


@final
class LPlusRMetric(eqx.Module):
    """``h(k, γ) = ½⟨k, J(γ)⁻¹k⟩``, the L+R kinetic energy with ``J`` of ``lplusr``."""

    reduced: NonholonomicSystem

    def __call__(self, y: Float[Array, " m"]) -> Scalar:
        return self.reduced.energy(y)


def lplusr_geodesic(inertia: ArrayLike, D: ArrayLike, T: Optional[ArrayLike] = None, n: int = 3) -> LiePoissonSystem:
    """The geodesic flow of the L+R metric (seed 001, (2.6)–(2.7)): Euler–Poincaré with the
    γ_i advected, the Lie–Poisson system on (so(n) ⋉ (Rⁿ)^r)* ((−) bracket) with
    ``h = ½⟨k, J(γ)⁻¹k⟩`` and J of ``lplusr(inertia, D, T, n)``: ``k' = [k, Ω] + Σ_i γ_i ⋄ ∂h/∂γ_i``,
    ``γ_i' = −Ωγ_i``. Dropping the γ-term gives the L+R system (2.8), ``lplusr``. Same state."""
    reduced = lplusr(inertia, D, T, n)
    g = reduced.algebra
    algebra = semidirect(g, defining_blocks(g, reduced.r), name=f"{g.name} ⋉ (R^{reduced.n})^{reduced.r}")
    return LiePoissonSystem(algebra, LPlusRMetric(reduced), -1, name="lplusr_geodesic")
