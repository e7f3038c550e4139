"""Nonholonomic LR and L+R systems on so(n) × (Rⁿ)ʳ (seed 001; the rebuilt equations are in
``docs/seeds/seed001-equations.md``).

State ``x = (k, γ_1, …, γ_r, ξ_1, …, ξ_m)``: the momentum ``k = J(γ, ξ)Ω`` in so(n)
coordinates (the vector form of :func:`lpjax.algebras.so3` for n = 3, the orthonormal
coordinates of :func:`lpjax.algebras.so` otherwise), r advected body vectors and m advected
algebra elements. The equations are

    k' = [k, Ω] + Λ,   γ_i' = −Ω γ_i,   ξ_a' = [ξ_a, Ω],   Ω = J⁻¹ k,
    J = I + Σ_i [D_i pr(γ_i) + T_i (1 − pr(γ_i))] + Σ_a R_a ξ_a ⊗ ξ_a,
    pr(γ)X = X − PXP,  P = 1 − γγᵀ/|γ|²,

(L+R systems, Fedorov–Jovanović 2004; the Chaplygin sphere is r = 1, T = 0, m = 0; the general
L+R system with ``R = Σ_a R_a ξ_a ⊗ ξ_a`` is r = 0, 001-equations.md, table). With the LR
constraint of Veselova type on γ_1 (seed 001, sec. 2; Veselov–Veselova 1986), the angular
velocity stays in γ_1 ∧ Rⁿ: ``⟨Ω, E_a⟩ = 0`` for an orthonormal basis E_a of
so(n)_γ = {X : Xγ_1 = 0}, and the reaction ``Λ = Σ_a μ_a E_a`` is fixed by d/dt ⟨Ω, E_a⟩ = 0:
one small linear solve with the Gram matrix ``G_ab = ⟨J⁻¹E_a, E_b⟩`` and the rate of the
constraint along the free field, taken by autodiff (so the J̇Ω term of a γ-dependent inertia,
the rubber sphere's, is included; leaving it out breaks the invariant measure).

The invariant density (in (k, γ, ξ)) is ``ρ = |det J|^{−1/2}``, times ``sqrt(det G)`` with the
constraint (001-equations.md, table).
"""

from __future__ import annotations

from typing import Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from .._algebra import LieAlgebra
from .._checks import float_vector, is_traced
from .._small import solve_small
from ._base import AbstractSystem, compiled_method

__all__ = ["NonholonomicSystem"]

_INTEGRALS = ("energy", "gamma_norms", "constraint", "k_gamma", "k_dot_gamma", "k_norm", "gamma_gram", "k_xi",
              "xi_gram")


def _householder(g: Float[Array, " n"]) -> Float[Array, "n n"]:
    """An orthogonal H with ``H e_n = ±γ/|γ|`` (the reflection that keeps |v|² ≥ 2)."""
    n = g.shape[0]
    u = g / jnp.linalg.norm(g)
    s = jnp.where(u[-1] >= 0, 1.0, -1.0).astype(g.dtype)
    v = u + s * jnp.eye(n, dtype=g.dtype)[-1]
    return jnp.eye(n, dtype=g.dtype) - 2.0 * jnp.outer(v, v) / jnp.dot(v, v)


def so_basis_fixing_last_axis(n: int) -> np.ndarray:
    """``e_i e_jᵀ − e_j e_iᵀ`` for i < j < n − 1: an orthonormal basis of {X ∈ so(n) : X e_n = 0}."""
    pairs = [(i, j) for i in range(n - 1) for j in range(i + 1, n - 1)]
    E = np.zeros((len(pairs), n, n))
    for k, (i, j) in enumerate(pairs):
        E[k, i, j], E[k, j, i] = 1.0, -1.0
    return E


@final
class NonholonomicSystem(AbstractSystem):
    """An L+R system with an optional LR (Veselova) constraint on the first advected vector.

    Arguments:
        algebra: so(n) with a matrix basis (:func:`lpjax.algebras.so3` for the 3D vector form).
        inertia: the constant part I of the inertia operator, a symmetric positive definite
            ``(d, d)`` matrix in the algebra's coordinates.
        D, T: ``(r,)`` couplings of the r advected vectors (zeros for a plain LR system; r = 0
            for a general L+R system).
        constrained: the LR constraint Ω ∈ γ_1 ∧ Rⁿ.
        integral_names: which of ``energy``, ``gamma_norms``, ``constraint``, ``k_gamma``
            (|kγ_i|²), ``k_dot_gamma`` (⟨k, γ⟩, n = 3), ``k_norm`` (⟨k, k⟩), ``gamma_gram``,
            ``k_xi`` (⟨k, ξ_a⟩), ``xi_gram`` :meth:`integrals` returns (its first integrals).
        default: a state on the invariant manifold (returned by :meth:`default_state`).
        R: ``(m,)`` weights of the advected algebra elements ξ_a in ``Σ_a R_a ξ_a ⊗ ξ_a``
            (None: m = 0).
    """

    algebra: LieAlgebra
    inertia: Float[Array, "d d"]
    D: Float[Array, " r"]
    T: Float[Array, " r"]
    constrained: bool = eqx.field(static=True)
    integral_names: tuple = eqx.field(static=True)
    default: Optional[Float[Array, " m"]] = None
    name: str = eqx.field(static=True, default="NonholonomicSystem")
    R: Optional[Float[Array, " m"]] = None

    def __check_init__(self):
        n = self.algebra.so_n
        if n is None or self.algebra.matrix_basis is None:
            raise ValueError(f"{self.name}: the algebra must be so(n) with a matrix basis, got {self.algebra.name}")
        if n < 3:
            raise ValueError(f"{self.name}: needs n >= 3, got n = {n}")
        d = self.algebra.dim
        if self.inertia.shape != (d, d) or self.D.ndim != 1 or self.D.shape != self.T.shape:
            raise ValueError(f"{self.name}: inertia must be ({d}, {d}) and D, T of one shape (r,); got "
                             f"{self.inertia.shape}, {self.D.shape}, {self.T.shape}")
        if self.R is not None and self.R.ndim != 1:
            raise ValueError(f"{self.name}: R must be a vector of weights (m,), got shape {self.R.shape}")
        if self.r + self.m < 1 or (self.constrained and self.r < 1):
            raise ValueError(f"{self.name}: needs an advected vector γ (D, T of length r >= 1) or advected "
                             f"algebra elements (R of length m >= 1), and γ_1 for the LR constraint; got r = "
                             f"{self.r}, m = {self.m}")
        unknown = set(self.integral_names) - set(_INTEGRALS)
        if unknown:
            raise ValueError(f"{self.name}: unknown integrals {sorted(unknown)}; known: {_INTEGRALS}")

    # ------------------------------------------------------------------ structure
    @property
    def n(self) -> int:
        return self.algebra.so_n

    @property
    def r(self) -> int:
        return self.D.shape[0]

    @property
    def m(self) -> int:
        return 0 if self.R is None else self.R.shape[0]

    @property
    def size(self) -> int:
        return self.algebra.dim * (1 + self.m) + self.r * self.n

    def split(self, x: Float[Array, " m"]) -> tuple[Float[Array, " d"], Float[Array, "r n"]]:
        """``(k, γ)`` with the advected vectors as rows."""
        d = self.algebra.dim
        return x[:d], x[d : d + self.r * self.n].reshape(self.r, self.n)

    def xis(self, x: Float[Array, " m"]) -> Float[Array, "m d"]:
        """The advected algebra elements ξ_a as rows."""
        return x[self.algebra.dim + self.r * self.n :].reshape(self.m, self.algebra.dim)

    def _J(self, x: Float[Array, " m"]) -> Float[Array, "d d"]:
        return self.inertia_operator(self.split(x)[1], self.xis(x))

    def _pr(self, g: Float[Array, " n"]) -> Float[Array, "d d"]:
        """The matrix of ``pr(γ)X = X − PXP`` in the algebra's coordinates."""
        P = jnp.eye(self.n, dtype=g.dtype) - jnp.outer(g, g) / jnp.dot(g, g)
        B = jnp.asarray(self.algebra.matrix_basis, g.dtype)
        return self.algebra.vee(B - P @ B @ P, check=False).T

    def inertia_operator(self, gammas: Float[Array, "r n"], xis: Optional[Float[Array, "m d"]] = None
                         ) -> Float[Array, "d d"]:
        """``J = I + Σ_i [D_i pr(γ_i) + T_i (1 − pr(γ_i))] + Σ_a R_a ξ_a ⊗ ξ_a``."""
        J = self.inertia.astype(gammas.dtype)
        eye = jnp.eye(self.algebra.dim, dtype=gammas.dtype)
        for i in range(self.r):
            pr = self._pr(gammas[i])
            J = J + self.D[i] * pr + self.T[i] * (eye - pr)
        if self.m:
            if xis is None:
                raise ValueError(f"{self.name}: the inertia depends on the advected algebra elements ξ; pass xis")
            J = J + jnp.einsum("a,ai,aj->ij", self.R.astype(gammas.dtype), xis, xis)
        return J

    def constraint_basis(self, g: Float[Array, " n"]) -> Float[Array, "s d"]:
        """Rows: an orthonormal basis of so(n)_γ = {X : Xγ = 0} (s = (n−1)(n−2)/2); in 3D, γ/|γ|."""
        if self.n == 3:  # so(3)_γ is spanned by γ in the vector form
            return (g / jnp.linalg.norm(g))[None]
        H = _householder(g)
        E0 = np.asarray(so_basis_fixing_last_axis(self.n), dtype=g.dtype)  # so(n−1) ⊂ so(n), fixing e_n
        return self.algebra.vee(jnp.einsum("ai,kij,bj->kab", H, E0, H), check=False)

    def angular_velocity(self, x: Float[Array, " m"]) -> Float[Array, " d"]:
        return solve_small(self._J(x), self.split(x)[0])

    # ------------------------------------------------------------------ the system
    def _free_field(self, x):
        k, gammas = self.split(x)
        Om = self.angular_velocity(x)
        W = self.algebra.hat(Om)
        parts = [self.algebra.bracket(k, Om), (-(gammas @ W.T)).reshape(-1)]
        if self.m:
            parts.append(self.algebra.bracket(self.xis(x), Om).reshape(-1))
        return jnp.concatenate(parts)

    def constraint(self, x: Float[Array, " m"]) -> Float[Array, " s"]:
        """The LR constraint ``⟨Ω, E_a⟩`` (empty without one)."""
        if not self.constrained:
            return jnp.zeros((0,), x.dtype)
        return self.constraint_basis(self.split(x)[1][0]) @ self.angular_velocity(x)

    @compiled_method
    def vector_field(self, x: Float[Array, " m"]) -> Float[Array, " m"]:
        f0 = self._free_field(x)
        if not self.constrained:
            return f0
        # d/dt ⟨Ω, E_a⟩ = ⟨J⁻¹(k' − J̇Ω), E_a⟩ + ⟨Ω, Ė_a⟩ along the free field, then μ from G μ = −rate
        d = self.algebra.dim
        _, gammas = self.split(x)
        xis = self.xis(x)
        J, E = self.inertia_operator(gammas, xis), self.constraint_basis(gammas[0])
        Om = solve_small(J, x[:d])
        gdot, xidot = self.split(f0)[1], self.xis(f0)
        Jdot_Om = jax.jvp(lambda g, xi: self.inertia_operator(g, xi) @ Om, (gammas, xis), (gdot, xidot))[1]
        JinvE = solve_small(J, E.T)
        rate = JinvE.T @ (f0[:d] - Jdot_Om)
        if self.n > 3:  # in 3D, E = γ/|γ| and Ė·ω = (γ × ω)·ω/|γ| = 0
            rate = rate + jax.jvp(self.constraint_basis, (gammas[0],), (gdot[0],))[1] @ Om
        mu = -solve_small(E @ JinvE, rate)
        return f0.at[:d].add(E.T @ mu)

    def density(self, x: Float[Array, " m"]) -> Scalar:
        """The invariant density in (k, γ, ξ): ``|det J|^{−1/2}``, times ``sqrt(det⟨J⁻¹E_a, E_b⟩)``
        with the LR constraint (001-equations.md, table)."""
        J = self._J(x)
        rho = jnp.abs(jnp.linalg.det(J)) ** -0.5
        if self.constrained:
            E = self.constraint_basis(self.split(x)[1][0])
            rho = rho * jnp.sqrt(jnp.linalg.det(E @ solve_small(J, E.T)))
        return rho

    @compiled_method
    def energy(self, x: Float[Array, " m"]) -> Scalar:
        """``½⟨k, Ω⟩``; with the LR constraint an integral only on the constraint."""
        return 0.5 * jnp.dot(self.split(x)[0], self.angular_velocity(x))

    @compiled_method
    def casimirs(self, x: Float[Array, " m"]) -> Float[Array, " q"]:
        """The Gram matrices of the advected vectors and of the advected algebra elements (upper
        triangles): kept by γ' = −Ωγ and ξ' = [ξ, Ω] for any Ω."""
        _, gammas = self.split(x)
        xis = self.xis(x)
        return jnp.concatenate([(gammas @ gammas.T)[np.triu_indices(self.r)], (xis @ xis.T)[np.triu_indices(self.m)]])

    @property
    def casimir_names(self) -> tuple[str, ...]:
        """``γi·γj`` (i ≤ j), then ``ξi·ξj``: the entries :meth:`casimirs` returns."""
        return tuple(f"{s}{i + 1}·{s}{j + 1}" for s, k in (("γ", self.r), ("ξ", self.m)) for i, j in zip(*np.triu_indices(k)))

    @compiled_method
    def integrals(self, x: Float[Array, " m"]) -> dict:
        """This system's first integrals (``integral_names``), by name."""
        k, gammas = self.split(x)
        K = self.algebra.hat(k)
        table = {
            "energy": lambda: self.energy(x),
            "gamma_norms": lambda: jnp.sum(gammas**2, axis=1),
            "constraint": lambda: self.constraint(x),
            "k_gamma": lambda: jnp.sum((gammas @ K.T) ** 2, axis=1),
            "k_dot_gamma": lambda: gammas @ k,
            "k_norm": lambda: jnp.dot(k, k),
            "gamma_gram": lambda: (gammas @ gammas.T)[np.triu_indices(self.r)],
            "k_xi": lambda: self.xis(x) @ k,
            "xi_gram": lambda: (self.xis(x) @ self.xis(x).T)[np.triu_indices(self.m)],
        }
        return {name: table[name]() for name in self.integral_names}

    def from_velocity(self, Omega: Float[Array, " d"], gammas: Float[Array, "r n"],
                      xis: Optional[Float[Array, "m d"]] = None) -> Float[Array, " m"]:
        """The state with angular velocity Ω (then projected onto the constraint) and the given
        advected vectors (rows) and algebra elements: ``(J Ω, γ, ξ)``."""
        gammas = jnp.asarray(gammas).reshape(self.r, self.n)
        xis = jnp.zeros((0, self.algebra.dim), gammas.dtype) if xis is None else jnp.asarray(xis).reshape(
            self.m, self.algebra.dim)
        return _from_velocity(self, jnp.asarray(Omega), gammas, xis)

    def default_state(self) -> Float[Array, " m"]:
        if self.default is None:
            raise ValueError(f"{self.name} has no default state")
        return self.default

    def project(self, x: Float[Array, " m"]) -> Float[Array, " m"]:
        """The state with ``k`` moved along the reaction directions onto the constraint (the
        J⁻¹-orthogonal projection; γ unchanged)."""
        if not self.constrained:
            return x
        k, gammas = self.split(x)
        E = self.constraint_basis(gammas[0])
        JinvE = solve_small(self._J(x), E.T)
        mu = solve_small(E @ JinvE, JinvE.T @ k)
        return x.at[: self.algebra.dim].add(-E.T @ mu)

    def check_state(self, x: Array) -> None:
        float_vector(x, self.size, self.name)
        if is_traced(x) or any(is_traced(a) for a in jax.tree.leaves(self)):
            return
        with jax.ensure_compile_time_eval():  # concrete values, also while a jit is tracing
            norms = np.linalg.norm(np.asarray(self.split(jnp.asarray(x))[1]), axis=1)
            if not np.all(norms > 0):
                raise ValueError(f"{self.name}: every advected vector γ must be nonzero, got |γ| = {norms.tolist()}")
            J, scale, resid = (np.asarray(a) for a in _check_quantities(self, jnp.asarray(x)))
        lam = np.linalg.eigvalsh(J)
        if not lam[0] > 0:
            raise ValueError(f"{self.name}: the total inertia J at this state is not positive definite "
                             f"(eigenvalues {np.round(lam, 6).tolist()})")
        if self.constrained:
            if resid > 1e-8 * scale:
                raise ValueError(f"{self.name}: the state is off the constraint Ω ∈ γ ∧ Rⁿ (residual {resid:.2e}); "
                                 "system.project(x) moves it onto the constraint")


# One compiled program each (eagerly, their dozens of small operations compiled one by one:
# about 2 s per system on a fresh process).
@eqx.filter_jit
def _from_velocity(system, Omega, gammas, xis):
    k = system.inertia_operator(gammas, xis) @ Omega
    return system.project(jnp.concatenate([k, gammas.reshape(-1), xis.reshape(-1)]))


@eqx.filter_jit
def _check_quantities(system, x):
    """``(J(x), 1 + max|Ω|, max|constraint|)`` for :meth:`check_state` (the last two only for a
    constrained system; zeros otherwise)."""
    if not system.constrained:
        return system._J(x), jnp.ones((), x.dtype), jnp.zeros((), x.dtype)
    scale = 1.0 + jnp.max(jnp.abs(system.angular_velocity(x)))
    return system._J(x), scale, jnp.max(jnp.abs(system.constraint(x)))
