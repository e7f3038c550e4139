"""Implicit Gauss–Legendre Runge–Kutta methods with any number of stages.

The s-stage method has order 2s, is symplectic, and preserves every quadratic invariant
of the flow exactly (Hairer, Lubich & Wanner, *Geometric Numerical Integration*, IV.2.1),
hence every quadratic Casimir of a Lie–Poisson system. Seed 002, sec. 5.1 uses it as the
symplectic inner method of collective integrators.
"""

from __future__ import annotations

from typing import ClassVar, Literal, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jaxtyping import Array, Float, Scalar

from .. import _small as sm
from .._algebra._base import _Frozen
from .._system import AbstractSystem, AnySystem
from ._base import RESULTS, AbstractSteppedAdjoint, first_failure
from ._implicit import AbstractImplicitMethod, implicit_solve
from ._stage_adjoint import stage_linearize, stage_parameter_vjp, stage_vjp

__all__ = ["GaussLegendre", "gauss_legendre_tableau"]


def gauss_legendre_tableau(stages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Butcher tableau ``(A, b, c)`` of the s-stage Gauss–Legendre method.

    ``c`` are the Gauss nodes on [0, 1], ``b`` the quadrature weights and
    ``A_ij = ∫_0^{c_i} ℓ_j(τ) dτ`` with ``ℓ_j`` the Lagrange basis on the nodes (collocation).
    Checks ``Σ b = 1``, ``A·1 = c`` and the simplifying assumptions ``B(2s)`` and ``C(s)``.
    """
    if not isinstance(stages, (int, np.integer)) or isinstance(stages, bool) or stages < 1:
        raise ValueError(f"GaussLegendre needs an integer number of stages >= 1, got {stages!r}")
    s = int(stages)
    x, w = np.polynomial.legendre.leggauss(s)
    c = (x + 1.0) / 2.0
    b = w / 2.0
    A = np.empty((s, s))
    P = np.polynomial.Polynomial
    for j in range(s):
        others = np.delete(c, j)
        lj = P.fromroots(others) / np.prod(c[j] - others) if s > 1 else P([1.0])
        Lj = lj.integ()
        A[:, j] = Lj(c) - Lj(0.0)
    tol = 1e-12 * s
    k = np.arange(1, 2 * s + 1)
    if (
        abs(b.sum() - 1.0) > tol
        or np.max(np.abs(A.sum(1) - c)) > tol
        or np.max(np.abs(b @ c[:, None] ** (k - 1) - 1.0 / k)) > 100 * tol  # B(2s)
        or np.max(np.abs(A @ c[:, None] ** (k[:s] - 1) - c[:, None] ** k[:s] / k[:s])) > 100 * tol
    ):
        raise ValueError(f"Gauss–Legendre tableau with {s} stages is inaccurate in float64")
    return A, b, c


def _collocation_weights(c: np.ndarray, thetas, derivative: int = 0) -> np.ndarray:
    """``W[k, i] = ℓ_i(θ_k)``, ``ℓ_i`` the Lagrange basis on ``{0, c_1, …, c_s}`` belonging to
    ``c_i``: the step's collocation polynomial is ``u(t_k + θ dt) = y_k + Σ_i ℓ_i(θ) Z_i`` (it
    has degree s and passes through 0 at θ = 0 and the stage increments ``Z_i`` at ``θ = c_i``);
    with ``derivative`` = m, the m-th derivatives ``ℓ_i⁽ᵐ⁾(θ_k)``."""
    nodes = np.concatenate([[0.0], c])
    P = np.polynomial.Polynomial
    thetas = np.asarray(thetas, dtype=float)
    W = np.empty((len(thetas), len(c)))
    for i, ci in enumerate(c):
        others = np.delete(nodes, i + 1)
        W[:, i] = (P.fromroots(others) / np.prod(ci - others)).deriv(derivative)(thetas)
    return W


def _extrapolation(c: np.ndarray) -> np.ndarray:
    """``E[j, i] = ℓ_i(1 + c_j)``: weights that evaluate a step's collocation polynomial at the
    next step's nodes (HLW, *Geometric Numerical Integration*, VIII.6.1)."""
    return _collocation_weights(c, 1.0 + c)


@final
class GaussLegendreState(eqx.Module):
    """What :class:`GaussLegendre` carries between steps: the state ``y``, the predicted stage
    increments ``Z`` of the next step, and the compensation of the summed update."""

    y: Float[Array, " n"]
    Z: Float[Array, "s n"]
    compensation: Float[Array, " n"]


def _stage_fields(f, y: Float[Array, " n"], Z: Float[Array, "s n"]) -> Float[Array, "s n"]:
    """``F_i = f(y + Z_i)``, unrolled over the (few) stages."""
    return jnp.stack([f(y + Z[i]) for i in range(Z.shape[0])])


def _combine(W: np.ndarray, F: Float[Array, "s n"]) -> Float[Array, "r n"]:
    """``W @ F`` for a constant tableau ``W``, as unrolled scalar-times-vector sums.

    Tiny ``dot`` ops cost a library call each on CPU; scaled sums fuse into one kernel.
    """
    W = np.atleast_2d(W)
    rows = [sum(float(W[i, j]) * F[j] for j in range(W.shape[1])) for i in range(W.shape[0])]
    return jnp.stack(rows)


def _stage_residual(Z: Float[Array, "s n"], args) -> Float[Array, "s n"]:
    """Stage equations ``Z_i − dt Σ_j a_ij f(y + Z_j) = 0`` for the increments ``Z``."""
    system, y, dt, A = args
    return Z - dt * _combine(A, _stage_fields(system.vector_field, y, Z))


_AUTO_NEWTON_ITERS = 8  # solver="auto": the most simplified Newton updates after the fixed point
_SMALL = 32  # up to this size: unrolled Jacobian columns and Gauss–Jordan inverse
_SCALAR = 8  # up to this size: Gauss–Jordan on scalars


def _jacobian(f, x: Float[Array, " n"]) -> Float[Array, "n n"]:
    n = x.shape[0]
    if n > _SMALL:
        return jax.jacfwd(f)(x)
    eye = jnp.eye(n, dtype=x.dtype)  # column by column, unrolled: jacfwd lowers to tiny dots
    return jnp.stack([jax.jvp(f, (x,), (eye[i],))[1] for i in range(n)], axis=1)


def _newton_update(f, Y0: Float[Array, "s n"], dt: Scalar, A: np.ndarray):
    """Simplified Newton for the stage equations, one factorisation per step:
    ``(I − dt [a_ij f'(Y_j)]) ΔZ = R(Z)`` with each stage's Jacobian at its predicted value
    ``Y_j = y + Z_j⁽⁰⁾``. The matrix is then off the true Newton matrix by the predictor's error
    only, so the iteration contracts by about that error per update: two updates reach roundoff
    where the Jacobian at ``y`` (off by O(dt)) needs three or four.
    """
    s, n = Y0.shape
    Js = [_jacobian(f, Y0[j]) for j in range(s)]
    if s * n <= _SCALAR:  # scalar Gauss–Jordan (sm.solve): fuses, where array row operations do not
        J = [sm.unstack_matrix(Jj) for Jj in Js]
        M = [[(1.0 if (i, p) == (j, q) else 0.0) - dt * float(A[i, j]) * J[j][p][q]
              for j in range(s) for q in range(n)] for i in range(s) for p in range(n)]
        Minv = sm.stack_matrix(sm.solve(M, sm.identity(s * n)))
        return lambda r, _: jnp.sum(Minv * r.reshape(1, -1), axis=1).reshape(s, n)
    M = jnp.eye(s * n, dtype=Y0.dtype) - dt * jnp.block([[float(A[i, j]) * Js[j] for j in range(s)] for i in range(s)])
    if s * n <= _SMALL:
        Minv = sm.gauss_jordan(M, jnp.eye(s * n, dtype=Y0.dtype))
        return lambda r, _: jnp.sum(Minv * r.reshape(1, -1), axis=1).reshape(s, n)
    lu = jsl.lu_factor(M)
    return lambda r, _: jsl.lu_solve(lu, r.reshape(-1)).reshape(s, n)


def _newton_fallback(f, Y: Float[Array, "s n"], dt: Scalar, A: np.ndarray):
    """The simplified Newton update of ``solver="auto"``'s second phase, with each stage's
    Jacobian at ``Y_j``: as :func:`_newton_update`, but traced compactly (``jacfwd``, one
    :func:`~lpjax._small.solve_small` per update), since it is in every program and rarely runs."""
    s, n = Y.shape
    Js = [jax.jacfwd(f)(Y[j]) for j in range(s)]
    M = jnp.eye(s * n, dtype=Y.dtype) - dt * jnp.block([[float(A[i, j]) * Js[j] for j in range(s)] for i in range(s)])
    return lambda r, _: sm.solve_small(M, r.reshape(-1), pivot=True).reshape(s, n)


@final
class GaussLegendre(AbstractImplicitMethod, AbstractSteppedAdjoint):
    r"""s-stage Gauss–Legendre collocation method (order 2s), with implicit differentiation.

    The stage increments ``Z`` solve ``Z = dt (A ⊗ I) F(y + Z)`` with the implicit kernel
    (``jax.grad`` differentiates the exact root by the implicit
    function theorem instead of through the iterations), by at most ``max_iters`` iterations
    (until converged with ``early_exit=True``, the default; exactly ``max_iters`` otherwise):

    * ``solver="auto"`` (the default of :class:`lpjax.diffrax.GaussLegendre`): the fixed point
      below while it contracts; once its
      contraction estimate θ reaches ½ (after two updates) or it fails, within the same step,
      up to 8 updates of the simplified Newton iteration below, with the Jacobians at the
      current stage values (from the predictor if the fixed point overflowed). That phase is a
      ``while_loop`` that runs no iteration when the fixed point converged (under ``vmap``:
      when it did in every lane), so non-stiff steps cost what the fixed point costs; stiff
      steps (``dt ρ(f') ≳ 1``, where the fixed point diverges) converge, a linear problem in
      one Newton update. ``max_iters`` (default 30) bounds the fixed-point updates;
    * ``solver="fixed_point"`` (default): ``Z <- dt (A ⊗ I) F(y + Z)``, contracting when
      ``dt ‖f'‖ ‖A‖ < 1``; ``max_iters`` defaults to 30;
    * ``solver="newton"``: simplified Newton with one factorisation per step,
      ``(I − dt [a_ij f'(Y_j)]) ΔZ = −R(Z)``, each stage's Jacobian taken at its predicted value
      ``Y_j = y + Z_j⁽⁰⁾``; ``max_iters`` defaults to 6. The matrix is then off the exact Newton
      matrix only by the predictor's error, so two updates reach roundoff (2.00 per step on the
      rigid body at dt 0.1, against 3.61 with the Jacobian at ``y``). For ``s·n ≤ 8`` (GL2 on
      se(3), GL4 on so(3)) the matrix is inverted in closed form by scalar Gauss–Jordan
      elimination. Use it for stiff problems, where the fixed point does not contract.

    ``"auto"`` is not :func:`lpjax.integrate`'s default, by measurement on non-stiff runs
    (CPU, float64, 20 000 steps, median of 9): its second phase, even when it makes no
    iteration, costs 7–10% a step (GL4 rigid body, dt 0.1: 0.86 → 0.94 µs; GL6 1.44 → 1.57;
    GL4 heavy top, dt 0.05: 2.43 → 2.66; GL6 2.71 → 2.91) and 1.4–2× the XLA compile time.
    A zero-trip ``while_loop`` is most of it: without the phase, ``"auto"`` costs 1–5%. A run
    whose fixed point fails stops with ``RESULTS.implicit_solve_failed``, whose message
    suggests ``"auto"``.

    The fixed point, as the default and as ``"auto"``'s first phase, is chosen by measurement
    (GL4, CPU, compiled, one run, iterating to roundoff with the predictor): per step the fixed point costs 0.56–0.81 µs against 1.8 µs for Newton
    on the rigid body (dt 0.1; 6.92 updates against 2.00), 3.3–3.6 against 8.8–9.2 µs on the
    heavy top (dt 0.05; 10.0 against 2.82); with the Jacobian at ``y`` (an older variant) Newton
    also lost on the so(4) body (1.4 against 6.0 µs), the collective movable-base top (6.4
    against 19.3 µs) and the Kida vortex (1.9 against 3.5 µs). Forming and inverting the
    ``sn × sn`` matrix, not the iterations, dominates these small systems, whose fixed-point
    update costs s cheap evaluations of ``f`` (as in Hairer's ``gni_irk2``, which also
    iterates the fixed point).

    Each step starts from the previous step's collocation polynomial, extrapolated to the new
    nodes (``predictor=True``; HLW VIII.6.1, as Hairer's ``gni_irk2``); the first step starts
    from ``Z_i = c_i dt f(y)``. With ``early_exit=True`` the iteration stops as soon as it has
    converged (see :mod:`lpjax._integrator._implicit`); ``False`` always runs ``max_iters``,
    the uniform work that ``vmap``-ed GPU ensembles want. With ``compensated=True`` the update
    ``y ← y + dt Σ b_i f(Y_i)`` is summed with Kahan's compensation (as GNI codes do), so that
    roundoff in ``y`` grows like ε rather than ε√n over n steps. The method's state
    (:class:`GaussLegendreState`) carries the prediction and the compensation, so stepping on
    from a state is bit-identical to an uninterrupted run.

    A step whose updates of ``Z`` fail the mixed test ``|ΔZ| ≤ tol (1 + max(|Z|, |y|))``
    (with the contraction-rate estimate of the implicit kernel) reports
    ``RESULTS.implicit_solve_failed``; ``tol=None`` means 256 machine epsilons of
    the state's dtype (see :mod:`lpjax._integrator._implicit`). ``implicit_diff=False``
    differentiates through the unrolled iterations instead (for testing the implicit gradient).

    Preserves: all quadratic invariants (quadratic Casimirs such as |M|², |Γ|², M·Γ) to
    solver tolerance; symplectic for canonical systems, so energy errors stay bounded.
    """

    stages: int = eqx.field(static=True)
    solver: Literal["auto", "newton", "fixed_point"] = eqx.field(static=True)
    max_iters: int = eqx.field(static=True)
    tol: Optional[float] = eqx.field(static=True)
    implicit_diff: bool = eqx.field(static=True)
    early_exit: bool = eqx.field(static=True)
    predictor: bool = eqx.field(static=True)
    compensated: bool = eqx.field(static=True)
    _tableau: _Frozen = eqx.field(static=True)

    def __init__(
        self,
        stages: int = 2,
        *,
        solver: Literal["auto", "newton", "fixed_point"] = "fixed_point",
        max_iters: Optional[int] = None,
        tol: Optional[float] = None,
        implicit_diff: bool = True,
        early_exit: bool = True,
        predictor: bool = True,
        compensated: bool = True,
    ):
        A, b, c = gauss_legendre_tableau(stages)
        if solver not in ("auto", "newton", "fixed_point"):
            raise ValueError(f"solver must be 'auto', 'newton' or 'fixed_point', got {solver!r}")
        if max_iters is None:
            max_iters = 6 if solver == "newton" else 30
        self.stages = int(stages)
        self.solver = solver
        self.max_iters = max_iters
        self.tol = tol
        self.implicit_diff = bool(implicit_diff)
        self.early_exit = bool(early_exit)
        self.predictor = bool(predictor)
        self.compensated = bool(compensated)
        self._tableau = _Frozen(np.vstack([A, b[None], c[None], _extrapolation(c)]))

    family: ClassVar[AnySystem] = AnySystem()
    nonfinite_lasts: ClassVar[bool] = True
    symmetric: ClassVar[bool] = True

    @property
    def order(self) -> int:
        return 2 * self.stages

    @property
    def tableau(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(A, b, c)`` as NumPy arrays."""
        T, s = self._tableau.array, self.stages
        return T[:s], T[s], T[s + 1]

    @property
    def tableau_extrapolation(self) -> np.ndarray:
        """``E[j, i] = ℓ_i(1 + c_j)`` of :func:`_extrapolation` (the stage predictor)."""
        return self._tableau.array[self.stages + 2 :]

    def predicted_for(self, system: AbstractSystem, state: GaussLegendreState, dt: Scalar,
                      ratio: float) -> GaussLegendreState:
        """``state`` with its stage predictor for a stage of a composition: a next step of
        ``dt``, ``ratio`` times the last one (the stages alternate in size and sign; ``ratio`` is a
        number known when traced). With two stages or more, the last step's collocation
        polynomial, which the predicted increments and 0 at the step's end determine, evaluated
        at the nodes ``ratio·c`` instead of ``c``. With one stage, at every stage, the guess
        without a predictor, ``dt·c·f(y)``: the linear extrapolation made 0.6–2% more iterations
        (Kahan–Li 6 and the triple jump of GL2, rigid body and heavy top)."""
        if not self.predictor or (self.stages > 1 and ratio == 1.0):
            return state
        c = self.tableau[2]
        if self.stages == 1:
            Z = dt * jnp.asarray(c, state.y.dtype)[:, None] * system.vector_field(state.y)[None, :]
        else:
            Z = _combine(_collocation_weights(c, ratio * c), state.Z)
        return eqx.tree_at(lambda st: st.Z, state, Z)

    def init(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar) -> GaussLegendreState:
        c = jnp.asarray(self.tableau[2], y0.dtype)
        Z = dt * c[:, None] * system.vector_field(y0)[None, :]
        return GaussLegendreState(y0, Z, jnp.zeros_like(y0))

    def init_or_fail(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar):
        return self.init(system, y0, dt), RESULTS.successful

    def observe(self, system: AbstractSystem, state: GaussLegendreState) -> Float[Array, " n"]:
        return state.y

    def save(self, system: AbstractSystem, state: GaussLegendreState):
        return state.y, None

    def step(self, system: AbstractSystem, state: GaussLegendreState, dt: Scalar):
        return self.step_residuals(system, state, dt)[:3]

    def step_residuals(self, system: AbstractSystem, state: GaussLegendreState, dt: Scalar):
        Z, F, result, info = self.solve_stages(system, state, dt)
        return self.advance(state, Z, F, dt, result) + (info, Z)

    def step_linearize(self, system: AbstractSystem, dt: Scalar, state: GaussLegendreState, residuals):
        return stage_linearize(system, state, residuals)

    def step_vjp(self, system: AbstractSystem, dt: Scalar, state: GaussLegendreState, linearization, ct_state,
                 robust: bool = False):
        """The discrete adjoint of a step (:mod:`lpjax._integrator._stage_adjoint`)."""
        return stage_vjp(self, dt, state, linearization, ct_state, robust)

    def parameter_vjp(self, system: AbstractSystem, dt: Scalar, seed):
        return stage_parameter_vjp(system, dt, seed)

    def solve_stages(self, system: AbstractSystem, state: GaussLegendreState, dt: Scalar):
        """The stage increments ``Z`` of one step, the stage fields ``F_i = f(y + Z_i)``, the
        solve's result and its statistics (the first half of :meth:`step`)."""
        A, b, c = self.tableau
        y = state.y
        dtype = y.dtype
        f = system.vector_field
        Z0 = state.Z if self.predictor else dt * jnp.asarray(c, dtype)[:, None] * f(y)[None, :]
        fallback = None
        if self.solver == "newton":
            update = _newton_update(f, y[None, :] + Z0, dt, A)
        else:
            update = lambda r, _: r  # noqa: E731  (Z - R(Z) = dt A F(y + Z))
            if self.solver == "auto":
                fallback = lambda Z: _newton_fallback(f, y[None, :] + Z, dt, A)  # noqa: E731

        Z, result, info = implicit_solve(
            _stage_residual, Z0, (system, y, dt, A), update, max_iters=self.max_iters, tol=self.tol,
            implicit_diff=self.implicit_diff, early_exit=self.early_exit, scale=jnp.abs(y)[None, :],
            fallback=fallback, fallback_iters=_AUTO_NEWTON_ITERS,
        )
        return Z, _stage_fields(f, y, Z), result, info

    def advance(self, state: GaussLegendreState, Z, F, dt: Scalar, result):
        """``y ← y + dt Σ b_i F_i`` and the next step's predicted stages (the second half of
        :meth:`step`): ``(new state, result)``."""
        b = self.tableau[1]
        y = state.y
        delta = dt * _combine(b, F)[0]
        if self.compensated:  # Kahan: carry what the addition to y rounded away
            inc = delta + state.compensation
            y1 = y + inc
            comp = inc - (y1 - y)
        else:
            y1, comp = y + delta, state.compensation
        # the next step's stages: this step's collocation polynomial at 1 + c_j, less the increment
        Z1 = _combine(self.tableau_extrapolation, Z) - delta[None, :]
        return GaussLegendreState(y1, Z1, comp), first_failure(result, y1)
