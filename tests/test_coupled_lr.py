"""Seed 001 unreduced: coupled LR systems (Theorem 3.3), LR as the limit of L+R (2.10), and the
geodesic flow of the L+R metric (2.6)–(2.7)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import lpjax
from lpjax.algebras import so3
from lpjax.systems import abelian_coupled_lr, coupled_lr, lplusr, lplusr_geodesic, veselova

I3 = jnp.array([1.0, 1.4, 2.1])


def _expm_so3(x):
    return jax.scipy.linalg.expm(so3().hat(x))


_CASES = [  # (id, system, ω_0, g_0)
    ("so3_rubber_and_marble", coupled_lr(I3, np.array([[0.0, 0.0, 1.0], [0.6, 0.0, 0.8]]), jnp.array([0.3, 0.5]),
                                         jnp.array([0.5, 0.8]), b=jnp.array([1.0, jnp.inf])),
     jnp.array([0.7, -0.4, 1.1]), _expm_so3(jnp.array([0.2, -0.3, 0.5]))),
    ("so4_rubber", coupled_lr(jnp.array([1.0, 1.5, 2.2, 3.1]), np.array([[0.0, 0.0, 0.6, 0.8]]), 0.4, 0.7, b=1.0, n=4),
     jnp.array([0.7, -0.4, 1.1, 0.3, 0.9, -0.6]), None),
    ("so3_x_r2_abelian", abelian_coupled_lr(I3, np.linalg.qr(np.random.default_rng(0).normal(size=(3, 2)))[0].T,
                                            jnp.array([0.5, 0.3]), jnp.array([1.2, 0.7])),
     jnp.array([0.7, -0.4, 1.1]), _expm_so3(jnp.array([0.2, -0.3, 0.5]))),
]


@pytest.mark.parametrize("name, system, omega, g0", _CASES, ids=[c[0] for c in _CASES])
def test_the_coupled_lr_system_reduces_to_the_lplusr_system(name, system, omega, g0):
    """Theorem 3.3: SO(3)³ (two balls, one with the no-twist constraint) and SO(4)², integrated
    unreduced by GL6 (reactions from the differentiated constraints), reduce to the trajectory of
    ``lplusr(I, ε/a², ε/b²)``, and SO(3) × R² (two rotors, (4.5)–(4.7)) to that of the general
    ``lplusr(I, R=Σ ε_ia_i² ξ_i ⊗ ξ_i)``, from the reduced initial state (measured 1.1e-15,
    4.4e-15, 6.7e-16 over t = 5). Along the way the constraints, the Noether law (3.19) and the
    energy stay at roundoff, and the energy is the reduced one (3.18)."""
    x0 = system.state(omega, g0)
    sol = lpjax.integrate(system, lpjax.GaussLegendre(3), x0, 0.01, 500, save_every=50)
    reduced = system.reduce(sol.ys)
    ref = lpjax.integrate(system.reduced, lpjax.GaussLegendre(3), reduced[0], 0.01, 500, save_every=50).ys
    assert float(jnp.max(jnp.abs(ref - ref[:1]))) > 0.1  # it moves
    assert float(jnp.max(jnp.abs(reduced - ref))) <= 1e-10
    assert max(float(jnp.max(jnp.abs(system.constraints(y)))) for y in sol.ys) <= 1e-12
    spatial = jnp.stack([system.spatial_momentum(y) for y in sol.ys])
    assert float(jnp.max(jnp.abs(spatial - spatial[:1]))) <= 1e-12
    energy = jnp.stack([system.energy(y) for y in sol.ys])
    assert float(jnp.max(jnp.abs(energy - system.reduced.energy(reduced[0])))) <= 1e-12


def test_lplusr_tends_to_the_lr_system_as_the_coupling_grows():
    """(2.10): ``lplusr(I, D = 0, T)`` (J = I + T(1 − pr γ)) from a state on (ω, γ) = 0 tends to
    Veselova's LR system as T → ∞; the largest difference of ω and γ over t ≤ 3 falls as
    T^(−0.997) (measured 5.4e-3, 5.5e-4, 5.5e-5 for T = 10², 10³, 10⁴)."""
    gamma = jnp.array([0.0, 0.6, 0.8])
    om = jnp.array([0.7, -0.4, 0.3])
    om = om - jnp.dot(om, gamma) * gamma
    y0 = jnp.concatenate([I3 * om, gamma])
    ref = lpjax.integrate(veselova(I3), lpjax.GaussLegendre(3), y0, 0.01, 300, save_every=30).ys
    Ts = [1e2, 1e3, 1e4]
    errs = []
    for T in Ts:
        s = lplusr(I3, jnp.array([0.0]), jnp.array([T]))
        ys = lpjax.integrate(s, lpjax.GaussLegendre(3), y0, 0.01, 300, save_every=30).ys
        oms = jnp.stack([s.angular_velocity(y) for y in ys])
        errs.append(max(float(jnp.max(jnp.abs(oms - ref[:, :3] / I3[None]))), float(jnp.max(jnp.abs(ys[:, 3:] - ref[:, 3:])))))
    rate = -np.polyfit(np.log(Ts), np.log(errs), 1)[0]
    assert abs(rate - 1) <= 0.05, errs


def _euler_lagrange(system, e, q0, omega0, t1):
    """The geodesic of ``L = ½⟨J(γ)ω, ω⟩`` on SO(3) in exponential coordinates ``g = exp(q̂)``,
    ``ω = vee(gᵀġ)``, ``γ = gᵀe``: the Euler–Lagrange equations by autodiff, scipy DOP853."""
    red = system.hamiltonian.reduced

    def body(q, qd):
        g, gd = jax.jvp(_expm_so3, (q,), (qd,))
        return so3().vee(g.T @ gd, check=False), g.T @ e

    def lagrangian(q, qd):
        om, gam = body(q, qd)
        return 0.5 * om @ red.inertia_operator(gam[None]) @ om

    @jax.jit
    def rhs(q, qd):
        H = jax.hessian(lagrangian, argnums=1)(q, qd)
        dq = jax.grad(lagrangian, argnums=0)(q, qd)
        mixed = jax.jacfwd(jax.grad(lagrangian, argnums=1), argnums=0)(q, qd)
        return jnp.linalg.solve(H, dq - mixed @ qd)

    qd0 = jnp.linalg.solve(jax.jacfwd(lambda v: body(q0, v)[0])(jnp.zeros(3)), omega0)
    sol = solve_ivp(lambda t, z: np.concatenate([z[3:], np.asarray(rhs(jnp.asarray(z[:3]), jnp.asarray(z[3:])))]),
                    (0.0, t1), np.concatenate([q0, qd0]), method="DOP853", rtol=1e-12, atol=1e-12)
    q, qd = jnp.asarray(sol.y[:3, -1]), jnp.asarray(sol.y[3:, -1])
    om, gam = body(q, qd)
    return jnp.concatenate([red.inertia_operator(gam[None]) @ om, gam])


def test_lplusr_geodesic_is_the_geodesic_flow_of_the_lplusr_metric():
    """(2.6)–(2.7): the Lie–Poisson system ``lplusr_geodesic`` equals the Euler–Lagrange geodesic
    of the L+R metric on SO(3) (scipy DOP853 in exponential coordinates) to 1e-9 at t = 1
    (measured 2e-13); its field is L+R's plus the γ-term (2.8) drops, nonzero here; GL4 keeps its
    energy and Casimirs, but not L+R's momentum integral ⟨k, k⟩ (drift 2.4e-2), which the L+R
    system keeps (1e-16)."""
    D, T = jnp.array([0.5]), jnp.array([0.3])
    geo, lr = lplusr_geodesic(I3, D, T), lplusr(I3, D, T)
    e = jnp.array([0.0, 0.6, 0.8])
    q0, omega0 = jnp.array([0.1, -0.2, 0.15]), jnp.array([0.3, -0.2, 0.9])
    gamma0 = _expm_so3(q0).T @ e
    y0 = jnp.concatenate([geo.hamiltonian.reduced.inertia_operator(gamma0[None]) @ omega0, gamma0])
    ours = lpjax.integrate(geo, lpjax.GaussLegendre(3), y0, 0.01, 100).ys[-1]
    assert float(jnp.max(jnp.abs(ours - _euler_lagrange(geo, e, q0, omega0, 1.0)))) <= 1e-9
    extra = geo.vector_field(y0) - lr.vector_field(y0)
    assert float(jnp.max(jnp.abs(extra[:3]))) > 1e-3 and float(jnp.max(jnp.abs(extra[3:]))) == 0.0
    rel = lpjax.diagnostics.relative_invariant_error
    knorm = lambda y: jnp.sum(y[..., :3] ** 2, axis=-1)  # noqa: E731
    sol = lpjax.integrate(geo, lpjax.GaussLegendre(2), y0, 0.01, 2000, save_every=100)
    assert float(jnp.max(rel(geo.energy, sol.ys))) <= 1e-12 and float(jnp.max(rel(geo.casimirs, sol.ys))) <= 1e-12
    assert float(jnp.max(jnp.abs(knorm(sol.ys) - knorm(y0)))) > 1e-3
    sol = lpjax.integrate(lr, lpjax.GaussLegendre(2), y0, 0.01, 2000, save_every=100)
    assert float(jnp.max(jnp.abs(knorm(sol.ys) - knorm(y0)))) <= 1e-12


def test_coupled_lr_refuses_bad_input():
    with pytest.raises(ValueError, match="directions must be unit vectors in R\\^3"):
        coupled_lr(I3, np.array([[0.0, 0.0, 2.0]]), 0.3, 0.5)
    with pytest.raises(ValueError, match="eps must be finite and > 0"):
        coupled_lr(I3, np.array([[0.0, 0.0, 1.0]]), -0.3, 0.5)
    with pytest.raises(ValueError, match="b must be 1 values > 0"):
        coupled_lr(I3, np.array([[0.0, 0.0, 1.0]]), 0.3, 0.5, b=0.0)
    with pytest.raises(ValueError, match="xis must be orthonormal rows of length 3"):
        abelian_coupled_lr(I3, np.array([[1.0, 1.0, 0.0]]), 0.3, 0.5)
    system = _CASES[0][1]
    with pytest.raises(ValueError):
        lpjax.integrate(system, lpjax.GaussLegendre(2), jnp.ones(5), 0.01, 2)
