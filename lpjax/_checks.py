"""Argument validators shared by every layer: one place for each kind of check.

Concrete input is checked eagerly and raises ``ValueError`` naming the argument and what was
expected; traced input (under ``jit``/``vmap``/``grad``) is checked with :func:`error_if` at run
time, or, inside :func:`invalid_as_nan` (a fit's trial parameters), made NaN.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
import sys
import types
import warnings
from typing import Iterator, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

__all__ = [
    "eval_shape_cached",
    "invalid_as_nan",
    "is_traced",
    "checked_value",
    "error_if",
    "positive_step",
    "positive_int",
    "optional_tol",
    "as_float",
    "as_numbers",
    "float_vector",
    "positive_vector",
    "finite_array",
    "finite_scalar",
    "bracket_sign",
    "run_dtype",
    "refuse_silent_float32",
    "input_dtype",
    "cast_floats",
    "external_stacklevel",
]


def is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def positive_int(v, name: str) -> int:
    """``v`` as a Python ``int >= 1`` (``bool`` is rejected)."""
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{name} must be a positive integer (>= 1), got {v!r}")
    return int(v)


def bracket_sign(sign) -> int:
    """The sign of a Lie–Poisson bracket: ``+1`` or ``-1``."""
    if isinstance(sign, bool) or sign not in (1, -1):
        raise ValueError(f"sign must be +1 or -1, got {sign!r}")
    return int(sign)


def optional_tol(tol, name: str = "tol") -> Optional[float]:
    """``None`` or a finite float ``> 0``."""
    if tol is None:
        return None
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating, np.integer)):
        raise ValueError(f"{name} must be a positive finite float or None, got {tol!r}")
    if not (math.isfinite(float(tol)) and tol > 0):
        raise ValueError(f"{name} must be a positive finite float or None, got {tol!r}")
    return float(tol)


def as_numbers(x: ArrayLike, what: str) -> np.ndarray:
    """A NumPy float array of ``x`` (a list, a tuple, a NumPy array: its precision kept, for
    :func:`run_dtype` to judge; integers become float64); rejects complex and anything that is not
    numbers (a string)."""
    dt = np.asarray(x).dtype
    if dt.kind not in "biufc":
        raise ValueError(f"{what} expects numbers (an array of floats), got {dt} ({type(x).__name__})")
    if dt.kind == "c":
        raise ValueError(f"{what} expects a real floating-point array, got dtype {dt}")
    return np.asarray(x, None if dt.kind == "f" else np.float64)


def as_float(x: ArrayLike, what: str) -> Array:
    """``jnp.asarray`` with integers promoted to the default float; rejects complex and anything
    that is not numbers (a string)."""
    if not isinstance(x, jax.Array):
        as_numbers(x, what)
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        raise ValueError(f"{what} expects a real floating-point array, got dtype {x.dtype}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


def float_vector(y: Array, size: Optional[int], who: str) -> None:
    """Raise unless ``y`` is a floating vector of shape ``(size,)`` (any length if ``None``)."""
    shape = jnp.shape(y)
    if len(shape) != 1 or (size is not None and shape[0] != size):
        want = f"({size},)" if size is not None else "(n,)"
        raise ValueError(f"{who}: state must have shape {want}, got {shape}")
    dtype = jnp.result_type(y)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"{who}: state must have a floating dtype (float32/float64), got {dtype}")


_INVALID_AS_NAN = contextvars.ContextVar("lpjax_invalid_as_nan", default=False)


@contextlib.contextmanager
def invalid_as_nan() -> Iterator[None]:
    """Within it, traced parameters that fail a check become NaN instead of raising: a
    least-squares trial point outside the valid region (a negative inertia) is then a rejected
    step of that start, not an error for a whole batch of starts (``eqx.error_if`` under ``vmap``
    fires for all members)."""
    token = _INVALID_AS_NAN.set(True)
    try:
        yield
    finally:
        _INVALID_AS_NAN.reset(token)


def _with_short_traceback(error: Exception) -> Iterator[Exception]:
    try:
        raise error
    except Exception as e:
        yield e


def _fail(message: str, bad) -> None:
    if bool(np.any(bad)):
        # JAX reports an exception raised in a host callback as its traceback text, written from
        # the innermost frame outwards: raised from a suspended generator (a frame without a
        # caller), the text is one frame and the message, not the whole stack of the user's call.
        raise next(_with_short_traceback(ValueError(message)))


def error_if(x: Array, bad, message: str) -> Array:
    """``x``, raising ``ValueError(message)`` at run time where ``bad`` holds (any member of a
    ``vmap``). Unlike ``eqx.error_if``, which needs ``eqx.filter_jit`` outside to read well, the
    error under a user's ``jax.jit`` names the message within its first lines; gradients pass."""
    bad = eqx.internal.unvmap_any(jnp.any(bad))
    return jax.lax.cond(bad, lambda v: (jax.debug.callback(functools.partial(_fail, message), bad), v)[1],
                        lambda v: v, x)


def checked_value(x: Array, bad, message: str) -> Array:
    """``x``, where ``bad`` is false: a concrete ``bad`` raises ``ValueError`` at once, a traced
    one with :func:`error_if` at run time (or, inside :func:`invalid_as_nan`, makes ``x`` NaN)."""
    if is_traced(bad):
        if _INVALID_AS_NAN.get():
            return jnp.where(bad, jnp.nan, x)
        return error_if(x, bad, message)
    if bool(bad):
        raise ValueError(f"{message}, got {x}")
    return x


def positive_vector(x: ArrayLike, size: Optional[int], name: str) -> Array:
    """``x`` as a float array of shape ``(size,)`` with positive finite entries."""
    x = as_float(x, name)
    if x.ndim != 1 or (size is not None and x.shape[0] != size):
        want = f"({size},)" if size is not None else "(n,)"
        raise ValueError(f"{name} must have shape {want}, got {x.shape}")
    return checked_value(x, ~jnp.all(jnp.isfinite(x) & (x > 0)), f"{name} must be finite and > 0")


def finite_array(x: ArrayLike, shape: tuple, name: str) -> Array:
    """``x`` as a float array of the given shape with finite entries."""
    x = as_float(x, name)
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {x.shape}")
    return checked_value(x, ~jnp.all(jnp.isfinite(x)), f"{name} must be finite")


def real_number(x, name: str) -> None:
    """Refuse what is not a real number: a string, a bool, a complex or non-numeric array."""
    if is_traced(x):
        return
    kind = np.asarray(x).dtype.kind if not isinstance(x, (str, bytes, bool, np.bool_)) else None
    if kind not in ("f", "i", "u"):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__} {x!r}")


def positive_step(dt, name: str) -> None:
    """A step size: a real scalar, finite and > 0 (traced values pass; they are checked in the
    program)."""
    real_number(dt, name)
    if jnp.ndim(dt) != 0:
        raise ValueError(f"{name} must be a scalar, got shape {jnp.shape(dt)}")
    if not is_traced(dt) and not (math.isfinite(float(dt)) and float(dt) > 0):
        raise ValueError(f"{name} must be finite and > 0, got {float(dt)}")


def finite_scalar(x: ArrayLike, name: str) -> Array:
    """A finite real scalar (concrete values are checked; traced ones pass through)."""
    real_number(x, name)
    if jnp.ndim(x) != 0:
        raise ValueError(f"{name} must be a scalar, got shape {jnp.shape(x)}")
    if not is_traced(x) and not np.isfinite(np.asarray(x)):
        raise ValueError(f"{name} must be finite, got {x}")
    return jnp.asarray(x)


_X64_HINT = ("turn x64 on (jax.config.update('jax_enable_x64', True) before any computation, or the environment "
             "variable JAX_ENABLE_X64=1), or ask for float32 (dtype=jnp.float32, or a float32 state)")


def input_dtype(x) -> np.dtype:
    """The dtype ``x`` says it is: a JAX array's own; that of NumPy's reading of anything else (a
    NumPy array, a list of Python floats: float64), before JAX would truncate it with x64 off."""
    return np.dtype(x.dtype) if isinstance(x, jax.Array) else np.asarray(x).dtype


def refuse_silent_float32(x, who: str, what: str = "the initial state") -> None:
    """Raise if ``x`` is float64 (or integers, which become float64), given as NumPy or Python
    numbers, while JAX's x64 is off: JAX would run it in float32 and say nothing. A JAX array
    already made in float32 with x64 off is the user's choice and passes."""
    if jax.config.jax_enable_x64 or isinstance(x, jax.Array):
        return
    dt = input_dtype(x)
    if dt == np.float64 or dt.kind in "iub":
        raise ValueError(f"{who}: {what} is {dt} (NumPy or Python numbers) but JAX's x64 is off, so it would run in "
                         f"float32 without a word; {_X64_HINT}")


def run_dtype(dtype, x, who: str) -> np.dtype:
    """The floating dtype of a run whose state is ``x``: ``dtype`` if given, else ``x``'s. float64
    (asked for, or NumPy/Python float64 input) with JAX's x64 off is an error, not a silent
    float32 (:func:`refuse_silent_float32`). A float32 ``x`` with x64 on, and no ``dtype``, runs
    in float32 with a warning: a float32 state is usually an accident when x64 is on (a float32
    array from elsewhere)."""
    if dtype is not None:
        dt = np.dtype(dtype)
        if dt.kind != "f" or dt.itemsize < 4:
            raise ValueError(f"{who}: dtype must be float32 or float64, got {dt}")
        if dt.itemsize == 8 and not jax.config.jax_enable_x64:
            raise ValueError(f"{who}: dtype float64 needs x64 in JAX, and it is off (JAX would silently compute in "
                             f"float32): {_X64_HINT}")
        return dt
    refuse_silent_float32(x, who)
    dt = input_dtype(x)
    if dt.kind != "f":  # left to the caller (integrate refuses it, ensemble converts)
        return dt
    if dt.itemsize < 4:
        raise ValueError(f"{who}: {dt} states are not supported (about {int(-np.log10(np.finfo(dt).eps))} digits: the "
                         "implicit solves cannot meet their tolerance); use float32 or float64")
    if dt.itemsize < 8 and jax.config.jax_enable_x64:
        warnings.warn(f"{who}: the initial state is {dt} while JAX's x64 is on, so the run is in {dt} (about "
                      f"{int(-np.log10(np.finfo(dt).eps))} digits); pass dtype=jnp.{dt} to say so, or a float64 "
                      "state", stacklevel=3)
    return dt


def cast_floats(tree, dtype):
    """Every floating array of ``tree`` (a system, a method) in ``dtype``; the rest unchanged."""
    return jax.tree.map(lambda a: a.astype(dtype) if eqx.is_inexact_array(a) and a.dtype != dtype else a, tree)


def run_inputs(y0, dtype, tree, who: str):
    """``(y0, dtype, tree)``: one run's initial state as numbers in the run's dtype
    (:func:`run_dtype`), and the floating arrays of ``tree`` (its system and method) cast to it."""
    if not isinstance(y0, jax.Array):
        y0 = as_numbers(y0, f"{who}: y0")
    rdtype = run_dtype(dtype, y0, who)
    return jnp.asarray(y0, rdtype), rdtype, cast_floats(tree, rdtype)


_SHAPES: dict = {}


def eval_shape_cached(fn, *args):
    """``eqx.filter_eval_shape(fn, *args)``, remembered for a plain function ``fn`` (lpjax's
    own; a callable object, such as a user's observable, is traced every time) by the
    arguments' structure, static values, shapes and dtypes (and JAX's x64 flag): the abstract
    trace behind a shape check costs milliseconds, on every call of an ensemble."""
    if not isinstance(fn, types.FunctionType):
        return eqx.filter_eval_shape(fn, *args)
    leaves, tree = jax.tree.flatten(args)
    key = (fn, tree, jax.config.jax_enable_x64,
           tuple((x.shape, x.dtype, getattr(x, "weak_type", False)) if eqx.is_array(x) else x for x in leaves))
    try:
        out = _SHAPES.get(key)
    except TypeError:  # an unhashable static value
        return eqx.filter_eval_shape(fn, *args)
    if out is None:
        if len(_SHAPES) >= 256:
            _SHAPES.clear()
        out = _SHAPES[key] = eqx.filter_eval_shape(fn, *args)
    return out


_INTERNAL = tuple(os.path.dirname(m.__file__) + os.sep for m in (eqx, jax)) + (os.path.dirname(__file__) + os.sep,)


def external_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the calling function point at the
    first frame of the call stack outside lpjax, JAX and Equinox: the user's own line."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    return level
