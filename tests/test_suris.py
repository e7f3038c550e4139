"""Suris' explicit maps for the n-dimensional Lagrange top (seed 000, secs 5–6)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import lpjax
from lpjax.algebras import so
from lpjax.diagnostics import (
    empirical_order,
    lax_invariants,
    poisson_defect,
    relative_invariant_error,
    suris_lagrange_lax,
)
from lpjax.systems import heavy_top_n, lagrange_top, rigid_body

from .lax_defects import one_step_lax_defects
from .reference import states_at

METHOD = lpjax.SurisLagrangeTop()
CASES = [(n, frame) for n in (3, 4, 5) for frame in ("rest", "moving")]


def _y0(n, seed=None):
    d = n * (n - 1) // 2
    return jnp.asarray(np.random.default_rng(n if seed is None else seed).standard_normal(d + n))


@pytest.mark.parametrize("n", [3, 4, 5])
def test_rest_frame_is_5_12_and_moving_frame_is_4_5_with_5_1(n):
    d = n * (n - 1) // 2
    g = so(n)
    y = _y0(n, seed=10 + n)
    p = jnp.asarray(np.random.default_rng(n).standard_normal(n))
    rest = lagrange_top(n, frame="rest", p=p)
    m, a = g.hat(y[:d]), y[d:]
    f = rest.vector_field(y)
    np.testing.assert_allclose(g.hat(f[:d]), jnp.outer(a, p) - jnp.outer(p, a), atol=1e-14)
    np.testing.assert_allclose(f[d:], m @ a, atol=1e-14)
    alpha = 0.7
    J = jnp.array([alpha / 2] * (n - 1) + [1 - alpha / 2])
    A = jnp.zeros(n).at[-1].set(1.0)
    moving = lagrange_top(n, alpha=alpha, frame="moving")
    np.testing.assert_allclose(moving.vector_field(y), heavy_top_n(J, A).vector_field(y), atol=1e-14)


@pytest.mark.parametrize("n, frame", CASES)
def test_integrals_and_casimir_kept_over_1e4_steps(n, frame):
    system = lagrange_top(n, alpha=0.6, frame=frame)
    dt = 0.05
    sol = lpjax.integrate(system, METHOD, _y0(n), dt, 10_000, save_every=100)
    integral = relative_invariant_error(lambda y: METHOD.integral(system, y, dt), sol.ys)
    assert float(jnp.max(integral)) <= 1e-12  # (6.6) / (6.21); measured ≤ 1.1e-13
    assert float(jnp.max(relative_invariant_error(system.casimirs, sol.ys))) <= 1e-12
    energy = relative_invariant_error(system.energy, sol.ys)
    assert float(jnp.max(energy)) > 1e-4  # the continuous energy is not conserved: only H_ε is


@pytest.mark.parametrize("n, frame", CASES)
def test_poisson_map_and_rk4_is_not(n, frame):
    system = lagrange_top(n, alpha=0.6, frame=frame)
    y = _y0(n)
    assert poisson_defect(METHOD, system, y, 0.1) <= 1e-10  # measured ≤ 1.1e-15
    assert poisson_defect(lpjax.RK4(), system, y, 0.1) > 1e-7  # measured ≥ 5e-6


@pytest.mark.parametrize("frame", ["rest", "moving"])
def test_order_one_against_dop853(frame):
    system = lagrange_top(3, alpha=0.6, frame=frame)
    y0 = _y0(3)
    T = 1.0
    f = jax.jit(lambda y: system.vector_field(y))  # one compiled field for DOP853's calls
    ref = solve_ivp(lambda t, y: np.asarray(f(jnp.asarray(y))), (0, T), np.asarray(y0),
                    method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1]
    dts = [0.005, 0.0025, 0.00125, 0.000625]
    errs = [np.max(np.abs(y - ref)) for y in states_at(system, METHOD, y0, dts, T)]
    assert abs(empirical_order(dts, errs) - METHOD.order) <= 0.2  # measured 1.00 and 0.99


def test_gradient_wrt_alpha_matches_finite_differences():
    y0 = _y0(3)

    @jax.jit
    def loss(alpha):
        return lpjax.integrate(lagrange_top(3, alpha=alpha, frame="moving"), METHOD, y0, 0.05, 100).ys[-1, 2]

    g = jax.grad(loss)(0.6)
    h = 1e-6
    fd = (loss(0.6 + h) - loss(0.6 - h)) / (2 * h)
    assert abs(float(fd)) > 1e-3
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_bad_input():
    with pytest.raises(ValueError, match="alpha must be finite and > 0"):
        lagrange_top(3, alpha=0.0)
    with pytest.raises(ValueError, match="integer n >= 3"):
        lagrange_top(2)
    with pytest.raises(ValueError, match="frame must be"):
        lagrange_top(3, frame="body")
    with pytest.raises(ValueError, match=r"p must have shape \(4,\)"):
        lagrange_top(4, p=jnp.ones(3))
    with pytest.raises(ValueError, match=r"state must have shape \(6,\)"):
        lpjax.integrate(lagrange_top(3), METHOD, jnp.ones(8), 0.1, 1)  # P of the wrong length
    with pytest.raises(TypeError, match="SurisLagrangeTop steps only"):
        lpjax.integrate(rigid_body(jnp.ones(3)), METHOD, jnp.ones(3), 0.1, 1)


def test_theorem_7_lax_matrix_is_isospectral_with_b_corrected():
    """(6.15) needs ``b_k = (I − εm_k/2) a_k + (ε²/4)|a_k|² p``; the printed ``(ε²/4) p`` is exact only on |a| = 1."""
    n, d, eps = 3, 3, 0.1
    system = lagrange_top(n, frame="rest", p=jnp.array([0.2, -0.1, 1.0]))
    p = system.hamiltonian.p
    y0 = jnp.asarray(np.random.default_rng(1).standard_normal(d + n))  # |a| = 1.65
    lams = jnp.array([0.7, 1.3, 2.0])

    def printed(y, lam):
        m, a = so(n).hat(y[:d]), y[d:]
        b = (jnp.eye(n) - 0.5 * eps * m) @ a + 0.25 * eps**2 * p  # (6.15) as printed
        col = lam * b - p / lam
        return jnp.block([[m, col[:, None]], [col[None, :], jnp.zeros((1, 1))]])  # (6.14)

    def corrected(y, lam):
        return suris_lagrange_lax(system, y, eps, lam)

    defects = one_step_lax_defects(system, METHOD, (printed, corrected), eps, lams)

    printed_defect, corrected_defect = defects(y0)
    assert printed_defect > 1e-5  # measured 2.4e-4
    assert corrected_defect <= 1e-13  # measured 3.6e-16
    x = np.asarray(y0)
    on_leaf = defects(np.concatenate([x[:d], x[d:] / np.linalg.norm(x[d:])]))
    assert float(jnp.max(on_leaf)) <= 1e-13  # measured 3.2e-16 for both
