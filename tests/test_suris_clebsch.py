"""Clebsch case in an ideal fluid and Suris' map (7.17) (seed 000, sec. 7)."""

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
    suris_clebsch_lax,
)
from lpjax.systems import clebsch_case, lagrange_top

from .lax_defects import one_step_lax_defects
from .reference import states_at

METHOD = lpjax.SurisClebsch()


def _data(n):
    d = n * (n - 1) // 2
    rng = np.random.default_rng(n)
    B = jnp.asarray(rng.uniform(0.5, 2.0, n))
    a = rng.uniform(-1.0, 1.0, n)  # C by (7.7): the Clebsch condition (7.6) holds
    C = (B[:, None] - B[None, :]) / (a[:, None] - a[None, :] + np.eye(n))
    return d, B, jnp.asarray(C), jnp.asarray(rng.standard_normal(d + n))


@pytest.mark.parametrize("n", [3, 4, 5])
def test_vector_field_is_7_2(n):
    d, B, C, y = _data(n)
    g = so(n)
    M, P = g.hat(y[:d]), y[d:]
    Om = C * M  # (7.3)
    f = clebsch_case(B, C).vector_field(y)
    wedge = jnp.outer(P, B * P) - jnp.outer(B * P, P)
    np.testing.assert_allclose(g.hat(f[:d]), M @ Om - Om @ M + wedge, atol=1e-13)
    np.testing.assert_allclose(f[d:], -Om @ P, atol=1e-13)
    f1 = clebsch_case(B).vector_field(y)  # the flow (7.12)
    np.testing.assert_allclose(g.hat(f1[:d]), wedge, atol=1e-13)
    np.testing.assert_allclose(f1[d:], -M @ P, atol=1e-13)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_poisson_casimir_and_bounded_energy(n):
    d, B, _, y = _data(n)
    system = clebsch_case(B)
    assert poisson_defect(METHOD, system, y, 0.1) <= 1e-10  # measured ≤ 9e-16
    assert poisson_defect(lpjax.RK4(), system, y, 0.1) > 1e-9  # measured 2.7e-8, 8.6e-5
    sol = lpjax.integrate(system, METHOD, y, 0.05, 10_000, save_every=10)
    assert float(jnp.max(relative_invariant_error(system.casimirs, sol.ys))) <= 1e-12
    e = np.asarray(relative_invariant_error(system.energy, sol.ys))
    tenth = e.size // 10
    assert e[-tenth:].max() < 1.5 * e[1 : tenth + 1].max()  # O(ε) oscillation, no drift


def test_order_one_against_dop853():
    d, B, _, y = _data(3)
    system = clebsch_case(B)
    f = jax.jit(lambda x: system.vector_field(x))  # one compiled field for DOP853's calls
    ref = solve_ivp(lambda t, x: np.asarray(f(jnp.asarray(x))), (0, 1.0), np.asarray(y),
                    method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1]
    dts = [0.005, 0.0025, 0.00125, 0.000625]
    errs = [np.max(np.abs(x - ref)) for x in states_at(system, METHOD, y, dts, 1.0)]
    assert abs(empirical_order(dts, errs) - METHOD.order) <= 0.2  # measured 1.002


def test_gradient_wrt_B_matches_finite_differences():
    d, B, _, y = _data(3)

    @jax.jit
    def loss(B):
        return lpjax.integrate(clebsch_case(B), METHOD, y, 0.05, 100).ys[-1, 0]

    g = jax.grad(loss)(B)
    h = 1e-6
    fd = np.array([(loss(B.at[i].add(h)) - loss(B.at[i].add(-h))) / (2 * h) for i in range(3)])
    assert np.max(np.abs(fd)) > 1e-3
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("n", [3, 4])
def test_theorem_10_lax_matrix_is_isospectral_with_k_corrected(n):
    """(7.19) needs ``(I + (ε²/4)|P_k|² B)⁻¹``; the printed ``(I + (ε²/4) B)⁻¹`` is exact only on |P| = 1."""
    d, B, _, y = _data(n)
    system, eps = clebsch_case(B), 0.1
    g, eye = so(n), jnp.eye(n)
    lams = jnp.array([0.7, 1.3, 2.0])

    def printed(y, lam):
        M, P = g.hat(y[:d]), y[d:]
        Pc = (eye + 0.5 * eps * M) @ jnp.outer(P, P) @ (eye - 0.5 * eps * M)  # (7.20)
        return jnp.linalg.solve(eye + 0.25 * eps**2 * jnp.diag(B), lam * jnp.diag(B) + M + Pc / lam)  # (7.19)

    def corrected(y, lam):
        return suris_clebsch_lax(system, y, eps, lam)

    defects = one_step_lax_defects(system, METHOD, (printed, corrected), eps, lams)

    printed_defect, corrected_defect = defects(y)
    assert printed_defect > 1e-6  # measured 4.7e-6 (n = 3), 7.7e-4 (n = 4)
    assert corrected_defect <= 1e-13  # measured ≤ 3.2e-16
    x = np.asarray(y)
    on_leaf = defects(np.concatenate([x[:d], x[d:] / np.linalg.norm(x[d:])]))
    assert float(jnp.max(on_leaf)) <= 1e-13  # measured ≤ 8.2e-16 for both


def test_bad_input():
    with pytest.raises(ValueError, match=r"B must have shape \(n,\)"):
        clebsch_case(jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="C must be symmetric"):
        clebsch_case(jnp.ones(3), jnp.arange(9.0).reshape(3, 3))
    with pytest.raises(TypeError, match="SurisClebsch steps only"):
        lpjax.integrate(clebsch_case(jnp.ones(3), jnp.ones((3, 3)) * 2), METHOD, jnp.ones(6), 0.1, 1)
    with pytest.raises(TypeError, match="SurisClebsch steps only"):
        lpjax.integrate(lagrange_top(3), METHOD, jnp.ones(6), 0.1, 1)
