"""Dense output of :class:`lpjax.diffrax.GaussLegendre`: a Hermite–Birkhoff interpolant of the
step's order, built by bootstrapping (imported by :mod:`lpjax.diffrax` only; it needs diffrax).

Over a step ``θ ∈ [0, 1]`` (``t = t0 + θ h``; slopes per unit θ, ``k = h f``), the polynomial
``p`` of degree ``3 + m`` with ``p(0) = y0``, ``p(1) = y1``, ``p'(0) = k0``, ``p'(1) = k1`` and
``p'(θ_j) = g_j`` (j = 1 … m) interpolates with error O(h^{4+m}) on exact data (Hermite–
Birkhoff interpolation; Hairer, Nørsett & Wanner, *Solving ODEs I*, II.6). Slopes evaluated on
an interpolant of error O(h^q) are off by O(h^{q+1}) and so limit the next one to O(h^{q+1}):
bootstrapping (Enright, Jackson, Nørsett & Thomsen, "Interpolants for Runge–Kutta formulas",
ACM TOMS 12 (1986) 193–218) raises the order by one per round of ``m = q − 3`` new slopes.
Gauss–Legendre starts with its stage slopes ``F_i`` at ``c_i`` (stage values of error
O(h^{s+1}): q = s + 2), then s − 1 rounds at ``m = s − 1, …, 2s − 3`` nodes (one more where m
is odd: see :func:`_plan`) reach q = 2s + 1, the local error of the step itself: two
extra evaluations of ``f`` for GL4, six for GL6, besides ``f(y0)`` and ``f(y1)``. Only a run that interpolates (``SaveAt(dense=True)``
or ``SaveAt(ts=...)``) computes them: otherwise XLA drops them as unused.
"""

from __future__ import annotations

from typing import Any, final

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float, PyTree

from ._integrator.gauss_legendre import _combine

__all__ = ["DenseHermite", "dense_coefficients"]


def _birkhoff_matrix(nodes: np.ndarray) -> np.ndarray:
    """``M``: the data ``(y1 − y0, k0, k1, g_1 … g_m)`` of ``p − y0 = Σ_d a_d θ^d``
    (d = 1 … 3 + m) are ``M a``."""
    D = 3 + len(nodes)
    d = np.arange(1, D + 1)
    return np.array([np.ones(D), (d == 1).astype(float), d.astype(float)] + [d * th ** (d - 1) for th in nodes])


def _birkhoff_inverse(nodes: np.ndarray) -> np.ndarray:
    M = _birkhoff_matrix(nodes)
    if np.linalg.cond(M) > 1e8:
        raise ValueError(f"the slope nodes {nodes} are not poised for Hermite–Birkhoff interpolation")
    return np.linalg.inv(M)


def _plan(c: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per round: (its slope nodes, ``M⁻¹`` of its interpolant). Round 0: the stage nodes;
    then ``m = s − 1, …, 2s − 3`` equispaced nodes ``j/(m + 1)``. Slope-only nodes need not be
    poised: ``θ(θ − 1) Π(θ − θ_j)`` with a zero integral over [0, 1] is a null polynomial, as
    for any node set symmetric about ½ of odd size, or for Gauss nodes when m ≥ 3 (orthogonal
    to the quadratic). So an odd round takes one node more, and a stage set that is not
    poised (s odd, or s ≥ 4) drops its middle node."""
    s = len(c)
    first = np.asarray(c, float)
    if np.linalg.cond(_birkhoff_matrix(first)) > 1e8:
        first = np.delete(first, s // 2)
    rounds = [first] + [np.arange(1, k + 1) / (k + 1) for k in (m + m % 2 for m in range(s - 1, 2 * s - 2))]
    return [(nodes, _birkhoff_inverse(nodes)) for nodes in rounds]


def dense_coefficients(f, x0: Float[Array, " n"], x1: Float[Array, " n"], F: Float[Array, "s n"],
                       c: np.ndarray) -> Float[Array, "D n"]:
    """``(Δ, q_0, …, q_{D−2})`` of ``p(θ) = x0 + θ (Δ + (θ − 1) q(θ))`` over a step of
    ``x0 → x1`` (``Δ = x1 − x0``) with stage slopes ``F`` at ``c`` and ``f`` the slope per unit
    θ (see the module docstring)."""
    c = np.asarray(c, float)
    plan = _plan(c)
    head = jnp.stack([x1 - x0, f(x0), f(x1)])
    used = [int(np.argmin(np.abs(c - node))) for node in plan[0][0]]  # the stages round 0 keeps
    coeffs = _combine(plan[0][1], jnp.concatenate([head, F[np.asarray(used, int)]]))
    for nodes, inverse in plan[1:]:
        powers = nodes[:, None] ** np.arange(1, coeffs.shape[0] + 1)[None, :]  # (m, D_prev)
        values = x0[None, :] + _combine(powers, coeffs)
        g = jnp.stack([f(v) for v in values])
        coeffs = _combine(inverse, jnp.concatenate([head, g]))
    return jnp.concatenate([head[:1], _combine(_through_the_ends(coeffs.shape[0]), coeffs)])


def _through_the_ends(D: int) -> np.ndarray:
    """``Q``: with ``Σ_d a_d θ^d = θ Δ + θ(θ − 1) q(θ)`` (``Δ = Σ_d a_d``), the coefficients of
    ``q`` (degree D − 2) are ``Q a``, so that ``p(1) = y0 + Δ`` holds to one rounding, however
    the ``a_d`` cancel (synthetic division of ``Σ_d a_d θ^{d−1} − Δ`` by ``θ − 1``)."""
    Q = np.zeros((D - 1, D))
    r = np.eye(D) - np.ones((1, D)) * (np.arange(D) == 0)[:, None]  # coefficients of θ^0 … θ^{D−1}
    q = r[D - 1]
    for j in range(D - 2, -1, -1):  # q_j = r_{j+1} + q_{j+1}
        Q[j] = q
        q = r[j] + q
    return Q


@final
class DenseHermite(dfx.AbstractLocalInterpolation):
    """``y(t0 + θ h) ≈ start + θ (Δ + (θ − 1) q(θ))`` over one step (flat, real), unravelled
    like ``y0``: the bootstrapped Hermite–Birkhoff interpolant of :func:`dense_coefficients`
    (``coeffs = (Δ, q_0, …)``)."""

    t0: Any
    t1: Any
    y0: PyTree
    start: Float[Array, " n"]
    coeffs: Float[Array, "D n"]

    def evaluate(self, t0, t1=None, left: bool = True):
        del left
        if t1 is not None:
            return jax.tree.map(lambda a, b: a - b, self.evaluate(t1), self.evaluate(t0))
        theta = jnp.asarray((t0 - self.t0) / (self.t1 - self.t0), self.start.dtype)
        q = self.coeffs[-1]
        for j in range(self.coeffs.shape[0] - 2, 0, -1):  # Horner
            q = q * theta + self.coeffs[j]
        flat = self.start + theta * (self.coeffs[0] + (theta - 1) * q)
        template, unravel = ravel_pytree(self.y0)
        if jnp.iscomplexobj(template):  # (real parts, imaginary parts), as the solver steps them
            n = template.shape[0]
            return unravel(jax.lax.complex(flat[:n], flat[n:]))
        return unravel(flat)
