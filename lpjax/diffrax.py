"""lpjax's methods as diffrax solvers (the optional extra ``lpjax[diffrax]``).

* :class:`GaussLegendre` solves any diffrax ``ODETerm`` (``diffeqsolve(ODETerm(f),
  lpjax.diffrax.GaussLegendre(2), ...)``) with constant steps (``lpjax.integrate``'s steps, at its
  cost) or a ``PIDController``. Its dense output has the step's own order.
* :class:`LiePoissonTerm` carries an lpjax system. :class:`MoserVeselov`,
  :class:`SurisLagrangeTop`, :class:`SurisClebsch` and :class:`Collective` step it with the lpjax
  method of the same name (constant steps).

``import lpjax`` never imports this module or diffrax.
"""

from __future__ import annotations

from typing import Any, ClassVar, final

try:
    import diffrax as dfx
except ImportError as e:  # pragma: no cover - exercised in a subprocess without diffrax
    raise ImportError("lpjax.diffrax needs diffrax, the optional extra: pip install 'lpjax[diffrax]'") from e

import equinox as eqx
import jax
import jax.extend.core as jax_core
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, PyTree

from . import _integrator
from ._integrator import RESULTS
from ._diffrax_dense import DenseHermite, dense_coefficients
from ._integrator._error_estimates import halves
from ._system import AbstractSystem

__all__ = ["GaussLegendre", "LiePoissonTerm", "MapSolver", "MoserVeselov", "SurisLagrangeTop", "SurisClebsch",
           "Collective"]


def _step_size(t0, t1, dt_ref, dtype):
    """``t1 − t0``, or the first step's size when they agree to 1e-9: diffrax accumulates
    ``t_{k+1} = t_k + dt``, whose differences carry rounding that, fed back into every step,
    would make a constant-step run drift from lp.integrate's (2.5e-12 after 10⁴ MV steps)."""
    h = jnp.asarray(t1 - t0, dtype)
    return jnp.where(jnp.abs(h - dt_ref) <= 1e-9 * jnp.abs(dt_ref), dt_ref, h)


def _count(stats: dict, info, result) -> dict:
    """Running totals over the accepted steps, carried in the solver state (read them with
    ``SaveAt(solver_state=True)``: ``sol.solver_state[-1]``)."""
    it = jnp.asarray(info.iterations, stats["iterations"].dtype)
    return {"iterations": stats["iterations"] + it, "max_iterations": jnp.maximum(stats["max_iterations"], it),
            "failed_steps": stats["failed_steps"] + (result != RESULTS.successful).astype(it.dtype)}


def _no_counts() -> dict:
    zero = jnp.zeros((), jnp.int64 if jax.config.jax_enable_x64 else jnp.int32)
    return {"iterations": zero, "max_iterations": zero, "failed_steps": zero}


def _real_ravel(tree) -> tuple[Array, Any]:
    """``ravel_pytree`` into a real vector: a complex state as its real parts then its imaginary
    parts, so that the solver runs in real arithmetic (no complex–float promotion anywhere, as
    under ``jax_numpy_dtype_promotion="strict"``); ``unravel`` rebuilds the complex leaves."""
    flat, unravel = ravel_pytree(tree)
    if not jnp.iscomplexobj(flat):
        return flat, unravel
    n = flat.shape[0]
    return jnp.concatenate([flat.real, flat.imag]), lambda r: unravel(jax.lax.complex(r[:n], r[n:]))


def _dfx_result(result) -> dfx.RESULTS:
    return dfx.RESULTS.where(result == RESULTS.successful, dfx.RESULTS.successful,
                             dfx.RESULTS.nonlinear_max_steps_reached)


# ----------------------------------------------------------------------------- Gauss–Legendre


def _reads_time(terms, t0, y0, args, control) -> bool:
    """Whether ``terms.vf_prod(t, y0, args, control)`` reads ``t``: data flow through its jaxpr,
    conservative (a primitive with ``t`` among its inputs, such as a nested jit, passes it to
    all its outputs)."""
    jaxpr = jax.make_jaxpr(lambda t: terms.vf_prod(t, y0, args, control))(t0).jaxpr
    live = set(jaxpr.invars)
    reads = lambda vs: any(not isinstance(v, jax_core.Literal) and v in live for v in vs)  # noqa: E731
    for eqn in jaxpr.eqns:
        if reads(eqn.invars):
            live.update(eqn.outvars)
    return reads(jaxpr.outvars)


@final
class _TermSystem(AbstractSystem):
    """A diffrax term over one step as an autonomous lpjax system with unit time: on ``x = y``
    when the term does not read ``t`` (``x' = vf_prod(t0, y, args, h)``), else on ``x = (y, t)``
    with ``x' = (vf_prod(t, y, args, h), h)``, whose time Gauss–Legendre integrates exactly, so
    that its stages sit at ``t0 + c_i h``."""

    terms: Any
    args: Any
    control: Any
    y_template: PyTree
    t0: Any
    timed: bool = eqx.field(static=True)

    def vector_field(self, x):
        _, unravel = _real_ravel(self.y_template)
        t, y = (x[-1], x[:-1]) if self.timed else (self.t0, x)
        k = _real_ravel(self.terms.vf_prod(t, unravel(y), self.args, self.control))[0].astype(x.dtype)
        return jnp.concatenate([k, jnp.asarray(self.control, x.dtype)[None]]) if self.timed else k

    def state(self, y, t):
        """``x`` at ``(y, t)``; :meth:`part` takes ``y`` back."""
        return jnp.concatenate([y, jnp.asarray(t, y.dtype)[None]]) if self.timed else y

    def part(self, x):
        return x[..., :-1] if self.timed else x

    def energy(self, x):
        raise TypeError("a diffrax term carries no energy: only its vector field is stepped")

    def casimirs(self, x):
        return jnp.zeros((0,), x.dtype)

    @property
    def casimir_names(self) -> tuple[str, ...]:
        return ()

    def check_state(self, x) -> None:
        pass


@final
class GaussLegendre(dfx.AbstractAdaptiveSolver):
    """The s-stage Gauss–Legendre method (order 2s) of :class:`lpjax.GaussLegendre` as a diffrax
    solver for any ODE term, with the same stage solve (keyword arguments as there), except that
    ``solver="auto"`` is the default here: the fixed point, and simplified Newton within the
    step where it does not contract (a step with ``h ρ(f') ≳ 1``, which a controller or a
    constant step may well take; diffrax's own order test takes h = 1 on such a problem).
    ``solver="fixed_point"`` is :func:`lpjax.integrate`'s default.

    Every step is :func:`lpjax.integrate`'s step: on ``y`` for a term that does not read ``t``
    (seen in its jaxpr), else on ``(y, t)``. Under ``ConstantStepSize`` the run equals
    ``lpjax.integrate(system, lpjax.GaussLegendre(s), ...)`` to roundoff (≤ 1e-14 a step), and
    nothing else is computed (``benchmarks/diffrax_constant.py``, 4000 steps): a step costs
    1.06–1.10× ``integrate``'s with the same stage solve on the heavy top (GL2–GL6), 1.17–1.29×
    on the rigid body, whose steps of 0.3–0.9 µs carry diffrax's fixed cost per step. Against
    ``integrate``'s default (the fixed point) the default costs 1.14–1.42× on the heavy top,
    the price of the Newton fallback even where it never runs; ``solver="fixed_point"``
    1.05–1.09× (rigid body 1.12–1.24×).

    Error estimate (``error_estimate=True``, the default), for an adaptive controller such as
    ``PIDController``: step doubling. The step is also taken as two half steps, started from
    the full step's collocation polynomial; ``2^{2s} (y_halves − y_full) / (2^{2s} − 1)``
    estimates the full step's local error (Richardson; ``error_order = 2s + 1``). Only an
    adaptive controller reads it: under ``ConstantStepSize`` XLA drops the half steps as unused,
    so ``error_estimate=False`` (no estimate, which a ``PIDController`` refuses) changes neither
    the answer nor the cost. Step doubling holds on linear problems, where every estimate made
    of slopes along the collocation polynomial ``u`` (``f(y0)``, the stage slopes, and also
    ``f(y1)``, as ``y1 = u(1)``) vanishes identically: ``f(u(θ))`` is then a polynomial of
    degree s, which any quadrature exact to that degree integrates exactly (a divided
    difference of them, used before, let through local errors of 1e-4 on DETEST C3 at a
    tolerance of 1e-8); such an estimate of lower order (HW II, IV.8, as for Radau IIA) would
    be O(h^{s+1}) against the step's O(h^{2s+1}), and would take many more steps. On DETEST's
    25 problems at rtol = atol = 1e-8 (``benchmarks/detest.py``) GL4 stays within DETEST's
    bound (at most 0.33 of it, on B4), with at most 0.22 rejected steps per accepted one (A3).
    With ``solver="fixed_point"`` GL6 rejects the steps at which the fixed point does not
    contract (DETEST B2, C2, C4: up to 0.76 rejected per accepted step, against at most 0.42
    with the default). ``local_extrapolation=True`` goes on from the two half steps
    instead (a composition of two GL steps: still symplectic and exact on quadratic
    invariants): about 2^{2s} times more accurate for the same steps under an adaptive
    controller; under constant steps it costs three stage solves a step and is not
    ``integrate``'s answer. A stage solve that does not converge gives an infinite error (an
    adaptive controller retries with a step five times smaller, and diffrax counts a rejected
    step) and ``RESULTS.nonlinear_max_steps_reached``.

    Dense output (:class:`~lpjax._diffrax_dense.DenseHermite`): over each step the
    Hermite–Birkhoff polynomial through ``y0``, ``y1``, ``h f(y0)``, ``h f(y1)`` and slopes
    inside the step, bootstrapped from the stage slopes to the step's own local error,
    O(h^{2s+1}) (HNW I, II.6; Enright, Jackson, Nørsett & Thomsen, ACM TOMS 12, 1986): besides
    ``f(y0)`` and ``f(y1)``, two evaluations of ``f`` a step for GL4, six for GL6, made only in
    runs that interpolate. On the heavy top (I = (1, 1.3, 0.7), mgl = 2) under PID at
    rtol = atol = 1e-9 to t = 50, inside steps it is within 2.5e-9 (GL4) and 5.6e-9 (GL6) of
    the exact flow from the step's start, as its steps' own errors (2.6e-9, 3.1e-9), and the
    Casimirs at dense points hold to 4.3e-9 and 5.4e-9 (before, with the half steps'
    collocation polynomials: 5e-7 inside steps, 9.5e-7 on the Casimirs). The solver state ends with running totals of the full steps'
    stage solves over the accepted steps, ``{"iterations", "max_iterations", "failed_steps"}``
    (``SaveAt(solver_state=True)``).
    """

    term_structure: ClassVar = dfx.AbstractTerm
    interpolation_cls: ClassVar = DenseHermite
    inner: _integrator.GaussLegendre
    error_estimate: bool = eqx.field(static=True)
    local_extrapolation: bool = eqx.field(static=True)

    def __init__(self, stages: int = 2, *, error_estimate: bool = True, local_extrapolation: bool = False, **options):
        if local_extrapolation and not error_estimate:
            raise ValueError("local_extrapolation=True goes on from the half steps of the error estimate: "
                             "it needs error_estimate=True")
        self.inner = _integrator.GaussLegendre(stages, **{"solver": "auto", **options})
        self.error_estimate = bool(error_estimate)
        self.local_extrapolation = bool(local_extrapolation)

    def order(self, terms):
        return 2 * self.inner.stages

    def error_order(self, terms):
        return 2 * self.inner.stages + 1

    def _system(self, terms, args, h, y0, t0) -> _TermSystem:
        """On ``(y, t)`` for a term that reads ``t``, or an empty state (nothing else to step)."""
        timed = _real_ravel(y0)[0].size == 0 or _reads_time(terms, t0, y0, args, h)
        return _TermSystem(terms, args, h, y0, t0, timed)

    def init(self, terms, t0, t1, y0, args):
        y, _ = _real_ravel(y0)
        system = self._system(terms, args, jnp.asarray(terms.contr(t0, t1), y.dtype), y0, t0)
        return self.inner.init(system, system.state(y, t0), jnp.asarray(1.0, y.dtype)), system.control, _no_counts()

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        solver_state, h_ref, counts = solver_state
        y, unravel = _real_ravel(y0)
        system = self._system(terms, args, _step_size(t0, t1, h_ref, y.dtype), y0, t0)
        one = jnp.asarray(1.0, y.dtype)
        x = system.state(y, t0)
        fresh = self.inner.init(system, x, one)
        keep = jnp.logical_not(made_jump)
        compensation = jnp.where(keep, solver_state.compensation, 0.0)
        state = _integrator.GaussLegendreState(x, jnp.where(keep, solver_state.Z, fresh.Z),
                                               compensation.at[-1].set(0.0) if system.timed else compensation)
        Z, F, result, info = self.inner.solve_stages(system, state, one)
        new, result = self.inner.advance(state, Z, F, one, result)
        y_error = None
        if self.error_estimate:  # only an adaptive controller reads it: otherwise XLA drops the halves
            half = _TermSystem(terms, args, system.control / 2, y0, t0, system.timed)
            end, halves_ok = halves(self.inner, half, state, Z, one)
            p = 2.0 ** (2 * self.inner.stages)
            ok = halves_ok & (result == RESULTS.successful)
            y_error = unravel(jnp.where(ok, system.part(end.y - new.y) * (p / (p - 1)), jnp.inf))
            if self.local_extrapolation:  # the next step's stages are predicted from the full step
                new = _integrator.GaussLegendreState(end.y, new.Z, end.compensation)
        coeffs = dense_coefficients(system.vector_field, x, new.y, F, self.inner.tableau[2])
        dense = dict(y0=y0, start=y, coeffs=system.part(coeffs))
        return (unravel(system.part(new.y)), y_error, dense, (new, h_ref, _count(counts, info, result)),
                _dfx_result(result))

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)


# ----------------------------------------------------------------------------- Lie–Poisson maps


@final
class LiePoissonTerm(dfx.ODETerm):
    """A diffrax term for an lpjax system: its vector field is ``system.vector_field`` (so any
    diffrax solver runs it), and the lpjax maps below step it with their own methods."""

    system: AbstractSystem

    def __init__(self, system: AbstractSystem):
        if not isinstance(system, AbstractSystem):
            raise TypeError(f"LiePoissonTerm needs an lpjax system (lpjax.systems...), got {type(system).__name__}")
        self.system = system
        self.vector_field = _SystemField(system)


@final
class _SystemField(eqx.Module):
    system: AbstractSystem

    def __call__(self, t, y, args):
        return self.system.vector_field(y)


@final
class MapSolver(dfx.AbstractSolver):
    """Steps a :class:`LiePoissonTerm` with an lpjax method (constant steps), so that the two
    agree to roundoff. Dense output: the cubic Hermite interpolant through the step's ends and
    the field there (local error O(h⁴), below the error of these maps of order 1–4; between
    steps it does not keep the Casimirs)."""

    term_structure: ClassVar = dfx.AbstractTerm
    interpolation_cls: ClassVar = dfx.ThirdOrderHermitePolynomialInterpolation
    method: Any

    def order(self, terms):
        return getattr(self.method, "order", None)

    def _system(self, terms) -> AbstractSystem:
        term = _unwrap(terms)
        if not isinstance(term, LiePoissonTerm):
            raise TypeError(f"{type(self.method).__name__} as a diffrax solver steps a lpjax.diffrax.LiePoissonTerm "
                            f"(it carries the lpjax system); got {type(term).__name__}")
        self.method.check_system(term.system)
        return term.system

    def init(self, terms, t0, t1, y0, args):
        dt = jnp.asarray(t1 - t0, jnp.result_type(y0))
        return self.method.init(self._system(terms), y0, dt), dt, _no_counts()

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        system = self._system(terms)
        state, dt_ref, counts = solver_state
        dt = _step_size(t0, t1, dt_ref, jnp.result_type(y0))
        state, result, info = self.method.step(system, state, dt)
        y1 = self.method.observe(system, state)
        dense = dict(y0=y0, y1=y1, k0=dt * system.vector_field(y0), k1=dt * system.vector_field(y1))
        return y1, None, dense, (state, dt_ref, _count(counts, info, result)), _dfx_result(result)

    def func(self, terms, t0, y0, args):
        return self._system(terms).vector_field(y0)


def _unwrap(terms):
    """diffrax hands solvers its terms wrapped (for the direction of time)."""
    while not isinstance(terms, LiePoissonTerm) and hasattr(terms, "term"):
        terms = terms.term
    return terms


def MoserVeselov(**options) -> MapSolver:
    """:class:`lpjax.MoserVeselov` (order 2) for a LiePoissonTerm of a free rigid body."""
    return MapSolver(_integrator.MoserVeselov(**options))


def SurisLagrangeTop(**options) -> MapSolver:
    """:class:`lpjax.SurisLagrangeTop` (order 1) for a LiePoissonTerm of a Lagrange top."""
    return MapSolver(_integrator.SurisLagrangeTop(**options))


def SurisClebsch(**options) -> MapSolver:
    """:class:`lpjax.SurisClebsch` (order 1) for a LiePoissonTerm of a Clebsch flow."""
    return MapSolver(_integrator.SurisClebsch(**options))


def Collective(inner=None, **options) -> MapSolver:
    """:class:`lpjax.Collective` (the inner method's order; GL4 by default) for a LiePoissonTerm."""
    return MapSolver(_integrator.Collective(_integrator.GaussLegendre(2) if inner is None else inner, **options))
