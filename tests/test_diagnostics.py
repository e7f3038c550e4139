"""Diagnostics helpers."""

import jax.numpy as jnp
import numpy as np
import pytest

from lpjax.diagnostics import empirical_order, relative_invariant_error


def test_empirical_order_recovers_power_law_with_noise():
    dts = 2.0 ** -np.arange(2, 8)
    rng = np.random.default_rng(0)
    errs = 3.0 * dts**4 * np.exp(0.05 * rng.standard_normal(dts.size))
    assert empirical_order(dts, errs) == pytest.approx(4.0, abs=0.1)
    assert empirical_order(dts, 3.0 * dts**2) == pytest.approx(2.0, abs=1e-12)


@pytest.mark.parametrize(
    "dts, errs, match",
    [([0.1], [1e-3], "at least two"), ([0.1, 0.05], [1e-3, 0.0], "> 0"), ([0.1, np.nan], [1, 2], "finite")],
)
def test_empirical_order_bad_input(dts, errs, match):
    with pytest.raises(ValueError, match=match):
        empirical_order(dts, errs)


def test_relative_invariant_error_scalar_and_vector():
    ys = jnp.array([[1.0, 0.0], [1.1, 0.0], [0.9, 0.2]])
    e = relative_invariant_error(lambda y: jnp.sum(y**2), ys)
    np.testing.assert_allclose(e, [0.0, 0.21, 0.15], atol=1e-15)
    v = relative_invariant_error(lambda y: y, ys)  # second component starts at 0: absolute error
    np.testing.assert_allclose(v, [[0, 0], [0.1, 0], [0.1, 0.2]], atol=1e-15)
    with pytest.raises(ValueError, match=r"shape \(T, n\)"):
        relative_invariant_error(jnp.sum, jnp.ones(3))
