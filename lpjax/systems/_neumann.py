"""The Neumann system as the smallest symplectic leaf of the Clebsch flow (seed 000, sec. 7).

The flow (7.12) ``Ṁ = P ∧ (BP)``, ``Ṗ = −MP`` with Hamiltonian (7.13)
``H = ½<M, M> − ½<P, BP>`` on e(n)* (bracket (4.8)–(4.9)), restricted to the coadjoint orbit
``{M = P ∧ q, P ≠ 0}`` and written in ``P = x``, ``M = x ∧ p`` (``a ∧ b = a bᵀ − b aᵀ``), is
the Neumann system: a particle on the sphere ``|x| = 1`` in a harmonic potential (seed 000,
closing remark of sec. 7). Suris' map (7.17) keeps this leaf and is there Adler's discretization.
"""

from __future__ import annotations

import itertools
from typing import Callable, ClassVar, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._algebra import LieAlgebra, euclidean, so
from .._system import AbstractLiePoissonSystem
from ._clebsch_case import ClebschFlowHamiltonian
from .._checks import finite_array, error_if

__all__ = ["NeumannSystem", "neumann", "neumann_state", "neumann_coordinates"]


def _n_from_state_size(size: int) -> int:
    """``n`` with ``n(n − 1)/2 + n = n(n + 1)/2 == size``, or ``-1``."""
    n = int(round((np.sqrt(8 * size + 1) - 1) / 2))
    return n if n >= 2 and n * (n + 1) // 2 == size else -1


def _triples(n: int) -> np.ndarray:
    return np.array(list(itertools.combinations(range(n), 3)), dtype=int).reshape(-1, 3)


def _xp(y):
    """numpy for concrete input (no compilation for one-off checks), jax.numpy when traced."""
    return jnp if isinstance(y, jax.core.Tracer) else np


def _split(y, n: int, xp=jnp):
    d = n * (n - 1) // 2
    basis = np.asarray(so(n).matrix_basis, dtype=y.dtype)
    return xp.einsum("...i,iab->...ab", y[..., :d], basis), y[..., d:]


def _three_form(y, n: int, xp=jnp):
    """``(P ∧ M)_ijk = P_i M_jk + P_j M_ki + P_k M_ij`` for ``i < j < k`` (batched)."""
    M, P = _split(y, n, xp)
    t = _triples(n)
    i, j, k = t[:, 0], t[:, 1], t[:, 2]
    return P[..., i] * M[..., j, k] + P[..., j] * M[..., k, i] + P[..., k] * M[..., i, j]


def _leaf_defect(y, n: int, xp=jnp):
    d = n * (n - 1) // 2
    top = xp.max(xp.abs(_three_form(y, n, xp)), axis=-1, initial=0.0)
    scale = xp.linalg.norm(y[..., d:], axis=-1) * xp.linalg.norm(y[..., :d], axis=-1)
    return xp.where(scale > 0, top / xp.where(scale > 0, scale, 1.0), top)


def _coordinates(y, n: int, xp=jnp):
    M, x = _split(y, n, xp)
    p = -xp.einsum("...ij,...j->...i", M, x) / xp.sum(x * x, axis=-1, keepdims=True)
    return x, p


def _check_leaf(yv: np.ndarray, n: int, who: str, hint: str) -> None:
    d = n * (n - 1) // 2
    if not np.all(np.isfinite(yv)):
        raise ValueError(f"{who}: state must be finite; it contains NaN or inf")
    if np.any(np.all(yv[..., d:] == 0, axis=-1)):
        raise ValueError(f"{who}: state has P = 0; the Neumann leaf needs P = x ≠ 0")
    defect = float(np.max(_leaf_defect(yv, n, np)))
    if not defect <= NeumannSystem.leaf_rtol:
        raise ValueError(
            f"{who}: state is off the Neumann leaf {{M = P ∧ q, P ≠ 0}}: relative 3-form defect "
            f"max|P_i M_jk + P_j M_ki + P_k M_ij| / (|P| |M|) = {defect:.3e} > {NeumannSystem.leaf_rtol:.0e}{hint}"
        )


class _NeumannCasimirs(eqx.Module):
    """``|P|²`` and, for n ≥ 3, ``|P ∧ M|² = |P|²<M, M> − |MP|²`` (zero on the Neumann leaf)."""

    n: int = eqx.field(static=True)

    @property
    def names(self) -> tuple[str, ...]:
        return ("|P|²", "|P ∧ M|²") if self.n >= 3 else ("|P|²",)

    def __call__(self, y: Array) -> Array:
        M, P = _split(y, self.n, jnp)
        d = self.n * (self.n - 1) // 2
        p2 = jnp.dot(P, P)
        if self.n < 3:
            return p2[None]
        MP = M @ P
        return jnp.stack([p2, p2 * jnp.dot(y[:d], y[:d]) - jnp.dot(MP, MP)])


@final
class NeumannSystem(AbstractLiePoissonSystem):
    """The Clebsch flow (7.12) on e(n)* whose states must lie on the Neumann leaf.

    A Lie–Poisson system (so every integrator, and :class:`lpjax.SurisClebsch`, steps it)
    whose :meth:`check_state` also checks the leaf; build it with :func:`neumann`.
    """

    algebra: LieAlgebra
    hamiltonian: ClebschFlowHamiltonian
    sign: int = eqx.field(static=True, default=-1)
    casimir_fn: Optional[Callable[[Array], Array]] = None
    name: str = eqx.field(static=True, default="neumann")
    leaf_rtol: ClassVar[float] = 1e-8

    @property
    def n(self) -> int:
        return int(self.hamiltonian.B.shape[0])

    def leaf_defect(self, y: Float[Array, "... d"]) -> Float[Array, "..."]:
        """``max_{i<j<k} |P_i M_jk + P_j M_ki + P_k M_ij| / (|P| |M|)`` (0 when ``M = 0``).

        Zero exactly on the leaf ``{M = P ∧ q}``; works batched and under ``jit``. ``|M|`` is
        ``<M, M>^{1/2}`` (upper-triangle norm). For n = 2 every state with ``P ≠ 0`` is on the
        leaf and the defect is 0.
        """
        if not isinstance(y, jax.core.Tracer):
            y = np.asarray(y)
        return jnp.asarray(_leaf_defect(y, self.n, _xp(y)))

    def check_state(self, y: Array) -> None:
        """Shape and dtype as for any e(n)* state; for concrete ``y`` also the leaf.

        Raises ``ValueError`` unless ``y`` is finite, ``P ≠ 0`` and ``leaf_defect(y) ≤
        leaf_rtol`` (1e-8). With traced ``y`` (under ``jit``) only the shape and dtype can
        be checked; check concrete initial data before tracing.
        """
        self.check_shape(y)
        if isinstance(y, jax.core.Tracer):
            return
        who = f"{self.name} on {self.algebra.name}*"
        _check_leaf(np.asarray(y), self.n, who, "; build states with lpjax.systems.neumann_state(x, p)")


def neumann(B: ArrayLike) -> NeumannSystem:
    r"""The Neumann system on e(n)* as the smallest leaf of the flow (7.12) (seed 000, sec. 7).

    State ``y = (M, P)``, ``M`` by its upper-triangle entries (row-major, as ``so(n).vee``).
    Vector field: the Clebsch flow with ``c_jk = 1``, (7.12) ``Ṁ = P ∧ (BP)``, ``Ṗ = −MP``,
    Hamiltonian (7.13) ``H = ½<M, M> − ½<P, BP>``, the (−) Lie–Poisson bracket (4.8)–(4.9)
    of e(n); the Hamiltonian is a :class:`ClebschFlowHamiltonian`, so
    :class:`lpjax.SurisClebsch` steps it with the map (7.17) (Adler's discretization on this
    leaf).

    The leaf is ``{M = P ∧ q for some q, P ≠ 0}``, i.e. ``P ≠ 0`` and the 3-form
    ``P_i M_jk + P_j M_ki + P_k M_ij = 0`` for all ``i < j < k``; ``|P|²`` is its Casimir
    level. Through ``P = x``, ``M = x ∧ p`` with ``<x, p> = 0`` it is ``T*S`` of the sphere of
    radius ``|x|``, of dimension ``2(n − 1)`` (the seed's text says ``2n``; the rank of the
    Poisson tensor on the leaf is ``2n − 2``). The inverse is ``x = P``, ``p = −M P / |P|²``
    (:func:`neumann_coordinates`), since ``(x ∧ p) x = <p, x> x − |x|² p``.

    Equations induced on the leaf. From ``Ṗ = −MP``: ``ẋ = |x|² p − <x, p> x = |x|² p``. From
    ``Ṁ = ẋ ∧ p + x ∧ ṗ = x ∧ ṗ = x ∧ (Bx)``: ``ṗ = Bx + λ x``, and ``d<x, p>/dt = 0`` fixes
    ``λ``. On the unit sphere this is the Neumann system::

        ẋ = p,    ṗ = B x − (|p|² + <x, B x>) x,    |x| = 1, <x, p> = 0,

    with ``H = ½|p|² − ½<x, Bx>`` (on the leaf ``<M, M> = |x|²|p|² − <x, p>²``).

    The force is ``+Bx`` (potential ``−½<x, Bx>``, the seed's with ``B → −B``): the Neumann
    system with potential ``½<x, Ax>`` is ``neumann(-A)``. Its Uhlenbeck integrals, in
    ``(M, P)`` ``F_k = P_k² − Σ_{j≠k} M_jk² / (b_k − b_j)`` with ``H = −½ Σ_k b_k F_k``, are
    quadratic, so Gauss–Legendre keeps them to roundoff and :class:`lpjax.SurisClebsch` to
    O(ε) without drift (``docs/errata.md``, "The Neumann leaf").

    Arguments:
        B: the diagonal ``(b_1, …, b_n)``, n ≥ 2, finite (the integrals ``F_k`` need distinct
            ``b_k``; the system does not).
    Returns:
        a :class:`NeumannSystem` named ``"neumann"``; its ``check_state`` rejects concrete
        states off the leaf, its Casimirs are ``|P|²`` and (n ≥ 3) ``|P ∧ M|² = |P|²<M, M> −
        |MP|²``, which vanishes on the leaf.
    """
    B = jnp.asarray(B)
    if B.ndim != 1 or B.shape[0] < 2:
        raise ValueError(f"B must have shape (n,) with n >= 2 (the diagonal of B), got {B.shape}")
    B = finite_array(B, B.shape, "B")
    n = B.shape[0]
    return NeumannSystem(euclidean(n), ClebschFlowHamiltonian(B), casimir_fn=_NeumannCasimirs(n))


def _float_vector(v: ArrayLike, name: str, xp=jnp) -> Array:
    """``v`` as a floating vector of shape (n,) (NumPy for concrete checks with ``xp=np``)."""
    v = xp.asarray(v)
    if not xp.issubdtype(v.dtype, xp.floating):
        v = v.astype(jnp.result_type(float))
    if v.ndim != 1:
        raise ValueError(f"{name} must have shape (n,), got {v.shape}")
    return v


def neumann_state(x: ArrayLike, p: ArrayLike, tol: float = 1e-9) -> Float[Array, " d"]:
    """``y = (x ∧ p, x)`` on e(n)* for a point ``(x, p)`` of ``T*S`` (seed 000, sec. 7).

    Accepts only the Neumann phase space proper: ``x``, ``p`` finite of the same shape
    ``(n,)``, n ≥ 2, ``| |x|² − 1 | ≤ tol`` and ``|<x, p>| ≤ tol · max(1, |p|)``; anything else
    raises ``ValueError`` (under ``jit``, at run time, with the same message). Project first if needed:
    ``x / |x|``, then ``p − <x, p> x``. Then ``neumann_coordinates(neumann_state(x, p)) == (x,
    p)`` up to roundoff. (The leaf itself also holds ``|P| ≠ 1``: spheres of other radii.)
    """
    if not (isinstance(x, jax.core.Tracer) or isinstance(p, jax.core.Tracer)):
        xv, pv = _float_vector(x, "x", np), _float_vector(p, "p", np)
        n = xv.shape[0]
        if n < 2:
            raise ValueError(f"x must have shape (n,) with n >= 2, got {xv.shape}")
        if pv.shape != (n,):
            raise ValueError(f"p must have shape ({n},) like x, got {pv.shape}")
        for v, name in ((xv, "x"), (pv, "p")):
            if not np.all(np.isfinite(v)):
                raise ValueError(f"{name} must be finite, got {v}")
        r2, xdotp = float(xv @ xv), float(xv @ pv)
        if not abs(r2 - 1) <= tol:
            raise ValueError(f"x must lie on the unit sphere, |x|² = 1 (to {tol:g}); got |x|² = {r2!r}")
        if not abs(xdotp) <= tol * max(1.0, float(np.linalg.norm(pv))):
            raise ValueError(
                f"p must be tangent to the sphere at x, <x, p> = 0 (to {tol:g}·max(1, |p|)); got {xdotp!r}"
            )
        return jnp.asarray(_state(xv, pv, np))
    x = _float_vector(x, "x")
    n = x.shape[0]
    if n < 2:
        raise ValueError(f"x must have shape (n,) with n >= 2, got {x.shape}")
    x = finite_array(x, (n,), "x")
    p = finite_array(_float_vector(p, "p"), (n,), "p")
    bad_r = jnp.abs(jnp.dot(x, x) - 1) > tol
    bad_t = jnp.abs(jnp.dot(x, p)) > tol * jnp.maximum(1.0, jnp.linalg.norm(p))
    x = error_if(x, bad_r, "x must lie on the unit sphere: |x|² = 1")
    p = error_if(p, bad_t, "p must be tangent to the sphere: <x, p> = 0")
    return _state(x, p, jnp)


def _state(x, p, xp):
    n = x.shape[0]
    W = xp.outer(x, p) - xp.outer(p, x)
    return xp.concatenate([W[np.triu_indices(n, 1)], x])


def neumann_coordinates(y: ArrayLike, check: bool = True) -> tuple[Float[Array, "... n"], Float[Array, "... n"]]:
    """``(x, p)`` of a Neumann-leaf state ``y = (M, P)`` (or a batch ``(..., d)``): ``x = P``,
    ``p = −M P / |P|²``.

    ``p`` is the unique vector with ``M = x ∧ p`` and ``<x, p> = 0``. With ``check=True``
    (default) a concrete ``y`` must have a floating dtype, length ``n(n + 1)/2`` (n ≥ 2),
    finite entries, ``P ≠ 0`` and a relative 3-form defect ≤ 1e-8 (as
    :meth:`NeumannSystem.check_state`), else ``ValueError``. ``check=False`` skips the value
    checks (not the shape): ``x ∧ p`` is then the orthogonal projection of ``M`` onto
    ``{x ∧ q}`` (``P`` kept), e.g. for states of integrators that leave the leaf.
    """
    if not isinstance(y, jax.core.Tracer):
        y = np.asarray(y)
    if y.ndim < 1 or not jnp.issubdtype(y.dtype, jnp.floating):
        raise ValueError(f"y must be a floating array of shape (..., n(n+1)/2), got {y.shape} {y.dtype}")
    n = _n_from_state_size(y.shape[-1])
    if n < 0:
        raise ValueError(f"y must have last axis of length n(n+1)/2 with n >= 2 (3, 6, 10, ...), got {y.shape[-1]}")
    if isinstance(y, jax.core.Tracer):
        return _coordinates(y, n, jnp)
    if check:
        _check_leaf(y, n, "y", " (pass check=False to project)")
    x, p = _coordinates(y, n, np)
    return jnp.asarray(x), jnp.asarray(p)
