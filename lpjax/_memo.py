"""Memos by identity for the preparation of an ensemble run (:func:`lpjax.ensemble`).

Checking a system and a method, building the member program and describing the run cost about
a millisecond of Python on every call, the time the native kernel takes for 10⁴ members and a
hundred steps. A caller who runs the same system and method again (a sweep over initial
states, a benchmark) passes the same objects: :func:`by_identity` then returns what the first
call built. It remembers only arguments that cannot change in place: numbers, strings, dtypes,
frozen dataclasses, and pytrees (an Equinox system or method) whose leaves are all JAX arrays,
numbers or functions. A system holding a NumPy array, which can be written to, is prepared
again on every call. An Equinox module's static fields are not leaves: a mutable object kept in
one (a list changed in place) is not seen, as JAX's own caches do not see it either.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import types
from typing import Callable

import equinox as eqx
import jax
import numpy as np

__all__ = ["by_identity"]

_VALUES = (bool, int, float, complex, str, bytes, type(None), np.dtype, np.generic)
_IMMUTABLE = _VALUES + (jax.Array, types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)
SIZE = 8  # entries kept per memo (each holds its arguments alive)


def _by_value(a) -> bool:
    """A plain value (or a tuple of them), or a frozen dataclass that is not a pytree (a :class:`Plan`), not an
    Equinox module."""
    if isinstance(a, tuple):
        return all(_by_value(x) for x in a)
    return isinstance(a, _VALUES) or (dataclasses.is_dataclass(a) and not isinstance(a, (type, eqx.Module))
                                       and a.__dataclass_params__.frozen)


def _immutable(a) -> bool:
    return all(isinstance(leaf, _IMMUTABLE) for leaf in jax.tree.leaves(a))


def by_identity(fn: Callable) -> Callable:
    """``fn`` remembered for its last :data:`SIZE` argument lists: compared by value where an
    argument is a plain value or a frozen dataclass, else by identity (held alive, so that no
    other object takes its ``id``), and only when every argument is immutable (see the
    module's docstring); exceptions are not remembered."""
    cache: collections.OrderedDict = collections.OrderedDict()
    built = [0]

    def build(*args):
        built[0] += 1
        return fn(*args)

    @functools.wraps(fn)
    def memo(*args):
        try:
            key = tuple((type(a), a) if _by_value(a) else id(a) for a in args)
            hash(key)
        except TypeError:  # an unhashable value
            return build(*args)
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit[1]
        if not all(_by_value(a) or _immutable(a) for a in args):
            return build(*args)
        out = build(*args)
        cache[key] = (args, out)
        while len(cache) > SIZE:
            cache.popitem(last=False)
        return out

    memo.cache_clear = cache.clear
    memo.built = lambda: built[0]  # how many times ``fn`` ran (a test's count)
    return memo
