"""Reverse mode through integrate is checkpointed: same gradients, memory growing as about √n."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.systems import heavy_top, lagrange_top

CASES = {
    "GL4 heavy top": (heavy_top(jnp.array([1.0, 1.0, 0.5]), jnp.array([0.1, 0.0, 1.0]), 1.0), lpjax.GaussLegendre(2),
                      jnp.array([0.3, 0.2, 2.0, 0.0, np.sin(0.4), np.cos(0.4)])),
    "Suris": (lagrange_top(3, frame="rest"), lpjax.SurisLagrangeTop(), jnp.array([0.3, -0.2, 0.5, 0.0, 0.6, 0.8])),
}


def _loss(system, y0, method, n, save_every, plain=False):
    if plain:
        def step(state, _):
            return method.step(system, state, 0.01)[0], None

        return jnp.sum(method.observe(system, jax.lax.scan(step, method.init(system, y0, 0.01), None, length=n)[0]))
    return jnp.sum(lpjax.integrate(system, method, y0, 0.01, n, save_every=save_every).ys[-1])


@pytest.mark.parametrize("name, n, save_every", [("GL4 heavy top", 400, 20), ("Suris", 64, 64), ("Suris", 50, 1),
                                                 ("Suris", 37, 37)])
def test_checkpointed_gradient_equals_the_plain_scan_gradient(name, n, save_every):
    """Loops of 16 or more are checkpointed: both levels (400 = 20 saves × 20 steps), steps only,
    saves only, and a length (37) with a remainder group."""
    system, method, y0 = CASES[name]
    g = eqx.filter_grad(_loss)(system, y0, method, n, save_every)
    ref = eqx.filter_grad(_loss)(system, y0, method, n, save_every, plain=True)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def _temp_bytes(name, n, plain):
    system, method, y0 = CASES[name]
    grad = eqx.filter_jit(eqx.filter_grad(lambda s, y: _loss(s, y, method, n, n, plain)))
    return grad.lower(system, y0).compile().compiled.memory_analysis().temp_size_in_bytes


def test_gradient_memory_grows_sublinearly():
    """XLA's temporary buffers of the compiled gradient, 400 against 6400 steps (16×); the GL4
    heavy top is measured in ``benchmarks/gradients.py`` (exponent 0.48 there too)."""
    name = "Suris"
    growth = _temp_bytes(name, 6400, False) / _temp_bytes(name, 400, False)
    plain = _temp_bytes(name, 6400, True) / _temp_bytes(name, 400, True)
    assert growth <= 16**0.6  # measured about 16^0.45 (√n grouping); a plain scan grows 16×
    assert plain >= 16**0.95
