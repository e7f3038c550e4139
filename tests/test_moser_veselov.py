"""Moser–Veselov discrete rigid body (seed 003, sec. 3.4) and the Poisson-map defect."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.diagnostics import empirical_order, poisson_defect, relative_invariant_error
from lpjax.systems import heavy_top, kida_vortex, rigid_body, rigid_body_n

from .reference import euler_top_exact, states_at

INERTIA = np.array([1.0, 2.0, 3.0])
M0 = np.array([1.0, 0.5, 0.8])
J4 = jnp.array([0.5, 1.0, 1.5, 2.0])


def test_order_two_against_exact_euler_top():
    exact = euler_top_exact(INERTIA, M0, np.array([10.0]))[0]
    dts = [0.1, 0.05, 0.025, 0.0125]
    errs = [np.max(np.abs(y - exact)) for y in states_at(rigid_body(INERTIA), lpjax.MoserVeselov(), M0, dts, 10.0)]
    assert abs(empirical_order(dts, errs) - 2) <= 0.2  # measured 2.004


def test_casimir_and_energy_kept_to_roundoff():
    """|M|² and, as measured, the energy itself: its error does not depend on dt."""
    system = rigid_body(INERTIA)
    for dt in (0.5, 0.1):
        sol = lpjax.integrate(system, lpjax.MoserVeselov(), M0, dt, 10_000, save_every=10)
        assert float(jnp.max(relative_invariant_error(system.casimirs, sol.ys))) <= 1e-12  # measured 1.2e-14
        assert float(jnp.max(relative_invariant_error(system.energy, sol.ys))) <= 1e-12  # measured 7.5e-15
    rk4 = lpjax.integrate(system, lpjax.RK4(), M0, 0.5, 1000, save_every=10)
    assert float(jnp.max(relative_invariant_error(system.energy, rk4.ys))) > 1e-4


def test_n4_keeps_trace_invariants():
    system = rigid_body_n(J4)
    y0 = jnp.asarray(np.random.default_rng(0).standard_normal(6))
    sol = lpjax.integrate(system, lpjax.MoserVeselov(), y0, 0.05, 4000, save_every=10)
    drift = np.asarray(relative_invariant_error(system.casimirs, sol.ys)).max(axis=0)  # tr M², tr M⁴
    assert drift.shape == (2,) and np.all(drift <= 1e-12)  # measured 1.3e-14, 2.6e-14


def test_n3_so3_and_son_coordinates_agree():
    """rigid_body(I) on so3 and rigid_body_n(J) on so(3) with I1 = J2 + J3 etc. are the same map."""
    J = jnp.array([2.0, 1.0, 0.0]) + 0.25
    inertia = jnp.array([J[1] + J[2], J[0] + J[2], J[0] + J[1]])
    x = jnp.array([0.3, -0.7, 1.1])  # so3 coordinates (M1, M2, M3)
    y = jnp.array([-x[2], x[1], -x[0]])  # so(3) upper triangle (M12, M13, M23)
    a = lpjax.integrate(rigid_body(inertia), lpjax.MoserVeselov(), x, 0.1, 50).ys[-1]
    b = lpjax.integrate(rigid_body_n(J), lpjax.MoserVeselov(), y, 0.1, 50).ys[-1]
    np.testing.assert_allclose(jnp.array([-b[2], b[1], -b[0]]), a, atol=1e-13)


def test_poisson_defect_of_structure_preserving_maps_and_rk4():
    cases = [(rigid_body(INERTIA), jnp.asarray(M0)), (rigid_body_n(J4), jnp.asarray(np.linspace(-1, 1, 6)))]
    for system, y in cases:
        assert poisson_defect(lpjax.MoserVeselov(), system, y, 0.1) <= 1e-10  # measured ≤ 2e-15
        assert poisson_defect(lpjax.RK4(), system, y, 0.1) > 1e-12  # measured 8.8e-9 and 1.8e-12
    assert poisson_defect(lpjax.Collective(), *cases[0], 0.1) <= 1e-10  # measured ≤ 2e-15
    kida = kida_vortex(0.5, -1.0)
    mu = jnp.array([1.0, 0.08, -1.12])
    assert poisson_defect(lpjax.Collective(), kida, mu, 0.1) <= 1e-10
    assert poisson_defect(lpjax.RK4(), kida, mu, 0.1) > 1e-9
    assert poisson_defect(lpjax.GaussLegendre(2), kida, mu, 0.1) > 1e-10  # GL on mu is not Poisson


def test_gradient_wrt_inertia_matches_finite_differences():
    @jax.jit
    def loss(inertia):
        return lpjax.integrate(rigid_body(inertia), lpjax.MoserVeselov(), M0, 0.1, 50).ys[-1, 1]

    I = jnp.asarray(INERTIA)
    g = jax.grad(loss)(I)
    h = 1e-6
    fd = np.array([(loss(I.at[i].add(h)) - loss(I.at[i].add(-h))) / (2 * h) for i in range(3)])
    assert np.all(np.abs(fd) > 1e-3)
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_rejects_other_systems_and_reports_nonconvergence():
    with pytest.raises(TypeError, match="MoserVeselov steps only the free rigid body"):
        lpjax.integrate(heavy_top(INERTIA, jnp.ones(3), 1.0), lpjax.MoserVeselov(), jnp.ones(6), 0.1, 1)
    with pytest.raises(TypeError, match="MoserVeselov steps only the free rigid body"):
        poisson_defect(lpjax.MoserVeselov(), kida_vortex(1.0, 0.0), jnp.ones(3), 0.1)
    sol = lpjax.integrate(rigid_body(INERTIA), lpjax.MoserVeselov(max_iters=1), M0, 0.5, 5, throw=False)
    assert sol.result == lpjax.RESULTS.implicit_solve_failed
