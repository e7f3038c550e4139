"""The first stage of :func:`lpjax.ensemble`: its inputs checked and put in the run's dtype
(:func:`validated`), the method checked against the system by tracing one step abstractly
(cached by structure and shapes), and the observables (built in, or a user's function).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Callable, NamedTuple, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._checks import cast_floats, checked_value, eval_shape_cached, invalid_as_nan, is_traced, run_dtype
from .._integrator import AbstractIntegrator, AbstractStochasticIntegrator
from .._system import guarded
from .._memo import by_identity
from .._schedule import fixed_schedule
from .._tangents import is_indicator

__all__ = ["Inputs", "validated", "observe_fn", "observe_nothing", "check_members", "check_schedule", "first_member",
           "checked_members", "checked_inputs", "check_store_path"]


# -------------------------------------------------------------------------------- observables


def _observe_state(system, y):
    return {"state": y}


def _observe_casimirs(system, y):
    return {"casimirs": system.casimirs(y)}


def _observe_energy(system, y):
    return {"energy": system.energy(y)}


def observe_nothing(system, y):
    """No observable: what the kernel observes when the state's saves are all ``y0s`` and
    ``final_state`` (:func:`lpjax.ensemble`'s default)."""
    return {}


_BUILTIN = {None: _observe_state, "state": _observe_state, "casimirs": _observe_casimirs, "energy": _observe_energy}


@final
class _UserObserve(eqx.Module):
    """``observe(y)`` as ``(system, y) -> {name: array}``; hashable by the function, so that the
    same function reuses the compiled chunk."""

    fn: Callable = eqx.field(static=True)

    def __call__(self, system, y):
        leaves = jax.tree_util.tree_leaves_with_path(self.fn(y))
        if not leaves:
            raise ValueError("observe(y) returned no arrays")
        if len(leaves) == 1 and not leaves[0][0]:
            return {"observed": jnp.asarray(leaves[0][1])}
        return {_leaf_name(path): jnp.asarray(a) for path, a in leaves}


def observe_fn(observe) -> tuple[str, Callable]:
    """``(name, fn(system, y) -> dict of arrays)`` for ``observe`` (a chaos indicator: itself, which
    gives the shapes of what it keeps)."""
    if is_indicator(observe):
        return repr(observe), observe
    if isinstance(observe, str) or observe is None:
        if observe not in _BUILTIN:
            raise ValueError(f'observe must be None, "state", "casimirs", "energy" or a function y -> pytree, got {observe!r}')
        return observe or "state", _BUILTIN[observe]
    if not callable(observe):
        raise TypeError("observe must be a function y -> pytree of arrays or a chaos indicator (lpjax.Lyapunov, "
                        f"lpjax.MEGNO, lpjax.FLI), got {type(observe).__name__}")
    return f"{getattr(observe, '__module__', '')}.{getattr(observe, '__qualname__', type(observe).__name__)}", _UserObserve(observe)


def _leaf_name(path) -> str:
    name = re.sub(r"[^0-9A-Za-z_]+", "_", jax.tree_util.keystr(path)).strip("_")
    return name or "observed"


# -------------------------------------------------------------------------------- ensemble()


def _leading_sizes(system) -> dict:
    return {jax.tree_util.keystr(p): (a.shape[0] if a.ndim else None)
            for p, a in jax.tree_util.tree_leaves_with_path(eqx.filter(system, eqx.is_array))}


def first_member(system):
    dyn, static = eqx.partition(system, eqx.is_array)
    return eqx.combine(jax.tree.map(lambda a: a[0], dyn), static)


def _one_step(system, method, y, dt):  # traced once per system structure, method and state shape (eval_shape_cached)
    state = method.init(system, y, dt)
    if isinstance(method, AbstractStochasticIntegrator):
        return method.observe(system, method.step(system, state, dt, jnp.zeros((system.n_noise,), y.dtype))[0])
    return method.observe(system, method.step(system, state, dt)[0])


def checked_members(system, method, who: str, y0s=None, structure: bool = True):
    """``y0s``, once every member of a system batched over parameters is checked as a program
    over the members sees them: the method's family by structure (``structure``; each array
    traced under ``vmap``, so that no member's values, nor those a batched ensemble function is
    later called with, can hide a term), and the values the family checks
    (:meth:`AbstractFamily.guard`) for all members at once: by value where the members are
    concrete (``ValueError`` naming them), else in the program, on ``y0s`` (by
    :func:`lpjax._checks.checked_value`: inside ``invalid_as_nan``, a failing member's initial
    state is NaN)."""
    flags, message = member_flags(system, method, structure)
    if flags is None:
        return y0s
    if is_traced(flags):
        return None if y0s is None else checked_value(y0s, flags[:, None], message)
    if np.any(flags):
        raise ValueError(f"{who}: members {np.flatnonzero(flags)[:10].tolist()} of the batched system: {message}")
    return y0s


def checked_inputs(member, dyn, batched: bool, y0s):
    """``y0s`` of an ensemble function's call, checked in the program against the method
    family's checks of values (:meth:`AbstractFamily.guard`) where the system's arrays are traced
    (a fit, a user's ``jit``): as everywhere in an ensemble, a bad member fails alone, here with a
    NaN initial state (``RESULTS.invalid_initial_state``), and no host callback enters the
    program (which then lowers for a GPU as it did)."""
    if isinstance(member.method, AbstractStochasticIntegrator):
        return y0s  # (no family: checked when made)
    with invalid_as_nan():
        if not batched:
            return guarded(member.method.family, member.system(dyn), y0s)
        return checked_members(member.system(dyn), member.method, "ensemble function", y0s, structure=False)


def member_flags(system, method, structure: bool = True) -> tuple:
    """``(bad, message)``: per member of the batched ``system``, whether the method family's
    :meth:`~AbstractFamily.guard` fails (``None``: the family has none), after checking each
    member's structure (``structure``: :meth:`~AbstractIntegrator.check_system` under ``vmap``)."""
    messages = []

    def bad(s):
        if structure:
            method.check_system(s)
        check = method.family.guard(s)
        if check is None:
            return jnp.zeros((), bool)
        bad, message = check()
        messages.append(message)
        return bad

    flags = eqx.filter_vmap(bad)(system)
    return (flags, messages[0]) if messages else (None, "")


def check_members(system, method, batched: bool, who: str, y_one=None, dt=None) -> Optional[int]:
    """Check that ``method`` can run ``system`` (with ``batched``: one member's system, and
    return the common leading size N of its arrays), stepping ``y_one`` abstractly if given. A
    system that fails unbatched but whose first member runs is named as batched."""
    stochastic = isinstance(method, AbstractStochasticIntegrator)
    if not isinstance(method, AbstractIntegrator) and not stochastic:
        raise TypeError(f"{who}: method must be an lpjax integrator (e.g. lpjax.RK4()), got {type(method).__name__}")
    sizes = _leading_sizes(system)
    common = next(iter(set(sizes.values()))) if len(set(sizes.values())) == 1 else None

    def check(s):
        method.check_system(s)
        if y_one is not None:
            out = eval_shape_cached(_one_step, s, method, y_one, dt)
            if out.shape != y_one.shape:
                raise ValueError(f"{who}: one step of {type(method).__name__} maps a state of shape {y_one.shape} to "
                                 f"{out.shape}")

    if batched:
        if common is None:
            raise ValueError(f"{who}: with batched_system=True every array of the system needs the same leading axis N "
                             f"(leading sizes: {sizes})")
        check(first_member(system))
        if not stochastic:  # (a stochastic method has no family whose values to check)
            checked_members(system, method, who)
        return common
    try:
        check(system)
    except Exception as e:
        if common is not None:
            try:
                check(first_member(system))
            except Exception:
                raise e from None
            raise ValueError(f"{who}: the system looks batched over parameters (every array has a leading axis of "
                             f"{common}, and its first member runs); pass batched_system=True") from e
        raise
    return None


def check_schedule(n_steps, save_every, dt, who: str) -> tuple[int, int]:
    """``(n_steps, save_every)`` of :func:`lpjax._schedule.fixed_schedule`, ``save_every``
    defaulting to ``n_steps`` (the start and the end only)."""
    schedule = fixed_schedule(dt, n_steps, n_steps if save_every is None else save_every, who)
    return schedule.n_steps, schedule.save_every


class Inputs(NamedTuple):
    """An ensemble's inputs, checked, in the run's ``dtype``: ``y0s`` is ``(N, d)`` (one state
    broadcast over a batched system's N members), ``y_one`` the first member's state."""

    system: Any
    method: Any
    y0s: np.ndarray
    y_one: Any
    n_steps: int
    save_every: int
    dtype: np.dtype
    batched: bool


@by_identity
def _checked(system, method, rdtype, batched_system: bool, y_shape: tuple, dt):
    """The system and method in ``rdtype``, checked against each other (one step of a state of
    shape ``y_shape``, abstractly), and the batched system's N (None if not batched)."""
    system, method = cast_floats((system, method), rdtype)
    y_one = jax.ShapeDtypeStruct(y_shape, rdtype)
    return system, method, check_members(system, method, batched_system, "ensemble", y_one, np.asarray(dt, rdtype))


def validated(system, method, y0s, dt, n_steps, save_every, dtype, batched_system: bool, metadata) -> Inputs:
    """:func:`lpjax.ensemble`'s inputs checked (clear errors naming what was expected)."""
    n_steps, save_every = check_schedule(n_steps, save_every, dt, "ensemble")
    if metadata is not None:
        json.dumps(metadata)  # must be JSON (it goes into the store's attributes)
    if not isinstance(y0s, jax.Array) and np.asarray(y0s).dtype.kind not in "biuf":
        raise ValueError(f"ensemble: y0s must be numbers (an array of floats), got {np.asarray(y0s).dtype} "
                         f"({type(y0s).__name__})")
    rdtype = run_dtype(dtype, np.asarray(y0s), "ensemble")
    rdtype = rdtype if rdtype.kind == "f" else np.dtype(jnp.result_type(float))
    y0s = np.asarray(y0s, dtype=rdtype)
    if y0s.ndim not in (1, 2):
        raise ValueError(f"ensemble: y0s must have shape (N, d) (or (d,) with a batched system), got {y0s.shape}")
    y_one = jnp.asarray(y0s if y0s.ndim == 1 else y0s[0])
    try:
        system, method, system_n = _checked(system, method, rdtype, batched_system, y_one.shape, dt)
    except TypeError:  # a step traced with a state of the wrong shape: say so, as integrate does
        if not batched_system:
            system.check_state(y_one)
        raise
    if system_n is None and y0s.ndim == 1:
        raise ValueError(f"ensemble: y0s must have shape (N, d); got one state {y0s.shape} (for a system batched over "
                         "parameters pass batched_system=True)")
    if system_n is not None and y0s.ndim == 2 and y0s.shape[0] != system_n:
        raise ValueError(f"ensemble: the leading axes differ: y0s has N = {y0s.shape[0]} members, the batched "
                         f"system's arrays have {system_n}")
    if y0s.ndim == 1:
        y0s = np.broadcast_to(y0s, (system_n, y0s.shape[0]))
    if system_n is None:
        system.check_state(y_one)
    return Inputs(system, method, y0s, y_one, n_steps, save_every, rdtype, system_n is not None)


def check_store_path(out: Optional[str], who: str = "ensemble: out") -> None:
    """Refuse, before any work, a store path whose folder does not exist or cannot be written,
    or that names an existing file (a store is a directory): the run would fail only when its
    first chunk is written."""
    if out is None:
        return
    path = os.path.abspath(os.fspath(out))
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{who} {out!r} is a file; a store is a directory")
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise ValueError(f"{who} {out!r}: the folder {folder!r} does not exist or is not writable")
