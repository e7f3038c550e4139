"""The native kernel's ``cond`` around loops, against ``vmap`` bit for bit: a branch that one
member in a few takes (the listed lanes, its loops vectorized over the list), two branches
with loops (a branch per member), a three-way switch, and such a ``cond`` inside a ``while``
whose members end at different trips (only the members still going may take it)."""

from typing import Callable, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from lpjax._ensemble._kernels._native import run_native_host
from lpjax.kernels import Native


def _halve_until(y, bound):
    """A loop of a member's own length: halve y[0] until it is under ``bound``."""
    return lax.while_loop(lambda y: y[0] > bound, lambda y: y.at[0].multiply(0.5).at[1].add(1.0), y)


def _rare(y):  # one branch does anything: the lanes that take it are listed
    return lax.cond(y[0] > 3.0, lambda y: _halve_until(y, 1.0), lambda y: y, y) * 1.25


def _both(y):  # both branches loop: a branch per member
    return lax.cond(y[1] > 4.0, lambda y: _halve_until(y, 0.5), lambda y: _halve_until(y, 2.0).at[1].add(-0.5), y)


def _switch(y):  # three branches, one of them idle
    k = jnp.clip(y[1].astype(jnp.int32) % 3, 0, 2)
    return lax.switch(k, [lambda y: y, lambda y: _halve_until(y, 1.5), lambda y: _halve_until(y, 0.7) + 0.25], y) * 1.5


def _inside_while(y):  # a rare branch in a masked while: members stop after 1 + y[1] mod 4 trips
    n = 1 + (y[1].astype(jnp.int32) % 4)

    def body(c):
        y, i = c
        return _rare(y) - 0.5, i + 1

    return lax.while_loop(lambda c: c[1] < n, body, (y, jnp.zeros((), jnp.int32)))[0]


class _Branching(eqx.Module):
    """A member program whose step is ``fn`` on a state of 2 (observed at every step)."""

    fn: Callable = eqx.field(static=True)
    n_steps: ClassVar[int] = 12
    save_every: ClassVar[int] = 1
    sorts: ClassVar[bool] = False

    def init(self, dyn, y0):
        return y0

    def step(self, dyn, carry):
        return self.fn(carry)

    def observe(self, dyn, carry):
        return carry

    def summary(self, dyn, carry):
        return carry, jnp.zeros((), jnp.int32), {}

    def finished(self, dyn, carry):
        return None


@pytest.mark.parametrize("fn", [_rare, _both, _switch, _inside_while], ids=lambda f: f.__name__.strip("_"))
def test_a_cond_around_loops_is_vmap_s(fn):
    rng = np.random.default_rng(5)
    y0s = np.stack([rng.uniform(0.1, 8.0, 300), rng.integers(0, 9, 300).astype(float)], 1)
    member = _Branching(fn)
    _, saved = run_native_host(member, jnp.zeros(1), y0s, 12, False, Native(chunk=64))
    ys, ref = jnp.asarray(y0s), [y0s]
    for _ in range(12):
        ys = jax.jit(jax.vmap(fn))(ys)
        ref.append(np.asarray(ys))
    ref = np.stack(ref, 1)
    assert np.unique(ref[:, 1:, 1]).size > 5  # (the branches' loops ran, for some members)
    np.testing.assert_array_equal(np.asarray(saved), ref)
