"""The Moser–Veselov discrete rigid body (seeds 003/004, sec. 3.4) as a discrete Lie–Poisson map."""

from __future__ import annotations

from typing import ClassVar, Optional, final

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Scalar

from .. import _small as sm
from .._algebra import LieAlgebra, rotation_frame
from .._system import AbstractLiePoissonSystem, FreeRigidBodyFamily
from ._base import AbstractGroupMap, first_failure
from ._implicit import AbstractImplicitMethod, AbstractRootStepAdjoint, implicit_solve

__all__ = ["MoserVeselov"]


def _legendre_residual(x: Float[Array, " d"], args) -> Float[Array, " d"]:
    """``Fℓ(f) − dt M = fΛ − Λfᵀ − dt M`` at ``f = cay(hat(x))``, in algebra coordinates
    (seed 003, sec. 3.4); written entrywise (:mod:`lpjax._small`)."""
    algebra, lam, dtM = args
    f = sm.cayley(sm.hat(sm.unstack(x), algebra.matrix_basis))
    n = len(f)
    R = [[f[i][j] * lam[j] - lam[i] * f[j][i] for j in range(n)] for i in range(n)]
    return sm.stack(sm.vee(R, algebra.vee_matrix, skew=True)) - dtM  # R[j][i] = −R[i][j] to the bit


@final
class MoserVeselov(AbstractGroupMap, AbstractImplicitMethod, AbstractRootStepAdjoint):
    r"""Discrete rigid body of Moser and Veselov as a discrete Lie–Poisson map (order 2).

    Reduced discrete Lagrangian ``ℓ(f) = tr(fΛ)`` on SO(n), Legendre transform
    ``Fℓ(f) = fΛ − Λfᵀ`` and update ``Π_{k+1} = Ad*_{f⁻¹} Π_k = fᵀ Π_k f`` (seed 003, eqs (2.9),
    (3.1) and sec. 3.4). One step of size dt for the body ``Ṁ = [M, Ω]``, ``M = JΩ + ΩJ``:
    solve ``dt M_k = fΛ − Λfᵀ`` for ``f ∈ SO(n)``, then ``M_{k+1} = fᵀ M_k f``, with ``Λ = J``
    the mass tensor of the system's :class:`lpjax.AbstractFreeRigidBody` Hamiltonian (for
    :func:`lpjax.systems.rigid_body` with principal moments I, ``Λ_i = (I_j + I_k − I_i)/2``),
    so that ``f = I + dt Ω + O(dt²)``.

    ``f = cay(X)`` is solved in Cayley coordinates by the implicit kernel with ``max_iters``
    fixed iterations preconditioned with the derivative at ``X = 0``
    (``X_jk ← X_jk − R_jk / (2(Λ_j + Λ_k))``); see :class:`GaussLegendre` for ``tol``.

    Steps any system of :class:`FreeRigidBodyFamily` (so(n)* in a skew matrix basis, (−)
    bracket, an :class:`lpjax.AbstractFreeRigidBody` Hamiltonian whose ``mass_tensor`` agrees
    with its energy, which the family checks). The formulas hold in a basis of elementary skew
    matrices; any other skew basis (scaled, rotated) is stepped through the standard one, the
    momenta changed at the step's boundary (:class:`lpjax._algebra.RotationFrame`). Preserves the spectrum of
    M (Casimirs |M|², tr(M^{2k})) to roundoff; it is a Poisson map for the Lie–Poisson
    bracket, so energy errors stay bounded.
    """

    order: ClassVar[int] = 2
    nonfinite_lasts: ClassVar[bool] = True
    family: ClassVar[FreeRigidBodyFamily] = FreeRigidBodyFamily()
    max_iters: int = eqx.field(static=True, default=20)
    tol: Optional[float] = eqx.field(static=True, default=None)
    reconstruct: bool = eqx.field(static=True, default=False)
    early_exit: bool = eqx.field(static=True, default=False)

    def group_algebra(self, system: AbstractLiePoissonSystem) -> LieAlgebra:
        return system.algebra.rotation_structure[0]

    def _solve(self, system: AbstractLiePoissonSystem, g: LieAlgebra, y: Float[Array, " d"], dt: Scalar):
        """Cayley coordinates of f for momenta ``y`` in the elementary basis of ``g``."""
        lam = jnp.asarray(system.hamiltonian.mass_tensor, y.dtype)
        # the derivative of the residual at x = 0 is X ↦ 2(XΛ + ΛX): diagonal on matrix entries
        denom = g.vee(2.0 * (lam[:, None] + lam[None, :]) * g.hat(jnp.ones_like(y)), check=False)
        return implicit_solve(
            _legendre_residual, dt * y / denom, (g, sm.unstack(lam), dt * y), lambda r, _: r / denom,
            max_iters=self.max_iters, tol=self.tol, early_exit=self.early_exit,
        )

    def _step(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        """:meth:`group_step`, and the Cayley coordinates ``x`` of f (in the elementary basis of
        the system's :func:`rotation_frame`, through which the state passes in and out)."""
        frame = rotation_frame(system.algebra)
        yi = frame.momentum_in(y)
        x, result, info = self._solve(system, frame.algebra, yi, dt)
        y1, f = _update(frame, x, yi)
        return y1, f, first_failure(result, y1), info, x

    def group_step(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        return self._step(system, y, dt)[:4]

    def step_residuals(self, system: AbstractLiePoissonSystem, state, dt: Scalar):
        y1, f, result, info, x = self._step(system, self.observe(system, state), dt)
        return self.carry_on(system, state, y1, f), result, info, x

    def root_functions(self, system: AbstractLiePoissonSystem, dt: Scalar):
        """The Legendre equation in Cayley coordinates ``x`` of f, and ``M_{k+1} = fᵀ M_k f``."""
        dyn, static = eqx.partition(system, eqx.is_inexact_array)
        frame = rotation_frame(system.algebra)

        def residual(x, state, p):
            y = frame.momentum_in(self.observe(system, state))
            lam = jnp.asarray(eqx.combine(p[0], static).hamiltonian.mass_tensor, y.dtype)
            return _legendre_residual(x, (frame.algebra, sm.unstack(lam), p[2] * y))

        def update(x, state, p):
            return self.carry_on(system, state, *_update(frame, x, frame.momentum_in(self.observe(system, state))))

        return residual, update, (dyn, None, dt)


def _update(frame, x, yi):
    """``M_{k+1} = fᵀ M_k f`` with ``f = cay(x̂)``: ``(M_{k+1}, f)``, from and to the frame's
    elementary coordinates ``yi`` (in) and the user's (out)."""
    g = frame.algebra
    f = sm.cayley(sm.hat(sm.unstack(x), g.matrix_basis))
    Mk = sm.hat(sm.unstack(yi), g.matrix_basis)
    return frame.momentum_out(sm.stack(sm.vee(sm.mm(sm.mm(sm.transpose(f), Mk), f), g.vee_matrix))), sm.stack_matrix(f)
