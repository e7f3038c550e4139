"""Reduced discrete Lagrangians ``ℓ(W, P, dt)`` for :class:`lpjax.DiscreteEulerPoincare`."""

from __future__ import annotations

from typing import Callable, ClassVar, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from ._algebra import GroupSplit, LieAlgebra, group_split
from ._small import logdet_spd
from ._system import (AbstractSystem, ClebschFlowFamily, FreeRigidBodyFamily, LagrangeTopFamily, LiePoissonFamily,
                      MatrixGroupFamily, guarded)

__all__ = ["heavy_top", "kirchhoff", "midpoint", "movable_base_top", "moser_veselov", "suris_clebsch", "suris_lagrange_top"]


def _tr_log(W: Float[Array, "n n"]) -> Scalar:
    """``tr log(2I + W + W⁻¹) = log det(2I + W + Wᵀ)`` on SO(n) (positive definite off −1)."""
    n = W.shape[-1]
    return logdet_spd(2 * jnp.eye(n, dtype=W.dtype) + W + W.T)


@final
class MoserVeselovLagrangian(eqx.Module):
    """``ℓ(W) = −tr(WΛ)/dt`` (seed 003, sec. 3.4, in the convention ``W_k = g_k⁻¹ g_{k+1}``)."""

    symmetric: ClassVar[bool] = True  # measured: tests/test_composition.py

    lam: Float[Array, " n"]

    def __call__(self, W, P, dt):
        return -jnp.sum(jnp.diagonal(W) * self.lam) / dt


@final
class SurisClebschLagrangian(eqx.Module):
    """``ℓ(W, P) = −(1/ε) tr log(2I + W + W⁻¹) + (2/ε) log(1 + (ε²/4)<P, BP>)``: seed 000,
    eq. (7.16) with the coefficient 2/ε instead of the printed 4/ε (see :func:`suris_clebsch`)."""

    symmetric: ClassVar[bool] = False  # measured: tests/test_composition.py

    B: Float[Array, " n"]
    coefficient: float = eqx.field(static=True, default=2.0)

    def __call__(self, W, P, dt):
        return -_tr_log(W) / dt + self.coefficient / dt * jnp.log1p(0.25 * dt**2 * jnp.dot(P, self.B * P))


@final
class SurisLagrangeTopLagrangian(eqx.Module):
    """Seed 000, eq. (6.1) (rest frame, ``(w, a)``) or (6.16) (moving frame, ``(W, P)``)."""

    symmetric: ClassVar[bool] = False  # measured: tests/test_composition.py

    alpha: Scalar
    p: Float[Array, " n"]
    moving: bool = eqx.field(static=True)

    def __call__(self, W, a, dt):
        kinetic = -self.alpha / dt * _tr_log(W)
        if self.moving:  # (6.16): A = e_n and the state vector is P_k
            WA = W[:, -1]
            return kinetic - 2 * (1 - self.alpha) / dt * jnp.log1p(WA[-1]) - dt * jnp.dot(a, WA)
        # (6.1) with a_{k+1} = w_k a_k
        return kinetic - 2 * (1 - self.alpha) / dt * jnp.log1p(jnp.dot(a, W @ a)) - dt * jnp.dot(self.p, a)


@final
class SplitLagrangian(eqx.Module):
    """``ℓ(W, P) = −tr(WΛ)/dt − (dt/2)(V(P) + V(W⁻¹P))`` with ``V(P) = ⟨A, P⟩ − ½⟨P, BP⟩``:
    Moser–Veselov's kinetic term and the potential averaged over the step's two ends
    (``P_{k+1} = W_k⁻¹ P_k``)."""

    symmetric: ClassVar[bool] = True  # measured: tests/test_composition.py

    lam: Float[Array, " n"]
    A: Float[Array, " n"]
    B: Float[Array, " n"]

    def potential(self, P):
        return jnp.dot(self.A, P) - 0.5 * jnp.dot(P, self.B * P)

    def __call__(self, W, P, dt):
        return -jnp.sum(jnp.diagonal(W) * self.lam) / dt - 0.5 * dt * (self.potential(P) + self.potential(W.T @ P))


def _momentum_quadratic(h, mu, a, d: int):
    """``(A, b, c)`` with ``h(μ, a) = ½μᵀAμ + bᵀμ + c`` at ``a``: derivatives at ``μ = 0``."""
    def f(m):
        return h(m if a is None else jnp.concatenate([m, a]))

    zero = jnp.zeros(d, mu.dtype)
    return jax.hessian(f)(zero), jax.grad(f)(zero), f(zero)


@final
class MidpointLagrangian(eqx.Module):
    r"""``ℓ_d(W, a) = dt·ℓ(ξ_W, ā)``: the continuous reduced Lagrangian at the Cayley velocity
    ``ξ_W = (2/dt) vee((W + I)⁻¹(W − I))`` and the mean ``ā = (a + W⁻¹·a)/2`` of the step's two
    advected states, where ``ℓ(ξ, a) = ½(ξ − b)ᵀA⁻¹(ξ − b) − c`` is the Legendre transform of a
    Hamiltonian ``h(μ, a) = ½μᵀA(a)μ + b(a)ᵀμ + c(a)`` quadratic in the group's momentum μ
    (seed 003, sec. 2; seed 000, (3.9)–(3.10) with advected vectors)."""

    symmetric: ClassVar[bool] = True  # measured: tests/test_composition.py

    hamiltonian: Callable
    group: LieAlgebra
    k: int = eqx.field(static=True)  # advected vectors in Rʳ
    r: int = eqx.field(static=True)
    left: bool = eqx.field(static=True)

    def __call__(self, W, a, dt):
        g = self.group
        split = GroupSplit(g, g.matrix_basis, self.k, self.r, g.so_n is not None)
        d, m = g.dim, W.shape[-1]
        eye = jnp.eye(m, dtype=W.dtype)
        X = jnp.linalg.solve(W + eye, W - eye)
        xi = (2.0 / dt) * (X.reshape(-1) @ jnp.asarray(self.group.vee_matrix, W.dtype))
        abar = None if a is None else 0.5 * (a + split.advect(W, a, self.left))
        A, b, c = _momentum_quadratic(self.hamiltonian, xi, abar, d)
        v = xi - b
        return dt * (0.5 * jnp.dot(v, jnp.linalg.solve(A, v)) - c)


def midpoint(system: AbstractSystem, group: Optional[LieAlgebra] = None) -> MidpointLagrangian:
    r"""A second-order discrete Lagrangian for any Lie–Poisson system on ``(𝔤 ⋉ (Rʳ)^k)*``
    (:func:`lpjax.algebras.group_split`; ``group`` as in :class:`lpjax.DiscreteEulerPoincare`)
    whose Hamiltonian is quadratic in the momentum μ of 𝔤, ``h(μ, a) = ½μᵀA(a)μ + b(a)ᵀμ + c(a)``
    with ``A`` invertible: :class:`MidpointLagrangian`, ``ℓ_d(W, a) = dt·ℓ(ξ_W, ā)``, the Legendre
    transform ``ℓ(ξ, a) = ½(ξ − b)ᵀA⁻¹(ξ − b) − c`` at the Cayley velocity of ``W`` and the mean
    advected state. It is symmetric in the step, so the DEP map is of order 2.

    On so(3), SO(2,1), SE(3) and so(3) ⋉ (R³)^k alike; with the default group, a heavy top or a
    Kirchhoff body on se(3)* is SO(3) with its vector advected and ``b, c`` functions of it (a
    Routhian), ``group=lpjax.algebras.se3()`` makes the whole momentum the group's.

    ``ValueError`` when ``h`` is not quadratic in μ (checked at a random state: relative defect
    above 1e-9, e.g. the Kida vortex's logarithm) or ``A`` is singular there (condition number
    above 1e12: μ does not determine the velocity, so there is no Lagrangian); ``TypeError``
    for a system whose algebra is not 𝔤 ⋉ (Rʳ)^k.
    """
    LiePoissonFamily().check(system, "midpoint", "needs")
    MatrixGroupFamily(group).check(system, "midpoint", "needs")
    split = group_split(system.algebra, group)
    d = split.basis.shape[0]
    rng = np.random.default_rng(0)
    mu, a = (jnp.asarray(0.5 * rng.normal(size=n)) for n in (d, system.algebra.dim - d))
    a = a if split.k else None
    h = system.hamiltonian
    A, b, c = (np.asarray(v) for v in _momentum_quadratic(h, mu, a, d))
    value = float(h(mu if a is None else jnp.concatenate([mu, a])))
    model = 0.5 * mu @ A @ mu + b @ mu + c
    defect = abs(value - model) / max(abs(value), abs(model), 1e-300)
    if not defect <= 1e-9:
        raise ValueError(f"midpoint needs a Hamiltonian quadratic in the momentum of {split.group.name}; "
                         f"{type(h).__name__} is not (relative defect {defect:.3g} at a random state)")
    cond = np.linalg.cond(A) if np.all(np.isfinite(A)) else np.inf
    if not cond <= 1e12:
        raise ValueError(f"midpoint: the Hessian of {type(h).__name__} in the momentum of {split.group.name} is "
                         f"singular (condition number {cond:.3g}); no Lagrangian exists for this group "
                         "(try the rotations as the group, with the rest advected)")
    return MidpointLagrangian(h, split.group, split.k, split.r, bool(system.sign == -1))


def movable_base_top(system: AbstractSystem, group: Optional[LieAlgebra] = None) -> MidpointLagrangian:
    """The heavy top on a movable base, ``lpjax.systems.movable_base_top`` on (se(3) × R³)*
    (seed 002, (28)–(30), controlled or not): :func:`midpoint`, by default on SO(3) with ``P`` and
    ``Γ`` advected (``ℓ`` the Routhian of the locked inertia ``K(ρ)``), or on SE(3) with ``Γ``
    advected for ``group=lpjax.algebras.se3()``."""
    from .systems._movable_base import MovableBaseHamiltonian

    h = getattr(system, "hamiltonian", None)
    if not isinstance(h, MovableBaseHamiltonian):
        raise TypeError(f"movable_base_top needs lpjax.systems.movable_base_top(...), got {type(h).__name__}")
    return midpoint(system, group)


def heavy_top(system: AbstractSystem) -> SplitLagrangian:
    """A second-order discrete Lagrangian for the heavy top, ``heavy_top(I, χ, mgl)`` on se(3)*
    (``V(Γ) = mgl χ·Γ``) or ``heavy_top_n(J, A)`` on e(n)* (``V(P) = ⟨A, P⟩``):
    ``ℓ(W, P) = −tr(WΛ)/dt − (dt/2)(V(P) + V(W⁻¹P))``, Moser–Veselov's kinetic term (Λ the
    mass tensor) and the trapezoidal potential, for :class:`lpjax.DiscreteEulerPoincare`
    (seed 000, Theorem 2). The map keeps the Casimirs of the semidirect product (1.7e-14
    relative over 10⁴ steps, measured) and is of order 2 (measured 2.00 against GL6).
    """
    from .systems._heavy_top import HeavyTopHamiltonian, HeavyTopNHamiltonian

    h = getattr(system, "hamiltonian", None)
    if isinstance(h, HeavyTopHamiltonian):
        A = h.mgl * jnp.asarray(h.chi)
    elif isinstance(h, HeavyTopNHamiltonian):
        A = jnp.asarray(h.A)
    else:
        raise TypeError(f"heavy_top needs lpjax.systems.heavy_top(...) or heavy_top_n(...), got {type(h).__name__}")
    return SplitLagrangian(jnp.asarray(h.kinetic.mass_tensor), A, jnp.zeros_like(A))


def kirchhoff(system: AbstractSystem) -> SplitLagrangian:
    """A second-order discrete Lagrangian for a body in an ideal fluid, ``clebsch_case`` on
    e(n)* (seed 000, (7.1)–(7.4)): ``ℓ(W, P) = −tr(WΛ)/dt + (dt/4)(⟨P, BP⟩ + ⟨W⁻¹P, BW⁻¹P⟩)``.

    Moser–Veselov's kinetic term gives ``𝒥(Ω) = ΩΛ + ΛΩ``, so (7.5), ``𝒥(Ω)_jk = Ω_jk / c_jk``,
    needs ``Λ_j + Λ_k = 1/c_jk`` for every ``j < k``: always solvable for n = 3, and for the
    flow ``c_jk = 1`` (``Λ = ½``) in any dimension; other ``c_jk`` (n > 3) are refused with
    ``ValueError``.
    """
    from .systems._clebsch_case import ClebschFlowHamiltonian, ClebschHamiltonian

    h = getattr(system, "hamiltonian", None)
    if not isinstance(h, (ClebschHamiltonian, ClebschFlowHamiltonian)):
        raise TypeError(f"kirchhoff needs lpjax.systems.clebsch_case(...), got {type(h).__name__}")
    B = jnp.asarray(h.B)
    n = B.shape[0]
    if isinstance(h, ClebschFlowHamiltonian):
        lam = jnp.full(n, 0.5, B.dtype)
    else:
        rows, cols = np.triu_indices(n, 1)
        pairs = np.zeros((rows.size, n))
        pairs[np.arange(rows.size), rows] = pairs[np.arange(rows.size), cols] = 1.0
        inv_c = 1.0 / np.asarray(h.c, float)
        lam_np = np.linalg.lstsq(pairs, inv_c, rcond=None)[0]
        worst = float(np.max(np.abs(pairs @ lam_np - inv_c)) / np.max(np.abs(inv_c)))
        if worst > 1e-12:
            raise ValueError(f"kirchhoff: no Λ with Λ_j + Λ_k = 1/c_jk for these c_jk (relative residual {worst:.3g}); "
                             "Moser-Veselov's kinetic term cannot give this inertia operator (7.5)")
        lam = jnp.asarray(lam_np, B.dtype)
    return SplitLagrangian(lam, jnp.zeros_like(B), B)


def moser_veselov(system: AbstractSystem) -> MoserVeselovLagrangian:
    """The Moser–Veselov Lagrangian ``ℓ(W) = −tr(WΛ)/dt`` for a free rigid body.

    Λ is the mass tensor of the system's :class:`lpjax.AbstractFreeRigidBody` Hamiltonian, as
    :class:`lpjax.MoserVeselov` uses it; ``ℓ ≈ dt·½<Ω, M>`` for ``W = I + dtΩ + …``
    (``docs/errata.md``, "Moser–Veselov conventions").
    """
    family = FreeRigidBodyFamily()
    family.check(system, "moser_veselov", "needs")
    return MoserVeselovLagrangian(guarded(family, system, jnp.asarray(system.hamiltonian.mass_tensor)))


def suris_clebsch(system: AbstractSystem, coefficient: float = 2.0) -> SurisClebschLagrangian:
    """Suris' Lagrangian (7.16) for the Clebsch flow ``c_jk = 1``, seed 000.

    With the coefficient ``2/ε`` (the default) the DEP map is exactly (7.17); ``coefficient=4.0``
    gives the printed form (``docs/errata.md``, "The coefficient of (7.16)").
    """
    family = ClebschFlowFamily()
    family.check(system, "suris_clebsch", "needs")
    return SurisClebschLagrangian(guarded(family, system, system.hamiltonian.B), float(coefficient))


def suris_lagrange_top(system: AbstractSystem, alpha: ArrayLike = 0.5) -> SurisLagrangeTopLagrangian:
    """Suris' Lagrangian for ``lagrange_top``: (6.1) in the rest frame, (6.16) in the moving one.

    The moving frame takes α from the system; in the rest frame the map (6.5) does not
    depend on α (Theorem 6), so any ``alpha`` gives the same DEP map.
    """
    family = LagrangeTopFamily()
    family.check(system, "suris_lagrange_top", "needs")
    h = system.hamiltonian
    gravity = guarded(family, system, jnp.asarray(h.gravity))  # traced data: checked where the map runs
    if h.frame == "moving":
        return SurisLagrangeTopLagrangian(h.alpha, gravity, True)
    return SurisLagrangeTopLagrangian(jnp.asarray(alpha, gravity.dtype), gravity, False)
