"""Collective integrators (seed 002, sec. 5): Kida vortex and the heavy top on a movable base."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import lpjax
from lpjax.diagnostics import empirical_order, relative_invariant_error
from lpjax.systems import (
    kida_initial_state,
    kida_lambda_phi_from_mu,
    kida_mu_from_lambda_phi,
    kida_vortex,
    movable_base_mu,
    movable_base_top,
    rigid_body,
)

from .reference import euler_top_exact, states_at

EPS, OMEGA = 0.5, -1.0
OMEGA0, V0 = jnp.array([0.1, 0.2, 0.1]), jnp.zeros(3)
TH0, PH0 = np.pi / 3, np.pi / 20
GAMMA0 = jnp.array([np.cos(TH0) * np.sin(PH0), np.sin(TH0) * np.sin(PH0), np.cos(PH0)])


@pytest.fixture(scope="module")
def kida_runs():
    """Fig. 2 setting: t in [0, 1000], dt = 0.1, paper's initial data."""
    system = kida_vortex(EPS, OMEGA)
    mu0 = jnp.asarray(kida_initial_state(EPS, OMEGA))
    out = {}
    for name, method in [("collective", lpjax.Collective(lpjax.GaussLegendre(2))), ("rk4", lpjax.RK4())]:
        out[name] = lpjax.integrate(system, method, mu0, 0.1, 10_000, save_every=10)
    return system, out


def test_kida_initial_state_is_the_papers():
    system = kida_vortex(EPS, OMEGA)
    mu0 = jnp.asarray(kida_initial_state(EPS, OMEGA))
    assert float(mu0[0]) == 1.0
    assert float(system.casimirs(mu0)[0]) == pytest.approx(-0.25, abs=1e-13)
    assert float(system.energy(mu0)) == pytest.approx(1.0, abs=1e-13)


def test_kida_collective_keeps_casimir_and_rk4_drifts(kida_runs):
    system, runs = kida_runs
    coll = float(jnp.max(relative_invariant_error(system.casimirs, runs["collective"].ys)))
    rk4 = float(jnp.max(relative_invariant_error(system.casimirs, runs["rk4"].ys)))
    assert coll <= 1e-11
    assert rk4 > 1e-6 and rk4 > 1e3 * coll


def test_kida_collective_energy_has_no_secular_trend(kida_runs):
    system, runs = kida_runs
    e = np.asarray(relative_invariant_error(system.energy, runs["collective"].ys))
    tenth = e.size // 10
    assert e[-tenth:].max() < 1.5 * e[1 : tenth + 1].max()
    e_rk4 = np.asarray(relative_invariant_error(system.energy, runs["rk4"].ys))
    assert e_rk4[-tenth:].max() > 3 * e_rk4[1 : tenth + 1].max()  # RK4 drifts: the check can fail


def _kida_18(t, x):
    """Kida's equations (18) for (λ, φ)."""
    lam, phi = x
    return [
        -EPS * lam * np.sin(2 * phi),
        lam / (1 + lam) ** 2 + OMEGA / 2 + EPS / 2 * (1 + lam**2) / (1 - lam**2) * np.cos(2 * phi),
    ]


def test_kida_collective_matches_kidas_equations_on_the_physical_level():
    """mu(t) from the collective method vs DOP853 on (18), mapped by the corrected (21)."""
    lam0, phi0 = 0.5, 0.3
    system = kida_vortex(EPS, OMEGA)
    mu0 = kida_mu_from_lambda_phi(lam0, phi0)
    assert float(system.casimirs(mu0)[0]) == pytest.approx(-np.pi**2 / 64, rel=1e-14)
    dt, n = 0.01, 2000
    sol = lpjax.integrate(system, lpjax.Collective(), mu0, dt, n, save_every=10)
    ref = solve_ivp(_kida_18, (0, dt * n), [lam0, phi0], method="DOP853", rtol=1e-12, atol=1e-12,
                    t_eval=np.asarray(sol.ts))
    assert ref.success
    mu_ref = np.asarray(kida_mu_from_lambda_phi(ref.y[0], ref.y[1]))
    assert np.max(np.abs(np.asarray(sol.ys) - mu_ref)) <= 1e-6
    lam, phi = kida_lambda_phi_from_mu(sol.ys)  # λ stays < 1 here, so (λ, φ) are unambiguous
    assert np.all(ref.y[0] < 1)
    np.testing.assert_allclose(lam, ref.y[0], atol=1e-6)
    np.testing.assert_allclose(np.sin(2 * phi), np.sin(2 * ref.y[1]), atol=1e-6)
    np.testing.assert_allclose(np.cos(2 * phi), np.cos(2 * ref.y[1]), atol=1e-6)
    assert float(np.ptp(ref.y[0])) > 0.1  # a real excursion, not a fixed point


@pytest.fixture(scope="module")
def top_runs():
    out = {}
    for label, rho in [("controlled", None), ("uncontrolled", 0.44 + 0.7)]:
        system = movable_base_top(rho=rho)
        mu0 = movable_base_mu(system, OMEGA0, V0, GAMMA0)
        methods = [("collective", lpjax.Collective())] + ([("rk4", lpjax.RK4())] if rho is None else [])
        sols = {name: lpjax.integrate(system, method, mu0, 0.01, 3000, save_every=10) for name, method in methods}
        out[label] = (system, sols)
    return out


def test_movable_base_casimirs_kept_and_rk4_drifts(top_runs):
    system, sols = top_runs["controlled"]
    coll = float(jnp.max(relative_invariant_error(system.casimirs, sols["collective"].ys)))
    rk4 = float(jnp.max(relative_invariant_error(system.casimirs, sols["rk4"].ys)))
    assert coll <= 1e-11
    assert rk4 > 1e2 * coll


def test_movable_base_controlled_stays_upright_uncontrolled_falls(top_runs):
    system, sols = top_runs["controlled"]
    assert float(jnp.min(sols["collective"].ys[:, 8])) > 0.98
    system, sols = top_runs["uncontrolled"]
    assert float(jnp.min(sols["collective"].ys[:, 8])) < 0.0


def test_movable_base_invariants_J_of_canonized_system():
    """The nine J's (32) — here the computed basis of 𝔥 — along GL4 on the canonized system."""
    system = movable_base_top()
    mu0 = movable_base_mu(system, OMEGA0, V0, GAMMA0)
    q0, p0 = lpjax.clebsch.lift(system.algebra, mu0, system.sign)
    z0 = jnp.concatenate([q0, p0])
    sol = lpjax.integrate(lpjax.clebsch.canonize(system), lpjax.GaussLegendre(2), z0, 0.01, 3000, save_every=30)
    J = jax.vmap(lpjax.clebsch.invariants(system.algebra))(sol.ys)
    assert J.shape[1] == 9
    assert float(jnp.max(jnp.abs(J - J[:1]))) <= 1e-11 * float(z0 @ z0)
    casimirs = relative_invariant_error(system.casimirs, jax.vmap(lpjax.clebsch.momentum_map(system.algebra, -1))(sol.ys))
    assert float(jnp.max(casimirs)) <= 1e-11


def test_gradient_wrt_rho_matches_finite_differences():
    @jax.jit
    def loss(rho):
        system = movable_base_top(rho=rho)
        mu0 = movable_base_mu(system, OMEGA0, V0, GAMMA0)
        sol = lpjax.integrate(system, lpjax.Collective(), mu0, 0.01, 200, save_every=200)
        return sol.ys[-1, 8] + sol.ys[-1, 0]

    rho = jnp.asarray(0.9 * 0.7**2 * 0.215**2 / 0.2)
    g = jax.grad(loss)(rho)
    h = 1e-6
    fd = (loss(rho + h) - loss(rho - h)) / (2 * h)
    assert abs(float(fd)) > 1e-3
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_collective_order_on_the_rigid_body():
    inertia, M0 = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.5, 0.8])
    exact = euler_top_exact(inertia, M0, np.array([5.0]))[0]
    dts = [0.1, 0.05, 0.025]
    errs = [np.max(np.abs(y - exact)) for y in states_at(rigid_body(inertia), lpjax.Collective(), M0, dts, 5.0)]
    assert abs(empirical_order(dts, errs) - 4) <= 0.2


def test_collective_under_vmap_and_jit_equals_loop():
    system = kida_vortex(EPS, OMEGA)
    mu0s = jnp.stack([kida_mu_from_lambda_phi(lam, 0.2) for lam in (0.3, 0.5, 0.7)])
    run = jax.jit(lambda mu: lpjax.integrate(system, lpjax.Collective(), mu, 0.05, 100, save_every=100).ys[-1])
    batched = jax.vmap(run)(mu0s)
    looped = jnp.stack([run(m) for m in mu0s])
    assert float(jnp.max(jnp.abs(batched - looped))) <= 1e-13


def test_collective_rejects_non_lie_poisson_and_unreachable_states():
    can = lpjax.CanonicalSystem(lambda y: y @ y, n=1)
    with pytest.raises(TypeError, match="Collective steps only Lie–Poisson systems"):
        lpjax.integrate(can, lpjax.Collective(), jnp.ones(2), 0.1, 1)
    abelian = lpjax.LiePoissonSystem(lpjax.algebras.LieAlgebra(np.zeros((2, 2, 2))), lambda m: m @ m, 1)
    with pytest.raises(ValueError, match="not a dual pair"):
        lpjax.integrate(abelian, lpjax.Collective(), jnp.array([1.0, 0.0]), 0.1, 1)
    forced = lpjax.Collective(require_dual_pair=False)
    with pytest.raises(Exception, match="not in the image of the momentum map"):
        jax.block_until_ready(lpjax.integrate(abelian, forced, jnp.array([1.0, 0.0]), 0.1, 1).ys)


def test_kida_conversions_roundtrip_and_bad_parameters():
    lam, phi = jnp.array([0.2, 0.5, 0.9]), jnp.array([-0.7, 0.1, 1.2])
    lam2, phi2 = kida_lambda_phi_from_mu(kida_mu_from_lambda_phi(lam, phi))
    np.testing.assert_allclose(lam2, lam, rtol=1e-12)
    np.testing.assert_allclose(np.sin(2 * phi2), np.sin(2 * phi), atol=1e-12)
    np.testing.assert_allclose(np.cos(2 * phi2), np.cos(2 * phi), atol=1e-12)
    with pytest.raises(ValueError, match="eps must be finite"):
        kida_vortex(float("nan"), 1.0)
    with pytest.raises(ValueError, match="must be finite and > 0"):
        movable_base_top(m=-0.7)
    with pytest.raises(TypeError, match="made by movable_base_top"):
        movable_base_mu(kida_vortex(1.0, 0.0), OMEGA0, V0, GAMMA0)


def test_collective_requires_a_dual_pair_and_drifts_without_one():
    """so(5): dim 𝔥 = 3 < 10, so the flow on T*𝔤 does not descend (Theorem 3.2 (iii) fails)."""
    from lpjax.systems import rigid_body_n

    system = rigid_body_n(jnp.array([0.5, 0.8, 1.1, 1.5, 2.0]))
    mu0 = jnp.asarray(np.random.default_rng(0).standard_normal(10))
    with pytest.raises(ValueError, match="dim 𝔥 = 3 ≠ dim 𝔤 = 10"):
        lpjax.integrate(system, lpjax.Collective(), mu0, 0.05, 10)
    forced = lpjax.integrate(system, lpjax.Collective(require_dual_pair=False), mu0, 0.05, 2000, save_every=100)
    direct = lpjax.integrate(system, lpjax.GaussLegendre(2), mu0, 0.05, 2000, save_every=100)
    drift_forced = float(jnp.max(relative_invariant_error(system.casimirs, forced.ys)))
    drift_direct = float(jnp.max(relative_invariant_error(system.casimirs, direct.ys)))
    assert drift_forced > 1e-10 and drift_forced > 100 * drift_direct  # measured: 1.0e-8 vs 2.6e-12
