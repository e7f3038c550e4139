"""lpjax.Processed: effective orders 6 and 8 at the outputs against the exact Euler top, the
kernel alone of order 4, the processor applied only at the outputs, and clear refusals."""

import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax._integrator._schemes import PROCESSED_SCHEMES, composition_coefficients, processor_fractions
from lpjax.diagnostics import empirical_order
from lpjax.systems import heavy_top, rigid_body

from .reference import euler_top_exact, states_at

I = np.array([1.0, 2.0, 3.0])
RB = rigid_body(jnp.asarray(I))
M0 = jnp.array([0.4, -0.8, 1.5])
split = lpjax.LiePoissonSplitting.for_system


@pytest.mark.parametrize("scheme", list(PROCESSED_SCHEMES))
def test_the_tables_sum_as_they_should(scheme):
    """The kernel's steps add up to 1 and meet Σγ³ = 0 (order 4 alone); the processor's to 0."""
    g = composition_coefficients(scheme)
    assert abs(g.sum() - 1) <= 1e-15 and abs(np.sum(g ** 3)) <= 1e-13
    z = processor_fractions(scheme)
    assert abs(z.sum()) <= 1e-15 and abs(z[: len(z) // 2].sum()) <= 1e-15


_ORDERS = [  # (scheme, flow, dt_max, order): measured 6.01, 5.92, 7.94 (the last error 4e-13)
    ("blanes6", "exact", 0.8, 6), ("blanes6", "auto", 0.8, 6), ("blanes-casas-murua8", "auto", 1.0, 8)]


@pytest.mark.parametrize("scheme, flow, dt_max, order", _ORDERS, ids=[f"{a}-{b}" for a, b, *_ in _ORDERS])
def test_the_effective_order_at_the_outputs(scheme, flow, dt_max, order):
    """The rigid body's splitting processed, T = 4: the effective order at the saves, where the
    kernel alone is of order 4 (measured 4.3 on the same steps)."""
    T = 4.0
    ref = np.asarray(euler_top_exact(I, np.asarray(M0), T))
    method = lpjax.Processed(split(RB, flow), scheme)
    assert method.order == order and method.kernel.order == 4
    dts = [dt_max / k for k in (1, 2, 3, 4)]
    errs = [float(np.max(np.abs(y - ref))) for y in states_at(RB, method, M0, dts, T)]
    kernel = [float(np.max(np.abs(y - ref))) for y in states_at(RB, method.kernel, M0, dts, T)]
    assert abs(empirical_order(dts, errs) - order) <= 0.2, errs
    assert abs(empirical_order(dts, kernel) - 4) <= 0.4 and errs[-1] < 0.5 * kernel[-1], kernel


def test_the_processor_runs_at_the_outputs_and_the_casimirs_stay():
    ht = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
    y0 = jnp.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386])
    method = lpjax.Processed(split(ht), "blanes6")
    sol = lpjax.integrate(ht, method, y0, 0.1, 400, save_every=100)
    state = method.init(ht, y0, 0.1)
    for _ in range(100):
        state = method.step(ht, state, 0.1)[0]
    np.testing.assert_allclose(sol.ys[1], method.observe(ht, state), rtol=0, atol=1e-14)
    assert float(jnp.max(jnp.abs(method.kernel.observe(ht, state[0]) - method.observe(ht, state)))) > 1e-6
    assert float(jnp.max(jnp.abs(jnp.sum(sol.ys[:, 3:] ** 2, 1) - 1))) <= 1e-14
    np.testing.assert_allclose(method.observe(ht, method.init(ht, y0, 0.1)), y0, rtol=0, atol=1e-14)  # 1.3e-15


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="unknown scheme 'nope'; the schemes are 'blanes6'"):
        lpjax.Processed(split(RB), "nope")
    with pytest.raises(ValueError, match="GaussLegendre is of order 4; compose it with Composition instead"):
        lpjax.Processed(lpjax.GaussLegendre(2))
    with pytest.raises(TypeError, match="inner must be an lpjax integrator"):
        lpjax.Processed("splitting")


def test_a_processed_suris_map_runs_its_adjoint_in_each_stage():
    """A first-order inner method with an adjoint: each stage is ``Φ*_{h/2} ∘ Φ_{h/2}``; the
    Lagrange top to T = 4 against DOP853 at 1e-13, effective order 6 (measured 5.9x below)."""
    from scipy.integrate import solve_ivp

    from lpjax.systems import lagrange_top

    top, y0, T = lagrange_top(3, frame="rest"), jnp.array([0.3, -0.2, 0.5, 0.0, 0.6, 0.8]), 4.0
    field = lambda t, y: np.asarray(top.vector_field(jnp.asarray(y)))  # noqa: E731
    ref = solve_ivp(field, (0, T), np.asarray(y0), method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1]
    method = lpjax.Processed(lpjax.SurisLagrangeTop(), "blanes6")
    dts = [0.2 / k for k in (1, 2, 3, 4)]
    errs = [float(np.max(np.abs(y - ref))) for y in states_at(top, method, y0, dts, T)]
    assert abs(empirical_order(dts, errs) - 6) <= 0.2, errs
