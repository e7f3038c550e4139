"""SE(3) = SO(3) ⋉ R³ with closed-form exp, log and Cayley maps.

Coordinates are those of :func:`lpjax.algebras.se3`: ``ξ = (ω, v)``, rotation first, with
``hat(ξ) = [[ω̂, v], [0, 0]]``. The element ``g = [[R, t], [0, 1]]`` acts as ``p ↦ R p + t``.
"""

from __future__ import annotations

import functools
from typing import ClassVar, Optional, final

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .. import _small as sm
from .._algebra import LieAlgebra, se3
from .._checks import error_if
from ._base import (
    AbstractMatrixLieGroup,
    _broadcast_batch,
    _check_orthogonal,
    _check_square,
    _check_vector,
    _eye,
)
from ._so3 import (
    _D_TAYLOR,
    _SMALL,
    SO3,
    _poly,
    _so3_coeffs,
    _so3_inverse_cayley,
    _so3_log,
    _sq,
)

__all__ = ["SE3"]


@functools.lru_cache(maxsize=None)
def _se3_algebra() -> LieAlgebra:
    return se3()


def _matvec(A: Array, x: Array) -> Array:
    return (A @ x[..., None])[..., 0]


@final
class SE3(AbstractMatrixLieGroup):
    """Rigid motions ``g = [[R, t], [0, 1]]``: rotation ``R`` ``(..., 3, 3)`` and translation
    ``t`` ``(..., 3)``; batch axes of ``R`` and ``t`` are broadcast together.

    Tangent coordinates ``(ω, v)``; ``Ad_g = [[R, 0], [t̂ R, R]]``. The constructor does not
    check orthogonality; use :meth:`from_matrix`.
    """

    R: Float[Array, "... 3 3"]
    t: Float[Array, "... 3"]

    name: ClassVar[str] = "SE3"
    tangent_dim: ClassVar[int] = 6
    matrix_dim: ClassVar[int] = 4

    def __init__(self, R: Float[ArrayLike, "... 3 3"], t: Float[ArrayLike, "... 3"]):
        R = _check_square(R, 3, "SE3 rotation")
        t = _check_vector(t, 3, "SE3 translation")
        dtype = jnp.result_type(R, t)
        self.R, self.t = _broadcast_batch(R.astype(dtype), 2, t.astype(dtype), 1)

    # ------------------------------------------------------------ constructors
    @classmethod
    def identity(cls, batch_shape: tuple[int, ...] = (), dtype=None) -> "SE3":
        """``R = I``, ``t = 0``, broadcast to ``batch_shape``."""
        dtype = jnp.result_type(float) if dtype is None else dtype
        shape = tuple(batch_shape)
        R = jnp.broadcast_to(jnp.eye(3, dtype=dtype), shape + (3, 3))
        return cls(R, jnp.zeros(shape + (3,), dtype))

    @classmethod
    def from_rotation_translation(
        cls, rotation: SO3, translation: Float[ArrayLike, "... 3"]
    ) -> "SE3":
        """``g = [[R, t], [0, 1]]`` from an :class:`SO3` and a translation."""
        if not isinstance(rotation, SO3):
            raise TypeError(
                f"SE3.from_rotation_translation expects an SO3, got {type(rotation).__name__}"
            )
        return cls(rotation.R, translation)

    @classmethod
    def exp(cls, tangent: Float[ArrayLike, "... 6"]) -> "SE3":
        """``R = exp(ω̂)`` (Rodrigues), ``t = V v`` with the left Jacobian
        ``V = I + ((1 - cos θ)/θ²) ω̂ + ((θ - sin θ)/θ³) ω̂²``, ``θ = |ω|``."""
        xi = _check_vector(tangent, 6, "SE3.exp")
        w, v = xi[..., :3], xi[..., 3:]
        A, B, C = _so3_coeffs(_sq(w), with_c=True)
        W = sm.hat3(w)
        W2 = W @ W
        eye = _eye(3, W)
        R = eye + A[..., None, None] * W + B[..., None, None] * W2
        V = eye + B[..., None, None] * W + C[..., None, None] * W2
        return cls(R, _matvec(V, v))

    @classmethod
    def cayley(cls, tangent: Float[ArrayLike, "... 6"]) -> "SE3":
        """``(I - X)^{-1}(I + X)`` for ``X = [[ω̂, v], [0, 0]]``:
        ``R = cay(ω)``, ``t = 2 (I - ω̂)^{-1} v = 2 (v + (ω × v + ω × (ω × v))/(1 + |ω|²))``."""
        xi = _check_vector(tangent, 6, "SE3.cayley")
        w, v = xi[..., :3], xi[..., 3:]
        wv = jnp.cross(w, v)
        t = 2.0 * (v + (wv + jnp.cross(w, wv)) / (1.0 + _sq(w))[..., None])
        return cls(sm.cayley_matrix(sm.hat3(w)), t)

    @classmethod
    def from_matrix(
        cls, matrix: Float[ArrayLike, "... 4 4"], *, atol: Optional[float] = None
    ) -> "SE3":
        """From ``[[R, t], [0, 1]]``; checks the bottom row, ``RᵀR = I`` and ``det R > 0``."""
        M = _check_square(matrix, 4, "SE3.from_matrix")
        msg = "SE3.from_matrix: bottom row must be [0, 0, 0, 1]"
        if not isinstance(M, jax.core.Tracer):
            bottom = np.asarray(M)[..., 3, :]
            err = np.max(np.abs(bottom - np.array([0.0, 0.0, 0.0, 1.0])), initial=0.0)
            if err != 0.0:
                raise ValueError(f"{msg}, max deviation {err:.3e}")
        else:
            bad = jnp.any(M[..., 3, :3] != 0) | jnp.any(M[..., 3, 3] != 1)
            M = error_if(M, bad, msg)
        R = _check_orthogonal(M[..., :3, :3], "SE3.from_matrix", atol)
        return cls(R, M[..., :3, 3])

    # ---------------------------------------------------------------- methods
    @property
    def algebra(self) -> LieAlgebra:
        """The Lie algebra se(3) (:func:`lpjax.algebras.se3`)."""
        return _se3_algebra()

    def rotation(self) -> SO3:
        return SO3(self.R)

    def translation(self) -> Float[Array, "... 3"]:
        return self.t

    def compose(self, other: "SE3") -> "SE3":
        """``(R₁, t₁)(R₂, t₂) = (R₁R₂, R₁t₂ + t₁)``."""
        if not isinstance(other, SE3):
            raise TypeError(f"SE3.compose expects an SE3, got {type(other).__name__}")
        R1, R2 = _broadcast_batch(self.R, 2, other.R, 2)
        t1, t2 = _broadcast_batch(self.t, 1, other.t, 1)
        return SE3(R1 @ R2, _matvec(R1, t2) + t1)

    def inverse(self) -> "SE3":
        """``(Rᵀ, -Rᵀ t)``."""
        Rt = jnp.swapaxes(self.R, -1, -2)
        return SE3(Rt, -_matvec(Rt, self.t))

    def act(self, points: Float[ArrayLike, "... 3"]) -> Float[Array, "... 3"]:
        """``R p + t``; batch axes broadcast."""
        p = _check_vector(points, 3, "SE3.act")
        R, p = _broadcast_batch(self.R, 2, p, 1)
        t, p = _broadcast_batch(self.t, 1, p, 1)
        return _matvec(R, p) + t

    def log(self) -> Float[Array, "... 6"]:
        """``ω = log(R)`` (stable near 0 and π), ``v = V^{-1} t`` with
        ``V^{-1} = I - ½ ω̂ + ((1 - (θ/2) cot(θ/2))/θ²) ω̂²``."""
        w = _so3_log(self.R)
        th2 = _sq(w)
        small = th2 < _SMALL
        t2 = jnp.where(small, 1.0, th2)
        half = 0.5 * jnp.sqrt(t2)
        D_big = (1.0 - half * jnp.cos(half) / jnp.sin(half)) / t2
        D = jnp.where(small, _poly(th2, _D_TAYLOR), D_big)
        W = sm.hat3(w)
        Vinv = _eye(3, W) - 0.5 * W + D[..., None, None] * (W @ W)
        return jnp.concatenate([w, _matvec(Vinv, self.t)], axis=-1)

    def inverse_cayley(self) -> Float[Array, "... 6"]:
        """``ω = vee(R - Rᵀ)/(1 + tr R)``, ``v = (I - ω̂) t / 2``; raises within about 1e-4 rad of a
        rotation by π."""
        w = _so3_inverse_cayley(self.R)
        v = 0.5 * (self.t - jnp.cross(w, self.t))
        return jnp.concatenate([w, v], axis=-1)

    def Ad(self) -> Float[Array, "... 6 6"]:
        """``Ad_g = [[R, 0], [t̂ R, R]]``: ``Ad_g(ω, v) = (R ω, R v + t × R ω)``."""
        R = self.R
        top = jnp.concatenate([R, jnp.zeros_like(R)], axis=-1)
        bottom = jnp.concatenate([sm.hat3(self.t) @ R, R], axis=-1)
        return jnp.concatenate([top, bottom], axis=-2)

    def as_matrix(self) -> Float[Array, "... 4 4"]:
        """``[[R, t], [0, 1]]``."""
        R, t = self.R, self.t
        upper = jnp.concatenate([R, t[..., None]], axis=-1)
        lower = jnp.broadcast_to(jnp.array([0.0, 0.0, 0.0, 1.0], R.dtype), R.shape[:-2] + (1, 4))
        return jnp.concatenate([upper, lower], axis=-2)
