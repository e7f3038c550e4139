"""The Moser–Veselov discrete rigid body (seeds 003/004, sec. 3.4) as a discrete Lie–Poisson map."""

from __future__ import annotations

import functools
from typing import ClassVar, NamedTuple, Optional, final

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from .. import _small as sm
from .._algebra import LieAlgebra, RotationFrame, rotation_frame, so3
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
    (``X_jk ← X_jk − R_jk / (2(Λ_j + Λ_k))``); see :class:`GaussLegendre` for ``tol``. On
    so(3) the equation is solved, and M turned, in closed vector forms (the axial vector of
    ``fΛ − Λfᵀ``; ``cay(−x̂)m``), chosen by the algebra's structure: 1204 operations a step in
    the fused GPU kernel against 2175 through the matrices and 1215 for a hand-written kernel
    (``benchmarks/kernel_ops.py``).

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
    symmetric: ClassVar[bool] = True
    family: ClassVar[FreeRigidBodyFamily] = FreeRigidBodyFamily()
    max_iters: int = eqx.field(static=True, default=20)
    tol: Optional[float] = eqx.field(static=True, default=None)
    reconstruct: bool = eqx.field(static=True, default=False)
    early_exit: bool = eqx.field(static=True, default=False)

    def group_algebra(self, system: AbstractLiePoissonSystem) -> LieAlgebra:
        return system.algebra.rotation_structure[0]

    def _solve(self, system: AbstractLiePoissonSystem, c: "_Coordinates", y: Float[Array, " d"], dt: Scalar):
        """Cayley coordinates of f for momenta ``y`` in the coordinates ``c``."""
        lam = jnp.asarray(system.hamiltonian.mass_tensor, y.dtype)
        # the derivative of the residual at x = 0 is X ↦ 2(XΛ + ΛX): diagonal on matrix entries
        denom = 2.0 * c.pair_sums(lam)
        return implicit_solve(
            c.residual, dt * y / denom, (c, sm.unstack(lam), dt * y), lambda r, _: r / denom,
            max_iters=self.max_iters, tol=self.tol, early_exit=self.early_exit,
        )

    def _step(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        """:meth:`group_step`, and the Cayley coordinates ``x`` of f (in :func:`_coordinates`, through
        which the state passes in and out)."""
        c = _coordinates(system.algebra)
        yi = c.momentum_in(y)
        x, result, info = self._solve(system, c, yi, dt)
        y1, f = c.update(x, yi)
        return y1, f, first_failure(result, y1), info, x

    def group_step(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        return self._step(system, y, dt)[:4]

    def step_residuals(self, system: AbstractLiePoissonSystem, state, dt: Scalar):
        y1, f, result, info, x = self._step(system, self.observe(system, state), dt)
        return self.carry_on(system, state, y1, f), result, info, x

    def root_functions(self, system: AbstractLiePoissonSystem, dt: Scalar):
        """The Legendre equation in Cayley coordinates ``x`` of f, and ``M_{k+1} = fᵀ M_k f``."""
        dyn, static = eqx.partition(system, eqx.is_inexact_array)
        c = _coordinates(system.algebra)

        def residual(x, state, p):
            y = c.momentum_in(self.observe(system, state))
            lam = jnp.asarray(eqx.combine(p[0], static).hamiltonian.mass_tensor, y.dtype)
            return c.residual(x, (c, sm.unstack(lam), p[2] * y))

        def update(x, state, p):
            return self.carry_on(system, state, *c.update(x, c.momentum_in(self.observe(system, state))))

        return residual, update, (dyn, None, dt)


class _Coordinates(NamedTuple):
    """Where the map's formulas run: the elementary basis of the system's :func:`rotation_frame`,
    and for so(3) the Legendre equation in the cross-product coordinates of
    :func:`lpjax.algebras.so3` (``P``: the signed permutation from the frame's coordinates to
    them, ``None`` if none is needed), where it has a closed vector form (:func:`_so3_residual`)."""

    frame: RotationFrame
    cross: bool
    P: Optional[np.ndarray]

    def momentum_in(self, y):
        y = self.frame.momentum_in(y)
        return y if self.P is None else sm.stack(sm.const_mv(self.P, sm.unstack(y)))

    def pair_sums(self, lam):
        """``Λ_i + Λ_j`` for each coordinate (the pair (i, j) of its basis matrix)."""
        return _so3_pair_sums(lam) if self.cross else self.frame.pair_sums(lam)

    @staticmethod
    def residual(x: Float[Array, " d"], args) -> Float[Array, " d"]:
        c, lam, dtM = args
        return (_so3_residual if c.cross else _legendre_residual)(x, (c.frame.algebra, lam, dtM))

    def update(self, x, yi):
        """``M_{k+1} = fᵀ M_k f`` with ``f = cay(x̂)``: ``(M_{k+1}, f)``, from the coordinates ``yi``
        to the user's. On so(3) the axial vector turned by ``fᵀ = cay(−x̂)`` in its small-part
        form ``m + c(x × (x × m) − x × m)``, ``c = 2/(1 + |x|²)`` (:func:`lpjax._small.cayley_apply`):
        over 10⁴ steps of 0.1, 8 bodies, the Casimir |M|² drifted 2.5e-14 against 2.9e-14 for
        the matrix product (the attitudes' orthogonality 4.9e-13 against 3.5e-14 with XLA's
        default settings, 2.7e-13 against 1.1e-13 without contraction: roundoff either way);
        the product ``fᵀ m`` with f's entries drifted 9e-13. As matrices above so(3)."""
        g = self.frame.algebra
        P = self.P
        if self.cross:  # so3 coordinates: M_{k+1} = fᵀ M_k = cay(−x̂) M_k
            M1 = sm.cayley_apply(sm.hat(sm.unstack(-x), _SO3_BASIS), sm.unstack(yi))
        if P is not None:  # x in so3 coordinates, the matrices in the frame's: the same f
            x = sm.stack(sm.const_mv(P.T, sm.unstack(x)))
            yi = sm.stack(sm.const_mv(P.T, sm.unstack(yi)))
            M1 = sm.const_mv(P.T, M1)
        f = sm.cayley(sm.hat(sm.unstack(x), g.matrix_basis))
        if not self.cross:
            Mk = sm.hat(sm.unstack(yi), g.matrix_basis)
            M1 = sm.vee(sm.mm(sm.mm(sm.transpose(f), Mk), f), g.vee_matrix)
        return self.frame.momentum_out(sm.stack(M1)), sm.stack_matrix(f)


_SO3_BASIS = so3().matrix_basis


@functools.lru_cache(maxsize=64)
def _coordinates(algebra: LieAlgebra) -> _Coordinates:
    frame = rotation_frame(algebra)
    g = frame.algebra
    if g.so_n != 3:
        return _Coordinates(frame, False, None)
    P = (g.matrix_basis.reshape(3, -1) @ so3().vee_matrix).T  # column a: so3 coordinates of E_a (±1)
    return _Coordinates(frame, True, None if np.array_equal(P, np.eye(3)) else P)


def _so3_pair_sums(lam):
    """``(Λ_1 + Λ_2, Λ_0 + Λ_2, Λ_0 + Λ_1)``: the pairs of so3's coordinates (x_i turns the plane (j, k))."""
    l0, l1, l2 = (lam[i] for i in range(3))
    return jnp.stack([l1 + l2, l0 + l2, l0 + l1])


def _so3_residual(x: Float[Array, " 3"], args) -> Float[Array, " 3"]:
    """:func:`_legendre_residual` in so3 coordinates, closed form: the axial vector of
    ``fΛ − Λfᵀ`` is ``r_i = c((x_i + x_j x_k) Λ_j − (x_j x_k − x_i) Λ_k)`` for cyclic (i, j, k)."""
    _, lam, dtM = args
    x0, x1, x2 = sm.unstack(x)
    l0, l1, l2 = lam
    c = 2.0 / (1.0 + x0 * x0 + x1 * x1 + x2 * x2)
    p01, p02, p12 = x0 * x1, x0 * x2, x1 * x2
    r = [c * ((x0 + p12) * l1 - (p12 - x0) * l2), c * ((x1 + p02) * l2 - (p02 - x1) * l0),
         c * ((x2 + p01) * l0 - (p01 - x2) * l1)]
    return sm.stack(r) - dtM
