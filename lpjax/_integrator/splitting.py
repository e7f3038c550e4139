"""Explicit Lie–Poisson splitting: the Strang composition of the exact coadjoint flows of the
pieces of a Hamiltonian quadratic plus linear in μ (McLachlan 1993, Reich 1994, Touma & Wisdom
1994 for the free rigid body's rotations; here on any Lie algebra).

For ``h(μ) = ½ Σ_k A_kk μ_k² + Σ_k b_k μ_k`` (``A`` diagonal in the algebra's basis) the
pieces are ``½ A_kk μ_k²`` and ``b_k μ_k``. Along the flow of ``½ c ⟨μ, e_k⟩²`` the value
``⟨μ, e_k⟩`` is constant (``⟨ad*_{e_k} μ, e_k⟩ = ⟨μ, [e_k, e_k]⟩ = 0``), so the flow is linear in
μ: ``μ(t) = exp(t c μ_k M_k) μ``, with ``M_k`` the matrix of ``μ ↦ ±ad*_{e_k} μ`` (the system's
vector field of the linear Hamiltonian ``μ_k``); a linear piece flows by ``exp(t b_k M_k)``. Each
is a coadjoint action: a Poisson map that keeps every Casimir. ``exp(θ M_k)`` is evaluated in
closed form from the spectral decomposition of the constant ``M_k``, made once, at trace time:
``Σ_λ e^{θλ} E_λ`` with real projector pairs (on so(3) this is Rodrigues' formula), or the finite
Taylor series where ``M_k`` is nilpotent (a translation of se(3)).
"""

from __future__ import annotations

import functools
from typing import ClassVar, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from .._system import AbstractFamily, AbstractLiePoissonSystem, LiePoissonFamily
from ._base import AbstractStateIsY, StepInfo, finite_result

__all__ = ["LiePoissonSplitting", "SplittableFamily"]

_TOL = 1e-12  # relative: an off-diagonal Hessian entry, or a defect of the quadratic form, above it is refused


def _generator(structure: np.ndarray, sign: int, k: int) -> np.ndarray:
    """``M_k``: the vector field of the Hamiltonian ``μ_k`` is ``M_k μ`` (``f_i = sign Σ c_ijl μ_l ∂h_j``)."""
    return sign * np.asarray(structure, np.float64)[:, k, :]


@functools.lru_cache(maxsize=256)
def _spectral(m_bytes: bytes, d: int) -> tuple:
    """``exp(θ M)`` as ``(kind, terms)``: ``("taylor", (M⁰, M¹/1!, …))`` for a nilpotent ``M``, else
    ``("spectral", ((a, b, R, S), …))`` with ``exp(θ M) = Σ e^{aθ} (cos(bθ) R − sin(bθ) S)``."""
    M = np.frombuffer(m_bytes, np.float64).reshape(d, d)
    scale = max(1.0, float(np.max(np.abs(M))))
    powers, P = [np.eye(d)], np.eye(d)
    for j in range(1, d + 1):
        P = P @ M / j
        if np.max(np.abs(P)) <= 1e-14 * scale:
            return "taylor", tuple(powers)
        powers.append(P)
    lam, V = np.linalg.eig(M)
    if np.linalg.cond(V) > 1e8:
        raise ValueError("its generator is neither diagonalizable nor nilpotent")
    W = np.linalg.inv(V)
    terms, seen = [], np.zeros(d, bool)
    for i in range(d):
        if seen[i] or lam[i].imag < -1e-12:
            continue
        same = np.abs(lam - lam[i]) <= 1e-9 * max(1.0, abs(lam[i]))
        seen |= same | (np.abs(lam - np.conj(lam[i])) <= 1e-9 * max(1.0, abs(lam[i])))
        E = V[:, same] @ W[same, :]
        a, b = float(lam[i].real), float(lam[i].imag)
        if abs(b) <= 1e-12:
            terms.append((a, 0.0, E.real, np.zeros((d, d))))
        else:
            terms.append((a, b, 2 * E.real, 2 * E.imag))
    return "spectral", tuple(terms)


def _expm_apply(kind: str, terms: tuple, theta: Scalar, mu: Float[Array, " d"]) -> Float[Array, " d"]:
    """``exp(θ M) μ`` from :func:`_spectral` (constant matrices, zero entries dropped by XLA)."""
    dtype = mu.dtype
    if kind == "taylor":
        out, t = mu, jnp.ones((), dtype)
        for P in terms[1:]:
            t = t * theta
            out = out + t * (jnp.asarray(P, dtype) @ mu)
        return out
    out = jnp.zeros_like(mu)
    for a, b, R, S in terms:
        grow = jnp.exp(a * theta) if a != 0.0 else 1.0
        term = jnp.asarray(R, dtype) @ mu
        if b != 0.0:
            term = jnp.cos(b * theta) * term - jnp.sin(b * theta) * (jnp.asarray(S, dtype) @ mu)
        out = out + grow * term
    return out


def quadratic_pieces(system: AbstractLiePoissonSystem, dtype) -> tuple:
    """``(A_diag, b)``: the diagonal of the Hessian of ``h`` and its gradient at μ = 0 (autodiff;
    traced with the system's arrays)."""
    z = jnp.zeros((system.algebra.dim,), dtype)
    return jnp.diagonal(jax.hessian(system.energy)(z)), jax.grad(system.energy)(z)


@final
class SplittableFamily(AbstractFamily):
    """Lie–Poisson systems whose Hamiltonian is quadratic plus linear in μ with a quadratic part
    diagonal in the algebra's basis, and whose pieces (``pieces``, or all) have closed-form
    flows. Decided from the concrete system (one whose arrays are traced passes: it is checked
    where they are concrete)."""

    pieces: Optional[tuple] = eqx.field(static=True, default=None)
    description: ClassVar[str] = ("Lie–Poisson systems with a Hamiltonian ½ Σ A_kk μ_k² + Σ b_k μ_k (+ const) in the "
                                  "algebra's basis")

    def mismatch(self, system) -> Optional[Exception]:
        err = LiePoissonFamily().mismatch(system)
        if err is not None:
            return err
        d = system.algebra.dim
        names = _all_pieces(d) if self.pieces is None else self.pieces
        if any(int(p[1:]) >= d for p in names):
            return ValueError(f"a piece index is out of range for dim {system.algebra.name} = {d}: {names}")
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(eqx.filter(system, eqx.is_array))):
            return None
        with jax.ensure_compile_time_eval():  # concrete, even when integrate is traced
            err = _form_defect(system, d)
        if err is not None:
            return err
        for name in names:
            try:
                _spectral(_generator(system.algebra.structure_constants, int(system.sign), int(name[1:])).tobytes(), d)
            except ValueError as e:
                return ValueError(f"no closed-form flow for piece {name} on {system.algebra.name}: {e}")
        return None


def _all_pieces(d: int) -> tuple:
    return tuple(f"q{k}" for k in range(d)) + tuple(f"l{k}" for k in range(d))


def _form_defect(system, d: int) -> Optional[Exception]:
    """Why ``system``'s Hamiltonian is not ``h(0) + bᵀμ + ½ μᵀ diag(A) μ`` (None if it is)."""
    z = jnp.zeros((d,), jnp.result_type(float))
    H = np.asarray(jax.hessian(system.energy)(z))
    b, h0 = np.asarray(jax.grad(system.energy)(z)), float(system.energy(z))
    off = float(np.max(np.abs(H - np.diag(np.diagonal(H)))))
    if off > _TOL * max(1.0, float(np.max(np.abs(H)))):
        return ValueError(f"its quadratic part is not diagonal in the basis of {system.algebra.name} (largest "
                          f"off-diagonal Hessian entry {off:.2e}); only diagonal quadratic parts split into exact "
                          "coadjoint flows here")
    rng, defect = np.random.default_rng(0), 0.0
    for _ in range(4):
        mu = rng.normal(size=d)
        want = h0 + b @ mu + 0.5 * mu @ H @ mu
        defect = max(defect, abs(float(system.energy(jnp.asarray(mu))) - want) / max(1.0, abs(want)))
    if defect > _TOL * 1e2:
        return ValueError(f"its Hamiltonian is not quadratic plus linear in μ (relative defect {defect:.2e} of its "
                          "second-order Taylor form at random μ); use GaussLegendre or Collective")
    return None


@final
class LiePoissonSplitting(AbstractStateIsY):
    r"""The explicit splitting of a Lie–Poisson system whose Hamiltonian is quadratic plus linear
    in μ, with a quadratic part diagonal in the algebra's basis (the free rigid body on so(n),
    the heavy and Lagrange tops on se(3), the Clebsch case on e(3)): one step is the symmetric
    Strang sequence ``φ¹_{dt/2} ∘ … ∘ φᴷ_{dt} ∘ … ∘ φ¹_{dt/2}`` of the pieces' exact coadjoint
    flows (module docstring). Order 2, symmetric, explicit; every Casimir is kept to roundoff and
    the energy is bounded. Higher orders: :class:`lpjax.Composition` of it.

    ``pieces``: the pieces and their order, as names ``"q<k>"`` (``½ A_kk μ_k²``) and ``"l<k>"``
    (``b_k μ_k``); the last is the middle one, taken for a whole step. Default: every quadratic
    piece then every linear piece, in the basis order, all ``2d`` of them (a piece whose
    coefficient is zero is the identity, exactly, but costs its work);
    :meth:`for_system` drops the pieces that are zero for a given system. The order of the
    pieces changes the error constant, not the order (Fassò 2003).

    A Hamiltonian that is not of this form is refused (:class:`SplittableFamily`, for a system
    with concrete arrays), naming its measured defect. A system whose arrays are traced when it is
    checked (``jax.grad`` over a system built inside the function) is not checked: the step then
    uses the Hessian's diagonal and the gradient at 0, whatever the off-diagonal entries.
    """

    pieces: Optional[tuple] = eqx.field(static=True, default=None)
    order: ClassVar[int] = 2
    symmetric: ClassVar[bool] = True

    @property
    def family(self) -> "SplittableFamily":
        return SplittableFamily(self.pieces)

    def __check_init__(self):
        if self.pieces is not None:
            if not self.pieces or not all(isinstance(p, str) and p[:1] in ("q", "l") and p[1:].isdigit()
                                          for p in self.pieces):
                raise ValueError(f'LiePoissonSplitting: pieces must be names "q<k>" or "l<k>", got {self.pieces!r}')

    @classmethod
    def for_system(cls, system: AbstractLiePoissonSystem) -> "LiePoissonSplitting":
        """The splitting with only the pieces whose coefficient is not zero for ``system``
        (concrete arrays), quadratic ones first, in the basis order."""
        LiePoissonFamily().check(system, "LiePoissonSplitting")
        with jax.ensure_compile_time_eval():
            A, b = (np.asarray(x) for x in quadratic_pieces(system, jnp.result_type(float)))
        names = tuple(f"q{k}" for k in np.flatnonzero(A)) + tuple(f"l{k}" for k in np.flatnonzero(b))
        return cls(names or ("q0",))

    def _names(self, d: int) -> tuple:
        return self.pieces if self.pieces is not None else _all_pieces(d)

    def step(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        d = system.algebra.dim
        A, b = quadratic_pieces(system, y.dtype)
        names = self._names(d)
        sequence = [(n, 0.5) for n in names[:-1]] + [(names[-1], 1.0)] + [(n, 0.5) for n in reversed(names[:-1])]
        for name, share in sequence:
            k = int(name[1:])
            kind, terms = _spectral(_generator(system.algebra.structure_constants, int(system.sign), k).tobytes(), d)
            rate = A[k] * y[k] if name[0] == "q" else b[k]
            y = _expm_apply(kind, terms, (share * dt) * rate, y)
        return y, finite_result(y), StepInfo.explicit(y.dtype)
