"""Small vectors and matrices as Python lists of scalar arrays ("structure of arrays").

Under ``vmap`` a 3×3 ``@`` lowers to a batched ``dot`` and the n-by-n minor dimensions of a
batch defeat SIMD. Written entry by entry, an explicit map for an ensemble becomes fused
elementwise code over the ensemble axis; for Suris' map this is 6–8× faster on CPU (see
``benchmarks/explicit_maps.py``). A matrix is a list of rows, a vector a list; every entry
is a scalar array (or a Python float, for structural zeros and ones).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

Vec = list
Mat = list
_UNROLL_SOLVE = 4  # largest n whose Cayley solve is unrolled
_UNROLL_LINEAR = 8  # largest m whose linear solve (solve_small) is unrolled
_UNROLL_REDUCE = 64  # largest size whose reductions are written entry by entry

__all__ = [
    "unstack", "unstack_matrix", "stack", "stack_matrix", "const_mv", "bilinear", "hat", "vee", "dot", "mm", "mv",
    "transpose", "wedge", "lin", "solve", "solve_small", "logdet_spd", "identity", "gauss_jordan", "cayley", "cayley_matrix", "hat3", "wedge_matrix",
    "max_entry", "entrywise_solves",
]

_ENTRYWISE = contextvars.ContextVar("lpjax_entrywise_solves", default=False)


@contextlib.contextmanager
def entrywise_solves() -> Iterator[None]:
    """Within it, :func:`solve_small` and :func:`logdet_spd` trace to unrolled scalar code
    (no LU primitive), as the entrywise evaluator (:mod:`lpjax._ensemble._kernels._entrywise`) and
    the fused kernel need; outside it they are LAPACK calls. Both are set while those trace a member's program. The
    unrolled code takes longer to compile under ``vmap``/``scan`` (measured: a rubber-sphere
    GL4 test, 11 s against 29 s), so it is kept to where it is needed."""
    token = _ENTRYWISE.set(True)
    try:
        yield
    finally:
        _ENTRYWISE.reset(token)


def max_entry(x: Array) -> Array:
    """``jnp.max(x)`` over all entries, as a chain of elementwise maxima for small ``x``: under a
    ``vmap`` whose member axis is last it is then fused elementwise code over the members, where
    a ``reduce`` over the leading axes is a kernel of its own. Measured on Moser–Veselov
    ensembles: 4.5e6 against 3.3e6 body-steps/s. (Not for every reduction: the finiteness test
    of Suris' state is faster as ``jnp.all``, 9.3e7 against 3.4e7.)"""
    flat = jnp.reshape(x, -1)
    if flat.size > _UNROLL_REDUCE or flat.size == 0:
        return jnp.max(flat)
    return functools.reduce(jnp.maximum, [flat[i] for i in range(flat.size)])



def unstack(x: Array) -> Vec:
    """The entries along the last axis. ``lax.split``, not indexing: its transpose is one
    concatenate, where the indexing's is a sum of pads, which XLA fuses into one loop that
    evaluates every entry's whole cotangent expression for each output entry."""
    x = jnp.asarray(x)
    return [jnp.squeeze(p, -1) for p in jax.lax.split(x, [1] * x.shape[-1], axis=x.ndim - 1)]


def unstack_matrix(X: Array) -> Mat:
    X = jnp.asarray(X)
    return [unstack(jnp.squeeze(r, -2)) for r in jax.lax.split(X, [1] * X.shape[-2], axis=X.ndim - 2)]


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


def const_mv(C: np.ndarray, x: Vec) -> Vec:
    """``C x`` for a constant NumPy matrix ``C``, over its nonzeros only."""
    return [_dot([_scaled(float(C[i, j]), x[j]) for j in np.flatnonzero(C[i])]) for i in range(C.shape[0])]


def bilinear(C: np.ndarray, u: Vec, v: Vec) -> Vec:
    """``w_i = Σ_jk C_ijk u_j v_k`` for a constant NumPy tensor ``C``, over its nonzeros only."""
    out = []
    for i in range(C.shape[0]):
        terms = [_scaled(float(C[i, j, k]), _mul(u[j], v[k])) for j, k in np.argwhere(C[i] != 0)]
        out.append(_dot(terms))
    return out


def vee(X: Mat, vee_map: np.ndarray, skew: bool = False) -> Vec:
    """Coordinates ``X.ravel() @ vee_map`` for a constant NumPy ``vee_map`` (n·n, d).

    ``skew=True`` is for an ``X`` that is skew to the bit (``X[b][a]`` computed as ``−X[a][b]``
    or by the same operations in mirrored order, as :func:`hat`, :func:`wedge` and
    :func:`lin` of such matrices give it): the coordinates are then read from the upper
    triangle alone, ``Σ_{a<b} (V[ab] − V[ba]) X[a][b]``, which for a ±½ projection is the
    same number with no arithmetic, and the lower entries are never needed."""
    n = len(X)
    if skew:
        V = vee_map.reshape(n, n, -1)
        coef = {(a, b): V[a, b] - V[b, a] for a in range(n) for b in range(a + 1, n)}
        return [_dot([_scaled(float(c[i]), X[a][b]) for (a, b), c in coef.items() if c[i] != 0.0])
                for i in range(vee_map.shape[1])]
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


def solve(A: Mat, B: Mat, pivot: bool = False) -> Mat:
    """``A⁻¹B`` for nested lists of scalars (or same-shaped arrays) by Gauss–Jordan elimination,
    unrolled.

    Without ``pivot``, for matrices whose leading minors stay away from 0: ``I − X`` with X
    skew (minors ≥ 1), symmetric positive definite matrices (a mass tensor, a Gram matrix),
    and the Newton matrix ``I − dt A ⊗ f'(y)`` of an implicit Runge–Kutta step, which tends
    to the identity as ``dt → 0``. With ``pivot``, partial pivoting as LAPACK's LU does it,
    written as conditional row swaps (``where``) so that it stays elementwise code: for
    column k each lower row is swapped into place when its entry is larger in magnitude.
    A breakdown (a singular matrix) gives non-finite entries, which callers report through
    their result code. The scalar operations fuse into a few elementwise kernels, where a
    LAPACK call, or row operations on a small array, cost mostly call overhead (measured on
    CPU for 6 × 6: 0.13 µs, against 0.36 µs for an LU factorisation and 0.94 µs for the same
    elimination on the array), and they run entry by entry in a fused GPU kernel
    (:mod:`lpjax._ensemble._kernels._entrywise`), where an LU is a primitive of its own. Constant
    0/1 entries (an identity ``B``) are skipped. The code grows as m³: use it up to m ≈ 8 (at 12 the compile
    takes seconds and the run is slower than :func:`gauss_jordan`); :func:`solve_small`
    picks.
    """
    m = len(A)
    rows = [list(A[i]) + list(B[i]) for i in range(m)]
    for k in range(m):
        if pivot:
            for i in range(k + 1, m):
                swap = jnp.abs(rows[i][k]) > jnp.abs(rows[k][k])
                rows[k], rows[i] = ([jnp.where(swap, a, b) for a, b in zip(rows[i], rows[k])],
                                    [jnp.where(swap, b, a) for a, b in zip(rows[i], rows[k])])
        p = 1.0 / rows[k][k]
        pivot_row = [_mul(p, x) for x in rows[k]]
        rows = [pivot_row if i == k else [_dot([x, -_mul(rows[i][k], q)]) for x, q in zip(rows[i], pivot_row)]
                for i in range(m)]
    return [r[m:] for r in rows]


def entrywise() -> bool:
    """Whether an ensemble kernel is tracing a member's program (:func:`entrywise_solves`)."""
    return _ENTRYWISE.get()


def solve_small(A: Float[Array, "m m"], b: Float[Array, "m *k"], pivot: bool = False) -> Float[Array, "m *k"]:
    """``A⁻¹b`` for one small matrix: inside :func:`entrywise_solves`, :func:`solve` unrolled up
    to ``m = 8``; otherwise (and above 8) ``jnp.linalg.solve``. ``pivot=False`` is for matrices
    that need no pivoting (see :func:`solve`: SPD, near the identity); a general matrix needs
    ``pivot=True``."""
    m = A.shape[-1]
    if A.ndim != 2 or b.ndim not in (1, 2):
        raise ValueError(f"solve_small: A must be (m, m) and b (m,) or (m, k), got {A.shape} and {b.shape}")
    if m > _UNROLL_LINEAR or not _ENTRYWISE.get():
        return jnp.linalg.solve(A, b)
    B = b[:, None] if b.ndim == 1 else b
    X = stack_matrix(solve(unstack_matrix(A), unstack_matrix(B), pivot=pivot))
    return X[:, 0] if b.ndim == 1 else X


def logdet_spd(A: Float[Array, "m m"]) -> Float[Array, ""]:
    """``log det A`` for a symmetric positive definite ``A``: the sum of the logs of the pivots
    of Gaussian elimination without pivoting, unrolled up to ``m = 8`` inside
    :func:`entrywise_solves` (so that it runs entry by entry, where ``slogdet`` is an LU),
    ``jnp.linalg.slogdet`` otherwise."""
    m = A.shape[-1]
    if m > _UNROLL_LINEAR or not _ENTRYWISE.get():
        return jnp.linalg.slogdet(A)[1]
    rows = unstack_matrix(A)
    terms = []
    for k in range(m):
        terms.append(jnp.log(rows[k][k]))
        for i in range(k + 1, m):
            f = rows[i][k] / rows[k][k]
            rows[i] = [None] * (k + 1) + [rows[i][j] - f * rows[k][j] for j in range(k + 1, m)]
    return sum(terms[1:], terms[0])


def identity(m: int) -> Mat:
    return [[1.0 if i == j else 0.0 for j in range(m)] for i in range(m)]


def gauss_jordan(A: Array, B: Array) -> Array:
    """``A⁻¹B`` for (batched) arrays ``A (..., m, m)``, ``B (..., m, k)``: the elimination of
    :func:`solve` as row operations on the array, whose code grows as m rather than m³."""
    m = A.shape[-1]
    aug = jnp.concatenate([A, B], axis=-1)
    for k in range(m):
        row = aug[..., k, :] / aug[..., k, k : k + 1]
        aug = aug - aug[..., :, k : k + 1] * row[..., None, :]
        aug = aug.at[..., k, :].set(row)
    return aug[..., m:]


def cayley(X: Mat) -> Mat:
    """``cay(X) = (I − X)⁻¹(I + X) = I + 2(I − X)⁻¹X`` for skew X.

    ``I + 2(X + X²)/(1 − ½tr X²)`` for n = 3; :func:`gauss_jordan` for n = 4 (the leading
    minors of ``I − X`` are ``≥ 1``); a dense solve above. Solving for the small part
    ``(I − X)⁻¹X`` rather than for ``(I − X)⁻¹(I + X)`` keeps the result orthogonal to
    roundoff without drift (|a|² over 10⁴ Suris steps, n = 4: 1e-14 instead of 6e-13).
    """
    n = len(X)
    if n == 3:
        X2 = mm(X, X)
        c = 2.0 / (1.0 - 0.5 * (X2[0][0] + X2[1][1] + X2[2][2]))
        return [[(1.0 if i == j else 0.0) + c * (X[i][j] + X2[i][j]) for j in range(n)] for i in range(n)]
    Xa = stack_matrix(X)
    eye = jnp.broadcast_to(jnp.eye(n, dtype=Xa.dtype), Xa.shape)
    if n > _UNROLL_SOLVE:  # the unrolled elimination grows as n³ in code size and compile time
        return unstack_matrix(eye + 2.0 * jnp.linalg.solve(eye - Xa, Xa))
    return unstack_matrix(eye + 2.0 * gauss_jordan(eye - Xa, Xa))


def cayley_apply(X: Mat, v: Vec) -> Vec:
    """``cay(X) v`` for skew X: ``v + c (Xv + X(Xv))`` with ``c = 2/(1 − ½tr X²)
    = 2/(1 + Σ_{i<j} X_ij²)`` for n = 3 (two matrix-vector products instead of :func:`cayley`'s
    matrix square, and three squares for the trace), else
    ``mv(cayley(X), v)``."""
    if len(X) != 3:
        return mv(cayley(X), v)
    Xv = mv(X, v)
    XXv = mv(X, Xv)
    c = 2.0 / (1.0 + _dot([_mul(X[i][j], X[i][j]) for i in range(3) for j in range(i + 1, 3)]))
    return [v[i] + c * (Xv[i] + XXv[i]) for i in range(3)]


def cayley_matrix(X: Float[Array, "... n n"]) -> Float[Array, "... n n"]:
    """:func:`cayley` on a (batched) skew matrix array."""
    return stack_matrix(cayley(unstack_matrix(X)))


def hat3(x: Float[Array, "... 3"]) -> Float[Array, "... 3 3"]:
    """``[[0, -x3, x2], [x3, 0, -x1], [-x2, x1, 0]]``, so ``hat3(x) y = x × y`` (batched)."""
    x1, x2, x3 = unstack(x)
    z = jnp.zeros_like(x1)
    return stack_matrix([[z, -x3, x2], [x3, z, -x1], [-x2, x1, z]])


def wedge_matrix(a: Float[Array, "... n"], b: Float[Array, "... n"]) -> Float[Array, "... n n"]:
    """``a ∧ b = a bᵀ − b aᵀ`` on (batched) arrays (seed 000, sec. 4)."""
    return a[..., :, None] * b[..., None, :] - b[..., :, None] * a[..., None, :]
