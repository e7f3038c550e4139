"""Local error estimates of a Gauss–Legendre step, for adaptive runs (:func:`lpjax.ensemble` with a
controller, :class:`lpjax.diffrax.GaussLegendre` under a ``PIDController``).

* ``"doubling"``: the step of size h is also taken as two half steps, started from the full
  step's collocation polynomial; Richardson extrapolation, ``2^{2s} (y_halves − y_full) /
  (2^{2s} − 1)``, estimates the full step's local error, of order ``2s + 1`` (Hairer, Nørsett &
  Wanner, *Solving ODEs I*, II.4). Three stage solves a step. Estimates made of slopes along
  the collocation polynomial vanish on linear problems (see :class:`lpjax.diffrax.GaussLegendre`);
  this one does not.
* ``"defect"``: ``h (u'(1) − f(y₁))``, the defect of the step's collocation polynomial ``u`` at
  the step's end, times h (Enright, "A new error-control for initial value solvers", Appl.
  Math. Comput. 31 (1989); the defect is zero at the nodes only). Of order ``s + 1``, not the
  step's ``2s + 1``: it bounds how well the polynomial follows the flow, not the error of
  ``y₁``, so a tolerance does not translate into an error as for ``"doubling"``; it costs one
  evaluation of ``f`` a step. It does not vanish on linear problems: ``u'`` has degree
  ``s − 1`` and ``f(u)`` degree ``s`` there.

A step whose stage solves do not converge gets an infinite error, so that a controller rejects
it. :class:`~lpjax.Collective` (with a Gauss–Legendre inner method) is estimated on its lifted
canonical state, the state its inner method steps.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from .._clebsch import canonize
from ._base import RESULTS, AbstractIntegrator
from .collective import Collective
from .gauss_legendre import GaussLegendre, GaussLegendreState, _collocation_weights, _combine

__all__ = ["halves", "step_and_error", "error_order", "adaptive_method", "error_space", "ESTIMATES"]

ESTIMATES = ("doubling", "defect")


def adaptive_method(method: AbstractIntegrator, who: str) -> None:
    """Refuse a method without an error estimate, naming those that have one."""
    inner = method.inner if isinstance(method, Collective) else method
    if not isinstance(inner, GaussLegendre):
        raise TypeError(f"{who}: adaptive steps need a local error estimate, which lpjax has for GaussLegendre(s) "
                        f"and Collective(GaussLegendre(s)) (step doubling); {type(method).__name__}"
                        f"{'(' + type(inner).__name__ + ')' if inner is not method else ''} has none: run it with "
                        "fixed steps (dt, n_steps) instead")


def _parts(method: AbstractIntegrator, system):
    """The Gauss–Legendre method and the system it steps (the canonized one for Collective)."""
    if isinstance(method, Collective):
        return method.inner, canonize(system)
    return method, system


def error_order(method: AbstractIntegrator, estimate: str = "doubling") -> int:
    """The order of the local error estimate: ``2s + 1`` (step doubling), ``s + 1`` (defect)."""
    s = (method.inner if isinstance(method, Collective) else method).stages
    return 2 * s + 1 if estimate == "doubling" else s + 1


def error_space(method: AbstractIntegrator, system, state) -> tuple:
    """``(f, y)``: the vector field and the state on which errors are measured (the lifted
    canonical ones for Collective)."""
    return _parts(method, system)[1].vector_field, state.y


def halves(method: GaussLegendre, system, state: GaussLegendreState, Z: Float[Array, "s n"], half_dt: Scalar):
    """The step whose stage increments are ``Z`` as two half steps of ``half_dt``, each started
    from the full step's collocation polynomial: the end state, and whether both stage solves
    converged."""
    s, c = method.stages, method.tableau[2]
    u = _combine(_collocation_weights(c, np.concatenate([c / 2, 0.5 + c / 2, [0.5]])), Z)  # u(θ) − y0
    a = GaussLegendreState(state.y, u[:s], state.compensation)
    Za, Fa, result_a, _ = method.solve_stages(system, a, half_dt)
    mid, result_a = method.advance(a, Za, Fa, half_dt, result_a)
    b = GaussLegendreState(mid.y, u[s:2 * s] - u[2 * s][None, :], mid.compensation)
    Zb, Fb, result_b, _ = method.solve_stages(system, b, half_dt)
    end, result_b = method.advance(b, Zb, Fb, half_dt, result_b)
    return end, (result_a == RESULTS.successful) & (result_b == RESULTS.successful)


def step_and_error(method: AbstractIntegrator, system, state, dt: Scalar, estimate: str = "doubling",
                   extrapolate: bool = False):
    """One step and its local error estimate: ``(new state, error, result, info)``, the error
    on :func:`error_space`'s state (``inf`` where a stage solve failed). With ``extrapolate``
    (local extrapolation, step doubling only) the new state is the two half steps' end, a
    composition of two steps of the method, about ``2^{2s}`` times more accurate than the full
    step, its next stages predicted from the full step."""
    inner, stepped = _parts(method, system)
    Z, F, result, info = inner.solve_stages(stepped, state, dt)
    new, result = inner.advance(state, Z, F, dt, result)
    if estimate == "defect":  # h (u'(1) − f(y1)): the collocation polynomial's defect at the step's end
        slope = _combine(_collocation_weights(inner.tableau[2], [1.0], derivative=1), Z)[0]
        ok = result == RESULTS.successful
        return new, jnp.where(ok, slope - dt * stepped.vector_field(new.y), jnp.inf), result, info
    end, halves_ok = halves(inner, stepped, state, Z, dt / 2)
    p = 2.0 ** (2 * inner.stages)
    ok = halves_ok & (result == RESULTS.successful)
    error = jnp.where(ok, (end.y - new.y) * (p / (p - 1)), jnp.inf)
    if extrapolate:
        new = GaussLegendreState(end.y, new.Z, end.compensation)
    return new, error, result, info

