"""Suris' explicit integrable maps for the Lagrange top and the Clebsch flow (seed 000, secs 6, 7)."""

from __future__ import annotations

from typing import ClassVar, final

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Scalar

from .. import _small as sm
from .._algebra import LieAlgebra, rotation_frame
from .._system import AbstractLiePoissonSystem, ClebschFlowFamily, LagrangeTopFamily
from ._base import AbstractAdjointPair, AbstractGroupMap, StepInfo, finite_result

__all__ = ["SurisLagrangeTop", "SurisClebsch"]


def _split(system: AbstractLiePoissonSystem, y: Float[Array, " d"]):
    """``(frame, y in its coordinates, hat(M) as lists, P as a list)`` for a state on e(n)*: the
    maps are written in the elementary so(n) basis of :func:`rotation_frame`."""
    frame = rotation_frame(system.algebra)
    g, y = frame.algebra, frame.momentum_in(y)
    d = g.dim
    return frame, y, sm.hat(sm.unstack(y[:d]), g.matrix_basis), sm.unstack(y[d:])


@final
class SurisLagrangeTop(AbstractGroupMap, AbstractAdjointPair):
    r"""Suris' explicit Poisson maps for the Lagrange top (seed 000, Theorems 6 and 8). Order 1.

    Rest frame (6.5): ``m_{k+1} = m_k + ε a_k ∧ p``, ``a_{k+1} = cay(ε m_{k+1}/2) a_k`` with
    ``cay(X) = (I − X)⁻¹(I + X)``. Integral (6.6):
    ``H_ε = ½<m, m> + <a, p> − (ε/2)<m, p ∧ a>``.

    Moving frame (6.19)–(6.20): ``M_{k+1} = W⁻¹ M_k W + ε A ∧ P_{k+1}``, ``P_{k+1} = W⁻¹ P_k``,
    with ``W`` from inverting the Legendre map (6.20) explicitly (``docs/errata.md``,
    "Inverting (6.20)"). Integral (6.21): ``H̄_ε = ½<M, M> + <P, A> + (ε/2)<M, P ∧ A>``.

    ε is the time step dt. Both maps are Poisson for the Lie–Poisson bracket of e(n) and
    keep ``|a|²`` (``|P|²``) and the integrals above to roundoff. Steps any system of
    :class:`LagrangeTopFamily` (an :class:`lpjax.AbstractLagrangeTop` Hamiltonian on e(n)*,
    whose frame, α and gravity agree with its energy; so(n) in any skew basis, as for
    :class:`MoserVeselov`).

    ``reconstruct=True`` carries the attitude: ``g_{k+1} = g_k W_k`` (moving frame) or
    ``g_{k+1} = w_k g_k`` (rest frame) with ``w_k`` from inverting (6.11) like (6.20), with
    ``A = a_k/|a_k|``. The state map (6.5) does not depend on α but ``w_k`` does (for α ≠ 1,
    ``w_k ≠ cay(ε m_{k+1}/2)``; only their action on ``a_k`` agrees).

    ``reverse=True`` is the adjoint map ``Φ*_ε = Φ_{−ε}⁻¹`` (:attr:`adjoint`), also explicit:
    the two updates in the other order. Rest frame: ``a_{k+1} = cay(ε m_k/2) a_k``, then
    ``m_{k+1} = m_k + ε a_{k+1} ∧ p``. Moving frame: ``N = M_k + ε A ∧ P_k``, ``V`` from
    inverting (6.20) at ``N`` with step ε (``V⁻¹ F_{−ε}(V⁻¹) V = F_ε(V)``, ``F_ε`` the right side
    of (6.20)), then ``P_{k+1} = Vᵀ P_k``, ``M_{k+1} = Vᵀ N V``. The attitude steps by ``V``
    (moving frame) or by ``w_kᵀ`` of (6.11) at step −ε (rest frame). :class:`lpjax.Composition`
    composes the two into symmetric methods of any even order.
    """

    order: ClassVar[int] = 1
    nonfinite_lasts: ClassVar[bool] = True
    family: ClassVar[LagrangeTopFamily] = LagrangeTopFamily()
    reconstruct: bool = eqx.field(static=True, default=False)
    reverse: bool = eqx.field(static=True, default=False)

    @property
    def adjoint(self) -> "SurisLagrangeTop":
        return SurisLagrangeTop(self.reconstruct, not self.reverse)

    def integral(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar) -> Scalar:
        """The map's conserved modified energy: (6.6) in the rest frame, (6.21) in the moving one."""
        self.check_system(system)
        h = system.hamiltonian
        frame = rotation_frame(system.algebra)
        g, y = frame.algebra, frame.momentum_in(y)
        m, a = y[: g.dim], y[g.dim :]
        p = jnp.asarray(h.gravity, y.dtype)
        if h.frame == "rest":
            return 0.5 * jnp.dot(m, m) + jnp.dot(a, p) - 0.5 * dt * jnp.dot(m, g.vee(sm.wedge_matrix(p, a), check=False))
        return 0.5 * jnp.dot(m, m) + jnp.dot(a, p) + 0.5 * dt * jnp.dot(m, g.vee(sm.wedge_matrix(a, p), check=False))

    def lax_matrix(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar, lam: Scalar):
        """Lax matrix of Theorem 7 (rest) or 9 (moving), corrected forms: see
        :func:`lpjax.diagnostics.suris_lagrange_lax`."""
        from .._lax import suris_lagrange_lax

        return suris_lagrange_lax(system, y, dt, lam)

    def group_algebra(self, system: AbstractLiePoissonSystem) -> LieAlgebra:
        return system.algebra.rotation_structure[0]

    def group_step(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        h = system.hamiltonian
        frame, y, m, a = _split(system, y)
        g = frame.algebra
        if self.reverse:
            return self._adjoint_step(system, frame, y, m, a, dt)
        if h.frame == "rest":  # m_{k+1} in coordinates (a ∧ p is skew to the bit), then its matrix
            m1c = sm.lin(1.0, sm.unstack(y[: g.dim]), dt, sm.vee(sm.wedge(a, sm.unstack(h.gravity)), g.vee_matrix, skew=True))
            m1 = sm.hat(m1c, g.matrix_basis)
            a1 = sm.cayley_apply(sm.lin(0.5 * dt, m1), a)
            norm = jnp.sqrt(sm.dot(a, a))
            W = _invert_legendre(m1, [ai / norm for ai in a], h.alpha, dt)  # w_k of (6.11)
        else:
            A = [0.0] * (h.n - 1) + [1.0]
            W = _invert_legendre(m, A, h.alpha, dt)
            WT = sm.transpose(W)
            a1 = sm.mv(WT, a)
            m1c = sm.vee(sm.lin(1.0, sm.mm(sm.mm(WT, m), W), dt, sm.wedge(A, a1)), g.vee_matrix)
        y1 = frame.momentum_out(sm.stack(m1c + a1))
        return y1, sm.stack_matrix(W), finite_result(y1), StepInfo.explicit(y.dtype)

    def _adjoint_step(self, system, frame, y, m, a, dt):
        """The adjoint map (class docstring, ``reverse=True``)."""
        h, g = system.hamiltonian, frame.algebra
        mc = sm.unstack(y[: g.dim])
        if h.frame == "rest":
            a1 = sm.cayley_apply(sm.lin(0.5 * dt, m), a)
            m1c = sm.lin(1.0, mc, dt, sm.vee(sm.wedge(a1, sm.unstack(h.gravity)), g.vee_matrix, skew=True))
            norm = jnp.sqrt(sm.dot(a1, a1))
            W = sm.transpose(_invert_legendre(m, [ai / norm for ai in a1], h.alpha, -dt))
        else:
            A = [0.0] * (h.n - 1) + [1.0]
            N = sm.lin(1.0, m, dt, sm.wedge(A, a))
            W = _invert_legendre(N, A, h.alpha, dt)
            WT = sm.transpose(W)
            a1 = sm.mv(WT, a)
            m1c = sm.vee(sm.mm(sm.mm(WT, N), W), g.vee_matrix)
        y1 = frame.momentum_out(sm.stack(m1c + a1))
        return y1, sm.stack_matrix(W), finite_result(y1), StepInfo.explicit(y.dtype)


def _invert_legendre(m, A, alpha, dt):
    """``W`` with ``m = (2α/ε)(W − I)(W + I)⁻¹ − (2(1 − α)/ε) A ∧ (WA)/(1 + <A, WA>)``, |A| = 1.

    (6.20) (and (6.11) with ``A = a_k``, ``m = m_{k+1}``): ``WA = cay(εm/2) A`` (6.22), then
    ``W = cay(Y)`` with ``Y = (ε/2α)[m + (2(1 − α)/ε) A ∧ (WA)/(1 + <A, WA>)]``
    (``docs/errata.md``, "Inverting (6.20)"). Matrices and vectors are :mod:`lpjax._small` lists.
    """
    WA = sm.cayley_apply(sm.lin(0.5 * dt, m), A)
    c = (1 - alpha) / alpha / (1 + sm.dot(A, WA))
    return sm.cayley(sm.lin(0.5 * dt / alpha, m, c, sm.wedge(A, WA)))


@final
class SurisClebsch(AbstractGroupMap, AbstractAdjointPair):
    r"""Suris' explicit Poisson map for the Clebsch flow ``c_jk = 1`` (seed 000, Theorem 10). Order 1.

    (7.17): ``M_{k+1} = M_k + ε P_k ∧ (BP_k) / (1 + (ε²/4)<P_k, BP_k>)``,
    ``P_{k+1} = (I + ε M_{k+1}/2)⁻¹ (I − ε M_{k+1}/2) P_k``, with ε = dt; Poisson for the bracket
    (4.8)–(4.9), keeps ``|P|²`` to roundoff. Steps any system of :class:`ClebschFlowFamily`
    (an :class:`lpjax.AbstractClebschFlow` Hamiltonian on e(n)* whose B agrees with its energy;
    so(n) in any skew basis, as for :class:`MoserVeselov`).

    ``reverse=True`` is the adjoint map ``Φ*_ε = Φ_{−ε}⁻¹`` (:attr:`adjoint`), the two updates
    in the other order: ``W = cay(ε M_k/2)``, ``P_{k+1} = Wᵀ P_k``, then
    ``M_{k+1} = M_k + ε P_{k+1} ∧ (BP_{k+1}) / (1 + (ε²/4)<P_{k+1}, BP_{k+1}>)``; the attitude
    steps by ``W``.
    """

    order: ClassVar[int] = 1
    nonfinite_lasts: ClassVar[bool] = True
    family: ClassVar[ClebschFlowFamily] = ClebschFlowFamily()
    reconstruct: bool = eqx.field(static=True, default=False)
    reverse: bool = eqx.field(static=True, default=False)

    @property
    def adjoint(self) -> "SurisClebsch":
        return SurisClebsch(self.reconstruct, not self.reverse)

    def lax_matrix(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar, lam: Scalar):
        """Lax matrix of Theorem 10, corrected form: see :func:`lpjax.diagnostics.suris_clebsch_lax`."""
        from .._lax import suris_clebsch_lax

        return suris_clebsch_lax(system, y, dt, lam)

    def group_algebra(self, system: AbstractLiePoissonSystem) -> LieAlgebra:
        return system.algebra.rotation_structure[0]

    def group_step(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        frame, _, m, P = _split(system, y)
        B = sm.unstack(system.hamiltonian.B)

        def kick(m, P):  # (7.17)'s first update
            BP = [b * p for b, p in zip(B, P)]
            return sm.lin(1.0, m, dt / (1 + 0.25 * dt**2 * sm.dot(P, BP)), sm.wedge(P, BP))

        if self.reverse:
            W = sm.cayley(sm.lin(0.5 * dt, m))
            P1 = sm.mv(sm.transpose(W), P)
            m1 = kick(m, P1)
        else:
            m1 = kick(m, P)
            W = sm.cayley(sm.lin(0.5 * dt, m1))
            P1 = sm.mv(sm.transpose(W), P)
        y1 = frame.momentum_out(sm.stack(sm.vee(m1, frame.algebra.vee_matrix, skew=True) + P1))
        return y1, sm.stack_matrix(W), finite_result(y1), StepInfo.explicit(y.dtype)
