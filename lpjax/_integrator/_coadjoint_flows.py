"""Closed forms of the flows ``exp(θ M_k)`` of a Lie–Poisson splitting's pieces, and their Cayley
variants (:mod:`lpjax._integrator.splitting` says what they are): built once per generator at
trace time, applied as scalar arithmetic over the nonzero entries of constant matrices."""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax.numpy as jnp
import numpy as np
from jaxtyping import Scalar

__all__ = ["piece_flow", "coefficients", "speed", "apply"]


def piece_flow(algebra, sign: int, k: int) -> "_Flow":
    """The flow of piece ``k``: ``M_k``, the matrix of the vector field of the Hamiltonian ``μ_k``
    (``f_i = sign Σ c_ijl μ_l ∂h_j``), and the group matrix ``E_k`` of the basis element."""
    M = sign * np.asarray(algebra.structure_constants, np.float64)[:, k, :]
    basis = algebra.matrix_basis
    E = None if basis is None else np.ascontiguousarray(basis[k], np.float64)
    return _flow(np.ascontiguousarray(M).tobytes(), M.shape[0], None if E is None else E.tobytes(),
                 0 if E is None else E.shape[0])


class _Flow(NamedTuple):
    """``exp(θ M)`` for a constant ``M``: ``kind == "taylor"`` (nilpotent ``M``): ``mats`` are
    ``M^j/j!``, ``j ≥ 1``, and ``exp(θM) = I + Σ θ^j mats[j-1]``; ``kind == "spectral"``: ``terms``
    are ``(a, b, R, S)`` with ``exp(θM) = Σ e^{aθ} (cos(bθ) R − sin(bθ) S)``. ``cayley``: for the
    Cayley variant, ``(ω, type, multiples)`` with ``type`` "elliptic", "hyperbolic" or
    "square-zero" and each term's frequency the integer ``multiples[i]`` times ω (None: no
    Cayley variant, ``why`` says why). ``generator``: ``M`` itself (the adjoint needs ``M y'``)."""

    kind: str
    mats: tuple
    terms: tuple
    cayley: Optional[tuple]
    why: str
    generator: np.ndarray


def _clean(P: np.ndarray) -> np.ndarray:
    """``P`` with the entries that are roundoff of a zero set to zero (so that the step skips them)."""
    return np.where(np.abs(P) <= 1e-15 * max(1.0, float(np.max(np.abs(P)))), 0.0, P)


@functools.lru_cache(maxsize=256)
def _flow(m_bytes: bytes, d: int, e_bytes: Optional[bytes], m: int) -> _Flow:
    """The closed form of ``exp(θ M)`` (``M`` of shape ``d × d``), and of its Cayley variant when
    the generator's group matrix ``E`` (``m × m``, ``e_bytes``) is given (module docstring)."""
    M = np.frombuffer(m_bytes, np.float64).reshape(d, d)
    scale = max(1.0, float(np.max(np.abs(M))))
    E = None if e_bytes is None else np.frombuffer(e_bytes, np.float64).reshape(m, m)
    powers, P = [], np.eye(d)
    for j in range(1, d + 1):
        P = P @ M / j
        if np.max(np.abs(P)) <= 1e-14 * scale:
            cay, why = _cayley_nilpotent(E)
            return _Flow("taylor", tuple(_clean(Q) for Q in powers), (), cay, why, _clean(M))
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
        P = V[:, same] @ W[same, :]
        a, b = float(lam[i].real), float(lam[i].imag)
        if abs(b) <= 1e-12:
            terms.append((0.0 if abs(a) <= 1e-12 else a, 0.0, _clean(P.real), np.zeros((d, d))))
        else:
            terms.append((0.0 if abs(a) <= 1e-12 else a, b, _clean(2 * P.real), _clean(2 * P.imag)))
    cay, why = _cayley_spectral(E, terms)
    return _Flow("spectral", (), tuple(terms), cay, why, _clean(M))


def _cayley_nilpotent(E: Optional[np.ndarray]) -> tuple:
    if E is None:
        return None, "the algebra has no matrix basis (no group to take the Cayley map in)"
    if np.max(np.abs(E @ E)) > 1e-12 * max(1.0, float(np.max(np.abs(E)))) ** 2:
        return None, "its group matrix is nilpotent but E² ≠ 0, where cay(θE) is not exp(θE)"
    return (0.0, "square-zero", ()), ""  # cay(θE) = I + θE = exp(θE): the exact flow


def _cayley_spectral(E: Optional[np.ndarray], terms: list) -> tuple:
    """``cay(θE) = exp(φ(θ) E)`` when ``E³ = ∓ω² E`` (eigenvalues 0, ±iω or 0, ±ω, diagonalizable),
    with ``tan(ωφ/2) = ωθ/2`` or ``tanh(ωφ/2) = ωθ/2``; then ``Ad*`` of it is ``exp(φ M)`` and
    every frequency of ``M`` is an integer multiple of ω."""
    if E is None:
        return None, "the algebra has no matrix basis (no group to take the Cayley map in)"
    lam = np.linalg.eigvals(E)
    big = lam[np.abs(lam) > 1e-9 * max(1.0, float(np.max(np.abs(lam))))]
    if big.size == 0:
        return None, "its group matrix is nilpotent while its coadjoint generator is not"
    omega = float(np.abs(big[0]))
    elliptic = bool(np.all(np.abs(big.real) <= 1e-9 * omega))
    if not (elliptic or np.all(np.abs(big.imag) <= 1e-9 * omega)) or np.any(np.abs(np.abs(big) - omega) > 1e-9 * omega):
        return None, f"its group matrix has eigenvalues {np.round(lam, 6)} (Cayley needs 0, ±iω or 0, ±ω)"
    if np.max(np.abs(E @ E @ E + (1 if elliptic else -1) * omega ** 2 * E)) > 1e-9 * omega ** 3:
        return None, "its group matrix is not diagonalizable"
    multiples = []
    for a, b, _, _ in terms:
        rate = b if elliptic else a
        other = a if elliptic else b
        k = round(rate / omega)
        if abs(other) > 1e-9 * omega or abs(rate - k * omega) > 1e-9 * omega:
            return None, "a frequency of its coadjoint generator is not a multiple of its group matrix's"
        multiples.append(k)
    if np.max(np.abs(sum(R for _, _, R, _ in terms) - np.eye(len(terms[0][2])))) > 1e-12:
        return None, "its coadjoint generator's spectral projectors do not sum to the identity"
    return (omega, "elliptic" if elliptic else "hyperbolic", tuple(multiples)), ""


def coefficients(flow: _Flow, theta: Scalar, cayley: bool, d: int) -> tuple:
    """``(c_t, P_t)`` with ``exp(θM) = Σ c_t P_t`` (``c_t`` None: 1), or its Cayley variant."""
    if flow.kind == "taylor":  # the Cayley map of a square-zero E is its exponential
        out, t = [(None, np.eye(d))], None
        for P in flow.mats:
            t = theta if t is None else t * theta
            out.append((t, P))
        return tuple(out)
    if cayley:
        return _cayley_coefficients(flow, theta, d)
    grow = [None if a == 0.0 else jnp.exp(a * theta) for a, _, _, _ in flow.terms]
    trig = [(None, None) if b == 0.0 else (jnp.cos(b * theta), jnp.sin(b * theta)) for _, b, _, _ in flow.terms]
    out = []
    for (_, b, R, S), g, (c, s) in zip(flow.terms, grow, trig):
        out.append((_times(g, c), R))
        if s is not None:
            out.append((-_times(g, s), S))
    return tuple(out)


def _cayley_coefficients(flow: _Flow, theta: Scalar, d: int) -> tuple:
    """The Cayley variant as the identity plus ``(cos kψ − 1) R − sin kψ S`` per term (the
    projectors ``R`` sum to the identity): the rounding is then relative to the changes, not to
    1, so ``|μ|`` does not drift by a rounding of ``cos² + sin²`` each piece."""
    omega, kind, multiples = flow.cayley
    h = 0.5 * omega * theta
    out = [(None, np.eye(d))]
    if kind == "elliptic":  # cos ψ − 1 and sin ψ of ψ = ωφ, then of kψ by the angle sums
        inv = 1.0 / (1.0 + h * h)
        cm1, s1 = -2.0 * h * h * inv, 2.0 * h * inv
        powers = {1: (cm1, s1)}
        for k in range(2, max(multiples, default=0) + 1):
            c, s = powers[k - 1]
            powers[k] = (c + cm1 + c * cm1 - s * s1, s + s1 + s * cm1 + c * s1)
        for k, (_, _, R, S) in zip(multiples, flow.terms):
            if k:
                out += [(powers[k][0], R), (-powers[k][1], S)]
        return tuple(out)
    up, down = 2.0 * h / (1.0 - h), -2.0 * h / (1.0 + h)  # e^{±ψ} − 1, e^{ψ} = (1 + h)/(1 − h)
    for k, (_, _, R, _) in zip(multiples, flow.terms):
        if k:
            base = up if k > 0 else down
            e = base
            for _ in range(abs(k) - 1):
                e = e + base + e * base
            out.append((e, R))
    return tuple(out)


def speed(flow: _Flow, theta: Scalar, cayley: bool):
    """``dφ/dθ``: the variant acts by ``exp(φ(θ) M)`` (the exact flow: ``φ = θ``, None)."""
    if not cayley or flow.kind == "taylor":
        return None
    omega, kind, _ = flow.cayley
    h = 0.5 * omega * theta
    return 1.0 / (1.0 + h * h) if kind == "elliptic" else 1.0 / (1.0 - h * h)


def _times(a, b):
    return b if a is None else (a if b is None else a * b)


def apply(coefficients: tuple, x: list) -> list:
    """``Σ c_t P_t μ`` written out over the nonzero entries of the constant ``P_t``, on the
    entries of μ as scalars: arithmetic that fuses (no dot products with mostly zero matrices,
    and no array to slice between pieces)."""
    rows = []
    for i in range(len(x)):
        acc = None
        for c, P in coefficients:
            part = None
            for j in np.flatnonzero(P[i]):
                term = x[j] if P[i, j] == 1.0 else (-x[j] if P[i, j] == -1.0 else float(P[i, j]) * x[j])
                part = term if part is None else part + term
            if part is not None:
                part = part if c is None else c * part
                acc = part if acc is None else acc + part
        rows.append(jnp.zeros_like(x[i]) if acc is None else acc)
    return rows
