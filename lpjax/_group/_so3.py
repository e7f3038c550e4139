"""SO(3) with closed-form exp, log and Cayley maps.

Coordinates are those of :func:`lpjax.algebras.so3`: ``hat(x) y = x × y``. Every
small-angle branch uses the double-``where`` trick (the unused branch is fed a safe
argument) so that values *and* gradients are NaN-free at and near the identity.
"""

from __future__ import annotations

import functools
from typing import ClassVar, Optional, final

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .. import _small as sm
from .._algebra import LieAlgebra, so3
from ._base import (
    cayley_domain_error,
    AbstractMatrixLieGroup,
    _broadcast_batch,
    _check_orthogonal,
    _check_square,
    _check_vector,
    _eye,
)

__all__ = ["SO3"]

# Below |θ|² < _SMALL the trigonometric coefficients are replaced by Taylor polynomials
# through θ⁸: the truncation error is < θ¹⁰/11! ≈ 3e-18, and the direct formulas are
# cancellation-free (to float roundoff) above it.
_SMALL = 1e-2


@functools.lru_cache(maxsize=None)
def _so3_algebra() -> LieAlgebra:
    return so3()


def _vee3(X: Float[Array, "... 3 3"]) -> Float[Array, "... 3"]:
    """Inverse of :func:`lpjax._small.hat3` on skew matrices, reading ``(X32, X13, X21)``."""
    return jnp.stack([X[..., 2, 1], X[..., 0, 2], X[..., 1, 0]], axis=-1)


def _sq(x: Array) -> Array:
    return jnp.sum(x * x, axis=-1)


def _poly(t2: Array, coeffs: tuple[float, ...]) -> Array:
    """``Σ_k coeffs[k] t2^k`` by Horner's rule."""
    out = jnp.full_like(t2, coeffs[-1])
    for c in coeffs[-2::-1]:
        out = out * t2 + c
    return out


# Taylor coefficients in θ² (alternating signs included).
_A_TAYLOR = (1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880)  # sin θ / θ
_B_TAYLOR = (1 / 2, -1 / 24, 1 / 720, -1 / 40320, 1 / 3628800)  # (1 - cos θ)/θ²
_C_TAYLOR = (1 / 6, -1 / 120, 1 / 5040, -1 / 362880, 1 / 39916800)  # (θ - sin θ)/θ³
# arcsin(σ)/σ in σ²
_ASIN_TAYLOR = (1.0, 1 / 6, 3 / 40, 5 / 112, 35 / 1152)
# (1 - (θ/2) cot(θ/2)) / θ² in θ²
_D_TAYLOR = (1 / 12, 1 / 720, 1 / 30240, 1 / 1209600, 1 / 47900160)


def _so3_coeffs(theta2: Array, with_c: bool = False):
    """``A = sin θ/θ``, ``B = (1-cos θ)/θ²`` and optionally ``C = (θ - sin θ)/θ³``."""
    small = theta2 < _SMALL
    t2 = jnp.where(small, 1.0, theta2)  # safe argument for the unused branch
    t = jnp.sqrt(t2)
    half = 0.5 * t
    A = jnp.where(small, _poly(theta2, _A_TAYLOR), jnp.sin(t) / t)
    B = jnp.where(small, _poly(theta2, _B_TAYLOR), 0.5 * jnp.square(jnp.sin(half) / half))
    if not with_c:
        return A, B
    C = jnp.where(small, _poly(theta2, _C_TAYLOR), (t - jnp.sin(t)) / (t2 * t))
    return A, B, C


def _so3_exp(x: Float[Array, "... 3"]) -> Float[Array, "... 3 3"]:
    """Rodrigues: ``exp(x̂) = I + (sin θ/θ) x̂ + ((1 - cos θ)/θ²) x̂²``, ``θ = |x|``."""
    A, B = _so3_coeffs(_sq(x))
    X = sm.hat3(x)
    return _eye(3, X) + A[..., None, None] * X + B[..., None, None] * (X @ X)


def _so3_log(R: Float[Array, "... 3 3"]) -> Float[Array, "... 3"]:
    """Principal log, ``|x| = θ ∈ [0, π]``, in three branches.

    With ``s = vee(R - Rᵀ)/2 = sin θ n`` and ``c = (tr R - 1)/2 = cos θ``:

    * small (``|s|² < 1e-4``, ``c > 0``): ``x = (arcsin σ/σ) s``, a polynomial in ``σ² = |s|²``;
    * generic: ``θ = atan2(|s|, c)``, ``x = (θ/|s|) s``;
    * near π (``c < -1/2``): ``n nᵀ = ((R + Rᵀ)/2 - c I)/(1 - c)``; ``n`` is the column with the
      largest diagonal entry, normalised, its sign chosen so ``n·s ≥ 0``; then
      ``θ = atan2(n·s, c)`` and ``x = θ n``. This stays accurate to roundoff up to and at
      ``θ = π``, where ``s`` carries no direction.
    """
    Rt = jnp.swapaxes(R, -1, -2)
    s = 0.5 * _vee3(R - Rt)
    c = 0.5 * (jnp.trace(R, axis1=-2, axis2=-1) - 1.0)
    ss = _sq(s)
    near_pi = c < -0.5
    small = (ss < 1e-4) & (c > 0.0)
    generic = ~(small | near_pi)

    x_small = _poly(ss, _ASIN_TAYLOR)[..., None] * s

    sn = jnp.sqrt(jnp.where(generic, ss, 1.0))
    x_gen = (jnp.arctan2(sn, c) / sn)[..., None] * s

    denom = jnp.where(near_pi, 1.0 - c, 1.0)
    M = (0.5 * (R + Rt) - c[..., None, None] * _eye(3, R)) / denom[..., None, None]
    d = jnp.diagonal(M, axis1=-2, axis2=-1)
    k = jnp.argmax(d, axis=-1)
    col = jnp.take_along_axis(M, k[..., None, None], axis=-1)[..., 0]
    dk = jnp.take_along_axis(d, k[..., None], axis=-1)[..., 0]
    n = col / jnp.sqrt(jnp.where(near_pi, dk, 1.0))[..., None]
    ns = jnp.sum(n * s, axis=-1)
    n = jnp.where((ns < 0)[..., None], -n, n)
    x_pi = jnp.arctan2(jnp.abs(ns), c)[..., None] * n

    return jnp.where(
        small[..., None], x_small, jnp.where(near_pi[..., None], x_pi, x_gen)
    )


def _so3_inverse_cayley(W: Float[Array, "... 3 3"]) -> Float[Array, "... 3"]:
    """``x = vee(W - Wᵀ)/(1 + tr W)``; raises for rotations by π (``tr W = -1``) and near them."""
    num = _vee3(W - jnp.swapaxes(W, -1, -2))
    den = 1.0 + jnp.trace(W, axis1=-2, axis2=-1)
    return cayley_domain_error(num / den[..., None], den)


@final
class SO3(AbstractMatrixLieGroup):
    """Rotations of R³, stored as a (batch of) rotation matrix ``R`` of shape ``(..., 3, 3)``.

    Tangent coordinates are so(3) ≅ R³ with ``hat(x) y = x × y``; ``Ad_g = R`` and
    ``Ad*_g = Rᵀ``. The constructor does not check orthogonality; use :meth:`from_matrix`.
    """

    R: Float[Array, "... 3 3"]

    name: ClassVar[str] = "SO3"
    tangent_dim: ClassVar[int] = 3
    matrix_dim: ClassVar[int] = 3

    def __init__(self, R: Float[ArrayLike, "... 3 3"]):
        self.R = _check_square(R, 3, "SO3")

    # ------------------------------------------------------------ constructors
    @classmethod
    def identity(cls, batch_shape: tuple[int, ...] = (), dtype=None) -> "SO3":
        """The identity rotation, broadcast to ``batch_shape``."""
        dtype = jnp.result_type(float) if dtype is None else dtype
        return cls(jnp.broadcast_to(jnp.eye(3, dtype=dtype), tuple(batch_shape) + (3, 3)))

    @classmethod
    def exp(cls, tangent: Float[ArrayLike, "... 3"]) -> "SO3":
        """Rodrigues' formula ``R = I + (sin θ/θ) x̂ + ((1 - cos θ)/θ²) x̂²``, ``θ = |x|``."""
        return cls(_so3_exp(_check_vector(tangent, 3, "SO3.exp")))

    @classmethod
    def cayley(cls, tangent: Float[ArrayLike, "... 3"]) -> "SO3":
        """``R = (I - x̂)^{-1}(I + x̂) = I + 2/(1 + |x|²)(x̂ + x̂²)``, a rotation by ``2 arctan|x|``
        about ``x`` (check: ``(I - x̂)(I + a(x̂ + x̂²)) = I + x̂`` for ``a = 2/(1+|x|²)`` as
        ``x̂³ = -|x|² x̂``)."""
        return cls(sm.cayley_matrix(sm.hat3(_check_vector(tangent, 3, "SO3.cayley"))))

    @classmethod
    def from_matrix(
        cls, matrix: Float[ArrayLike, "... 3 3"], *, atol: Optional[float] = None
    ) -> "SO3":
        """Check ``RᵀR = I`` (to ``atol``, default ``10 sqrt(eps)``) and ``det R > 0``."""
        R = _check_square(matrix, 3, "SO3.from_matrix")
        return cls(_check_orthogonal(R, "SO3.from_matrix", atol))

    # ---------------------------------------------------------------- methods
    @property
    def algebra(self) -> LieAlgebra:
        """The Lie algebra so(3) (:func:`lpjax.algebras.so3`)."""
        return _so3_algebra()

    def compose(self, other: "SO3") -> "SO3":
        """``R₁ R₂``."""
        if not isinstance(other, SO3):
            raise TypeError(f"SO3.compose expects an SO3, got {type(other).__name__}")
        a, b = _broadcast_batch(self.R, 2, other.R, 2)
        return SO3(a @ b)

    def inverse(self) -> "SO3":
        """``Rᵀ``."""
        return SO3(jnp.swapaxes(self.R, -1, -2))

    def act(self, points: Float[ArrayLike, "... 3"]) -> Float[Array, "... 3"]:
        """``R p``; the batch axes of the rotation and the points broadcast."""
        p = _check_vector(points, 3, "SO3.act")
        R, p = _broadcast_batch(self.R, 2, p, 1)
        return (R @ p[..., None])[..., 0]

    def log(self) -> Float[Array, "... 3"]:
        """Principal logarithm ``x = θ n``, ``θ ∈ [0, π]``, stable near 0 and π."""
        return _so3_log(self.R)

    def inverse_cayley(self) -> Float[Array, "... 3"]:
        """``x = vee(R - Rᵀ)/(1 + tr R)``; raises within about 1e-4 rad of a rotation by π."""
        return _so3_inverse_cayley(self.R)

    def Ad(self) -> Float[Array, "... 3 3"]:
        """``Ad_g = R`` (since ``R x̂ Rᵀ = hat(R x)``)."""
        return self.R

    def as_matrix(self) -> Float[Array, "... 3 3"]:
        return self.R
