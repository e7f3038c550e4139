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
Taylor series where ``M_k`` is nilpotent (a translation of se(3)). No LAPACK call, no loop: the
step is scalar arithmetic over the nonzero entries of those constant matrices.

The Cayley variant (``flow="cayley"``) replaces the group element ``exp(θ e_k)`` of a piece by
the Cayley map taken in the group, ``cay(θ E_k) = (I − θE_k/2)⁻¹ (I + θE_k/2)`` (``E_k`` the
basis element's matrix). Where ``E_k³ = −ω² E_k`` (a rotation generator: eigenvalues 0, ±iω),
``cay(θ E_k) = exp(φ E_k)`` with ``tan(ωφ/2) = ωθ/2``, so the piece acts by ``exp(φ M_k)``:
every ``cos(mωφ)``, ``sin(mωφ)`` is rational in θ (one division, no trigonometric function).
Likewise ``E_k³ = ω² E_k`` (a boost of so(2,1): ``tanh(ωφ/2) = ωθ/2``), and ``E_k² = 0`` (a
translation: ``cay = exp``). ``cay(θ E_k)`` commutes with ``e_k``, so ``μ_k`` is still constant
along the piece; the map is a coadjoint action (Poisson, every Casimir kept) and, as
``cay(−X) = cay(X)⁻¹``, symmetric: the Strang step is still symmetric and of order 2.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from .._structure import monomials, reads_traced
from .._system import AbstractFamily, AbstractLiePoissonSystem, LiePoissonFamily
from ._base import AbstractComposable, AbstractStateIsY, AbstractSteppedAdjoint, StepInfo, finite_result
from ._coadjoint_flows import apply, piece_flow
from ._coadjoint_flows import speed as flow_speed
from ._coadjoint_flows import coefficients as flow_coefficients
from ._splitting_groups import rkn_mismatch

__all__ = ["LiePoissonSplitting", "SplittableFamily"]

_FLOWS = ("auto", "exact", "cayley")
_TOL = 1e-12  # relative: an off-diagonal Hessian entry, or a defect of the quadratic form, above it is refused


def quadratic_pieces(system: AbstractLiePoissonSystem, dtype) -> tuple:
    """``(A_diag, b)``: the diagonal of the Hessian of ``h`` and its gradient at μ = 0 (autodiff;
    traced with the system's arrays)."""
    z = jnp.zeros((system.algebra.dim,), dtype)
    return jnp.diagonal(jax.hessian(system.energy)(z)), jax.grad(system.energy)(z)


@final
class SplittableFamily(AbstractFamily):
    """Lie–Poisson systems whose Hamiltonian is quadratic plus linear in μ with a quadratic part
    diagonal in the algebra's basis, whose pieces have closed-form flows, and whose nonzero
    pieces are all in ``pieces`` (None: all of them).

    Decided by value where every array the Hamiltonian reads is concrete; where one is traced
    (under ``jit``, ``vmap`` or ``grad``: the system's arrays, or one it closes over), by the
    Hamiltonian's structure, read off its jaxpr: a term whose coefficient is traced counts as
    present, whatever its value, so a traced parameter cannot hide a coupling or a piece (its
    value may be zero, its derivative is not)."""

    pieces: Optional[tuple] = eqx.field(static=True, default=None)
    flow: str = eqx.field(static=True, default="auto")
    rkn: bool = eqx.field(static=True, default=False)  # the pieces must form a kick and a drift group (_splitting_groups)
    description: ClassVar[str] = ("Lie–Poisson systems with a Hamiltonian ½ Σ A_kk μ_k² + Σ b_k μ_k (+ const) in the "
                                  "algebra's basis")

    def guard(self, system) -> None:  # decided by structure where values are traced (mismatch)
        return None

    def mismatch(self, system) -> Optional[Exception]:
        err = LiePoissonFamily().mismatch(system)
        if err is not None:
            return err
        d = system.algebra.dim
        names = _all_pieces(d) if self.pieces is None else self.pieces
        if any(int(p[1:]) >= d for p in names):
            return ValueError(f"a piece index is out of range for dim {system.algebra.name} = {d}: {names}")
        for name in names:
            try:
                flow = piece_flow(system.algebra, int(system.sign), int(name[1:]))
            except ValueError as e:
                return ValueError(f"no closed-form flow for piece {name} on {system.algebra.name}: {e}")
            if self.flow == "cayley" and flow.cayley is None:
                return ValueError(f'no Cayley variant (flow="cayley") of piece {name} on {system.algebra.name}: '
                                  f'{flow.why}; use flow="exact"')
        present = _present_pieces(system)
        if isinstance(present, Exception):
            return present
        missing = [p for p in present.names if p not in names]
        if missing:
            why = ("their coefficients depend on values traced under jit, vmap or grad, so they may not be zero "
                   "(and their derivatives are not)" if present.traced else "they are not zero for this system")
            return ValueError(f"pieces={tuple(names)} leaves out {', '.join(missing)}: {why}; a split without them "
                              "drops their terms. Include them (pieces=None has every piece; "
                              "LiePoissonSplitting.for_system(system) has those present)")
        return rkn_mismatch(system.algebra, present.names) if self.rkn else None


class _Present(NamedTuple):
    names: tuple  # the pieces whose coefficient is (or, traced, may be) nonzero, quadratic ones first
    traced: bool


def _present_pieces(system) -> "_Present | Exception":
    """The pieces of ``system``'s Hamiltonian, or why it does not split: by value where the
    Hamiltonian reads no traced value, else by its structure (:class:`SplittableFamily`)."""
    d, dtype = system.algebra.dim, jnp.result_type(float)
    if not reads_traced(system.energy, jnp.zeros((d,), dtype)):
        with jax.ensure_compile_time_eval():  # concrete, even when integrate is traced
            return _form_defect(system, d)
    m = monomials(system.energy, d, dtype)
    if m.other:
        return ValueError(f"its Hamiltonian is not quadratic plus linear in μ: it may depend otherwise on "
                          f"{_entries(m.other)} (through {', '.join(m.through)}; read from its jaxpr, the values traced "
                          "under jit, vmap or grad unknown); use GaussLegendre or Collective")
    if m.products:
        pairs = ", ".join(f"μ_{i}μ_{j}" for i, j in sorted(m.products))
        return ValueError(f"its quadratic part may not be diagonal in the basis of {system.algebra.name}: it may contain "
                          f"{pairs} (read from its jaxpr: a coefficient that depends on values traced under jit, vmap or "
                          "grad cannot be known to vanish, and its derivative does not); only diagonal quadratic parts "
                          "split into exact coadjoint flows here: use GaussLegendre, or integrate outside the transform "
                          "with concrete arrays, where the coefficients are checked by value")
    return _Present(_names(sorted(m.squares), sorted(m.linear)), True)


def _names(squares, linear) -> tuple:
    return tuple(f"q{k}" for k in squares) + tuple(f"l{k}" for k in linear)


def _entries(indices) -> str:
    return ", ".join(f"μ_{i}" for i in sorted(indices))


def _all_pieces(d: int) -> tuple:
    return tuple(f"q{k}" for k in range(d)) + tuple(f"l{k}" for k in range(d))


@eqx.filter_jit
def _taylor_data(system, mus):
    """The Hessian and gradient of ``h`` at 0, ``h(0)``, and ``h`` at the states ``mus`` (one
    compiled call, where eager autodiff took milliseconds on every call of ``integrate``)."""
    z = jnp.zeros_like(mus[0])
    return (jax.hessian(system.energy)(z), jax.grad(system.energy)(z), system.energy(z),
            jax.vmap(system.energy)(mus))


def _form_defect(system, d: int) -> "_Present | Exception":
    """Why ``system``'s Hamiltonian is not ``h(0) + bᵀμ + ½ μᵀ diag(A) μ``, or its pieces
    (``A_k`` and ``b_k`` not zero)."""
    mus = np.random.default_rng(0).normal(size=(4, d))
    H, b, h0, h = (np.asarray(x, np.float64) for x in _taylor_data(system, jnp.asarray(mus, jnp.result_type(float))))
    off = float(np.max(np.abs(H - np.diag(np.diagonal(H)))))
    if off > _TOL * max(1.0, float(np.max(np.abs(H)))):
        return ValueError(f"its quadratic part is not diagonal in the basis of {system.algebra.name} (largest "
                          f"off-diagonal Hessian entry {off:.2e}); only diagonal quadratic parts split into exact "
                          "coadjoint flows here")
    want = h0 + mus @ b + 0.5 * np.einsum("si,ij,sj->s", mus, H, mus)
    err = np.abs(h - want) / np.maximum(1.0, np.abs(want))
    defect = float(np.max(np.where(np.isfinite(err), err, np.inf)))  # a polynomial is finite everywhere
    if defect > _TOL * 1e2:
        return ValueError(f"its Hamiltonian is not quadratic plus linear in μ (relative defect {defect:.2e} of its "
                          "second-order Taylor form at random μ); use GaussLegendre or Collective")
    return _Present(_names(np.flatnonzero(np.diagonal(H)), np.flatnonzero(b)), False)


@final
class LiePoissonSplitting(AbstractStateIsY, AbstractSteppedAdjoint, AbstractComposable):
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

    ``flow``: ``"exact"`` (each piece's exact coadjoint flow), ``"cayley"`` (its Cayley variant,
    module docstring; refused on an algebra without a matrix basis, or for a generator whose
    Cayley map is not an exponential of it) or ``"auto"`` (the default: the Cayley variant for
    every piece that has one, the exact flow for the others). Why the Cayley variant by default:
    it has no trigonometric function, and in the native ensemble kernel, where a ``cos``/``sin``
    is a call into libm, a step of the rigid body's splitting costs 1.6 ns per member against
    36 ns (10⁴ members, 2 cores, float64), its Kahan–Li 6 composition 22 ns against 273 ns. Its
    error is larger, by less than it saves: on the rigid body to t = 100 (I = (1, 2, 3)) the
    splitting's error is 27× the exact flow's (dt = 0.1 and 0.02), so equal errors take a step
    √27 = 5.2 times smaller, 8 ns against 36; Kahan–Li 6's is 2.1–2.3× (dt = 0.1, 0.05); with
    Kahan–Li 8 the exact flows are at roundoff (1e-13 at dt = 0.2) where the Cayley ones are
    9e-13. On one trajectory under XLA on CPU the two cost about the same
    (``benchmarks/splitting_flows.py``).

    A Hamiltonian that is not of this form is refused before any work (:class:`SplittableFamily`),
    naming its measured defect, and so is ``pieces`` that leaves out a nonzero piece. Under
    ``jit``, ``vmap`` or ``grad`` over the system's parameters (a fit, a parameter ensemble) the
    Hamiltonian is checked by its structure, read off its jaxpr: a coupling ``c·μ_iμ_j`` with a
    traced ``c`` is refused whatever ``c`` is, since its derivative in ``c`` is not zero.
    """

    pieces: Optional[tuple] = eqx.field(static=True, default=None)
    flow: str = eqx.field(static=True, default="auto")
    # (internal) the step as Lie–Trotter steps χ (the pieces in order) and χ* (in the other) of
    # these fractions of dt in turn, χ first: (½, ½) is Strang's step; Composition's stages
    _halves: tuple = eqx.field(static=True, default=(0.5, 0.5))
    # (internal) a Runge–Kutta–Nyström scheme's: the linear pieces (the kick) first, exact flows
    _rkn: bool = eqx.field(static=True, default=False)
    order: ClassVar[int] = 2
    symmetric: ClassVar[bool] = True
    linear_seed: ClassVar[bool] = True
    batched_seed: ClassVar[bool] = True

    @property
    def family(self) -> "SplittableFamily":
        return SplittableFamily(self.pieces, self.flow, self._rkn)

    def __check_init__(self):
        if self.flow not in _FLOWS:
            raise ValueError(f'LiePoissonSplitting: flow must be one of {", ".join(map(repr, _FLOWS))}, got {self.flow!r}')
        if self.pieces is not None:
            if not self.pieces or not all(isinstance(p, str) and p[:1] in ("q", "l") and p[1:].isdigit()
                                          for p in self.pieces):
                raise ValueError(f'LiePoissonSplitting: pieces must be names "q<k>" or "l<k>", got {self.pieces!r}')
        f = self._halves
        if not f or len(f) % 2 or f != f[::-1] or abs(sum(f) - 1.0) > 1e-12:
            raise ValueError(f"LiePoissonSplitting: the step's fractions must be a palindrome of even length summing to "
                             f"1, got {f!r}")

    def composed(self, halves: tuple, rkn: bool = False) -> "LiePoissonSplitting":
        """The composition ``… ∘ χ*_{h_2 dt} ∘ χ_{h_1 dt}`` of this splitting's Lie–Trotter step
        ``χ`` (its pieces in order, each for the whole step) and its adjoint ``χ*`` (in the
        other order) as one sequence of pieces (a Strang step of ``γ dt`` is ``h = (γ/2, γ/2)``):
        where one stage ends with the piece the next begins with, the two join (the exact flow of
        a piece is a one-parameter group, ``φ_a ∘ φ_b = φ_{a+b}``; a Cayley piece is not, and joins
        only in the middle of a Strang step), so Kahan–Li 8 of a rigid body's three pieces runs 69
        flows, not 85. One step, compiled and adjoint as one (:class:`lpjax.Composition` runs it).
        ``rkn``: the linear pieces (the kick) first, then the quadratic ones (the drift), exact
        flows, for a Runge–Kutta–Nyström scheme (the groups are checked with the system)."""
        if self._halves != (0.5, 0.5):
            raise ValueError("LiePoissonSplitting.composed: this splitting is already a composition")
        if rkn and self.flow == "cayley":
            raise ValueError('LiePoissonSplitting: a Runge–Kutta–Nyström scheme needs the exact flows of its groups; '
                             'flow="cayley" is not one (use flow="auto" or "exact")')
        return LiePoissonSplitting(self.pieces, self.flow, tuple(float(h) for h in halves), rkn)

    @classmethod
    def for_system(cls, system: AbstractLiePoissonSystem, flow: str = "auto") -> "LiePoissonSplitting":
        """The splitting with only the pieces whose coefficient is not zero for ``system``,
        quadratic ones first, in the basis order; for a system with traced arrays (inside
        ``jit``, ``vmap`` or ``grad``), those whose coefficient depends on them, whatever their
        values (:class:`SplittableFamily`). Raises if ``system`` does not split."""
        LiePoissonFamily().check(system, "LiePoissonSplitting")
        present = _present_pieces(system)
        if isinstance(present, Exception):
            raise type(present)(f"LiePoissonSplitting.for_system: {present}")
        return cls(present.names or ("q0",), flow)

    def _sequence(self, d: int) -> list:
        """The pieces of each pair ``χ*_b ∘ χ_a`` of the step in turn, as ``(k, quadratic, share
        of dt, cut)`` (``cut``: the pair ends with it); a Strang pair (``a = b``) has one middle
        piece, of the two halves joined."""
        names = self.pieces if self.pieces is not None else _all_pieces(d)
        if self._rkn:
            names = [n for n in names if n[0] == "l"] + [n for n in names if n[0] == "q"]
        names = [(int(n[1:]), n[0] == "q") for n in names]
        out = []
        for a, b in zip(self._halves[::2], self._halves[1::2]):
            turn = [(*names[-1], a + b)] if a == b else [(*names[-1], a), (*names[-1], b)]
            pair = [(*n, a) for n in names[:-1]] + turn + [(*n, b) for n in reversed(names[:-1])]
            out += [(*piece, i == len(pair) - 1) for i, piece in enumerate(pair)]
        return out

    def _flows(self, system) -> list:
        """Each piece of the sequence: ``(k, quadratic, share, closed form, Cayley?, cut)``, with
        neighbours that are the same piece's exact flow joined; ``cut``: a fraction of the step
        ends with it."""
        out = []
        for k, quadratic, share, cut in self._sequence(system.algebra.dim):
            flow = piece_flow(system.algebra, int(system.sign), k)
            cayley = not self._rkn and (self.flow == "cayley" or (self.flow == "auto" and flow.cayley is not None))
            exact = not cayley or flow.kind == "taylor"  # (the Cayley map of a square-zero E is exp)
            if out and exact and out[-1][:2] == (k, quadratic) and out[-1][6]:
                _, _, joined, _, _, joined_cut, _ = out.pop()
                share, cut = share + joined, cut or joined_cut
            out.append((k, quadratic, share, flow, cayley, cut, exact))
        return [piece[:6] for piece in out]

    def _pieces(self, system, y: Float[Array, " d"], dt: Scalar, keep: bool):
        """The step on the entries of ``y``; with ``keep``, per piece ``(θ, coefficients, rate, output)``."""
        d = system.algebra.dim
        A, b = quadratic_pieces(system, y.dtype)
        x, kept = [y[j] for j in range(d)], []
        for k, quadratic, share, flow, cayley, _ in self._flows(system):
            rate = A[k] * x[k] if quadratic else b[k]
            theta = (share * dt) * rate
            coefficients = flow_coefficients(flow, theta, cayley, d)
            x = apply(coefficients, x)
            # each piece's values stored once, not recomputed for each use: XLA fuses a chain of pieces and
            # recomputes every entry for each of its uses, a cost that doubles with each piece (so(4)'s 12
            # default pieces, fused in one step: 30 ms a step, against 3.9 µs fenced)
            x = _fence(x)
            if keep:
                kept.append((theta, coefficients, rate, x))
        return x, kept

    def step(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        x, _ = self._pieces(system, y, dt, False)
        # one fusion per step: XLA's CPU code generation grows steeply with one fusion of many steps
        y = jax.lax.optimization_barrier(jnp.stack(x).astype(y.dtype))
        return y, finite_result(y), StepInfo.explicit(y.dtype)

    # ------------------------------------------------------------------ the adjoint of a step
    # Piece i maps y to y' = R(θ) y = Σ c_t(θ) P_t y with θ = τ·(A_k y_k or b_k), τ = share·dt;
    # ∂y'/∂θ = φ'(θ) M_k y' (R = exp(φ(θ) M_k)) and y_k = y'_k for a quadratic piece. So with
    # g = λ'·∂y'/∂θ: λ = R(θ)ᵀ λ' (+ g τ A_k e_k), Ā_k += g τ y_k, b̄_k += g τ, dt̄ += g·share·rate.

    def step_residuals(self, system: AbstractLiePoissonSystem, y: Float[Array, " d"], dt: Scalar):
        return (*self.step(system, y, dt), None)

    def step_linearize(self, system: AbstractLiePoissonSystem, dt: Scalar, y: Float[Array, " d"], residuals):
        """Per piece, packed in one vector: its coefficients, the nonzero entries of
        ``φ'(θ) M_k y'``, and ``y_k`` (a quadratic piece) (the step redone, batched over steps)."""
        _, kept = self._pieces(system, y, dt, True)
        out = []
        for (k, quadratic, share, flow, cayley, _), (theta, coefficients, rate, x) in zip(self._flows(system), kept):
            out += [c for c, _ in coefficients if c is not None]
            rate_of_phi = flow_speed(flow, theta, cayley)
            w = apply(((None, flow.generator),), x)
            out += [w[j] if rate_of_phi is None else rate_of_phi * w[j] for j in _rows(flow)]
            out += [x[k]] if quadratic else []
        return jnp.stack([jnp.asarray(v, y.dtype) for v in out])

    def step_vjp(self, system: AbstractLiePoissonSystem, dt: Scalar, y: Float[Array, " d"], linearization, ct_state,
                 robust: bool = False):
        lam, seed = self._adjoint(system, dt, linearization, ct_state, False)
        return lam, seed, jnp.asarray(True)

    def step_seed(self, system: AbstractLiePoissonSystem, dt: Scalar, y: Float[Array, " d"], linearization, ct_state):
        """The seed of :meth:`step_vjp`, for many steps at once (``batched_seed``): its entries
        sum the chain of λ through the pieces, which the sweep would recompute for each."""
        return self._adjoint(system, dt, linearization, ct_state, True)[1]

    def _adjoint(self, system, dt, linearization, ct_state, batched: bool):
        """``(λ, seed)``: λ through the pieces, last first, and the seed (Ā, b̄, dt̄) in one vector."""
        d = system.algebra.dim
        A, b = quadratic_pieces(system, ct_state.dtype)
        lam, ct_a, ct_b, ct_dt = [ct_state[j] for j in range(d)], [None] * d, [None] * d, None
        entries = iter(linearization[j] for j in reversed(range(len(linearization))))  # read from the end
        for i, (k, quadratic, share, flow, cayley, cut) in enumerate(reversed(self._flows(system))):
            if i and (cut or batched):  # a fraction of the step ends here, or each piece (batched)
                fenced = _fence(lam + ct_a + ct_b + [ct_dt])
                lam, ct_a, ct_b, ct_dt = fenced[:d], fenced[d:2 * d], fenced[2 * d:3 * d], fenced[3 * d]
            y_k = next(entries) if quadratic else None
            g = sum(lam[j] * w for j, w in zip(reversed(_rows(flow)), entries))
            pattern = flow_coefficients(flow, 0.0, cayley, d)
            values = iter([next(entries) for c, _ in reversed(pattern) if c is not None][::-1])
            lam = apply(tuple((None if c is None else next(values), P.T) for c, P in pattern), lam)
            if quadratic:  # θ = share·dt·A_k·y_k
                ct_dt = _plus(ct_dt, g * (share * A[k]) * y_k)
                lam[k] = lam[k] + g * (share * dt * A[k])
                ct_a[k] = _plus(ct_a[k], g * (share * dt) * y_k)
            else:  # θ = share·dt·b_k
                ct_dt = _plus(ct_dt, g * (share * b[k]))
                ct_b[k] = _plus(ct_b[k], g * (share * dt))
        zero = jnp.zeros((), ct_state.dtype)
        seed = jnp.stack([zero if v is None else v for v in ct_a + ct_b + [ct_dt]])
        return jax.lax.optimization_barrier((jnp.stack(lam).astype(ct_state.dtype), seed))

    def parameter_vjp(self, system: AbstractLiePoissonSystem, dt: Scalar, seed):
        d = system.algebra.dim
        _, vjp = eqx.filter_vjp(lambda s: quadratic_pieces(s, seed.dtype), system)
        (ct_system,) = vjp((seed[:d], seed[d:2 * d]))
        return ct_system, None, seed[2 * d]


def _rows(flow) -> np.ndarray:
    """The rows of a piece's generator ``M_k`` that are not zero (``M_k y'`` elsewhere is 0)."""
    return np.flatnonzero(np.any(flow.generator != 0, axis=1))


def _fence(values: list) -> list:
    """``values`` (scalars; None: zero) through one optimization barrier, so that XLA stores them
    once rather than recomputing them in every fusion that reads them."""
    it = iter(jax.lax.optimization_barrier(jnp.stack([v for v in values if v is not None])))
    return [None if v is None else next(it) for v in values]


def _plus(a, b):
    return b if a is None else a + b
