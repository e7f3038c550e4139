"""Clebsch canonization of Lie–Poisson systems (seed 002, secs 2–4).

For a Lie algebra 𝔤 with structure constants ``c_ij^k`` the momentum maps

* ``M+(q, p) = −ad*_q p``, ``M+_i = c_ij^k q^j p_k``  (seed 002, eqs (6), (7)),
* ``M−(q, p) = +ad*_q p = −M+(q, p)``                   (eq. (10)),

are Poisson maps from canonical T*𝔤 ≅ T*Rⁿ to the (±) Lie–Poisson bracket on 𝔤*
(eqs (8), (11)); so ``H = h ∘ M±`` canonizes ``mu_dot = ∓ad*_{∇h} mu`` (Theorem 3.1, eq. (12)).
The symmetry algebra 𝔥 ⊂ sym(2n) of (14)–(15) gives quadratic invariants
``J_σ(z) = ½ zᵀσz`` of the canonized system (Theorem 3.2).
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float, Scalar

from ._algebra import LieAlgebra
from ._checks import bracket_sign
from ._small import solve_small
from ._algebra._base import _Frozen
from ._system import AbstractLiePoissonSystem, CanonicalSystem

__all__ = [
    "momentum_map",
    "canonize",
    "symmetry_algebra",
    "invariants",
    "lift",
    "CollectiveHamiltonian",
]


def _apply_momentum_map(c: Array, sign: int, z: Float[Array, " 2n"]) -> Float[Array, " n"]:
    n = c.shape[0]
    q, p = z[:n], z[n:]
    return sign * jnp.einsum("ijk,j,k->i", c, q, p)


class _MomentumMap(eqx.Module):
    algebra: LieAlgebra
    sign: int = eqx.field(static=True)

    def __call__(self, z: Float[Array, " 2n"]) -> Float[Array, " n"]:
        z = jnp.asarray(z)
        n = self.algebra.dim
        if z.shape[-1:] != (2 * n,):
            raise ValueError(f"momentum map on T*{self.algebra.name} expects z = (q, p) of shape (..., {2 * n}), got {z.shape}")
        c = jnp.asarray(self.algebra.structure_constants, dtype=jnp.result_type(z, jnp.float32))
        q, p = z[..., :n], z[..., n:]
        return self.sign * jnp.einsum("ijk,...j,...k->...i", c, q, p)


def momentum_map(algebra: LieAlgebra, sign: int = 1) -> Callable[[Array], Array]:
    """``z = (q, p) ↦ M±(q, p) = ∓ad*_q p`` (seed 002, eqs (6), (7), (10)); batched over ``z``."""
    return _MomentumMap(algebra, bracket_sign(sign))


class CollectiveHamiltonian(eqx.Module):
    """``H(q, p) = h(M±(q, p))`` (seed 002, Theorem 3.1). Differentiable in ``h``'s parameters."""

    hamiltonian: Callable[[Array], Array]
    momentum: _MomentumMap

    def __call__(self, z: Float[Array, " 2n"]) -> Scalar:
        return self.hamiltonian(self.momentum(z))


def canonize(system: AbstractLiePoissonSystem) -> CanonicalSystem:
    """The canonized system (12) on T*𝔤 ≅ T*Rⁿ with ``H = h ∘ M±``, ``±`` = ``system.sign``."""
    if not isinstance(system, AbstractLiePoissonSystem):
        raise TypeError(f"canonize needs a LiePoissonSystem, got {type(system).__name__}")
    H = CollectiveHamiltonian(system.hamiltonian, _MomentumMap(system.algebra, system.sign))
    return CanonicalSystem(H, n=system.algebra.dim, name=f"canonized {system.name}")


# ----------------------------------------------------------------------------- 𝔥 and J


def _structure_blocks(algebra: LieAlgebra) -> list[np.ndarray]:
    """The 2n × 2n symmetric matrices 𝓜_i = [[0, C_i], [C_iᵀ, 0]], (C_i)_jk = c_ij^k (eq. (13))."""
    c = algebra.structure_constants
    n = c.shape[0]
    out = []
    for i in range(n):
        Mi = np.zeros((2 * n, 2 * n))
        Mi[:n, n:] = c[i]
        Mi[n:, :n] = c[i].T
        out.append(Mi)
    return out


@functools.lru_cache(maxsize=32)
def _symmetry_algebra(frozen: _Frozen, n: int) -> np.ndarray:
    algebra = LieAlgebra(frozen.array)
    Ms = _structure_blocks(algebra)
    m = 2 * n
    J = np.block([[np.zeros((n, n)), np.eye(n)], [-np.eye(n), np.zeros((n, n))]])
    iu = np.triu_indices(m)
    cols = []
    for a, b in zip(*iu):
        S = np.zeros((m, m))
        S[a, b] = S[b, a] = 1.0
        # [σ, 𝓜_i]_J = σ J 𝓜_i − 𝓜_i J σ = 0 for all i  (eq. (14))
        cols.append(np.concatenate([(S @ J @ Mi - Mi @ J @ S).ravel() for Mi in Ms]))
    A = np.stack(cols, axis=1)
    _, sv, vt = np.linalg.svd(A, full_matrices=True)
    rank = int(np.sum(sv > 1e-10 * max(1.0, sv[0])))
    basis = []
    for v in vt[rank:]:
        S = np.zeros((m, m))
        S[iu] = v
        S = S + S.T - np.diag(np.diag(S))
        basis.append(S)
    out = np.array(basis).reshape(len(basis), m, m)
    out.setflags(write=False)
    return out


def symmetry_algebra(algebra: LieAlgebra) -> np.ndarray:
    """A basis of 𝔥 ⊂ sym(2n) (seed 002, eqs (14)–(15)), shape ``(dim 𝔥, 2n, 2n)``.

    𝔥 = {σ symmetric : σ J 𝓜_i − 𝓜_i J σ = 0 ∀i}, computed as the numerical null space of
    these linear conditions (SVD, cached). The basis is orthonormal in the Frobenius
    inner product, so individual elements are linear combinations of the paper's.
    """
    if not isinstance(algebra, LieAlgebra):
        raise TypeError(f"symmetry_algebra needs a LieAlgebra, got {type(algebra).__name__}")
    return _symmetry_algebra(algebra._c_frozen, algebra.dim).copy()


def in_symmetry_algebra(algebra: LieAlgebra, sigma: ArrayLike, atol: float = 1e-10) -> bool:
    """Whether the symmetric ``sigma`` satisfies the conditions (15) defining 𝔥."""
    sigma = np.asarray(sigma, dtype=np.float64)
    n = algebra.dim
    J = np.block([[np.zeros((n, n)), np.eye(n)], [-np.eye(n), np.zeros((n, n))]])
    if sigma.shape != (2 * n, 2 * n) or np.max(np.abs(sigma - sigma.T)) > atol:
        return False
    scale = max(1.0, np.max(np.abs(sigma)))
    return all(np.max(np.abs(sigma @ J @ Mi - Mi @ J @ sigma)) <= atol * scale for Mi in _structure_blocks(algebra))


class _Invariants(eqx.Module):
    sigmas: _Frozen = eqx.field(static=True)

    def __call__(self, z: Float[Array, " 2n"]) -> Float[Array, " d"]:
        z = jnp.asarray(z)
        S = jnp.asarray(self.sigmas.array, dtype=z.dtype)
        return 0.5 * jnp.einsum("...a,rab,...b->...r", z, S, z)


def invariants(algebra: LieAlgebra, sigmas: Optional[ArrayLike] = None) -> Callable[[Array], Array]:
    """``z ↦ (J_σ(z))_σ`` with ``J_σ(z) = ½ zᵀσz`` (seed 002, Theorem 3.2 (i), eqs (16)–(17), (32)).

    ``sigmas`` defaults to :func:`symmetry_algebra`; explicit ones (e.g. the paper's basis)
    are checked to lie in 𝔥 and a ``ValueError`` names the first that does not.
    """
    if sigmas is None:
        S = symmetry_algebra(algebra)
    else:
        S = np.asarray(sigmas, dtype=np.float64)
        if S.ndim == 2:
            S = S[None]
        for r, s in enumerate(S):
            if not in_symmetry_algebra(algebra, s):
                raise ValueError(f"sigmas[{r}] is not in the symmetry algebra 𝔥 of {algebra.name} (eq. (15))")
    return _Invariants(_Frozen(S))


# ----------------------------------------------------------------------------- lifting


def _lift_start(n: int, dtype) -> Array:
    rng = np.random.default_rng(20231)
    return jnp.asarray(rng.standard_normal(2 * n) / np.sqrt(2 * n), dtype=dtype)


def _lift_iterations(c: Array, sign: int, mu: Array, z0: Array, q_fixed: Optional[Array], iters: int):
    """Damped Gauss–Newton for ``M±(z) = mu`` with a fixed number of iterations.

    With ``q_fixed`` only ``p`` is solved for (a linear least-squares problem). The minimum-norm
    step ``Δz = Aᵀ (A Aᵀ + λ I)⁻¹ r`` with ``λ = 1e-3 |r| + ε max diag(A Aᵀ)`` (Levenberg–Marquardt) keeps
    rank-deficient iterates finite and converges quadratically near a solution.
    """
    n = mu.shape[0]
    M = lambda z: _apply_momentum_map(c, sign, z)  # noqa: E731
    size = jnp.max(jnp.abs(mu))
    # solve at unit scale, rescale p afterwards; mu = 0 keeps scale 1 (a finite derivative there)
    scale = jnp.where(size > 0, size, 1.0)
    mu_s = mu / scale

    def body(z, _):
        r = M(z) - mu_s
        A = jax.jacfwd(M)(z)
        if q_fixed is not None:
            A = A.at[:, :n].set(0.0)
        AAt = A @ A.T
        eps = jnp.finfo(z.dtype).eps
        lam = 1e-3 * jnp.sqrt(jnp.sum(r * r)) + eps * jnp.max(jnp.diag(AAt)) + jnp.finfo(z.dtype).tiny
        lam = jax.lax.stop_gradient(lam)  # a damping choice, not part of the solution
        # pivoting although the matrix is SPD: near a rank-deficient A Aᵀ (mu = 0) the damping is at
        # roundoff level, and unpivoted elimination left a residual of 2e-12 (> _LIFT_TOL), pivoted 7e-18
        step = A.T @ solve_small(AAt + lam * jnp.eye(n, dtype=z.dtype), r, pivot=True)
        return z - step, None

    if q_fixed is not None:
        z0 = z0.at[:n].set(q_fixed)
    z, _ = jax.lax.scan(body, z0, None, length=iters)
    z = z.at[n:].multiply(scale)
    resid = jnp.max(jnp.abs(M(z) - mu)) / scale
    return z, resid


_LIFT_ITERS = 60
_LIFT_TOL = 1e-12


def lift_jax(algebra: LieAlgebra, mu: Float[Array, " n"], sign: int) -> tuple[Array, Array]:
    """Traceable lift used by :class:`lpjax.Collective`: ``(z, relative residual)``.

    A fixed number of Gauss–Newton iterations from a fixed start; works under jit/vmap/grad
    (the gradient flows through the unrolled iterations; any lift gives the same collective
    trajectory in 𝔤*).
    """
    c = jnp.asarray(algebra.structure_constants, dtype=mu.dtype)
    return _lift_point(sign, c, mu, _lift_start(algebra.dim, mu.dtype))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _lift_point(sign: int, c: Array, mu: Array, z0: Array):
    return _lift_iterations(c, sign, mu, z0, None, _LIFT_ITERS)


@_lift_point.defjvp
def _lift_point_jvp(sign: int, primals, tangents):
    """The lift's tangent: the minimum-norm ``dz`` with ``DM(z) dz = dmu`` (any tangent of the
    lift gives the same collective trajectory). Where ``DM(z)`` has rank below n (μ = 0, where
    every lift is singular) there is none, and differentiating raises."""
    c, mu, z0 = primals
    dmu = tangents[1]
    z, resid = _lift_point(sign, c, mu, z0)
    A = jax.jacfwd(lambda w: _apply_momentum_map(c, sign, w))(z)
    AAt = A @ A.T
    lam = jnp.linalg.eigvalsh(AAt)
    dz = A.T @ jnp.linalg.solve(AAt, dmu)
    dz = eqx.error_if(dz, ~(lam[0] > 1e-12 * lam[-1]),
                      "Collective: the momentum map's derivative is singular at the lifted initial state (as at "
                      "mu0 = 0, where no lift is regular), so the derivative with respect to the initial state is "
                      "undefined there")
    return (z, resid), (dz, jnp.zeros_like(resid))


def lift(
    algebra: LieAlgebra, mu: ArrayLike, sign: int = 1, q: Optional[ArrayLike] = None
) -> tuple[Array, Array]:
    """Find ``(q, p)`` with ``M±(q, p) = mu`` to relative 1e-12 (seed 002, sec. 5; errata).

    Every lift has ``<mu, q> = ∓<p, [q, q]> = 0``: ``q`` annihilates ``mu``. With ``q`` given,
    ``p`` solves the linear system ``M±(q, ·) = mu``; otherwise ``(q, p)`` are solved for
    together by damped Gauss–Newton from a fixed start, which yields such a ``q``.

    Raises ``ValueError`` when ``mu`` is not reached: not in the image of ``M±`` (e.g. any
    ``mu ≠ 0`` of an abelian algebra), or not reachable from the given ``q`` (e.g.
    ``<mu, q> ≠ 0``, as for seed 002's ``q(0) = (1, 0, 0)`` with ``mu_1(0) = 1``).
    """
    n = algebra.dim
    mu = jnp.asarray(mu)
    if not jnp.issubdtype(mu.dtype, jnp.floating):
        mu = mu.astype(jnp.result_type(float))
    if mu.shape != (n,):
        raise ValueError(f"lift on {algebra.name}* expects mu of shape ({n},), got {mu.shape}")
    if not np.all(np.isfinite(np.asarray(mu))):
        raise ValueError("lift: mu must be finite")
    sign = bracket_sign(sign)
    c = jnp.asarray(algebra.structure_constants, dtype=mu.dtype)
    if q is not None:
        q = jnp.asarray(q, dtype=mu.dtype)
        if q.shape != (n,):
            raise ValueError(f"lift: q must have shape ({n},), got {q.shape}")
        z, resid = _lift_iterations(c, sign, mu, jnp.zeros(2 * n, mu.dtype), q, 8)
        if not float(resid) <= _LIFT_TOL:
            pairing = float(jnp.dot(mu, q))
            raise ValueError(
                f"lift: mu is not reachable with the given q (relative residual {float(resid):.2e}); "
                f"q must annihilate mu, but <mu, q> = {pairing:.3e}, and mu must lie in the range of p ↦ M±(q, p)"
            )
    else:
        z, resid = lift_jax(algebra, mu, sign)
        if not float(resid) <= _LIFT_TOL:
            raise ValueError(
                f"lift: mu is not in the image of the momentum map M{'+' if sign > 0 else '-'} of "
                f"{algebra.name} (best relative residual {float(resid):.2e})"
            )
    return z[:n], z[n:]
