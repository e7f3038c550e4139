"""Design: discounted cost functionals through :func:`lpjax.integrate`, and gain tuning with optax.

A cost is a plain differentiable function of the system's parameters; a constrained gain is
reparameterised (kept inside its stable range by a sigmoid), never clipped. The standard problem
is the heavy top on a movable base of seed 002, sec. 5.3: :func:`upright_top_cost` and
:func:`tune_upright_top`.
"""

from __future__ import annotations

import functools
import math
import sys
from typing import Callable, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Float, Scalar
from tqdm.auto import tqdm

from ._checks import finite_scalar, is_traced
from ._integrate import integrate
from ._integrator import RESULTS, AbstractIntegrator, GaussLegendre
from ._system import AbstractSystem
from .systems import movable_base_mu, movable_base_top
from .systems._movable_base import MovableBaseHamiltonian

__all__ = [
    "discounted_cost", "upright_top_cost", "upright_top_running_cost", "upright_top_initial_states",
    "tune_upright_top", "TuneResult", "UPRIGHT_TOP_TABLE",
]


def _grid_steps(T: float, dt: float, who: str) -> int:
    for v, name in ((T, "T"), (dt, "dt")):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not (
            math.isfinite(v) and v > 0
        ):
            raise ValueError(f"{who}: {name} must be a finite float > 0 (concrete, it sets the number of steps), got {v!r}")
    n = round(T / dt)
    if n < 1 or abs(T / dt - n) > 1e-9 * max(n, 1):
        raise ValueError(f"{who}: T = {T!r} must be a whole number of steps dt = {dt!r} (T/dt = {T / dt!r})")
    return int(n)


@eqx.filter_jit
def _discounted_cost(system, method, mu0s, running_cost, tau, dt, n_steps: int, adjoint: str):
    def one(mu0):
        sol = integrate(system, method, mu0, dt, n_steps, throw=False, adjoint=adjoint)
        w = jnp.exp(-sol.ts / tau) / tau
        f = w * jax.vmap(lambda y: running_cost(system, y))(sol.ys)
        return dt * (jnp.sum(f) - 0.5 * (f[0] + f[-1])), sol.result

    costs, results = jax.vmap(one)(mu0s)
    failed = jnp.any(results != RESULTS.successful)
    return eqx.error_if(jnp.mean(costs), failed, "discounted_cost: the integration failed for an initial state "
                        "(an implicit solve did not converge: reduce dt)")


def discounted_cost(
    system: AbstractSystem,
    method: AbstractIntegrator,
    mu0s: Float[ArrayLike, "K n"],
    running_cost: Callable[[AbstractSystem, Array], Scalar],
    *,
    T: float,
    tau: ArrayLike,
    dt: float,
    adjoint: str = "auto",
) -> Scalar:
    """``(1/K) Σ_k ∫₀ᵀ e^(−t/τ)/τ · c(μ_k(t)) dt`` over the initial states ``mu0s`` (shape ``(K, n)``).

    ``running_cost(system, mu)`` is ``c``: a function of the system (so that it may use the
    system's parameters, and stays differentiable in them) and of one state; pass a module-level
    function, which is hashable, so that calls reuse the compiled code. Each trajectory runs
    ``T/dt`` steps of ``method`` (``T`` must be a whole number of steps) and the integral is the
    trapezoid rule on the steps. The initial states are ``vmap``-ed, the whole is compiled once
    per configuration (``eqx.filter_jit``) and differentiable with respect to any array in
    ``system`` (and ``mu0s``, ``tau``): ``adjoint`` is passed to :func:`lpjax.integrate` (use
    ``"direct"`` for forward mode). A failed integration raises (``EquinoxRuntimeError``).
    """
    n = _grid_steps(T, dt, "discounted_cost")
    mu0s = jnp.asarray(mu0s)
    if mu0s.ndim != 2:
        raise ValueError(f"discounted_cost: mu0s must have shape (K, n) (K initial states), got {mu0s.shape}")
    if not callable(running_cost):
        raise TypeError(f"discounted_cost: running_cost must be callable as running_cost(system, mu), got {running_cost!r}")
    tau = finite_scalar(tau, "tau")
    if not is_traced(tau) and not float(tau) > 0:
        raise ValueError(f"discounted_cost: tau must be > 0, got {float(tau)}")
    for mu0 in (mu0s if not is_traced(mu0s) else mu0s[:1]):
        system.check_state(mu0)
    dtype = mu0s.dtype
    return _discounted_cost(system, method, mu0s, running_cost, jnp.asarray(tau, dtype), jnp.asarray(dt, dtype), n, adjoint)


# The standard upright-top problem ---------------------------------------------------------------

#: ``(tilt φ, azimuth θ, Ω₀)`` of the four initial states of :func:`upright_top_cost`; v₀ = 0 and
#: ``Γ₀ = (cos θ sin φ, sin θ sin φ, cos φ)``. State 0 is seed 002's (sec. 5.3).
UPRIGHT_TOP_TABLE = (
    (math.pi / 20, math.pi / 3, (0.1, 0.2, 0.1)),
    (math.radians(15), 0.0, (0.0, 0.5, 0.0)),
    (math.radians(5), math.pi, (-0.4, 0.3, 0.5)),
    (math.radians(20), -math.pi / 2, (0.3, 0.0, -0.2)),
)
UPRIGHT_TOP_WEIGHT = 0.05
UPRIGHT_TOP_TAU = 2.0
UPRIGHT_TOP_T = 20.0


def upright_top_initial_states(system: Optional[AbstractSystem] = None) -> Float[Array, "4 9"]:
    """The four initial states ``μ₀ = (Π, P, Γ)`` of :data:`UPRIGHT_TOP_TABLE`. With v₀ = 0 they
    are ``(I₀Ω₀, −ml χ×Ω₀, Γ₀)``, the same for every gain ρ."""
    system = movable_base_top() if system is None else system
    rows = []
    for phi, theta, Omega in UPRIGHT_TOP_TABLE:
        Gamma = jnp.array([math.cos(theta) * math.sin(phi), math.sin(theta) * math.sin(phi), math.cos(phi)])
        rows.append(movable_base_mu(system, jnp.asarray(Omega), jnp.zeros(3), Gamma))
    return jnp.stack(rows)


def upright_top_running_cost(system: AbstractSystem, mu: Float[Array, " 9"]) -> Scalar:
    """``c = (1 − Γ₃) + w |u|² / (m̄ g)²`` with ``w = 0.05``, ``u`` the shaping force on the base
    (:meth:`lpjax.systems.MovableBaseHamiltonian.control_force`) and ``m̄ = M + m``."""
    h = system.hamiltonian
    if not isinstance(h, MovableBaseHamiltonian):
        raise TypeError("upright_top_running_cost needs a system made by lpjax.systems.movable_base_top")
    u = h.control_force(mu)
    return (1.0 - mu[8]) + UPRIGHT_TOP_WEIGHT * jnp.dot(u, u) / (h.total_mass * h.g) ** 2


def upright_top_cost(rho: ArrayLike, *, dt: float = 0.01, method: Optional[AbstractIntegrator] = None) -> Scalar:
    """The standard upright-top problem: :func:`discounted_cost` of :func:`upright_top_running_cost`
    for ``movable_base_top(rho)`` with seed 002's parameters, τ = 2 s, T = 20 s, over the four
    initial states of :func:`upright_top_initial_states`; ``method`` defaults to ``GaussLegendre(2)``.

    Differentiable in the scalar ``rho``: ``jax.grad`` runs forward mode inside (a
    ``custom_vjp`` whose forward pass is one ``jax.jvp``), which for one parameter costs about
    one extra forward sweep, where reverse mode through the 2000 steps costs many (see
    ``benchmarks/gradients.py``). Not differentiable twice. A gain outside ``(0, ρc)`` is
    unstable (the cost is then large) and ``ρ ≤ 0`` or ``ρ = ρc`` raises.
    """
    method = GaussLegendre(2) if method is None else method
    _grid_steps(UPRIGHT_TOP_T, dt, "upright_top_cost")
    rho = finite_scalar(rho, "rho")
    if not is_traced(rho):
        movable_base_top(rho=rho)  # a bad gain raises ValueError here, before tracing
    return _upright_top_cost(jnp.asarray(rho, dtype=jnp.result_type(float)), float(dt), method)


def _upright_top_value(rho, dt: float, method) -> Scalar:
    system = movable_base_top(rho=rho)
    mu0s = upright_top_initial_states(system)
    return discounted_cost(system, method, mu0s, upright_top_running_cost, T=UPRIGHT_TOP_T, tau=UPRIGHT_TOP_TAU, dt=dt,
                           adjoint="direct")  # differentiated by jax.jvp


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _upright_top_cost(rho, dt: float, method):
    return _upright_top_value(rho, dt, method)


def _upright_top_cost_fwd(rho, dt: float, method):
    return jax.jvp(lambda r: _upright_top_value(r, dt, method), (rho,), (jnp.ones_like(rho),))


def _upright_top_cost_bwd(dt: float, method, dJ_drho, g):
    return (g * dJ_drho,)


_upright_top_cost.defvjp(_upright_top_cost_fwd, _upright_top_cost_bwd)


@final
class TuneResult(eqx.Module):
    """Output of :func:`tune_upright_top`: the gain ``rho``, its ``cost``, ``rho_c``, the
    ``gradient`` dJ/dρ at ``rho``, the number of ``iterations`` and the ``history`` of
    ``(rho, cost)`` per iteration."""

    rho: float
    cost: float
    rho_c: float
    gradient: float
    iterations: int
    history: list[tuple[float, float]]


def tune_upright_top(
    rho0: Optional[float] = None,
    *,
    optimizer: Optional[optax.GradientTransformationExtraArgs] = None,
    max_steps: int = 100,
    gtol: float = 1e-9,
    dt: float = 0.01,
    method: Optional[AbstractIntegrator] = None,
    progress: Optional[bool] = None,
) -> TuneResult:
    """Minimise :func:`upright_top_cost` over the stable range ``0 < ρ < ρc`` with optax.

    The gain is reparameterised as ``ρ = ρc · sigmoid(s)``, so that every iterate is a stable
    gain. ``optimizer`` defaults to ``optax.lbfgs()`` (with its zoom line search); it is driven
    until ``|ρ dJ/dρ| ≤ gtol · J`` or ``max_steps`` updates, and the result is the last gain whose
    cost and gradient were evaluated. ``rho0`` (default: the paper's
    ``0.9 ρc``) must lie in ``(0, ρc)``. ``progress``: a tqdm bar over the iterations with the
    current ρ and J (the first one compiles, about 25 s); default on when stderr is a terminal.
    """
    rho_c = float(movable_base_top().hamiltonian.rho_c)
    rho0 = 0.9 * rho_c if rho0 is None else rho0
    if isinstance(rho0, bool) or not isinstance(rho0, (int, float, np.floating, np.integer)) or not (0 < rho0 < rho_c):
        raise ValueError(f"tune_upright_top: rho0 must be a float in the stable range (0, rho_c = {rho_c:.6g}), got {rho0!r}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"tune_upright_top: max_steps must be a positive integer, got {max_steps!r}")
    optimizer = _default_optimizer() if optimizer is None else optimizer
    method = GaussLegendre(2) if method is None else method
    _grid_steps(UPRIGHT_TOP_T, dt, "tune_upright_top")

    s = jnp.asarray(math.log(rho0 / (rho_c - rho0)), jnp.result_type(float))
    state = optimizer.init(s)
    history: list[tuple[float, float]] = []
    show = sys.stderr.isatty() if progress is None else bool(progress)
    with tqdm(total=max_steps, desc="tune (the first step compiles)", unit="it", disable=not show) as bar:
        for it in range(1, max_steps + 1):
            s_new, state, value, grad = _tune_update(s, _strong(state), optimizer, rho_c, dt, method)
            rho, J = rho_c * float(jax.nn.sigmoid(s)), float(value)
            dJ_drho = float(grad) / (rho * (1 - rho / rho_c))  # dJ/ds = dJ/dρ · ρ (1 − ρ/ρc)
            history.append((rho, J))
            bar.set_description("tune")
            bar.set_postfix(rho=f"{rho:.8g}", J=f"{J:.8g}")
            bar.update()
            if abs(rho * dJ_drho) <= gtol * abs(J):
                break
            s = s_new
    # the last point whose cost and gradient were evaluated (a further update is not taken)
    return TuneResult(rho=rho, cost=J, rho_c=rho_c, gradient=dJ_drho, iterations=it, history=history)


@functools.lru_cache(maxsize=None)
def _default_optimizer() -> optax.GradientTransformationExtraArgs:
    return optax.lbfgs()  # one instance, so that the compiled update below is reused across calls


def _strong(tree):
    """The arrays of ``tree`` without weak types. optax's state starts with weak-typed scalars
    that its update returns strong: without this the update compiles three times, not once."""
    return jax.tree.map(lambda a: jnp.asarray(a, a.dtype) if getattr(a, "weak_type", False) else a, tree)


def _tune_loss(s, rho_c: float, dt: float, method):
    return upright_top_cost(rho_c * jax.nn.sigmoid(s), dt=dt, method=method)


@eqx.filter_jit
def _tune_update(s, state, optimizer, rho_c: float, dt: float, method):
    loss = functools.partial(_tune_loss, rho_c=rho_c, dt=dt, method=method)
    value, grad = optax.value_and_grad_from_state(loss)(s, state=state)
    updates, state = optimizer.update(grad, state, s, value=value, grad=grad, value_fn=loss)
    return optax.apply_updates(s, updates), state, value, grad
