"""``integrate``: a fixed-step ``lax.scan`` driver with a save schedule and result codes.

The loop is compiled once per configuration with ``eqx.filter_jit``, as diffrax's
``diffeqsolve`` is: the static parts (the method and its settings, the system's structure and
static fields, ``n_steps``, ``save_every``, ``throw``, shapes and dtypes) key the cache, while
arrays (``y0``, ``dt``, ``t0``, the system's parameters) are traced. A second call with new
array values reuses the compiled code.
"""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, PyTree

from ._adaptive import adaptive_member
from ._events import as_events, event_record, with_events
from ._adjoint import loop
from ._integrate_adaptive import run_member, solve
from ._tangent_members import with_indicator
from ._tangents import is_indicator
from ._checks import as_numbers, cast_floats, error_if, finite_scalar, is_traced, run_dtype, run_inputs
from ._integrator import RESULTS, AbstractImplicitMethod, AbstractIntegrator, AbstractSteppedAdjoint, Composition
from ._member import Carry, FixedMember, count_dtype, innermost, the_state
from ._schedule import adaptive_schedule, fixed_schedule
from ._system import AbstractSystem, guarded
from ._solution import Solution
from ._integrate_sde import integrate_sde
from ._stochastic_member import is_stochastic

__all__ = ["Solution", "integrate"]


_MAX_STEPS_INT32 = 2**31 - 1


def _check_inputs(system, method, y0, dt, n_steps, save_every, t0):
    if not isinstance(method, AbstractIntegrator):
        raise TypeError(f"method must be an lpjax integrator (e.g. lpjax.RK4()), got {type(method).__name__}")
    method.check_system(system)
    fixed_schedule(dt, n_steps, save_every, "integrate")
    if n_steps > _MAX_STEPS_INT32 and not jax.config.jax_enable_x64:
        raise ValueError(f"n_steps = {n_steps} exceeds 2**31 - 1, the most that 32-bit step counters hold; turn on "
                         "JAX's x64 (jax.config.update('jax_enable_x64', True)) for 64-bit counters, or split the run "
                         "(integrate(..., y0=solution) continues it)")
    finite_scalar(t0, "t0")
    system.check_state(y0)
    if not is_traced(y0) and not np.all(np.isfinite(np.asarray(y0))):
        raise ValueError("y0 must be finite; it contains NaN or inf")


def _solves_implicitly(method: AbstractIntegrator) -> bool:
    """Whether ``method`` (or a method it wraps, or a composition's stage: an implicit adjoint)
    solves implicit equations in its step."""
    is_implicit = lambda x: isinstance(x, AbstractImplicitMethod)  # noqa: E731
    methods = [method] + ([m for m, _ in method.stages] if isinstance(method, Composition) else [])
    return any(is_implicit(x) for m in methods for x in jax.tree.leaves(m, is_leaf=is_implicit))


def _has_stepped_adjoint(method: AbstractIntegrator) -> bool:
    """Whether ``method`` and every integrator it wraps (Collective's inner method) supply their
    own adjoint of a step."""
    wrapped = lambda x: x is not method and isinstance(x, AbstractIntegrator)  # noqa: E731
    inner = [x for x in jax.tree.leaves(method, is_leaf=wrapped) if wrapped(x)]
    return isinstance(method, AbstractSteppedAdjoint) and all(isinstance(x, AbstractSteppedAdjoint) for x in inner)


@eqx.filter_jit
def _integrate(system, method, y0, dt, t0, n_steps: int, save_every: int, throw: bool, adjoint: str,
               state0=None) -> Solution:
    y0 = error_if(y0, ~jnp.all(jnp.isfinite(y0)), "integrate: y0 must be finite; it contains NaN or inf")
    dt = error_if(dt, ~(jnp.isfinite(dt) & (dt > 0)), "integrate: dt must be finite and > 0")
    rdtype = y0.dtype
    if state0 is None:
        state0 = method.init(system, y0, dt)
    dyn, static = eqx.partition((system, method, dt), eqx.is_array)
    # The discrete adjoint runs over single steps: within a save when saves are far apart, over
    # the saves (each a few steps) when they are close. A method with its own adjoint of a step
    # (AbstractSteppedAdjoint) gets it over the steps of each save.
    stepped_method = _has_stepped_adjoint(method) and adjoint != "direct"
    discrete = adjoint == "discrete" or (adjoint == "auto" and not _solves_implicitly(method))

    def one_step(dyn, carry: Carry):
        system, method, dt = eqx.combine(dyn, static)
        state, result, info = method.step(system, carry.state, dt)
        return carry.update(state, result, info), None

    def step_residuals(dyn, carry: Carry):
        system, method, dt = eqx.combine(dyn, static)
        state, result, info, res = method.step_residuals(system, carry.state, dt)
        return carry.update(state, result, info), res

    def step_linearize(dyn, state, res):
        system, method, dt = eqx.combine(dyn, static)
        return method.step_linearize(system, dt, state, res)

    def step_vjp(dyn, state, res, ct, robust):
        system, method, dt = eqx.combine(dyn, static)
        return method.step_vjp(system, dt, state, res, ct, robust)

    def parameter_vjp(dyn, seed):
        system, method, dt = eqx.combine(dyn, static)
        ct = method.parameter_vjp(system, dt, seed)
        zeros = jax.tree.map(jnp.zeros_like, eqx.filter(dyn, eqx.is_inexact_array))
        return tuple(z if c is None else jax.tree.map(lambda c, z: c.astype(z.dtype), c, z) for c, z in zip(ct, zeros))

    def step_seed(dyn, state, res, ct):
        system, method, dt = eqx.combine(dyn, static)
        return method.step_seed(system, dt, state, res, ct)

    stepped = ((step_residuals, step_linearize, step_vjp, parameter_vjp, throw, method.linear_seed,
                step_seed if method.batched_seed else None) if stepped_method else None)

    def one_save(dyn, carry: Carry):
        system, method, _ = eqx.combine(dyn, static)
        carry, _ = loop(one_step, dyn, carry, save_every, discrete and save_every >= 16, stepped, in_sweep=True)
        return carry, method.save(system, carry.state)

    init = Carry.start(state0, rdtype)
    n_save = n_steps // save_every
    carry, saved = loop(one_save, dyn, init, n_save, not stepped_method and discrete and save_every < 16)
    saved = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), method.save(system, state0), saved)
    ys, gs = saved
    ts = t0 + dt * save_every * jnp.arange(n_save + 1, dtype=rdtype)
    if throw:
        ys = carry.result.error_if(ys, carry.result != RESULTS.successful)
    stats = {
        "max_residual": carry.max_residual,
        "max_iterations": carry.max_iterations,
        "mean_iterations": carry.total_iterations.astype(rdtype) / n_steps,
        "num_failed_steps": carry.num_failed,
        "num_steps": jnp.asarray(n_steps, count_dtype()),
    }
    return Solution(ts=ts, ys=ys, result=carry.result, stats=stats, gs=gs, state=carry.state)


def integrate(
    system: AbstractSystem,
    method: AbstractIntegrator,
    y0: ArrayLike | Solution,
    dt: Optional[ArrayLike],
    n_steps: Optional[int] = None,
    save_every: Optional[int] = None,
    throw: bool = True,
    t0: Optional[float] = None,
    adjoint: str = "auto",
    dtype=None,
    *,
    controller=None,
    t1: Optional[float] = None,
    ts=None,
    max_steps: Optional[int] = None,
    error_estimate: Optional[str] = None,
    local_extrapolation: Optional[bool] = None,
    events=None,
    observe=None,
    brownian=None,
    key=None,
) -> Solution:
    """Integrate ``system`` with ``method`` for ``n_steps`` fixed steps of size ``dt`` (saving
    every ``save_every``, default 1), or, with a ``controller``, with adaptive steps to ``t1``.

    One ``lax.scan`` over ``n_steps // save_every`` saves, each an inner scan of
    ``save_every`` steps; no ``while_loop``. Compiled once per configuration
    (``eqx.filter_jit`` inside): calls that differ only in array values — ``y0``, ``dt``,
    ``t0``, the system's parameters — reuse the compiled code; a new ``n_steps``,
    ``save_every``, method setting, shape or dtype compiles anew. Works under ``jit``,
    ``vmap`` (over ``y0`` or over system parameters) and ``grad``.

    Gradients. Reverse mode stores the carry at about √n_steps points and recomputes the
    steps between them (two-level checkpointing), so gradient memory grows as about
    √n_steps besides the saved output. ``adjoint`` picks how the steps are differentiated:

    * ``"discrete"``: the discrete adjoint of the map, written out (the adjoint recursion over
      the state in a reverse scan; the parameter cotangent summed in the same sweep over single
      steps, formed for all steps at once under ``vmap`` over saves a few steps apart), in
      reverse mode (see below).
    * ``"direct"``: JAX differentiates the checkpointed loop itself. Forward mode too
      (``jax.jvp``, ``jax.jacfwd``: one forward run per direction, for few parameters).
    * For a method with its own adjoint of a step (:class:`lpjax.AbstractSteppedAdjoint`:
      :class:`GaussLegendre`, :class:`MoserVeselov`, :class:`DiscreteEulerPoincare`, and
      :class:`Collective` when its inner method has one), ``"discrete"`` is that adjoint: each
      checkpoint group is recomputed once keeping what the step solved for, all its steps are
      linearized at once under ``vmap`` (GL: the stages' Jacobians; MV, DEP: the step's
      Jacobian by the implicit function theorem), the sweep back solves the transposed step
      equations (GL: 8 fixed-point updates, a group where they fail the implicit kernel's test
      redone by elimination; MV, DEP: one matrix–vector product) and the parameter cotangents
      of the group are formed at once under ``vmap`` (DEP: those of its Lagrangian's arrays). A
      step whose adjoint solve fails makes the gradient NaN, and raises under ``throw=True``.
    * ``"auto"`` (default): ``"discrete"`` for explicit maps and for methods with their own
      adjoint of a step, ``"direct"`` for the other implicit methods.

    Gradient over forward run, 10⁴ steps, every array and y0 (``benchmarks/gradients.py``, 2-core
    CPU): 3.5–3.8 for GL4, the Suris map and Moser–Veselov, against 13–60 for ``"direct"``.

    The written-out adjoints are used only in reverse mode (an input of ``integrate`` under
    ``jax.grad``, ``jax.vjp`` or ``jax.jacrev``, also inside ``vmap``); a plain run, forward mode
    (``jax.jvp``, ``jax.jacfwd``) and a jitted run differentiated from outside run JAX's loop, so
    ``"auto"`` and ``"discrete"`` give forward mode too. Call ``integrate`` inside the function
    that is differentiated.

    All give the same derivatives to roundoff.

    Precision. ``dtype`` (float32 or float64) is the precision of the run: the state, dt and
    the floating arrays of the system and the method are cast to it. By default it is
    ``y0``'s; a float32 ``y0`` while JAX's x64 is on runs in float32 with a warning (pass
    ``dtype=jnp.float32`` to ask for it). With x64 off, float64 is an error, whether asked for
    or given as NumPy or Python numbers (which JAX would truncate to float32 without a word): a
    float32 run happens only when asked for, by a float32 ``y0`` or ``dtype=jnp.float32``.

    Continuing a run. With ``y0`` a :class:`Solution` of the same system and method, the run
    starts from its last state and the method's internal state with it (a predictor, a lifted
    point, a reconstructed attitude), at ``t0 = solution.ts[-1]`` unless ``t0`` is given: a run
    split into pieces gives the states of the whole run bit for bit.

    Bad input raises ``ValueError``/``TypeError`` before tracing (a system outside the
    method's family, a non-scalar or non-positive ``dt``, a non-finite ``y0``); with traced
    ``y0``/``dt``, non-finite or non-positive values raise at run time: a ``JaxRuntimeError``
    whose first lines hold the ``ValueError`` and its message, under ``jax.jit`` as under
    ``eqx.filter_jit``. With ``throw=True`` a failed step raises once at the end: a ``RuntimeError`` whose
    first words are the :class:`RESULTS` message (what to try), or, under an outer
    ``jit``/``vmap``/``grad``, an ``EquinoxRuntimeError`` with it; with ``throw=False`` inspect
    ``Solution.result``. ``y0`` may be a list or tuple (integers become float64).

    Adaptive steps. ``controller=lpjax.PIDController(rtol, atol)``, with ``t1`` and the save
    times ``ts`` (default ``(t1,)``), ``max_steps``, ``error_estimate`` and
    ``local_extrapolation`` as for :func:`lpjax.ensemble`, runs the trajectory with the
    ensembles' adaptive member: its steps and states are those of the same member of an
    adaptive ensemble (``dt`` is the first step, or None to select it). The run starts at
    t = 0; ``ts`` of the Solution are 0 and the save times; its statistics are
    ``num_accepted_steps``, ``num_rejected_steps``, ``next_dt`` and ``t_reached``. Methods:
    ``GaussLegendre(s)`` and ``Collective(GaussLegendre(s))``. Gradients (reverse mode, with
    respect to ``y0`` and the system's arrays) are the discrete adjoint over the accepted
    steps, their sizes held fixed (:mod:`lpjax._integrate_adaptive`); ``max_steps + 1`` of the
    method's states are kept for them.

    Events. ``events=lpjax.Event(cond, direction, terminal, max_crossings)`` (or a list of them)
    locates each crossing of ``cond(t, y) = 0`` by the method's own partial step (its state is a
    state of the method), and records it in ``Solution.events``; a terminal event stops the run
    there (``RESULTS.event_occurred``, which ``throw`` does not raise; the later saves hold the
    event's state, ``stats["t_final"]`` (adaptive: ``t_reached``) its time). See :class:`lpjax.Event`.
    Fixed or adaptive steps, from t = 0, without gradients (the crossing's search is a ``while``
    loop).

    Chaos indicators. ``observe=lpjax.Lyapunov(k, every)``, ``lpjax.MEGNO()`` or ``lpjax.FLI()``
    propagates tangent vectors by the method's own linearized step beside the state and keeps
    the indicator's values at the saves in ``Solution.observables`` (see :class:`lpjax.Lyapunov`).
    Fixed or adaptive steps from t = 0, with or without events.

    Noise. A :class:`lpjax.StochasticLiePoissonSystem` takes a stochastic method
    (:class:`lpjax.StochasticMidpoint`, :class:`lpjax.NoiseSplitting`), fixed steps from t = 0,
    and its Wiener increments from ``key=jax.random.key(seed)`` (counter-based: step ``n``'s
    from the key's Threefry block at ``n``, as every ensemble kernel draws them) or from
    ``brownian=``, any diffrax Brownian path of shape ``(m,)``. Gradients are pathwise (the
    increments fixed), the steps checkpointed as above; ``adjoint`` is ``"auto"``/``"direct"``
    (JAX differentiates them) or ``"discrete"`` (their discrete adjoint, reverse mode only).
    """
    if is_stochastic(system, method, brownian, key):
        extras = dict(t0=t0, events=events, observe=observe, controller=controller, t1=t1, ts=ts)
        return integrate_sde(system, method, y0, dt, n_steps, save_every, throw, dtype, brownian, key, adjoint, extras)
    if events is not None or observe is not None or controller is not None or any(
            v is not None for v in (t1, ts, max_steps, error_estimate, local_extrapolation)):
        return _integrate_member(system, method, y0, dt, n_steps, save_every, throw, t0, adjoint, dtype, controller,
                                 t1, ts, max_steps, error_estimate, local_extrapolation, events, observe)
    save_every = 1 if save_every is None else save_every
    previous = y0 if isinstance(y0, Solution) else None
    if not isinstance(y0, (jax.Array, Solution)):  # NumPy, lists: their precision judged by run_dtype
        y0 = as_numbers(y0, "integrate: y0")
    if previous is not None:
        y0 = previous.ys[-1]
        t0 = previous.ts[-1] if t0 is None else t0
    t0 = 0.0 if t0 is None else t0
    rdtype = run_dtype(dtype, y0, "integrate")
    y0 = jnp.asarray(y0, rdtype if rdtype.kind == "f" else None)  # an integer y0 is refused below
    if rdtype.kind == "f":
        system, method = cast_floats((system, method), rdtype)
    _check_inputs(system, method, y0, dt, n_steps, save_every, t0)
    # a traced system's values, checked in the program, gating y0: every run reads it (a check gating
    # an array the run does not read would be dropped by XLA with it)
    y0 = guarded(method.family, system, y0)
    if adjoint not in ("auto", "discrete", "direct"):
        raise ValueError(f'adjoint must be "auto", "discrete" or "direct", got {adjoint!r}')
    dt = jnp.asarray(dt, dtype=y0.dtype)
    t0 = jnp.asarray(t0, dtype=y0.dtype)
    state0 = None if previous is None else _previous_state(previous, system, method, y0, dt)
    args = (system, method, y0, dt, t0, int(n_steps), int(save_every))
    if not _in_reverse_mode((args, state0)):  # the written-out adjoints only pay off, and only work, there
        adjoint = "direct"
    if not throw or any(is_traced(a) for a in jax.tree.leaves(eqx.filter((args, state0), eqx.is_array))):
        return _integrate(*args, bool(throw), adjoint, state0)  # traced: a failure raises inside (eqx.error_if)
    sol = _integrate(*args, False, adjoint, state0)
    if sol.result != RESULTS.successful:  # eager: the hint first, in one line
        failed = int(sol.stats["num_failed_steps"])
        raise RuntimeError(f"integrate: {RESULTS[sol.result]} ({failed} of {int(n_steps)} steps failed; "
                           "throw=False returns the solution with its result code)")
    return sol


def _in_reverse_mode(tree) -> bool:
    """Whether an array of ``tree`` is being differentiated in reverse mode (``jax.grad``,
    ``jax.vjp``, ``jax.jacrev``: a linearize tracer, also inside ``vmap``). Otherwise — a plain
    run, forward mode, or a jitted run differentiated from outside — :func:`integrate` runs
    JAX's own (checkpointed) loop: the written-out adjoints are reverse mode only, and a loop
    inside their ``custom_vjp`` compiled to twice the time (Moser–Veselov, 10⁴ steps: 12.5 ms
    against 6.7 ms)."""
    for leaf in jax.tree.leaves(tree):
        while isinstance(leaf, jax.core.Tracer):
            kind = type(leaf).__name__
            if kind == "LinearizeTracer":
                return True
            leaf = getattr(leaf, "val", None) if kind == "BatchTracer" else None
    return False


def _previous_state(previous: Solution, system, method, y0, dt) -> PyTree:
    """The method state a :class:`Solution` ended in, checked to be one of ``method``'s states."""
    if previous.state is None:
        raise ValueError("this Solution carries no method state to continue from (it was not made by integrate)")
    want = eqx.filter_eval_shape(method.init, system, y0, dt)
    shape = lambda t: [(jnp.shape(a), jnp.result_type(a)) for a in jax.tree.leaves(t)]  # noqa: E731
    if jax.tree.structure(want) != jax.tree.structure(previous.state) or shape(want) != shape(previous.state):
        raise ValueError(f"the Solution's final state is not a state of {type(method).__name__} on this system: "
                         "continue a run with the method and system that made it")
    return previous.state



def _integrate_member(system, method, y0, dt, n_steps, save_every, throw, t0, adjoint, dtype, controller, t1, ts,
                      max_steps, error_estimate, local_extrapolation, events, observe) -> Solution:
    """:func:`integrate` through a member program: adaptive steps (a ``controller``), events, or
    both, or a chaos indicator (see there)."""
    events = as_events(events, "integrate")
    if observe is not None and not is_indicator(observe):
        raise TypeError("integrate: observe takes a chaos indicator (lpjax.Lyapunov, lpjax.MEGNO, lpjax.FLI), got "
                        f"{type(observe).__name__}")
    schedule = adaptive_schedule(method, dt, n_steps, save_every, t1, ts, controller, max_steps, False, "integrate",
                                 error_estimate, local_extrapolation)  # (t1 and the rest without a controller: refused)
    if isinstance(y0, Solution) or t0 is not None or adjoint != "auto":
        raise ValueError("integrate: a run with a controller or events starts at t = 0 from a state: it takes no "
                         "Solution to continue, no t0 and no adjoint (an adaptive run's gradient is the discrete "
                         "adjoint over the accepted steps)")
    y0, rdtype, (system, method) = run_inputs(y0, dtype, (system, method), "integrate")
    save_every = 1 if save_every is None else save_every
    _check_inputs(system, method, y0, 1.0 if dt is None else dt, *((1, 1) if schedule else (n_steps, save_every)), 0.0)
    y0 = guarded(method.family, system, y0)
    dyn, static = eqx.partition(system, eqx.is_array)
    if schedule is None:
        inner = FixedMember(static, method, jnp.asarray(dt, rdtype), int(n_steps), int(save_every), the_state, True)
        times = jnp.asarray(dt, rdtype) * save_every * jnp.arange(int(n_steps) // int(save_every) + 1, dtype=rdtype)
    else:
        inner = adaptive_member(static, method, schedule, dt, the_state, rdtype)
        times = jnp.concatenate([jnp.zeros((1,), rdtype), inner.ts])
    traced = any(is_traced(a) for a in jax.tree.leaves(eqx.filter((dyn, y0, dt), eqx.is_array)))
    record = observables = None
    if observe is not None or events:  # traced: a failure raises inside
        member = with_events(inner if observe is None else with_indicator(inner, observe, True), events)
        ys, carry, (_, _, stats) = run_member(member, dyn, y0, bool(throw) and traced)
        result, state = innermost(carry).result, innermost(carry).state
        if observe is not None:
            observables, ys = ys, ys.pop("state")
        if events:
            record = event_record(stats)
            stats = {k: v for k, v in stats.items() if not k.startswith("event_")}
    else:
        ys, result, stats, state = solve(inner, dyn, y0, bool(throw) and traced)
    sol = Solution(ts=times, ys=ys, result=result, stats=stats, state=state, events=record, observables=observables)
    if throw and not traced and result != RESULTS.successful and result != RESULTS.event_occurred:
        steps = (f"after {int(stats['num_accepted_steps'])} accepted and {int(stats['num_rejected_steps'])} rejected "
                 "steps; " if schedule else "")  # eager: the hint first, in one line
        raise RuntimeError(f"integrate: {RESULTS[result]} ({steps}throw=False returns the solution with its result code)")
    return sol
