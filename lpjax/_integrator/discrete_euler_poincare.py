"""Generic discrete Euler–Poincaré / discrete Lie–Poisson map from a reduced discrete Lagrangian."""

from __future__ import annotations

from typing import Callable, ClassVar, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from .. import _small as sm
from .._system import AbstractLiePoissonSystem, RotationFamily
from ._base import AbstractGroupMap, first_failure
from ._implicit import AbstractImplicitMethod, implicit_solve, newton_update

__all__ = ["DiscreteEulerPoincare", "legendre", "group_casimir"]


def _coadjoint_coords(basis: Float[Array, "d n n"], S: Float[Array, "n n"]) -> Float[Array, " d"]:
    """``μ_i = <S, E_i>_F``: the coordinates of ``η ↦ tr(Sᵀη)`` in the dual of the basis ``E_i``."""
    return jnp.einsum("ijk,jk->i", basis, S)


def _legendre(ell, W, P, dt, basis, left: bool):
    """Fℓ at ``(W, P)``: the momentum ``M_k`` the step must reproduce (seed 000, eqs (3.14)–(3.15)).

    Body frame (``left``): ``<M_k, η> = d/dε ℓ(e^{εη}W, e^{εη}P)``; rest frame:
    ``<m_k, η> = d/dε ℓ(W e^{εη}, e^{−εη}a)`` (the right version, (3.24)–(3.25)). Only first
    order in ε matters, so the derivative is the ambient gradient contracted with ``ηW``
    (``Wη``) and ``±ηP``.
    """
    gW, gP = jax.grad(ell, argnums=(0, 1))(W, P, dt)
    S = gW @ W.T if left else W.T @ gW
    if P is not None:
        S = S + jnp.outer(gP, P) if left else S - jnp.outer(gP, P)
    return _coadjoint_coords(basis, S)


def legendre(system: AbstractLiePoissonSystem, ell: Callable[..., Scalar], W: Float[Array, "n n"], dt,
             P: Optional[Float[Array, " n"]] = None, *, check: bool = True) -> Float[Array, " d"]:
    """The discrete Legendre transform ``Fℓ(W, P)`` of a reduced discrete Lagrangian ``ell``
    (seeds 003 and 004, sec. 3; seed 000, (3.14)), the momentum in ``system``'s coordinates,
    with ``P`` appended for a system with an advected vector: the state ``y_k`` whose step by
    :class:`DiscreteEulerPoincare` has ``W_k = W``. Body frame (``sign = −1``):
    ``<Fℓ(W, P), η> = d/dε ℓ(e^{εη}W, e^{εη}P)``; rest frame: ``d/dε ℓ(W e^{εη}, e^{−εη}P)``.

    ``check``: ``ℓ`` must be regular at ``W``, i.e. Fℓ's Jacobian in the chart
    ``X ↦ Fℓ(W cay(X))`` must have full rank (relative singular-value tolerance 1e-10), else
    ``ValueError`` (needs concrete values; skipped under tracing). Also ``ValueError`` for a
    ``W`` that is not (n, n) or a ``P`` that the system does not advect.
    """
    RotationFamily().check(system, "legendre", "needs")
    g, advected = system.algebra.rotation_structure
    W = jnp.asarray(W)
    basis = jnp.asarray(g.matrix_basis, W.dtype)
    n = basis.shape[-1]
    if W.shape != (n, n):
        raise ValueError(f"W must have shape ({n}, {n}), got {W.shape}")
    if (P is None) != (not advected):
        raise ValueError(f"P: {system.algebra.name} {'advects a vector: pass P' if advected else 'advects nothing'}")
    left = system.sign == -1
    M = _legendre(ell, W, P, dt, basis, left)
    if check and not isinstance(M, jax.core.Tracer):
        chart = jax.jacfwd(lambda x: _legendre(ell, W @ sm.cayley_matrix(jnp.tensordot(x, basis, axes=1)), P, dt,
                                                basis, left))(jnp.zeros(basis.shape[0], W.dtype))
        sv = np.linalg.svd(np.asarray(chart), compute_uv=False)
        rank = int(np.sum(sv > 1e-10 * sv[0])) if sv[0] > 0 else 0
        if rank < basis.shape[0]:
            raise ValueError(f"ell is not regular at W: the Jacobian of its Legendre transform has rank {rank} < "
                             f"{basis.shape[0]} (singular values {np.array2string(sv, precision=3)})")
    return M if P is None else jnp.concatenate([M, jnp.asarray(P, M.dtype)])


def group_casimir(system: AbstractLiePoissonSystem, ell: Callable[..., Scalar], W: Float[Array, "n n"], dt,
                  P: Optional[Float[Array, " n"]] = None) -> Float[Array, " r"]:
    """Casimirs on the group (seed 003, Theorem 3.2 and (3.10)): the quadratic Casimirs
    ``½ yᵀ S y`` of ``system``'s algebra (``algebra.quadratic_casimirs()``) pulled back by the
    Legendre transform, ``y = Fℓ(W, P)`` (:func:`legendre`). Along the sequence ``W_k`` of a
    discrete Euler–Poincaré map they are constant; for Moser–Veselov, ``ℓ(W) = −tr(WΛ)/dt``, the
    one Casimir of so(3) pulls back to ``Tr(WΛWΛ)`` up to a factor and a constant (3.10)."""
    y = legendre(system, ell, W, dt, P, check=False)
    S = jnp.asarray(system.algebra.quadratic_casimirs(), y.dtype)
    return 0.5 * jnp.einsum("i,rij,j->r", y, S, y)


def _next_momentum(ell, W, P, dt, basis, left: bool):
    """``M_{k+1} = d'_W ℓ(W_k, P_k)`` (3.15), or ``m_{k+1} = d_w ℓ(w_k, a_k)`` (3.25)."""
    gW = jax.grad(ell)(W, P, dt)
    return _coadjoint_coords(basis, W.T @ gW if left else gW @ W.T)


def _dep_residual(x: Float[Array, " d"], args) -> Float[Array, " d"]:
    """``Fℓ(cay(x̂), P_k) − M_k``: the discrete Legendre transform in Cayley coordinates."""
    ell, M, P, dt, basis, left = args
    W = sm.cayley_matrix(jnp.tensordot(x, basis, axes=1))
    return _legendre(ell, W, P, dt, basis, left) - M


@final
class DiscreteEulerPoincare(AbstractGroupMap, AbstractImplicitMethod):
    r"""The discrete Euler–Poincaré (DEP) / discrete Lie–Poisson (DLP) map of a reduced discrete
    Lagrangian ``ℓ(W, P, dt)`` on SO(n), with an optional advected vector ``P ∈ Rⁿ``.

    Seed 003, eqs (2.3)–(2.9) and (3.1); with advected quantities seed 000, Theorem 2,
    eqs (3.14)–(3.15) (left, body frame) and (3.24)–(3.25) (right, rest frame). For a
    body-frame system (``sign = −1``) on so(n)* or e(n)*, with ``W_k = g_k⁻¹ g_{k+1}``:

    1. solve the discrete Legendre transform ``M_k = Fℓ(W_k, P_k)``,
       ``<Fℓ(W, P), η> = d/dε ℓ(e^{εη} W, e^{εη} P)``, for ``W_k = cay(X)`` in Cayley
       coordinates ``X`` by Newton's method in the implicit kernel (IFT gradients);
    2. ``M_{k+1} = d'_W ℓ(W_k, P_k)``, ``<d'_W ℓ, η> = d/dε ℓ(W e^{εη}, P)``, which equals
       ``Ad*_{W_k} (M_k + P_k ⋄ ∇_P ℓ)``, i.e. ``W_k M_{k+1} W_k⁻¹ = M_k + P_k ∧ ∇_P ℓ`` (3.14);
    3. ``P_{k+1} = W_k⁻¹ P_k``.

    For a rest-frame system (``sign = +1``) the right version: ``w_k = g_{k+1} g_k⁻¹``,
    ``<m_k, η> = d/dε ℓ(w e^{εη}, e^{−εη} a)``, ``m_{k+1} = d_w ℓ(w_k, a_k)``,
    ``a_{k+1} = w_k a_k``. All derivatives come from ``jax.grad`` of ``ell`` on the ambient
    matrix space, so ``ell`` may write ``W⁻¹`` as ``W.T``.

    ``ell(W, P, dt)`` gets ``P=None`` on so(n)*; the pairing is the one of the state
    coordinates (``-½ tr`` on so(n), the dot product on Rⁿ). Ready-made Lagrangians are in
    :mod:`lpjax.lagrangians`: ``moser_veselov`` reproduces :class:`MoserVeselov`,
    ``suris_clebsch`` reproduces :class:`SurisClebsch` and ``suris_lagrange_top`` (both
    frames) reproduces :class:`SurisLagrangeTop`.

    The map is Poisson for the Lie–Poisson bracket (seed 000, Theorem 2b) and keeps the
    Casimirs of Ad*-orbits; its order is that of ``ell`` (not known to the method, so
    ``order`` is the attribute given by the user, default 1). ``max_iters`` Newton
    iterations of the implicit kernel run always (no ``while_loop``); see
    :class:`GaussLegendre` for ``tol``.
    """

    ell: Callable[..., Scalar]
    max_iters: int = eqx.field(static=True)
    tol: Optional[float] = eqx.field(static=True)
    reconstruct: bool = eqx.field(static=True)
    early_exit: bool = eqx.field(static=True)
    _order: int = eqx.field(static=True)

    def __init__(
        self,
        ell: Callable[..., Scalar],
        *,
        max_iters: int = 8,
        tol: Optional[float] = None,
        reconstruct: bool = False,
        order: int = 1,
        early_exit: bool = False,
    ):
        if not callable(ell):
            raise TypeError(f"ell must be a callable ell(W, P, dt) -> scalar, got {type(ell).__name__}")
        self.ell = ell
        self.max_iters = max_iters
        self.tol = tol
        self.reconstruct = bool(reconstruct)
        self.early_exit = bool(early_exit)
        self._order = int(order)

    family: ClassVar[RotationFamily] = RotationFamily()

    @property
    def order(self) -> int:
        return self._order

    def group_step(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        g, advected = system.algebra.rotation_structure
        basis = jnp.asarray(g.matrix_basis, y.dtype)
        d = basis.shape[0]
        M, P = y[:d], (y[d:] if advected else None)
        left = system.sign == -1
        args = (self.ell, M, P, dt, basis, left)
        x, result, info = implicit_solve(
            _dep_residual, jnp.zeros_like(M), args, newton_update(_dep_residual, args),
            max_iters=self.max_iters, tol=self.tol, early_exit=self.early_exit, unroll=False,
        )
        W = sm.cayley_matrix(jnp.tensordot(x, basis, axes=1))
        M1 = _next_momentum(self.ell, W, P, dt, basis, left)
        y1 = M1 if P is None else jnp.concatenate([M1, W.T @ P if left else W @ P])
        return y1, W, first_failure(result, y1), info
