"""Seed 001 unreduced: coupled LR systems on G^{r+1} (secs 3–4) and the L+R geodesic flow (sec. 2).

The seed's formulas are lost; these are rebuilt from its theorems and re-derived from the
Lagrange–d'Alembert principle (``docs/seeds/seed001.md``, "The coupled systems, rebuilt").
"""

from __future__ import annotations

import abc
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

__all__ = ["AbstractCoupledLRSystem", "CoupledLRSystem", "AbelianCoupledLRSystem", "coupled_lr", "abelian_coupled_lr",
           "lplusr_geodesic", "LPlusRMetric"]


def _ad(alg, g, x):
    """``Ad_g x = vee(g x̂ gᵀ)`` in so(n)'s coordinates."""
    return alg.vee(g @ alg.hat(x) @ g.T, check=False)


class AbstractCoupledLRSystem(AbstractSystem):
    """A body ``g_0 ∈ SO(n)`` coupled to other bodies by right-invariant constraints (seed 001,
    secs 3–4), whose reduction (:meth:`reduce`) is the L+R system :attr:`reduced`."""

    reduced: eqx.AbstractVar[NonholonomicSystem]

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """The length of the state."""

    @abc.abstractmethod
    def reduce(self, x: Float[Array, "... s"]) -> Float[Array, "... m"]:
        """Theorem 3.3: the state of :attr:`reduced`."""

    def casimirs(self, x: Float[Array, " s"]) -> Float[Array, " q"]:
        """None are known: the flow is not Hamiltonian."""
        return jnp.zeros((0,), x.dtype)

    @property
    def casimir_names(self) -> tuple[str, ...]:
        return ()

    def check_state(self, x: Array) -> None:
        float_vector(x, self.size, type(self).__name__)

    def spatial_momentum(self, x: Float[Array, " s"]) -> Float[Array, " d"]:
        """``Ad_{g_0} k``, the linear conservation law (3.19): constant along a motion."""
        n = self.reduced.n
        return _ad(self.reduced.algebra, x[: n * n].reshape(n, n), self.reduce(x)[: self.reduced.algebra.dim])


@final
class CoupledLRSystem(AbstractCoupledLRSystem):
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
            out += [(alg.hat(ps[i + 1] / self.eps[i]) @ gs[i + 1]).reshape(-1), _ad(self.reduced.algebra, g0, lam[i])]
        return jnp.concatenate(out)

    def energy(self, x: Float[Array, " s"]) -> Scalar:
        """``½⟨M_0, ω_0⟩ + Σ_i |m_i|²/(2ε_i)``: on the constraints, the reduced ``½⟨k, ω_0⟩``."""
        gs, ps = self._split(x)
        om0 = jnp.linalg.solve(self.reduced.inertia.astype(x.dtype), ps[0])
        return 0.5 * jnp.dot(ps[0], om0) + 0.5 * jnp.sum(jnp.sum(ps[1:] ** 2, axis=1) / self.eps)

    def constraints(self, x: Float[Array, " s"]) -> Float[Array, " c"]:
        """``pr_{𝔳_i}(Ω_0 + a_iΩ_i)`` and ``pr_{𝔥_i}(Ω_0 − b_iΩ_i)/b_i²`` (0 without the twist
        constraint), in space: zero along a motion."""
        gs, ps = self._split(x)
        Om0 = _ad(self.reduced.algebra, gs[0], jnp.linalg.solve(self.reduced.inertia.astype(x.dtype), ps[0]))
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
        k = ps[0] + sum(A[i] @ _ad(self.reduced.algebra, gs[0].T, ps[i + 1]) for i in range(self.r))
        return jnp.concatenate([k, gammas.reshape(-1)])

    def state(self, omega: ArrayLike, g0: Optional[ArrayLike] = None) -> Float[Array, " s"]:
        """The state on the constraints with body angular velocity ``ω_0``, attitude ``g_0``
        (default I), the other bodies at ``g_i = I`` and without spin about ``e_i``."""
        n = self.n
        om = as_float(omega, "omega")
        g0 = jnp.eye(n, dtype=om.dtype) if g0 is None else as_float(g0, "g0")
        Om0 = _ad(self.reduced.algebra, g0, om)
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
class AbelianCoupledLRSystem(AbstractCoupledLRSystem):
    r"""A body ``g ∈ SO(n)`` coupled to r rotors ``x_i ∈ R`` (the abelian group Rʳ) by
    ``ẋ_i = a_i⟨Ω, ξ_i⟩``, Ω = ġg⁻¹ the space angular velocity and ξ_i fixed orthonormal elements of
    so(n) (seed 001, (4.5)–(4.7), and the proof of Theorem 3.3 with the basis (3.21)):
    ``L = ½⟨Iω, ω⟩ + Σ_i ½ε_i ẋ_i²``.

    Lagrange–d'Alembert: ``p_i' = λ_i`` for the rotors' momenta ``p_i = ε_iẋ_i`` and
    ``M' = [M, ω] − Σ_i a_iλ_i E_i`` with ``E_i = Ad_{g⁻¹}ξ_i``; the constraints differentiated give
    ``λ_i/ε_i = a_i⟨ω', E_i⟩``. State ``(g, M, x, p)`` (g row-major). Reduction (:meth:`reduce`):
    ``k = M + Σ_i a_ip_iE_i`` and the ``E_i`` solve the general L+R system
    ``lplusr(I, R=Σ_i ε_ia_i² ξ_i ⊗ ξ_i)`` (ξ_a' = [ξ_a, Ω], in the order of its weights).
    """

    reduced: NonholonomicSystem
    eps: Float[Array, " r"]
    a: Float[Array, " r"]
    xis: Float[Array, "r d"]
    order: tuple[int, ...] = eqx.field(static=True)  # the E_i in the order of reduced.R
    name: str = eqx.field(static=True, default="abelian_coupled_lr")

    @property
    def size(self) -> int:
        n, d, r = self.reduced.n, self.reduced.algebra.dim, len(self.order)
        return n * n + d + 2 * r

    def _split(self, x):
        n, d, r = self.reduced.n, self.reduced.algebra.dim, len(self.order)
        g = x[: n * n].reshape(n, n)
        return g, x[n * n : n * n + d], x[n * n + d : n * n + d + r], x[n * n + d + r :]

    def _body(self, g):
        """``E_i = Ad_{g⁻¹}ξ_i`` as rows."""
        return jnp.stack([_ad(self.reduced.algebra, g.T, xi) for xi in self.xis])

    def vector_field(self, x: Float[Array, " s"]) -> Float[Array, " s"]:
        alg = self.reduced.algebra
        g, M, _, p = self._split(x)
        I = self.reduced.inertia.astype(x.dtype)
        om = jnp.linalg.solve(I, M)
        E = self._body(g)
        rhs = alg.bracket(M, om)
        K = jnp.diag(1.0 / self.eps) + jnp.outer(self.a, self.a) * (E @ jnp.linalg.solve(I, E.T))
        lam = jnp.linalg.solve(K, self.a * (E @ jnp.linalg.solve(I, rhs)))
        return jnp.concatenate([(g @ alg.hat(om)).reshape(-1), rhs - E.T @ (self.a * lam), p / self.eps, lam])

    def energy(self, x: Float[Array, " s"]) -> Scalar:
        """``½⟨M, ω⟩ + Σ_i p_i²/(2ε_i)``: on the constraints, the reduced ``½⟨k, ω⟩``."""
        _, M, _, p = self._split(x)
        return 0.5 * jnp.dot(M, jnp.linalg.solve(self.reduced.inertia.astype(x.dtype), M)) + 0.5 * jnp.sum(p**2 / self.eps)

    def constraints(self, x: Float[Array, " s"]) -> Float[Array, " r"]:
        """``ẋ_i − a_i⟨Ω, ξ_i⟩``: zero along a motion."""
        g, M, _, p = self._split(x)
        Om = _ad(self.reduced.algebra, g, jnp.linalg.solve(self.reduced.inertia.astype(x.dtype), M))
        return p / self.eps - self.a * (self.xis @ Om)

    def reduce(self, x: Float[Array, "... s"]) -> Float[Array, "... m"]:
        """Theorem 3.3: the state ``(k, E_1, …)`` of :attr:`reduced`."""
        if x.ndim > 1:
            return jnp.stack([self.reduce(row) for row in x])
        g, M, _, p = self._split(x)
        E = self._body(g)
        return jnp.concatenate([M + E.T @ (self.a * p), E[np.asarray(self.order)].reshape(-1)])

    def state(self, omega: ArrayLike, g0: Optional[ArrayLike] = None) -> Float[Array, " s"]:
        """The state on the constraints with body angular velocity ω, attitude ``g0`` (default I),
        rotors at 0."""
        om = as_float(omega, "omega")
        n = self.reduced.n
        g0 = jnp.eye(n, dtype=om.dtype) if g0 is None else as_float(g0, "g0")
        p = self.eps * self.a * (self.xis @ _ad(self.reduced.algebra, g0, om))
        return jnp.concatenate([g0.reshape(-1), self.reduced.inertia.astype(om.dtype) @ om, jnp.zeros_like(p), p])


def abelian_coupled_lr(inertia: ArrayLike, xis: ArrayLike, eps: ArrayLike, a: ArrayLike, n: int = 3
                       ) -> AbelianCoupledLRSystem:
    """The LR system on SO(n) × Rʳ of seed 001, (4.5)–(4.7) (:class:`AbelianCoupledLRSystem`):
    ``xis`` r orthonormal rows in so(n)'s coordinates, ``eps`` and ``a`` r positive values. Any
    general L+R system ``lplusr(I, R=R)`` is the reduction of the one with ξ_i the eigenvectors
    of R and ``ε_ia_i²`` its eigenvalues (Theorem 3.3)."""
    xis = as_float(xis, "xis")
    xis = xis.reshape(-1, xis.shape[-1]) if xis.ndim else xis
    r = xis.shape[0]
    eps = positive_vector(jnp.atleast_1d(as_float(eps, "eps")), r, "eps")
    a = positive_vector(jnp.atleast_1d(as_float(a, "a")), r, "a")
    X = np.asarray(xis)
    if X.shape[1] != n * (n - 1) // 2 or not np.allclose(X @ X.T, np.eye(r), atol=1e-12):
        raise ValueError(f"abelian_coupled_lr: xis must be orthonormal rows of length {n * (n - 1) // 2} (so({n})), "
                         f"got {X!r}")
    weights = np.asarray(eps * a**2)
    reduced = lplusr(inertia, R=jnp.einsum("i,ij,ik->jk", eps * a**2, xis, xis), n=n)
    order = tuple(int(i) for i in np.argsort(weights, kind="stable"))
    return AbelianCoupledLRSystem(reduced, eps, a, xis, order)


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
