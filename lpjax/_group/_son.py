"""SO(n) for general n ≥ 2 on so(n) coordinates.

Coordinates are those of :func:`lpjax.algebras.so`: the upper-triangle entries ``X_ij``
(``i < j``, lexicographic) of a skew matrix, orthonormal for ``<ξ, η> = -½ tr(ξη)``. For
n = 3 prefer :class:`lpjax.groups.SO3` (closed forms, cross-product coordinates).
"""

from __future__ import annotations

import functools
from typing import ClassVar, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import expm
from jaxtyping import Array, ArrayLike, Float

from .. import _small as sm
from .._algebra import LieAlgebra, so
from ._base import (
    cayley_domain_error,
    AbstractMatrixLieGroup,
    _as_float,
    _broadcast_batch,
    _check_orthogonal,
    _check_vector,
    _eye,
)

__all__ = ["SOn"]


@functools.lru_cache(maxsize=None)
def _son_algebra(n: int) -> LieAlgebra:
    return so(n)


@functools.lru_cache(maxsize=None)
def _indices(n: int):
    """Upper-triangle index pairs ``(i, j)``, ``i < j``, in the order of so(n) coordinates."""
    return np.triu_indices(n, 1)


def _n_from_dim(d: int) -> Optional[int]:
    n = int(round((1 + np.sqrt(1 + 8 * d)) / 2))
    return n if n >= 2 and n * (n - 1) // 2 == d else None


def _hat(x: Float[Array, "... d"], n: int) -> Float[Array, "... n n"]:
    return _son_algebra(n).hat(x)


def _vee(X: Float[Array, "... n n"]) -> Float[Array, "... d"]:
    """Upper-triangle entries of the skew part ``(X - Xᵀ)/2``."""
    iu, ju = _indices(X.shape[-1])
    return 0.5 * (X[..., iu, ju] - X[..., ju, iu])


def _log_value(R: Float[Array, "... n n"]) -> Float[Array, "... n n"]:
    """Principal log of a rotation matrix via the symmetric eigenproblem of ``S = (R + Rᵀ)/2``.

    ``R`` commutes with ``S`` and ``K = (R - Rᵀ)/2``; in an eigenbasis ``Q`` of ``S`` each
    rotation plane of angle θ is an eigenspace with eigenvalue ``cos θ``, on which
    ``K̃ = QᵀKQ`` acts as ``sin θ J`` (``J² = -I``). Row norms ``ρ_i = |K̃_i·| = sin θ_i`` and
    ``θ_i = atan2(ρ_i, λ_i)`` give ``log R = Q X̃ Qᵀ`` with
    ``X̃_ij = min(θ_i/ρ_i, θ_j/ρ_j) K̃_ij``; this holds for any degeneracy of the angles
    (``K̃_ij = 0`` unless ``λ_i = λ_j``). Since ``K̃_ij/ρ_i`` is a unit direction and θ comes from
    ``atan2``, a plane at angle ``π - δ`` keeps roundoff accuracy down to ``δ ~ sqrt(ε)``.
    Below that (and ``cos θ < 0``), ``K`` no longer carries the direction: the eigenvector
    pair ``(2k, 2k+1)`` of ascending eigenvalues spans the plane and
    ``X̃_{2k,2k+1} = ±θ`` with the sign of ``K̃_{2k,2k+1}``. This fallback assumes that at
    most one plane has an angle that close to π; with several the log is ill-conditioned
    (unique only up to O(ε/δ)) and the result is *a* logarithm only to that accuracy.
    """
    n = R.shape[-1]
    dtype = R.dtype
    eps = float(np.finfo(dtype).eps)
    Rt = jnp.swapaxes(R, -1, -2)
    S = 0.5 * (R + Rt)
    K = 0.5 * (R - Rt)
    lam, Q = jnp.linalg.eigh(S)
    Kt = jnp.swapaxes(Q, -1, -2) @ K @ Q
    Kt = 0.5 * (Kt - jnp.swapaxes(Kt, -1, -2))
    rho = jnp.sqrt(jnp.sum(Kt * Kt, axis=-1))
    small = (rho < 1e-2) & (lam > 0.0)
    rho_safe = jnp.where(small | (rho <= 0.0), 1.0, rho)
    ratio_small = 1.0 + rho * rho * (1 / 6 + rho * rho * (3 / 40 + rho * rho * (5 / 112)))
    ratio = jnp.where(small, ratio_small, jnp.arctan2(rho, lam) / rho_safe)
    # Kt_ij vanishes exactly unless λ_i = λ_j (K commutes with S); its roundoff for
    # λ_i ≠ λ_j is weighted by the smaller ratio, so a near-π row (ratio ~ π/sin θ) does not
    # amplify it. Within one eigenspace the two ratios agree.
    Xt = jnp.minimum(ratio[..., :, None], ratio[..., None, :]) * Kt

    # fallback for planes within ~sqrt(eps) of angle π: pair (2k, 2k+1)
    m = n // 2
    if m:
        i0 = np.arange(0, 2 * m, 2)
        i1 = i0 + 1
        k01 = Kt[..., i0, i1]
        lam_p = 0.5 * (lam[..., i0] + lam[..., i1])
        rho_p = jnp.maximum(rho[..., i0], rho[..., i1])
        fb = (rho_p < np.sqrt(eps)) & (lam_p < 0.0)
        th = jnp.arctan2(jnp.abs(k01), lam_p)
        th = jnp.where(k01 < 0, -th, th)
        fb_row = jnp.zeros(lam.shape, bool).at[..., i0].set(fb).at[..., i1].set(fb)
        Xfb = jnp.zeros_like(Xt).at[..., i0, i1].set(th).at[..., i1, i0].set(-th)
        mask = fb_row[..., :, None] | fb_row[..., None, :]
        Xt = jnp.where(mask, Xfb, Xt)
    X = Q @ Xt @ jnp.swapaxes(Q, -1, -2)
    return 0.5 * (X - jnp.swapaxes(X, -1, -2))


# Taylor degree and scaling threshold of :func:`_expm_phi`: for ‖A‖₁ ≤ 1 the truncation
# error of the φ series is below 1/19! ≈ 8e-18.
_TAYLOR_DEGREE = 18
_SCALE_NORM = 1.0
_MAX_SQUARINGS = 32


def _expm_phi(A: Float[Array, "... m m"]) -> tuple[Array, Array]:
    """``(e^A, φ(A))`` with ``φ(A) = Σ_k A^k/(k+1)! = ∫₀¹ e^{sA} ds``, by scaling and squaring.

    With ``s = ceil(log2(‖A‖₁))``: Taylor series of ``φ`` at ``A/2^s`` (Horner), then
    ``e^A = I + A φ(A)`` and ``s`` doublings ``φ(2B) = φ(B)(e^B + I)/2``, ``e^{2B} = (e^B)²``.
    The doublings run as a fixed-length masked loop (``s ≤ 32``, i.e. ``‖A‖₁ ≲ 4e9``), so
    the map is jit/vmap friendly and differentiable in forward and reverse mode. Relative
    accuracy is ~2^s ε; it only feeds the right Jacobian ``J_r`` used by the derivatives of
    ``exp`` and ``log`` (values use ``expm`` and :func:`_log_value`).
    """
    eye = jnp.broadcast_to(jnp.eye(A.shape[-1], dtype=A.dtype), A.shape)
    norm = jax.lax.stop_gradient(jnp.max(jnp.sum(jnp.abs(A), axis=-2), axis=-1))
    ratio = jnp.where(norm > _SCALE_NORM, norm, _SCALE_NORM) / _SCALE_NORM
    s = jnp.clip(jnp.ceil(jnp.log2(ratio)), 0, _MAX_SQUARINGS)
    As = A * jnp.exp2(-s)[..., None, None]

    def horner(j, P):  # P <- I + As P/(k+1) for k = degree, ..., 1
        return eye + (As @ P) / (_TAYLOR_DEGREE + 1 - j).astype(A.dtype)

    P = jax.lax.fori_loop(0, _TAYLOR_DEGREE, horner, eye)
    E = eye + As @ P

    def body(i, EP):
        E, P = EP
        m = (i < s)[..., None, None]
        return jnp.where(m, E @ E, E), jnp.where(m, 0.5 * (P @ (E + eye)), P)

    return jax.lax.fori_loop(0, _MAX_SQUARINGS, body, (E, P))


def _phi_neg_ad(x: Float[Array, "... d"], n: int) -> Float[Array, "... d d"]:
    """Right Jacobian ``J_r(x) = φ(-ad_x) = Σ_k (-ad_x)^k/(k+1)!``."""
    return _expm_phi(-_son_algebra(n).ad(x))[1]


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _son_exp(x: Float[Array, "... d"], n: int) -> Float[Array, "... n n"]:
    return expm(_hat(x, n))


@_son_exp.defjvp
def _son_exp_jvp(n, primals, tangents):
    """``d exp(hat x) = exp(hat x) hat(J_r(x) dx)`` with ``J_r(x) = φ(-ad_x)``; this avoids
    differentiating through the Padé approximant."""
    (x,), (dx,) = primals, tangents
    R = _son_exp(x, n)
    w = (_phi_neg_ad(x, n) @ dx[..., None])[..., 0]
    return R, R @ _hat(w, n)


@jax.custom_jvp
def _son_log(R: Float[Array, "... n n"]) -> Float[Array, "... d"]:
    return _vee(_log_value(R))


@_son_log.defjvp
def _son_log_jvp(primals, tangents):
    """Implicit function theorem for ``exp(hat(x)) = R``: ``Rᵀ dR = hat(J_r(x) dx)``, so
    ``dx = J_r(x)^{-1} vee(skew(Rᵀ dR))``; the non-tangent part of ``dR`` is discarded."""
    (R,), (dR,) = primals, tangents
    x = _son_log(R)
    w = _vee(jnp.swapaxes(R, -1, -2) @ dR)
    J = _phi_neg_ad(x, R.shape[-1])
    dx = jnp.linalg.solve(J, w[..., None])[..., 0]
    return x, dx


@final
class SOn(AbstractMatrixLieGroup):
    """Rotations of Rⁿ (n ≥ 2), stored as a (batch of) matrix ``R`` of shape ``(..., n, n)``.

    * ``exp`` uses ``jax.scipy.linalg.expm`` (Padé, scaling and squaring) for values and
      ``d exp = exp(X) hat(J_r(x) dx)``, ``J_r(x) = φ(-ad_x)``, for derivatives.
    * ``log`` is the symmetric-eigenproblem method of :func:`_log_value` (``jnp.linalg.eigh``)
      for values, with a custom JVP from the implicit function theorem, so gradients do not
      go through ``eigh`` (whose derivative is singular for the always-repeated eigenvalues).
      The log is not differentiable where it is not unique, i.e. when a rotation angle
      is π, and the derivative blows up as two angles sum to 2π.
    * ``cayley`` is :func:`lpjax._small.cayley`; ``inverse_cayley`` uses ``jnp.linalg.solve``.
    * ``Ad`` is the second compound matrix ``Ad[(ij),(kl)] = R_ik R_jl - R_il R_jk``.
    """

    R: Float[Array, "... n n"]
    n: int = eqx.field(static=True)

    name: ClassVar[str] = "SOn"

    def __init__(self, R: Float[ArrayLike, "... n n"]):
        R = _as_float(R, "SOn")
        if R.ndim < 2 or R.shape[-1] != R.shape[-2] or R.shape[-1] < 2:
            raise ValueError(f"SOn expects shape (..., n, n) with n >= 2, got {tuple(R.shape)}")
        self.R = R
        self.n = int(R.shape[-1])

    @property
    def tangent_dim(self) -> int:
        return self.n * (self.n - 1) // 2

    @property
    def matrix_dim(self) -> int:
        return self.n

    # ------------------------------------------------------------ constructors
    @classmethod
    def identity(cls, n: int, batch_shape: tuple[int, ...] = (), dtype=None) -> "SOn":
        """The identity of SO(n), broadcast to ``batch_shape``."""
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 2:
            raise ValueError(f"SOn.identity needs an integer n >= 2, got {n!r}")
        dtype = jnp.result_type(float) if dtype is None else dtype
        return cls(jnp.broadcast_to(jnp.eye(int(n), dtype=dtype), tuple(batch_shape) + (n, n)))

    @staticmethod
    def _tangent(tangent: ArrayLike, what: str, n: Optional[int]) -> tuple[Array, int]:
        x = _as_float(tangent, what)
        if n is not None:
            return _check_vector(x, n * (n - 1) // 2, what), n
        m = _n_from_dim(x.shape[-1]) if x.ndim >= 1 else None
        if m is None:
            raise ValueError(
                f"{what} expects shape (..., n(n-1)/2) for some n >= 2 "
                f"(1, 3, 6, 10, ...), got {tuple(x.shape)}"
            )
        return x, m

    @classmethod
    def exp(cls, tangent: Float[ArrayLike, "... d"], n: Optional[int] = None) -> "SOn":
        """``R = expm(hat(x))``; ``n`` is inferred from ``d = n(n-1)/2`` unless given."""
        x, n = cls._tangent(tangent, "SOn.exp", n)
        return cls(_son_exp(x, n))

    @classmethod
    def cayley(cls, tangent: Float[ArrayLike, "... d"], n: Optional[int] = None) -> "SOn":
        """``R = (I - X)^{-1}(I + X) = I + 2(I - X)^{-1}X``, ``X = hat(x)`` (:func:`lpjax._small.cayley`)."""
        x, n = cls._tangent(tangent, "SOn.cayley", n)
        return cls(sm.cayley_matrix(_hat(x, n)))

    @classmethod
    def from_matrix(
        cls, matrix: Float[ArrayLike, "... n n"], *, atol: Optional[float] = None
    ) -> "SOn":
        """Check ``RᵀR = I`` (to ``atol``, default ``10 sqrt(eps)``) and ``det R > 0``."""
        R = cls(matrix).R
        return cls(_check_orthogonal(R, "SOn.from_matrix", atol))

    # ---------------------------------------------------------------- methods
    @property
    def algebra(self) -> LieAlgebra:
        """The Lie algebra so(n) (:func:`lpjax.algebras.so`)."""
        return _son_algebra(self.n)

    def _same(self, other, what: str) -> "SOn":
        if not isinstance(other, SOn):
            raise TypeError(f"{what} expects an SOn, got {type(other).__name__}")
        if other.n != self.n:
            raise ValueError(f"{what}: cannot combine SO({self.n}) with SO({other.n})")
        return other

    def compose(self, other: "SOn") -> "SOn":
        """``R₁ R₂``."""
        other = self._same(other, "SOn.compose")
        a, b = _broadcast_batch(self.R, 2, other.R, 2)
        return SOn(a @ b)

    def inverse(self) -> "SOn":
        """``Rᵀ``."""
        return SOn(jnp.swapaxes(self.R, -1, -2))

    def act(self, points: Float[ArrayLike, "... n"]) -> Float[Array, "... n"]:
        """``R p``; batch axes broadcast."""
        p = _check_vector(points, self.n, "SOn.act")
        R, p = _broadcast_batch(self.R, 2, p, 1)
        return (R @ p[..., None])[..., 0]

    def log(self) -> Float[Array, "... d"]:
        """Principal logarithm (all rotation angles in ``[0, π]``); see the class docstring."""
        return _son_log(self.R)

    def inverse_cayley(self) -> Float[Array, "... d"]:
        """``x = vee((R + I)^{-1}(R - I))``; raises when ``R`` has an eigenvalue -1 or is within
        about 1e-4 rad of one (``det(R + I) = Π 4cos²(θ_k/2)`` over the rotation planes)."""
        eye = _eye(self.n, self.R)
        x = _vee(jnp.linalg.solve(self.R + eye, self.R - eye))
        return cayley_domain_error(x, 0.5 * jnp.linalg.det(self.R + eye) / 2.0 ** (self.n - 3))

    def Ad(self) -> Float[Array, "... d d"]:
        """``Ad[(ij),(kl)] = R_ik R_jl - R_il R_jk`` (coordinates of ``R E_(kl) Rᵀ``)."""
        iu, ju = _indices(self.n)
        I, J = iu[:, None], ju[:, None]
        K, L = iu[None, :], ju[None, :]
        R = self.R
        return R[..., I, K] * R[..., J, L] - R[..., I, L] * R[..., J, K]

    def as_matrix(self) -> Float[Array, "... n n"]:
        return self.R
