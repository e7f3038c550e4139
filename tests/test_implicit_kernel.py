"""The implicit kernel's modes and Gauss–Legendre's stage predictor and compensated update."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax._integrator.gauss_legendre import _combine, _extrapolation, _stage_fields
from lpjax.diagnostics import relative_invariant_error
from lpjax.systems import heavy_top, rigid_body

INERTIA = jnp.array([1.0, 2.0, 3.0])
M0 = jnp.array([1.0, 0.5, 0.8])
RB = rigid_body(INERTIA)


@pytest.mark.parametrize("s", [1, 2, 3, 4])
def test_extrapolation_weights_reproduce_polynomials_of_degree_s(s):
    """E evaluates at 1 + c_j the polynomial through (0, 0) and (c_i, p(c_i)): exact for deg ≤ s."""
    _, _, c = lpjax._integrator.gauss_legendre_tableau(s)
    E = _extrapolation(c)
    for k in range(1, s + 1):
        np.testing.assert_allclose(E @ c**k, (1 + c) ** k, rtol=1e-12, atol=1e-12)


def _converged(system, y, dt, Z, method):
    A, _, _ = method.tableau
    for _ in range(60):  # fixed point to roundoff, from the given start
        Z = dt * _combine(A, _stage_fields(system.vector_field, y, Z))
    return Z


def test_predictor_starts_an_order_of_magnitude_closer():
    """Error of the starting stages after a few steps: O(dt³) with the predictor, O(dt²) without."""
    dt = 0.1
    method = lpjax.GaussLegendre(2)
    state = method.init(RB, M0, dt)
    for _ in range(3):
        state, _, _ = method.step(RB, state, dt)
    _, _, c = method.tableau
    plain = dt * jnp.asarray(c)[:, None] * RB.vector_field(state.y)[None, :]
    exact = _converged(RB, state.y, dt, state.Z, method)
    ratio = float(jnp.max(jnp.abs(plain - exact)) / jnp.max(jnp.abs(state.Z - exact)))
    assert ratio > 5  # measured 15 (5.0e-5 against 7.3e-4)


def test_stepping_on_from_a_state_is_bit_identical_to_one_run():
    method = lpjax.GaussLegendre(2)
    sol = lpjax.integrate(RB, method, M0, 0.1, 40, save_every=20)
    step = jax.jit(lambda st: method.step(RB, st, jnp.asarray(0.1))[0])
    state = method.init(RB, M0, jnp.asarray(0.1))
    for k in range(40):
        state = step(state)
        if k == 19:
            assert np.array_equal(np.asarray(state.y), np.asarray(sol.ys[1]))
    assert np.array_equal(np.asarray(state.y), np.asarray(sol.ys[2]))


@pytest.mark.parametrize("solver", ["newton", "fixed_point"])
def test_early_exit_matches_the_fixed_count_and_does_less_work(solver):
    fixed = lpjax.GaussLegendre(2, solver=solver, early_exit=False)
    early = lpjax.GaussLegendre(2, solver=solver)
    a = lpjax.integrate(RB, fixed, M0, 0.1, 1000, save_every=100)
    b = lpjax.integrate(RB, early, M0, 0.1, 1000, save_every=100)
    assert float(jnp.max(jnp.abs(a.ys - b.ys))) <= 1e-13  # measured 1.5e-14 (newton), 1.4e-15
    assert b.result == lpjax.RESULTS.successful
    mean = float(b.stats["mean_iterations"])
    assert 1 <= mean < fixed.max_iters and int(b.stats["max_iterations"]) <= fixed.max_iters
    # measured 2.00 (newton, of 6; 3.61 with the Jacobian at y) and 6.92 (fixed point, of 30) updates
    if solver == "newton":  # the Jacobians at the predicted stages: two updates reach roundoff
        assert mean <= 2.0 + 1e-3


def test_early_exit_iterates_to_roundoff_so_invariants_do_not_drift():
    """Stopping as soon as ``tol`` is met leaves an error of one sign per step (measured with such a
    stopping rule: 1.3e-9 Casimir drift after 10⁶ steps); iterating to roundoff keeps it there."""
    method = lpjax.GaussLegendre(2, solver="fixed_point")
    sol = lpjax.integrate(RB, method, M0, 0.1, 100_000, save_every=1000)
    drift = float(jnp.max(relative_invariant_error(RB.casimirs, sol.ys)))
    assert drift <= 1e-13  # measured 4.2e-15


def test_early_exit_under_vmap_equals_the_loop():
    system = heavy_top(INERTIA, jnp.array([0.0, 0.1, 1.0]), 1.0)
    y0s = jnp.asarray(np.random.default_rng(3).standard_normal((4, 6)))
    run = lambda y0: lpjax.integrate(system, lpjax.GaussLegendre(2), y0, 0.05, 50).ys[-1]  # noqa: E731
    batched = jax.vmap(run)(y0s)
    looped = jnp.stack([run(y0) for y0 in y0s])
    np.testing.assert_allclose(batched, looped, rtol=0, atol=1e-14)


def test_early_exit_reports_nonconvergence():
    sol = lpjax.integrate(RB, lpjax.GaussLegendre(2, solver="fixed_point", max_iters=3), 3 * M0, 0.5, 5, throw=False)
    assert sol.result == lpjax.RESULTS.implicit_solve_failed
    assert int(sol.stats["num_failed_steps"]) == 5


def _padé22(Z):
    """GL4's stability function, the (2, 2) Padé approximant of exp: exact for a linear flow."""
    eye = np.eye(Z.shape[0])
    return np.linalg.solve(eye - Z / 2 + Z @ Z / 12, eye + Z / 2 + Z @ Z / 12)


STIFF_OMEGA = np.array([100.0, 1.0])


def _stiff_oscillators():
    """H = ½ Σ (ω_i² q_i² + p_i²), ω = (100, 1): y' = A y with eigenvalues ±100i and ±i."""
    return lpjax.CanonicalSystem(lambda y: 0.5 * jnp.sum(STIFF_OMEGA**2 * y[:2] ** 2 + y[2:] ** 2), n=2)


def test_auto_stage_solver_survives_a_stiff_step():
    """At dt = 0.1 (dt ω = 10) the fixed point diverges and reports failure; "auto" switches to
    simplified Newton within the step and lands on GL4's exact linear map, the (2, 2) Padé
    approximant R(dt A), to roundoff, in a few updates per step."""
    system, y0, dt, n = _stiff_oscillators(), jnp.array([0.01, 1.0, 0.0, 0.0]), 0.1, 20
    A = np.zeros((4, 4))
    A[:2, 2:] = np.eye(2)
    A[2:, :2] = -np.diag(STIFF_OMEGA**2)
    fixed = lpjax.integrate(system, lpjax.GaussLegendre(2, solver="fixed_point"), y0, dt, n, throw=False)
    assert fixed.result == lpjax.RESULTS.implicit_solve_failed
    auto = lpjax.integrate(system, lpjax.GaussLegendre(2, solver="auto"), y0, dt, n)
    expected = np.linalg.matrix_power(_padé22(dt * A), n) @ np.asarray(y0)
    assert np.max(np.abs(np.asarray(auto.ys[-1]) - expected)) <= 1e-13 * np.max(np.abs(expected))  # 1.7e-14
    # fixed-point updates until θ ≥ ½ (two), then Newton: one update solves, one confirms
    assert int(auto.stats["max_iterations"]) <= 2 + 3, auto.stats  # 5


@pytest.mark.parametrize("early_exit", [True, False])
def test_auto_stage_solver_is_the_fixed_point_where_that_converges(early_exit):
    """On a non-stiff run the Newton phase never runs: "auto" equals the fixed point bit for
    bit, with the same iteration counts."""
    system, y0 = rigid_body(jnp.array([1.0, 2.0, 3.0])), jnp.array([1.0, 0.5, 0.8])
    runs = [lpjax.integrate(system, lpjax.GaussLegendre(2, solver=s, early_exit=early_exit), y0, 0.1, 500, save_every=50)
            for s in ("fixed_point", "auto")]
    np.testing.assert_array_equal(runs[0].ys, runs[1].ys)
    assert {k: int(v) for k, v in runs[0].stats.items()} == {k: int(v) for k, v in runs[1].stats.items()}
