"""Declared family data against the Hamiltonian: the gradient identity a structural family's
data imply (the free rigid body's mass tensor, the Lagrange top's alpha and gravity, the Clebsch
flow's B), checked by value where the system is concrete and in the program where it is traced."""

from __future__ import annotations

import collections
from typing import Callable, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._algebra import rotation_frame
from .._checks import checked_value
from .._structure import reads_traced, tracing
from ._base import AbstractLiePoissonSystem

__all__ = ["values_traced", "guarded", "data_mismatch", "data_guard"]


_VERDICTS: "collections.OrderedDict" = collections.OrderedDict()  # a system's key -> its defects
_N_VERDICTS = 256
_N_STATES = 4  # random states at which the gradients are compared


@eqx.filter_jit
def _gradients(system, expected: Callable, y: Float[Array, "s D"]):
    """``(∂h/∂μ, expected)`` at the states ``y`` (in the :func:`rotation_frame`'s coordinates), both there."""
    frame = rotation_frame(system.algebra)
    # by the chain rule the gradient in v = T⁻ᵀμ is T ∂h/∂μ: the algebra element ∂h/∂μ in the frame's coordinates
    got = jax.vmap(jax.grad(lambda v: jnp.asarray(system.hamiltonian(frame.momentum_out(v)), v.dtype)))(y)
    return got, jax.vmap(lambda v: expected(system.hamiltonian, frame, v))(y)


def _key(system):
    leaves, treedef = jax.tree_util.tree_flatten(system)
    parts = tuple((a.dtype.str, a.shape, a.tobytes()) if isinstance(a, (np.ndarray, jax.Array)) else repr(a)
                  for a in (np.asarray(x) if isinstance(x, jax.Array) else x for x in leaves))
    return treedef, parts


def _relative_defects(system, expected: Callable):
    """The relative defects ``(rotations, vectors)`` of the Hamiltonian's gradient against the
    one its declared family data give (``expected(h, frame, y)``, in the frame's coordinates),
    the largest over random states, each block over the largest expected entry: JAX scalars,
    traced with the system's arrays."""
    dtype = jnp.result_type(float)
    y = jnp.asarray(np.random.default_rng(0).standard_normal((_N_STATES, system.algebra.dim)), dtype)
    got, want = (jnp.asarray(a, dtype) for a in _gradients(system, expected, y))
    d = rotation_frame(system.algebra).algebra.dim
    err = jnp.abs(got - want) / jnp.maximum(jnp.max(jnp.abs(want)), jnp.finfo(dtype).tiny)
    return jnp.max(err[:, :d]), (jnp.max(err[:, d:]) if err.shape[1] > d else jnp.zeros((), dtype))


def _defect_bound(system) -> float:
    dtypes = [jnp.result_type(float)] + [x.dtype for x in jax.tree_util.tree_leaves(system) if eqx.is_inexact_array(x)]
    return 10.0 * float(np.sqrt(max(float(jnp.finfo(t).eps) for t in dtypes)))


def values_traced(system) -> bool:
    """Whether ``system`` holds, or its Hamiltonian reads, a value traced by an enclosing
    ``jit``, ``vmap`` or ``grad`` (a fit's parameters, a closed-over array): its values are then
    checked in the program that runs (:meth:`AbstractFamily.guard`), not before."""
    if not tracing():
        return False
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(system)):
        return True
    return isinstance(system, AbstractLiePoissonSystem) and reads_traced(
        system.energy, jnp.zeros((system.algebra.dim,), jnp.result_type(float)))


def guarded(family, system, x):
    """``x`` (a pytree), checked in the program that runs against ``family``'s
    :meth:`~AbstractFamily.guard` where ``system``'s values are traced (where they are concrete,
    ``check`` has decided): the check gates ``x``'s first floating array, which must be one the
    program reads (XLA drops a check whose result nothing reads)."""
    check = family.guard(system)
    if check is None or not values_traced(system):
        return x
    leaves = jax.tree_util.tree_leaves(x)
    i = next(i for i, a in enumerate(leaves) if eqx.is_inexact_array(a))
    return eqx.tree_at(lambda t: jax.tree_util.tree_leaves(t)[i], x, checked_value(leaves[i], *check()))


def _data_defects(system, expected: Callable) -> Optional[tuple[float, float, float]]:
    """:func:`_relative_defects` and their bound ``(rotations, vectors, bound)``, computed now;
    ``None`` while the system's values are traced (:func:`values_traced`)."""
    if values_traced(system):
        return None
    try:
        key = (_key(system), expected)
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in _VERDICTS:
        _VERDICTS.move_to_end(key)
        return _VERDICTS[key]
    with jax.ensure_compile_time_eval():  # concrete arrays, even where integrate is called inside a jit
        out = (*(float(x) for x in _relative_defects(system, expected)), _defect_bound(system))
    if key is not None:
        _VERDICTS[key] = out
        if len(_VERDICTS) > _N_VERDICTS:
            _VERDICTS.popitem(last=False)
    return out


def data_guard(system, expected: Callable, what: str, bad=False) -> tuple:
    """:meth:`AbstractFamily.guard` of a family whose data are checked against the gradient
    (``bad``: another condition on the traced data, or'ed in)."""
    rotations, vectors = _relative_defects(system, expected)
    bound = _defect_bound(system)
    return (rotations > bound) | (vectors > bound) | bad, (
        f"{what}: its declared data and its Hamiltonian describe different systems (the gradient identity at "
        f"{_N_STATES} random states is off by more than {bound:.2g} relative)")


def data_mismatch(system, expected: Callable, describe: Callable[[], tuple[str, str]]) -> Optional[Exception]:
    """A ``ValueError`` naming the declared datum whose gradient block disagrees with the
    Hamiltonian; ``describe()`` says what each block's defect means (rotations, vectors)."""
    defects = _data_defects(system, expected)
    if defects is None or max(defects[:2]) <= defects[2]:
        return None
    rotations, vectors, bound = defects
    what, defect = (describe()[0], rotations) if rotations > bound else (describe()[1], vectors)
    return ValueError(f"{what} by {defect:.3g} relative to its largest entry, at random states (bound {bound:.2g}): "
                      "its declared data and its Hamiltonian describe different systems")
