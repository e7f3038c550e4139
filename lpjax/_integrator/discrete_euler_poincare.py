"""Generic discrete Euler–Poincaré / discrete Lie–Poisson map from a reduced discrete Lagrangian."""

from __future__ import annotations

from typing import Callable, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from .. import _small as sm
from .._algebra import GroupSplit, LieAlgebra, group_split
from .._system import AbstractLiePoissonSystem, MatrixGroupFamily
from ._base import AbstractGroupMap, first_failure
from ._implicit import AbstractImplicitMethod, AbstractRootStepAdjoint, implicit_solve, newton_update

__all__ = ["DiscreteEulerPoincare", "legendre", "group_casimir"]


def _coadjoint_coords(basis: Float[Array, "d m m"], S: Float[Array, "m m"]) -> Float[Array, " d"]:
    """``μ_i = <S, E_i>_F``: the coordinates of ``η ↦ tr(Sᵀη)`` in the dual of the basis ``E_i``."""
    return jnp.einsum("ijk,jk->i", basis, S)


def _chart(x: Float[Array, " d"], split: GroupSplit, chart: str) -> Float[Array, "m m"]:
    """``W = cay(x̂) = (I − x̂)⁻¹(I + x̂)`` (closed forms on so(3), so(4)) or ``exp(x̂)``."""
    X = jnp.tensordot(x, jnp.asarray(split.basis, x.dtype), axes=1)
    if chart == "exp":
        return jax.scipy.linalg.expm(X)
    if split.skew:
        return sm.cayley_matrix(X)
    eye = jnp.eye(X.shape[-1], dtype=X.dtype)
    return eye + 2.0 * jnp.linalg.solve(eye - X, X)


def _legendre(ell, W, a, dt, split: GroupSplit, left: bool):
    """Fℓ at ``(W, a)``: the momentum ``M_k`` the step must reproduce (seed 000, eqs (3.14)–(3.15)).

    Body frame (``left``): ``<M_k, η> = d/dε ℓ(e^{εη}W, e^{εη}·a)``; rest frame:
    ``<m_k, η> = d/dε ℓ(W e^{εη}, e^{−εη}·a)`` (the right version, (3.24)–(3.25)), with the dual
    action ``η·a = −η_rᵀ a``. Only first order in ε matters, so the derivative is the ambient
    gradient contracted with ``ηW`` (``Wη``) and ``∓η_rᵀ a``: ``<S, η>_F`` with
    ``S = ∇_W ℓ Wᵀ − Σ_j a_j ∇_{a_j}ℓᵀ`` (``Wᵀ∇_W ℓ + Σ_j a_j ∇_{a_j}ℓᵀ``).
    """
    gW, ga = jax.grad(ell, argnums=(0, 1))(W, a, dt)
    S = gW @ W.T if left else W.T @ gW
    if a is not None:
        r = split.r
        T = a.reshape(split.k, r).T @ ga.reshape(split.k, r)
        S = S.at[:r, :r].add(-T if left else T)
    return _coadjoint_coords(jnp.asarray(split.basis, S.dtype), S)


def legendre(system: AbstractLiePoissonSystem, ell: Callable[..., Scalar], W: Float[Array, "m m"], dt,
             P: Optional[Float[Array, " kr"]] = None, *, check: bool = True, group: Optional[LieAlgebra] = None,
             chart: str = "cayley") -> Float[Array, " d"]:
    """The discrete Legendre transform ``Fℓ(W, P)`` of a reduced discrete Lagrangian ``ell``
    (seeds 003 and 004, sec. 3; seed 000, (3.14)), the momentum in ``system``'s coordinates,
    with ``P`` (the advected vectors) appended: the state ``y_k`` whose step by
    :class:`DiscreteEulerPoincare` (same ``group`` and ``chart``) has ``W_k = W``. Body frame
    (``sign = −1``): ``<Fℓ(W, P), η> = d/dε ℓ(e^{εη}W, e^{εη}·P)``; rest frame:
    ``d/dε ℓ(W e^{εη}, e^{−εη}·P)``.

    ``check``: ``ℓ`` must be regular at ``W``, i.e. Fℓ's Jacobian in the chart
    ``X ↦ Fℓ(W cay(X))`` must have full rank (relative singular-value tolerance 1e-10), else
    ``ValueError`` (needs concrete values; skipped under tracing). Also ``ValueError`` for a
    ``W`` of the wrong shape or a ``P`` that the system does not advect.
    """
    group = group if group is not None else getattr(ell, "group", None)
    MatrixGroupFamily(group, chart).check(system, "legendre", "needs")
    split = group_split(system.algebra, group, chart)
    W = jnp.asarray(W)
    d, m = split.basis.shape[0], split.basis.shape[-1]
    if W.shape != (m, m):
        raise ValueError(f"W must have shape ({m}, {m}), got {W.shape}")
    if (P is None) != (split.k == 0):
        raise ValueError(f"P: {system.algebra.name} {'advects vectors: pass P' if split.k else 'advects nothing'}")
    left = system.sign == -1
    M = _legendre(ell, W, P, dt, split, left)
    if check and not isinstance(M, jax.core.Tracer):
        jac = jax.jacfwd(lambda x: _legendre(ell, W @ _chart(x, split, chart), P, dt, split, left))(jnp.zeros(d, W.dtype))
        sv = np.linalg.svd(np.asarray(jac), compute_uv=False)
        rank = int(np.sum(sv > 1e-10 * sv[0])) if sv[0] > 0 else 0
        if rank < d:
            raise ValueError(f"ell is not regular at W: the Jacobian of its Legendre transform has rank {rank} < "
                             f"{d} (singular values {np.array2string(sv, precision=3)})")
    return M if P is None else jnp.concatenate([M, jnp.asarray(P, M.dtype)])


def group_casimir(system: AbstractLiePoissonSystem, ell: Callable[..., Scalar], W: Float[Array, "m m"], dt,
                  P: Optional[Float[Array, " kr"]] = None, *, group: Optional[LieAlgebra] = None,
                  chart: str = "cayley") -> Float[Array, " r"]:
    """Casimirs on the group (seed 003, Theorem 3.2 and (3.10)): the quadratic Casimirs
    ``½ yᵀ S y`` of ``system``'s algebra (``algebra.quadratic_casimirs()``) pulled back by the
    Legendre transform, ``y = Fℓ(W, P)`` (:func:`legendre`). Along the sequence ``W_k`` of a
    discrete Euler–Poincaré map they are constant; for Moser–Veselov, ``ℓ(W) = −tr(WΛ)/dt``, the
    one Casimir of so(3) pulls back to ``Tr(WΛWΛ)`` up to a factor and a constant (3.10)."""
    y = legendre(system, ell, W, dt, P, check=False, group=group, chart=chart)
    S = jnp.asarray(system.algebra.quadratic_casimirs(), y.dtype)
    return 0.5 * jnp.einsum("i,rij,j->r", y, S, y)


def _next_momentum(ell, W, a, dt, split: GroupSplit, left: bool):
    """``M_{k+1} = d'_W ℓ(W_k, a_k)`` (3.15), or ``m_{k+1} = d_w ℓ(w_k, a_k)`` (3.25)."""
    gW = jax.grad(ell)(W, a, dt)
    return _coadjoint_coords(jnp.asarray(split.basis, gW.dtype), W.T @ gW if left else gW @ W.T)


def _dep_residual(x: Float[Array, " d"], args) -> Float[Array, " d"]:
    """``Fℓ(W(x), a_k) − M_k``: the discrete Legendre transform in the chart's coordinates."""
    ell, M, a, dt, split, left, chart = args
    return _legendre(ell, _chart(x, split, chart), a, dt, split, left) - M


@final
class DiscreteEulerPoincare(AbstractGroupMap, AbstractImplicitMethod, AbstractRootStepAdjoint):
    r"""The discrete Euler–Poincaré (DEP) / discrete Lie–Poisson (DLP) map of a reduced discrete
    Lagrangian ``ℓ(W, a, dt)`` on a matrix Lie group G, with k advected vectors ``a``.

    Seed 003, eqs (2.3)–(2.9) and (3.1); with advected quantities seed 000, Theorem 2,
    eqs (3.14)–(3.15) (left, body frame) and (3.24)–(3.25) (right, rest frame). The system's
    algebra must be ``𝔤 ⋉ (Rʳ)^k`` (:func:`lpjax.algebras.group_split`), 𝔤 the algebra of G
    given by ``group`` (a :class:`lpjax.algebras.LieAlgebra` with a matrix basis; default: the
    Lagrangian's own ``ell.group`` if it has one, else so(n) for so(n)* and so(n) ⋉ (Rⁿ)^k, else
    the system's algebra: so(2,1), se(3) as 4 × 4 affine matrices, …). For a body-frame system
    (``sign = −1``), with ``W_k = g_k⁻¹ g_{k+1}``:

    1. solve the discrete Legendre transform ``M_k = Fℓ(W_k, a_k)``,
       ``<Fℓ(W, a), η> = d/dε ℓ(e^{εη} W, e^{εη}·a)``, for ``W_k`` in the chart
       ``W = cay(x̂) = (I − x̂)⁻¹(I + x̂)`` (``chart="cayley"``; quadratic groups and their affine
       extensions) or ``exp(x̂)`` (``chart="exp"``, any matrix group) by Newton's method in the
       implicit kernel (IFT gradients);
    2. ``M_{k+1} = d'_W ℓ(W_k, a_k)``, ``<d'_W ℓ, η> = d/dε ℓ(W e^{εη}, a)``; on SO(n) this is
       ``W_k M_{k+1} W_k⁻¹ = M_k + P_k ∧ ∇_P ℓ`` (3.14);
    3. ``a_{k+1} = W_k⁻¹·a_k``, the dual action of ``W_k``'s top-left ``r × r`` block
       (``W_kᵀ P_k`` on SO(n)).

    For a rest-frame system (``sign = +1``) the right version: ``w_k = g_{k+1} g_k⁻¹``,
    ``<m_k, η> = d/dε ℓ(w e^{εη}, e^{−εη}·a)``, ``m_{k+1} = d_w ℓ(w_k, a_k)``,
    ``a_{k+1} = w_k·a_k``. All derivatives come from ``jax.grad`` of ``ell`` on the ambient
    matrix space, so ``ell`` may use any extension off the group (``W.T`` for ``W⁻¹`` on SO(n)).

    ``ell(W, a, dt)`` gets ``a=None`` without advected vectors, else the ``k·r`` advected
    coordinates; the pairing is the one of the state coordinates (``<μ, ξ> = Σ μ_i ξ^i`` in
    ``group``'s basis). Ready-made Lagrangians are in :mod:`lpjax.lagrangians`: ``moser_veselov``
    reproduces :class:`MoserVeselov`, ``suris_clebsch`` :class:`SurisClebsch`,
    ``suris_lagrange_top`` (both frames) :class:`SurisLagrangeTop`; ``midpoint`` fits any
    Hamiltonian quadratic in the group's momentum.

    The map is Poisson for the Lie–Poisson bracket (seed 000, Theorem 2b) and keeps the
    Casimirs of Ad*-orbits; its order is that of ``ell`` (not known to the method, so
    ``order`` is the attribute given by the user, default 1). ``max_iters`` Newton
    iterations of the implicit kernel run always (no ``while_loop``); see
    :class:`GaussLegendre` for ``tol``. With ``reconstruct=True`` :meth:`attitude` is an
    :class:`lpjax.groups.SO3`, ``SOn`` or ``SE3`` element, or the (m, m) matrix for other groups.
    """

    ell: Callable[..., Scalar]
    group: Optional[LieAlgebra]
    chart: str = eqx.field(static=True)
    max_iters: int = eqx.field(static=True)
    tol: Optional[float] = eqx.field(static=True)
    reconstruct: bool = eqx.field(static=True)
    early_exit: bool = eqx.field(static=True)
    _order: int = eqx.field(static=True)

    def __init__(
        self,
        ell: Callable[..., Scalar],
        *,
        group: Optional[LieAlgebra] = None,
        chart: str = "cayley",
        max_iters: int = 8,
        tol: Optional[float] = None,
        reconstruct: bool = False,
        order: int = 1,
        early_exit: bool = False,
    ):
        if not callable(ell):
            raise TypeError(f"ell must be a callable ell(W, a, dt) -> scalar, got {type(ell).__name__}")
        group = group if group is not None else getattr(ell, "group", None)
        if group is not None and not isinstance(group, LieAlgebra):
            raise TypeError(f"group must be an lpjax.algebras.LieAlgebra with a matrix basis, got {type(group).__name__}")
        if chart not in ("cayley", "exp"):
            raise ValueError(f"chart must be 'cayley' or 'exp', got {chart!r}")
        self.ell = ell
        self.group = group
        self.chart = chart
        self.max_iters = max_iters
        self.tol = tol
        self.reconstruct = bool(reconstruct)
        self.early_exit = bool(early_exit)
        self._order = int(order)

    @property
    def family(self) -> MatrixGroupFamily:
        return MatrixGroupFamily(self.group, self.chart)

    @property
    def order(self) -> int:
        return self._order

    @property
    def symmetric(self) -> bool:
        """The discrete Lagrangian's claim (a ``symmetric`` class attribute: ``L_d`` unchanged when
        its two points swap and ``dt`` changes sign, so the map is symmetric); False without one."""
        return bool(getattr(self.ell, "symmetric", False))

    def group_algebra(self, system: AbstractLiePoissonSystem) -> LieAlgebra:
        return group_split(system.algebra, self.group, self.chart).group

    def _solve(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        """``(x, result, info)``: the chart coordinates of ``W_k`` (step 1)."""
        split = group_split(system.algebra, self.group, self.chart)
        d = split.basis.shape[0]
        args = (self.ell, y[:d], y[d:] if split.k else None, dt, split, system.sign == -1, self.chart)
        return implicit_solve(
            _dep_residual, jnp.zeros_like(y[:d]), args, newton_update(_dep_residual, args),
            max_iters=self.max_iters, tol=self.tol, early_exit=self.early_exit, unroll=False,
        )

    def _step(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        """:meth:`group_step`, and the chart coordinates ``x`` of ``W_k``."""
        x, result, info = self._solve(system, y, dt)
        y1, W = _dep_update(self.ell, x, y, dt, group_split(system.algebra, self.group, self.chart),
                            system.sign == -1, self.chart)
        return y1, W, first_failure(result, y1), info, x

    def group_step(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        return self._step(system, y, dt)[:4]

    def step_residuals(self, system: AbstractLiePoissonSystem, state, dt: Scalar):
        y1, W, result, info, x = self._step(system, self.observe(system, state), dt)
        return self.carry_on(system, state, y1, W), result, info, x

    def root_functions(self, system: AbstractLiePoissonSystem, dt: Scalar):
        """The Legendre equation (step 1) in chart coordinates ``x`` and the update (steps 2, 3),
        as functions of the Lagrangian's arrays (the method's)."""
        dyn, static = eqx.partition(self, eqx.is_inexact_array)
        split = group_split(system.algebra, self.group, self.chart)
        d, left = split.basis.shape[0], system.sign == -1

        def residual(x, state, p):
            y = self.observe(system, state)
            ell = eqx.combine(p[1], static).ell
            return _dep_residual(x, (ell, y[:d], y[d:] if split.k else None, p[2], split, left, self.chart))

        def update(x, state, p):
            ell = eqx.combine(p[1], static).ell
            return self.carry_on(system, state, *_dep_update(ell, x, self.observe(system, state), p[2], split, left, self.chart))

        return residual, update, (None, dyn, dt)


def _dep_update(ell, x, y, dt, split: GroupSplit, left: bool, chart: str):
    """``(y_{k+1}, W_k)`` from the chart coordinates ``x`` of ``W_k``: steps 2 and 3."""
    d = split.basis.shape[0]
    a = y[d:] if split.k else None
    W = _chart(x, split, chart)
    M1 = _next_momentum(ell, W, a, dt, split, left)
    return (M1 if a is None else jnp.concatenate([M1, split.advect(W, a, left)])), W
