"""Abstract interface for matrix Lie groups, plus small shared helpers.

Conventions (all concrete groups):

* ``exp``/``log`` are the matrix exponential and its principal inverse on algebra
  coordinates ``x`` (``hat(x)`` is the matrix of :mod:`lpjax.algebras`).
* ``cayley(x) = (I - hat(x))^{-1} (I + hat(x))``, the Cayley map *without* a factor ½, so
  ``cayley(x) = exp(2x) + O(|x|^3)``; ``inverse_cayley(W) = vee((W - I)(W + I)^{-1})``.
* ``Ad()`` is the matrix of ``Ad_g ξ = vee(g hat(ξ) g^{-1})`` on algebra coordinates.
* ``Ad_star()`` is its transpose, acting on dual coordinates:
  ``<Ad*_g μ, ξ> = <μ, Ad_g ξ>`` with ``<μ, ξ> = μ_i ξ^i``. It satisfies
  ``Ad*_{gh} = Ad*_h Ad*_g``; the coadjoint *representation* (a left action) is
  ``μ ↦ Ad*_{g^{-1}} μ``. For SO(3) this is ``Ad*_g π = Rᵀ π`` (spatial → body momentum).
"""

from __future__ import annotations

import abc
from typing import Any, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._checks import as_float as _as_float
from .._checks import error_if

__all__ = ["AbstractMatrixLieGroup"]


class AbstractMatrixLieGroup(eqx.Module):
    """A matrix Lie group element (or a batch of them; leading axes are batch axes).

    Concrete subclasses are final. ``name`` is a class-level label used in error messages;
    ``tangent_dim`` is the dimension of the Lie algebra and ``matrix_dim`` the size of
    :meth:`as_matrix`.
    """

    name: eqx.AbstractClassVar[str]
    R: eqx.AbstractVar[Array]  # the rotation block, shape (..., k, k)

    @property
    @abc.abstractmethod
    def tangent_dim(self) -> int:
        """Dimension of the Lie algebra (length of tangent coordinates)."""

    @property
    @abc.abstractmethod
    def matrix_dim(self) -> int:
        """Size ``m`` of the ``m × m`` matrix returned by :meth:`as_matrix`."""

    # ------------------------------------------------------------ constructors
    @classmethod
    @abc.abstractmethod
    def identity(cls, *args: Any, **kwargs: Any) -> "AbstractMatrixLieGroup":
        """The identity element, optionally with a batch shape."""

    @classmethod
    @abc.abstractmethod
    def exp(cls, tangent: Float[Array, "... d"]) -> "AbstractMatrixLieGroup":
        """``g = exp(hat(tangent))``."""

    @classmethod
    @abc.abstractmethod
    def cayley(cls, tangent: Float[Array, "... d"]) -> "AbstractMatrixLieGroup":
        """``g = (I - hat(x))^{-1} (I + hat(x))``."""

    @classmethod
    @abc.abstractmethod
    def from_matrix(cls, matrix: Float[Array, "... m m"]) -> "AbstractMatrixLieGroup":
        """Element from its matrix; checks membership (``ValueError``, or at run time under tracing)."""

    # ---------------------------------------------------------------- algebra
    @property
    def batch_shape(self) -> tuple[int, ...]:
        """Leading batch axes."""
        return tuple(self.R.shape[:-2])

    @abc.abstractmethod
    def compose(self, other: "AbstractMatrixLieGroup") -> "AbstractMatrixLieGroup":
        """Group product ``self · other`` (matrix product); batch axes broadcast."""

    @abc.abstractmethod
    def inverse(self) -> "AbstractMatrixLieGroup":
        """Group inverse ``g^{-1}``."""

    @abc.abstractmethod
    def act(self, points: Float[Array, "... k"]) -> Float[Array, "... k"]:
        """Action on points of the defining space; batch axes broadcast."""

    @abc.abstractmethod
    def log(self) -> Float[Array, "... d"]:
        """Principal logarithm, ``exp(log(g)) = g``."""

    @abc.abstractmethod
    def inverse_cayley(self) -> Float[Array, "... d"]:
        """``x = vee((W - I)(W + I)^{-1})``, the inverse of :meth:`cayley`."""

    @abc.abstractmethod
    def Ad(self) -> Float[Array, "... d d"]:
        """Matrix of ``Ad_g``: ``hat(Ad() @ ξ) = g hat(ξ) g^{-1}``."""

    @abc.abstractmethod
    def as_matrix(self) -> Float[Array, "... m m"]:
        """The group element as a matrix."""

    # ------------------------------------------------------- concrete helpers
    def Ad_star(self) -> Float[Array, "... d d"]:
        """Matrix of ``Ad*_g := (Ad_g)ᵀ`` on dual coordinates: ``<Ad*_g μ, ξ> = <μ, Ad_g ξ>``.

        ``Ad*_{gh} = Ad*_h Ad*_g``; the coadjoint action is ``μ ↦ Ad*_{g^{-1}} μ``.
        """
        return jnp.swapaxes(self.Ad(), -1, -2)

    def __matmul__(self, other):
        """``g @ h`` composes two elements; ``g @ points`` acts on an array of points."""
        if isinstance(other, AbstractMatrixLieGroup):
            return self.compose(other)
        if isinstance(other, (jax.Array, np.ndarray)):
            return self.act(other)
        return NotImplemented


# ------------------------------------------------------------------ helpers
def _check_vector(x: ArrayLike, dim: int, what: str) -> Array:
    x = _as_float(x, what)
    if x.ndim < 1 or x.shape[-1] != dim:
        raise ValueError(f"{what} expects shape (..., {dim}), got {tuple(x.shape)}")
    return x


def _check_square(X: ArrayLike, dim: int, what: str) -> Array:
    X = _as_float(X, what)
    if X.ndim < 2 or X.shape[-2:] != (dim, dim):
        raise ValueError(f"{what} expects shape (..., {dim}, {dim}), got {tuple(X.shape)}")
    return X


def _eye(n: int, like: Array) -> Array:
    """Identity broadcast to ``like.shape[:-2] + (n, n)`` (no implicit rank promotion)."""
    return jnp.broadcast_to(jnp.eye(n, dtype=like.dtype), like.shape[:-2] + (n, n))


def _broadcast_batch(a: Array, a_core: int, b: Array, b_core: int) -> tuple[Array, Array]:
    """Broadcast the leading (batch) axes of ``a`` and ``b`` explicitly."""
    batch = jnp.broadcast_shapes(a.shape[: a.ndim - a_core], b.shape[: b.ndim - b_core])
    a = jnp.broadcast_to(a, batch + a.shape[a.ndim - a_core :])
    b = jnp.broadcast_to(b, batch + b.shape[b.ndim - b_core :])
    return a, b


def _default_atol(dtype) -> float:
    return float(10.0 * np.sqrt(np.finfo(dtype).eps))


def _check_orthogonal(R: Array, what: str, atol: Optional[float]) -> Array:
    """``RᵀR = I`` and ``det R > 0`` to ``atol``: ``ValueError`` for concrete input (checked in
    NumPy, no compilation), at run time under tracing."""
    n = R.shape[-1]
    tol = _default_atol(R.dtype) if atol is None else atol
    if not isinstance(R, jax.core.Tracer):
        Rn = np.asarray(R, dtype=np.float64)
        if not np.all(np.isfinite(Rn)):
            raise ValueError(f"{what}: matrix has non-finite entries")
        orth = np.max(np.abs(np.swapaxes(Rn, -1, -2) @ Rn - np.eye(n)), initial=0.0)
        if orth > tol:
            raise ValueError(
                f"{what}: matrix is not orthogonal, max |RᵀR - I| = {orth:.3e} > {tol:.1e}"
            )
        if Rn.size and np.any(np.linalg.det(Rn) <= 0):
            raise ValueError(f"{what}: matrix has det <= 0 (a reflection, not a rotation)")
        return R
    orth = jnp.max(jnp.abs(jnp.swapaxes(R, -1, -2) @ R - _eye(n, R)), initial=0.0)
    bad = ~jnp.all(jnp.isfinite(R)) | (orth > tol)
    R = error_if(R, bad, f"{what}: matrix is not orthogonal")
    neg = jnp.any(jnp.linalg.det(R) <= 0) if R.size else jnp.array(False)
    return error_if(R, neg, f"{what}: matrix has det <= 0 (not a rotation)")


_CAYLEY_PI_TOL = 1e-8  # 1 + tr R = 4 cos²(θ/2): within about 1e-4 rad of a rotation by π


def cayley_domain_error(x: Array, gap: Array) -> Array:
    """``x``, raising (eagerly, or at run time under ``jit``) when ``gap = det(R + I)/2``, which is
    ``1 + tr R = 4 cos²(θ/2)`` in 3D, shows a rotation within about 1e-4 rad of one by π: there
    the Cayley coordinates |x| = tan(θ/2) are undefined, and rounding makes them garbage."""
    return error_if(x, jnp.any(~(gap > _CAYLEY_PI_TOL)),
                        "inverse_cayley: the rotation is within about 1e-4 rad of a rotation by π (an eigenvalue "
                        "-1), where Cayley coordinates are undefined; use log() for such rotations")
