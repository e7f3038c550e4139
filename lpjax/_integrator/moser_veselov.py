"""The Moser–Veselov discrete rigid body (seeds 003/004, sec. 3.4) as a discrete Lie–Poisson map."""

from __future__ import annotations

from typing import ClassVar, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Scalar

from .. import _small as sm
from .._system import AbstractSystem, LiePoissonSystem
from ._base import RESULTS, AbstractGroupMap, StepInfo, finite_result
from .gauss_legendre import _iterate

__all__ = ["MoserVeselov", "cayley_matrix"]


def cayley_matrix(X: Float[Array, "n n"]) -> Float[Array, "n n"]:
    """``cay(X) = (I − X)⁻¹(I + X)`` for skew ``X``; closed form ``I + 2(X + X²)/(1 + |x|²)`` for n = 3."""
    n = X.shape[-1]
    eye = jnp.eye(n, dtype=X.dtype)
    if n == 3:
        X2 = X @ X
        return eye + 2.0 * (X + X2) / (1.0 - 0.5 * jnp.trace(X2))
    return jnp.linalg.solve(eye - X, eye + X)


def _legendre_residual(x: Float[Array, " d"], args) -> Float[Array, " d"]:
    """``Fℓ(f) − dt M = fΛ − Λfᵀ − dt M`` at ``f = cay(hat(x))``, in algebra coordinates
    (seed 003, sec. 3.4); written entrywise (:mod:`lpjax._small`)."""
    algebra, lam, dtM = args
    f = sm.cayley(sm.hat(sm.unstack(x), algebra.matrix_basis))
    n = len(f)
    R = [[f[i][j] * lam[j] - lam[i] * f[j][i] for j in range(n)] for i in range(n)]
    return sm.stack(sm.vee(R, algebra.vee_matrix)) - dtM


def _moser_veselov_lambda(system: AbstractSystem) -> Optional[Array]:
    from ..systems._rigid_body import RigidBodyHamiltonian, RigidBodyNHamiltonian

    if not isinstance(system, LiePoissonSystem) or system.sign != -1:
        return None
    h = system.hamiltonian
    if isinstance(h, RigidBodyNHamiltonian) and system.algebra.name.startswith("so("):
        return h.J
    if isinstance(h, RigidBodyHamiltonian) and system.algebra.name == "so(3)":
        return 0.5 * jnp.sum(h.inertia) - h.inertia  # Λ_i = (I_j + I_k − I_i)/2
    return None


class MoserVeselov(AbstractGroupMap):
    r"""Discrete rigid body of Moser and Veselov as a discrete Lie–Poisson map (order 2).

    Reduced discrete Lagrangian ``ℓ(f) = tr(fΛ)`` on SO(n), Legendre transform
    ``Fℓ(f) = fΛ − Λfᵀ`` and update ``Π_{k+1} = Ad*_{f⁻¹} Π_k = fᵀ Π_k f`` (seed 003, eqs (2.9),
    (3.1) and sec. 3.4). One step of size dt for the body ``Ṁ = [M, Ω]``, ``M = JΩ + ΩJ``:
    solve ``dt M_k = fΛ − Λfᵀ`` for ``f ∈ SO(n)``, then ``M_{k+1} = fᵀ M_k f``, with

    * ``Λ = J`` for :func:`lpjax.systems.rigid_body_n` (seed 000, eq. (4.4)), and
    * ``Λ_i = (I_j + I_k − I_i)/2`` for :func:`lpjax.systems.rigid_body` with principal moments I,

    so that ``f = I + dt Ω + O(dt²)``. ``f = cay(X)`` is solved in Cayley coordinates inside
    ``jax.lax.custom_root`` by ``max_iters`` fixed iterations preconditioned with the
    derivative at ``X = 0`` (``X_jk ← X_jk − R_jk / (2(Λ_j + Λ_k))``); a residual above
    ``tol · dt‖M‖`` gives ``RESULTS.implicit_solve_failed``.

    Preserves: the spectrum of M (Casimirs |M|², tr(M^{2k})) to roundoff; it is a Poisson map
    for the Lie–Poisson bracket, so energy errors stay bounded. Only the free rigid body
    systems above can be stepped.
    """

    order: ClassVar[int] = 2
    max_iters: int = eqx.field(static=True, default=20)
    tol: Optional[float] = eqx.field(static=True, default=None)
    reconstruct: bool = eqx.field(static=True, default=False)

    def check_system(self, system: AbstractSystem) -> None:
        if _moser_veselov_lambda(system) is None:
            raise TypeError(
                "MoserVeselov steps only the free rigid body: lpjax.systems.rigid_body(inertia) or "
                f"rigid_body_n(J); got {getattr(system, 'name', type(system).__name__)}"
            )


    def group_step(self, system: LiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        lam = jnp.asarray(_moser_veselov_lambda(system), y.dtype)
        g = system.algebra
        # the derivative of the residual at x = 0 is X ↦ 2(XΛ + ΛX): diagonal on matrix entries
        denom = g.vee(2.0 * (lam[:, None] + lam[None, :]) * g.hat(jnp.ones_like(y)), check=False)
        lam_entries = sm.unstack(lam)
        residual = lambda x: _legendre_residual(x, (g, lam_entries, dt * y))  # noqa: E731
        tol = self.tol if self.tol is not None else 256 * float(jnp.finfo(y.dtype).eps)
        tol_abs = tol * jnp.maximum(dt * jnp.max(jnp.abs(y)), jnp.finfo(y.dtype).tiny)

        def solve(res, x0):
            x, iters = _iterate(res, x0, lambda r, _: r / denom, self.max_iters, tol_abs)
            return x, iters.astype(x.dtype)  # custom_root mishandles integer aux outputs

        def tangent_solve(lin, r):
            return jnp.linalg.solve(jax.jacfwd(lin)(jnp.zeros_like(r)), r)

        x, iters = jax.lax.custom_root(residual, dt * y / denom, solve, tangent_solve, has_aux=True)
        iters = jnp.minimum(jax.lax.stop_gradient(iters).astype(jnp.int32), self.max_iters)
        resid = jax.lax.stop_gradient(jnp.max(jnp.abs(residual(x))))
        f = sm.cayley(sm.hat(sm.unstack(x), g.matrix_basis))
        Mk = sm.hat(sm.unstack(y), g.matrix_basis)
        y1 = sm.stack(sm.vee(sm.mm(sm.mm(sm.transpose(f), Mk), f), g.vee_matrix))
        f = sm.stack_matrix(f)
        result = RESULTS.where(resid <= tol_abs, finite_result(y1), RESULTS.implicit_solve_failed)
        return y1, f, result, StepInfo(resid, iters)
