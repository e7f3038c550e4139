"""Finite-dimensional real Lie algebras given by structure constants."""

from __future__ import annotations

import functools
from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._checks import bracket_sign, error_if

__all__ = ["LieAlgebra"]


def _check_structure_constants(c: np.ndarray, name: str, atol: float) -> None:
    """Antisymmetry ``c_ij^k = -c_ji^k`` and the Jacobi identity, eq. (5) of seed 002."""
    if c.ndim != 3 or not (c.shape[0] == c.shape[1] == c.shape[2]) or c.shape[0] < 1:
        raise ValueError(
            f"{name}: structure constants must have shape (n, n, n) with n >= 1, got {c.shape}"
        )
    if not np.all(np.isfinite(c)):
        raise ValueError(f"{name}: structure constants must be finite")
    scale = max(1.0, float(np.max(np.abs(c))))
    anti = np.max(np.abs(c + np.swapaxes(c, 0, 1)))
    if anti > atol * scale:
        raise ValueError(
            f"{name}: structure constants are not antisymmetric, "
            f"max |c_ij^k + c_ji^k| = {anti:.3e}"
        )
    # [[E_i, E_j], E_k] + cyclic = 0  <=>  c_ij^l c_lk^m + c_jk^l c_li^m + c_ki^l c_lj^m = 0
    t = np.einsum("ijl,lkm->ijkm", c, c)
    jac = t + np.transpose(t, (1, 2, 0, 3)) + np.transpose(t, (2, 0, 1, 3))
    err = np.max(np.abs(jac)) if jac.size else 0.0
    if err > atol * scale * scale:
        i, j, k, m = np.unravel_index(np.argmax(np.abs(jac)), jac.shape)
        raise ValueError(
            f"{name}: structure constants violate the Jacobi identity: "
            f"max |[[E_i,E_j],E_k] + cyclic| = {err:.3e} at (i, j, k) = ({i}, {j}, {k})"
        )


class _Frozen:
    """A hashable, read-only wrapper for a NumPy array held in a static field.

    Lie algebras are pure constants: keeping them static means a system that holds one
    contributes no array leaves to ``jit``/``vmap`` and its constants fold at trace time.
    """

    __slots__ = ("array", "_key")

    def __init__(self, array: np.ndarray):
        a = np.array(array, dtype=np.float64)
        a.setflags(write=False)
        self.array = a
        self._key = (a.shape, a.tobytes())

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Frozen) and self._key == other._key


def semidirect_constants(c: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Structure constants of 𝔤 ⋉ V for ``ρ(E_i) = rho[i]``, coordinates (ξ, u)."""
    n, m = c.shape[0], rho.shape[1]
    out = np.zeros((n + m, n + m, n + m))
    out[:n, :n, :n] = c
    # [E_i, e_a] = ρ(E_i) e_a = ρ_i[b, a] e_b
    out[:n, n:, n:] = np.transpose(rho, (0, 2, 1))
    out[n:, :n, n:] = -np.transpose(rho, (2, 0, 1))
    return out


def defining_blocks(algebra: "LieAlgebra", k: int) -> np.ndarray:
    """``ρ(E_i)`` for k copies of the defining representation of a skew matrix algebra."""
    n = algebra.so_n
    blocks = np.zeros((algebra.dim, k * n, k * n))
    for a in range(k):
        blocks[:, a * n : (a + 1) * n, a * n : (a + 1) * n] = algebra.matrix_basis
    return blocks


@functools.lru_cache(maxsize=64)
def _skew_basis_size(frozen: _Frozen) -> Optional[int]:
    basis = frozen.array
    d, n = basis.shape[0], basis.shape[-1]
    skew = np.array_equal(basis, -np.swapaxes(basis, 1, 2))
    return n if skew and d == n * (n - 1) // 2 else None


def _row_echelon(V: np.ndarray) -> np.ndarray:
    """The reduced row echelon form of the rows ``V`` (a basis of a subspace): the same span,
    in a basis fixed by the span alone, not by the SVD that found it (sparse and readable:
    for so(4), ``|μ|²`` and the Pfaffian's quadratic form apart)."""
    V = np.array(V, dtype=np.float64)
    tol = 1e-10 * max(1.0, float(np.max(np.abs(V), initial=0.0)))
    row = 0
    for col in range(V.shape[1]):
        if row == V.shape[0]:
            break
        p = row + int(np.argmax(np.abs(V[row:, col])))
        if abs(V[p, col]) <= tol:
            continue
        V[[row, p]] = V[[p, row]]
        V[row] /= V[row, col]
        for r in range(V.shape[0]):
            if r != row:
                V[r] -= V[r, col] * V[row]
        row += 1
    V[np.abs(V) <= tol] = 0.0
    return V


@functools.lru_cache(maxsize=64)
def _quadratic_casimirs(frozen: _Frozen) -> np.ndarray:
    c = frozen.array
    n = c.shape[0]
    iu = np.triu_indices(n)
    # parametrise symmetric S by its upper triangle; build the linear map S -> T_ikl
    cols = []
    for a, b in zip(*iu):
        S = np.zeros((n, n))
        S[a, b] = S[b, a] = 1.0
        T = np.einsum("ijk,jl->ikl", c, S)
        cols.append((T + np.swapaxes(T, 1, 2)).ravel())
    A = np.stack(cols, axis=1)
    _, sv, vt = np.linalg.svd(A)
    tol = 1e-10 * max(1.0, sv[0] if sv.size else 1.0)
    rank = int(np.sum(sv > tol))
    out = []
    for v in _row_echelon(vt[rank:]):
        S = np.zeros((n, n))
        S[iu] = v
        S = S + S.T - np.diag(np.diag(S))
        out.append(S / np.linalg.norm(S))
    arr = np.array(out).reshape(len(out), n, n)
    arr.setflags(write=False)
    return arr


class LieAlgebra(eqx.Module):
    r"""A real Lie algebra 𝔤 with basis ``E_i`` and ``[E_i, E_j] = c_ij^k E_k``.

    Coordinates: ``x = x^i E_i`` for elements of 𝔤 and ``mu = mu_i E^i_*`` for the dual
    basis of 𝔤*, so ``<mu, x> = mu_i x^i``. Conventions follow seed 002, sec. 2.1:

    * ``bracket(x, y)^k = c_ij^k x^i y^j``;
    * ``ad_star(x, mu)_j = c_ij^k x^i mu_k``, i.e. ``<ad*_x mu, y> = <mu, [x, y]>``;
    * the (±) Lie–Poisson tensor ``Π_ij(mu) = ± c_ij^k mu_k`` (seed 002, eqs (1), (9)),
      whose Hamiltonian vector field is ``mu_dot = Π(mu) ∇h = ∓ ad*_{∇h} mu``.

    Construct with the structure constants; antisymmetry and the Jacobi identity are
    checked and a ``ValueError`` names the violation. ``matrix_basis`` (shape
    ``(n, m, m)``), when given, enables :meth:`hat` and :meth:`vee` and must reproduce
    the structure constants as matrix commutators.
    """

    _c_frozen: _Frozen = eqx.field(static=True)
    _basis_frozen: Optional[_Frozen] = eqx.field(static=True)
    _vee_frozen: Optional[_Frozen] = eqx.field(static=True)
    name: str = eqx.field(static=True)
    _semidirect: Optional[tuple["LieAlgebra", int]] = eqx.field(static=True)

    def __init__(
        self,
        structure_constants: ArrayLike,
        *,
        name: str = "LieAlgebra",
        matrix_basis: Optional[ArrayLike] = None,
        atol: float = 1e-10,
        semidirect_of: Optional[tuple["LieAlgebra", int]] = None,
    ):
        c = np.asarray(structure_constants, dtype=np.float64)
        _check_structure_constants(c, name, atol)
        self._c_frozen = _Frozen(c)
        self.name = name
        if semidirect_of is not None:
            g, k = semidirect_of
            expect = semidirect_constants(g.structure_constants, defining_blocks(g, k)) if g.so_n else None
            if expect is None or expect.shape != c.shape or not np.array_equal(expect, c):
                raise ValueError(f"{name}: semidirect_of does not match the structure constants")
        self._semidirect = semidirect_of
        if matrix_basis is None:
            self._basis_frozen = None
            self._vee_frozen = None
        else:
            basis = np.asarray(matrix_basis, dtype=np.float64)
            n = c.shape[0]
            if basis.ndim != 3 or basis.shape[0] != n or basis.shape[1] != basis.shape[2]:
                raise ValueError(
                    f"{name}: matrix_basis must have shape ({n}, m, m), got {basis.shape}"
                )
            comm = np.einsum("iab,jbc->ijac", basis, basis)
            comm = comm - np.swapaxes(comm, 0, 1)
            expect = np.einsum("ijk,kab->ijab", c, basis)
            err = np.max(np.abs(comm - expect))
            if err > atol * max(1.0, float(np.max(np.abs(c)))):
                raise ValueError(
                    f"{name}: matrix_basis commutators differ from the structure constants "
                    f"by {err:.3e}"
                )
            flat = basis.reshape(n, -1)
            if np.linalg.matrix_rank(flat) < n:
                raise ValueError(f"{name}: matrix_basis is not linearly independent")
            self._basis_frozen = _Frozen(basis)
            gram = flat @ flat.T
            if np.array_equal(gram, np.diag(np.diag(gram))):
                # orthogonal basis (so(n), se(3), e(n), so(2,1)): an exact left inverse, so
                # hat/vee round trips carry no systematic rounding bias (SVD's pinv does)
                vee_map = flat.T / np.diag(gram)[None, :]
            else:
                vee_map = np.linalg.pinv(flat)
            self._vee_frozen = _Frozen(vee_map)  # (m*m, n)

    # ------------------------------------------------------------------ basics
    @property
    def structure_constants(self) -> np.ndarray:
        """``c[i, j, k] = c_ij^k`` as a read-only NumPy array."""
        return self._c_frozen.array

    @property
    def matrix_basis(self) -> Optional[np.ndarray]:
        """Basis matrices ``E_i`` (shape ``(n, m, m)``), or ``None``."""
        return None if self._basis_frozen is None else self._basis_frozen.array

    @property
    def vee_matrix(self) -> Optional[np.ndarray]:
        """The constant (m·m, n) matrix with ``vee(X) = X.ravel() @ vee_matrix``, or None."""
        return None if self._vee_frozen is None else self._vee_frozen.array

    @property
    def dim(self) -> int:
        return self.structure_constants.shape[0]

    @property
    def so_n(self) -> Optional[int]:
        """``n`` if the matrix basis is a basis of so(n) (skew n × n matrices), else ``None``."""
        return None if self._basis_frozen is None else _skew_basis_size(self._basis_frozen)

    @property
    def rotation_structure(self) -> Optional[tuple["LieAlgebra", int]]:
        """``(𝔨, k)`` if this algebra is ``𝔨 ⋉ (Rⁿ)^k`` with ``𝔨`` = so(n) in a skew matrix basis,
        acting on each of the ``k`` vectors by the defining representation, in coordinates
        ``(ξ, u_1, …, u_k)``; ``(self, 0)`` for so(n) itself; otherwise ``None``.

        This is the structural fact that SO(n)-based methods (Moser–Veselov, Suris, DEP)
        dispatch on: so(3), so(n), se(3), e(n) and se(3) × R³ have it, so(2,1) does not. Any
        skew basis of so(n) counts; :func:`lpjax._algebra.rotation_frame` says how the closed
        SO(n) formulas reach it.
        """
        if self.so_n is not None:
            return (self, 0)
        return self._semidirect

    def _c(self, dtype) -> Array:
        return jnp.asarray(self.structure_constants, dtype=dtype)

    def bracket(self, x: Float[Array, "... n"], y: Float[Array, "... n"]) -> Float[Array, "... n"]:
        """``[x, y]^k = c_ij^k x^i y^j``."""
        x, y = jnp.asarray(x), jnp.asarray(y)
        dt = jnp.result_type(x, y, jnp.float32)
        return jnp.einsum("...i,...j,ijk->...k", x, y, self._c(dt))

    def ad(self, x: Float[Array, "... n"]) -> Float[Array, "... n n"]:
        """Matrix of ``ad_x``: ``ad(x) @ y == bracket(x, y)``."""
        x = jnp.asarray(x)
        return jnp.einsum("...i,ijk->...kj", x, self._c(jnp.result_type(x, jnp.float32)))

    def ad_star(self, x: Float[Array, "... n"], mu: Float[Array, "... n"]) -> Float[Array, "... n"]:
        """``(ad*_x mu)_j = c_ij^k x^i mu_k``, so that ``<ad*_x mu, y> = <mu, [x, y]>``."""
        x, mu = jnp.asarray(x), jnp.asarray(mu)
        dt = jnp.result_type(x, mu, jnp.float32)
        return jnp.einsum("...i,...k,ijk->...j", x, mu, self._c(dt))

    def killing_form(self) -> np.ndarray:
        """Killing form ``K_ab = tr(ad_{E_a} ad_{E_b}) = c_ai^k c_bk^i`` as an (n, n) array."""
        c = self.structure_constants
        return np.einsum("aik,bki->ab", c, c)

    def killing(self, x: Float[Array, "... n"], y: Float[Array, "... n"]) -> Float[Array, "..."]:
        """``κ(x, y) = tr(ad_x ad_y)``."""
        x, y = jnp.asarray(x), jnp.asarray(y)
        K = jnp.asarray(self.killing_form(), dtype=jnp.result_type(x, y, jnp.float32))
        return jnp.einsum("...a,ab,...b->...", x, K, y)

    def quadratic_casimirs(self) -> np.ndarray:
        """Symmetric matrices ``S`` (shape ``(r, n, n)``) with ``C(mu) = ½ muᵀ S mu`` a Casimir.

        ``C`` is a Casimir of either Lie–Poisson bracket iff ``c_ij^k mu_k (S mu)_j = 0`` for
        all ``mu``, i.e. ``c_ij^k S_jl + c_ij^l S_jk = 0``: a linear null space, computed once
        by SVD and cached. The basis is the null space's reduced row echelon form (fixed by the
        algebra alone, and sparse), each ``S`` of unit Frobenius norm.
        """
        return _quadratic_casimirs(self._c_frozen).copy()

    def quadratic_casimir_names(self) -> tuple[str, ...]:
        """One name per :meth:`quadratic_casimirs`, saying what each is:
        ``"quadratic 1: ½ μᵀS₁μ = 0.2887 μ1² + …"``, the polynomial to four digits."""
        names = []
        for r, S in enumerate(self.quadratic_casimirs()):
            terms = [(0.5 * S[i, i] if i == j else S[i, j], f"μ{i + 1}²" if i == j else f"μ{i + 1}μ{j + 1}")
                     for i in range(self.dim) for j in range(i, self.dim)]
            poly = " ".join(f"{'−' if c < 0 else '+'} {abs(c):.4g} {m}" for c, m in terms if abs(c) > 1e-12)
            poly = poly[2:] if poly.startswith("+ ") else "−" + poly[2:]
            names.append(f"quadratic {r + 1}: ½ μᵀS{r + 1}μ = {poly}")
        return tuple(names)

    def poisson_tensor(self, mu: Float[Array, "... n"], sign: int = 1) -> Float[Array, "... n n"]:
        """(±) Lie–Poisson tensor ``Π_ij = ± c_ij^k mu_k`` (seed 002, eqs (1) and (9))."""
        sign = bracket_sign(sign)
        mu = jnp.asarray(mu)
        return sign * jnp.einsum("...k,ijk->...ij", mu, self._c(jnp.result_type(mu, jnp.float32)))

    # ---------------------------------------------------------------- matrices
    def _require_matrices(self) -> np.ndarray:
        if self.matrix_basis is None:
            raise ValueError(f"{self.name} has no matrix representation; hat/vee are unavailable")
        return self.matrix_basis

    def hat(self, x: Float[Array, "... n"]) -> Float[Array, "... m m"]:
        """Coordinates -> matrix, ``hat(x) = x^i E_i``."""
        basis = self._require_matrices()
        x = jnp.asarray(x)
        if x.shape[-1:] != (self.dim,):
            raise ValueError(f"{self.name}.hat expects shape (..., {self.dim}), got {x.shape}")
        return jnp.einsum("...i,iab->...ab", x, jnp.asarray(basis, jnp.result_type(x, jnp.float32)))

    def vee(self, X: Float[Array, "... m m"], *, rtol: float = 1e-6, check: bool = True) -> Float[Array, "... n"]:
        """Matrix -> coordinates, the inverse of :meth:`hat`.

        Raises ``ValueError`` (under ``jit``, at run time, with the same message) when ``X`` is not in
        the span of the basis, e.g. a non-skew matrix for so(n), to relative tolerance ``rtol``.
        ``check=False`` skips the test and returns the least-squares coordinates (the
        projection onto the algebra), e.g. inside solvers.
        """
        basis = self._require_matrices()
        m = basis.shape[-1]
        X = jnp.asarray(X)
        if X.shape[-2:] != (m, m):
            raise ValueError(f"{self.name}.vee expects shape (..., {m}, {m}), got {X.shape}")
        dt = jnp.result_type(X, jnp.float32)
        x = X.reshape(X.shape[:-2] + (m * m,)) @ jnp.asarray(self._vee_frozen.array, dt)
        if not check:
            return x
        resid = jnp.max(jnp.abs(self.hat(x) - X), initial=0.0)
        bad = resid > rtol * jnp.maximum(1.0, jnp.max(jnp.abs(X), initial=0.0))
        msg = (
            f"{self.name}.vee: matrix is not in the Lie algebra "
            "(for so(n): not skew-symmetric)"
        )
        if not isinstance(bad, jax.core.Tracer):
            if bool(bad):
                raise ValueError(f"{msg}; residual {float(resid):.3e}")
            return x
        return error_if(x, bad, msg)

    def __repr__(self) -> str:
        return f"LieAlgebra({self.name}, dim={self.dim})"

