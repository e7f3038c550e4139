"""Small vectors and matrices as Python lists of scalar arrays ("structure of arrays").

Under ``vmap`` a 3×3 ``@`` lowers to a batched ``dot`` and the n-by-n minor dimensions of a
batch defeat SIMD. Written entry by entry, an explicit map for an ensemble becomes fused
elementwise code over the ensemble axis; for Suris' map this is 6–8× faster on CPU (see
``benchmarks/explicit_maps.py``). A matrix is a list of rows, a vector a list; every entry
is a scalar array (or a Python float, for structural zeros and ones).
"""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

Vec = list
Mat = list
_UNROLL_SOLVE = 4  # largest n whose Cayley solve is unrolled

__all__ = ["unstack", "stack", "stack_matrix", "bilinear", "hat", "vee", "dot", "mm", "mv", "transpose", "wedge", "solve", "cayley", "lin"]


def unstack(x: Array) -> Vec:
    return [x[..., i] for i in range(x.shape[-1])]


def stack(v: Sequence) -> Array:
    return jnp.stack(jnp.broadcast_arrays(*v), axis=-1)


def stack_matrix(A: Mat) -> Array:
    return jnp.stack([stack(r) for r in A], axis=-2)


def _dot(terms):
    terms = [t for t in terms if not (isinstance(t, float) and t == 0.0)]
    return sum(terms[1:], terms[0]) if terms else 0.0


def _mul(a, b):
    if (isinstance(a, float) and a == 0.0) or (isinstance(b, float) and b == 0.0):
        return 0.0
    if isinstance(a, float) and a == 1.0:
        return b
    if isinstance(b, float) and b == 1.0:
        return a
    return a * b


def dot(a: Vec, b: Vec):
    return _dot([_mul(x, y) for x, y in zip(a, b)])


def _scaled(c: float, x):
    return x if c == 1.0 else (-x if c == -1.0 else c * x)


def hat(x: Vec, basis: np.ndarray) -> Mat:
    """``Σ_i x_i E_i`` for a constant NumPy basis (d, n, n), using only its nonzeros."""
    n = basis.shape[-1]
    return [
        [_dot([_scaled(float(basis[i, a, b]), x[i]) for i in np.flatnonzero(basis[:, a, b])]) for b in range(n)]
        for a in range(n)
    ]


def bilinear(C: np.ndarray, u: Vec, v: Vec) -> Vec:
    """``w_i = Σ_jk C_ijk u_j v_k`` for a constant NumPy tensor ``C``, over its nonzeros only."""
    out = []
    for i in range(C.shape[0]):
        terms = [_scaled(float(C[i, j, k]), _mul(u[j], v[k])) for j, k in np.argwhere(C[i] != 0)]
        out.append(_dot(terms))
    return out


def vee(X: Mat, vee_map: np.ndarray) -> Vec:
    """Coordinates ``X.ravel() @ vee_map`` for a constant NumPy ``vee_map`` (n·n, d)."""
    n = len(X)
    flat = [X[a][b] for a in range(n) for b in range(n)]
    return [_dot([_scaled(float(vee_map[k, i]), flat[k]) for k in np.flatnonzero(vee_map[:, i])]) for i in range(vee_map.shape[1])]


def mm(A: Mat, B: Mat) -> Mat:
    return [[_dot([_mul(A[i][k], B[k][j]) for k in range(len(B))]) for j in range(len(B[0]))] for i in range(len(A))]


def mv(A: Mat, x: Vec) -> Vec:
    return [_dot([_mul(A[i][k], x[k]) for k in range(len(x))]) for i in range(len(A))]


def transpose(A: Mat) -> Mat:
    return [list(r) for r in zip(*A)]


def lin(*pairs) -> list:
    """``Σ c_k X_k`` for same-shaped vectors or matrices, given as ``(c_1, X_1, c_2, X_2, …)``."""
    coeffs, items = pairs[::2], pairs[1::2]
    if isinstance(items[0][0], list):
        return [lin(*[z for c, X in zip(coeffs, items) for z in (c, X[i])]) for i in range(len(items[0]))]
    return [_dot([_mul(c, X[i]) for c, X in zip(coeffs, items)]) for i in range(len(items[0]))]


def wedge(a: Vec, b: Vec) -> Mat:
    """``a ∧ b = a bᵀ − b aᵀ``."""
    n = len(a)
    return [[0.0 if i == j else _dot([_mul(a[i], b[j]), _mul(-1.0, _mul(b[i], a[j]))]) for j in range(n)] for i in range(n)]


def solve(A: Mat, B: Mat) -> Mat:
    """``A⁻¹B`` by Gauss–Jordan elimination without pivoting (for matrices whose leading
    minors stay away from 0, such as ``I − X`` with X skew or ``I − dt A ⊗ J`` for small dt)."""
    n = len(A)
    A, B = [list(r) for r in A], [list(r) for r in B]
    for k in range(n):
        piv = A[k][k]
        A[k] = [v / piv for v in A[k]]
        B[k] = [v / piv for v in B[k]]
        for i in range(n):
            if i != k:
                f = A[i][k]
                A[i] = [A[i][j] - f * A[k][j] for j in range(n)]
                B[i] = [B[i][j] - f * B[k][j] for j in range(len(B[i]))]
    return B


def cayley(X: Mat) -> Mat:
    """``cay(X) = (I − X)⁻¹(I + X) = I + 2(I − X)⁻¹X`` for skew X.

    ``I + 2(X + X²)/(1 − ½tr X²)`` for n = 3; Gauss–Jordan without pivoting for n = 4 (the
    leading minors of ``I − X`` are ``≥ 1``); a dense solve above. Solving for the small part
    ``(I − X)⁻¹X`` rather than for ``(I − X)⁻¹(I + X)`` keeps the result orthogonal to
    roundoff without drift (|a|² over 10⁴ Suris steps, n = 4: 1e-14 instead of 6e-13).
    """
    n = len(X)
    if n == 3:
        X2 = mm(X, X)
        c = 2.0 / (1.0 - 0.5 * (X2[0][0] + X2[1][1] + X2[2][2]))
        return [[(1.0 if i == j else 0.0) + c * (X[i][j] + X2[i][j]) for j in range(n)] for i in range(n)]
    if n > _UNROLL_SOLVE:  # the unrolled elimination grows as n³ in code size and compile time
        Xa = stack_matrix(X)
        eye = jnp.eye(n, dtype=Xa.dtype)
        C = eye + 2.0 * jnp.linalg.solve(eye - Xa, Xa)
        return [[C[..., i, j] for j in range(n)] for i in range(n)]
    A = [[(1.0 if i == j else 0.0) - X[i][j] for j in range(n)] for i in range(n)]
    B = solve(A, X)  # cay(X) = I + 2(I − X)⁻¹X: the small part is solved for
    return [[(1.0 if i == j else 0.0) + 2.0 * B[i][j] for j in range(n)] for i in range(n)]
