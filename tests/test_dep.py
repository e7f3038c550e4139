"""Generic discrete Euler–Poincaré maps, reconstruction of the attitude (seed 003, seed 000 sec. 3)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax import lagrangians
from lpjax.algebras import so
from lpjax.diagnostics import poisson_defect
from lpjax.systems import clebsch_case, heavy_top, kida_vortex, lagrange_top, rigid_body, rigid_body_n
from lpjax._integrator.moser_veselov import cayley_matrix

DT = 0.05


def _unit_a(y, n):
    d = n * (n - 1) // 2
    return y.at[d:].set(y[d:] / jnp.linalg.norm(y[d:]))


def _cases():
    """(id, system, reference method, Lagrangian, y0)."""
    out = []
    for inertia in ([1.0, 2.0, 3.0],):
        s = rigid_body(jnp.array(inertia))
        out.append(("moser_veselov_so3", s, lpjax.MoserVeselov(), lagrangians.moser_veselov(s), jnp.array([1.0, 0.5, 0.8])))
    s = rigid_body_n(jnp.array([1.0, 1.5, 2.2, 3.1]))
    out.append(("moser_veselov_so4", s, lpjax.MoserVeselov(), lagrangians.moser_veselov(s), jnp.array([0.7, -0.4, 1.1, 0.3, 0.9, -0.6])))
    for n in (3, 4):
        d = n * (n - 1) // 2
        y0 = jax.random.normal(jax.random.PRNGKey(n), (d + n,))
        s = clebsch_case(jnp.linspace(0.5, 2.0, n))
        out.append((f"suris_clebsch_{n}", s, lpjax.SurisClebsch(), lagrangians.suris_clebsch(s), y0))
    for n in (3, 4, 5):
        d = n * (n - 1) // 2
        y0 = jax.random.normal(jax.random.PRNGKey(10 + n), (d + n,))
        s = lagrange_top(n, 0.7, frame="moving")
        out.append((f"suris_moving_{n}", s, lpjax.SurisLagrangeTop(), lagrangians.suris_lagrange_top(s), y0))
    for n in (3, 4):
        d = n * (n - 1) // 2
        y0 = _unit_a(jax.random.normal(jax.random.PRNGKey(20 + n), (d + n,)), n)
        s = lagrange_top(n, 0.3, frame="rest")
        out.append((f"suris_rest_{n}", s, lpjax.SurisLagrangeTop(), lagrangians.suris_lagrange_top(s, 0.3), y0))
    return out


CASES = _cases()
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_dep_reproduces_the_explicit_maps_step_for_step(case):
    """Same states as the explicit map over 100 steps; attitudes solve the DEL equations."""
    _, system, ref, ell, y0 = case
    a = lpjax.integrate(system, ref, y0, DT, 100).ys
    sol = lpjax.integrate(system, lpjax.DiscreteEulerPoincare(ell, reconstruct=True), y0, DT, 100)
    scale = float(jnp.max(jnp.abs(a)))
    assert float(jnp.max(jnp.abs(sol.ys - a))) <= 1e-10 * scale
    assert int(sol.stats["max_iterations"]) <= 6
    assert _del_residual(system, ell, sol.ys[:21], sol.gs[:21]) <= 1e-12 * scale


def test_printed_clebsch_lagrangian_does_not_give_7_17():
    """(7.16) as printed (4/ε) has twice the potential of (7.10); its DEP map is not (7.17)."""
    s = clebsch_case(jnp.array([0.5, 1.0, 2.0]))
    y0 = jax.random.normal(jax.random.PRNGKey(3), (6,))
    ref, _, _ = lpjax.SurisClebsch().step(s, y0, DT)
    printed, _, _ = lpjax.DiscreteEulerPoincare(lagrangians.suris_clebsch(s, 4.0)).step(s, y0, DT)
    fixed, _, _ = lpjax.DiscreteEulerPoincare(lagrangians.suris_clebsch(s)).step(s, y0, DT)
    assert float(jnp.max(jnp.abs(fixed - ref))) < 1e-14
    # one step differs at first order: by dt·P∧BP/(1 + …)
    assert float(jnp.max(jnp.abs(printed - ref))) > 0.1 * DT * float(jnp.max(jnp.abs(ref - y0)) / DT)


@pytest.mark.parametrize("coefficient, ok", [(2.0, True), (4.0, False)])
def test_clebsch_lagrangian_continuous_limit(coefficient, ok):
    """ℓ(exp(εΩ), P) = const + ε(½<Ω, Ω> + ½<P, BP>) + O(ε²) (seed 000, (7.10) and Lemma 5)."""
    B = jnp.array([0.5, 1.0, 2.0])
    ell = lagrangians.suris_clebsch(clebsch_case(B), coefficient)
    omega, P = jnp.array([0.3, -0.7, 0.5]), jnp.array([0.2, 0.9, -0.4])
    const = -jnp.log(64.0)  # −tr log(4I)/ε is ε-singular; compare ℓ(W)/ε against ℓ(I)/ε
    L_cont = 0.5 * jnp.dot(omega, omega) + 0.5 * jnp.dot(P, B * P)
    errs = []
    for eps in (1e-2, 1e-3):
        W = jax.scipy.linalg.expm(eps * so(3).hat(omega))
        val = (ell(W, P, eps) - ell(jnp.eye(3), jnp.zeros(3), eps)) / eps
        errs.append(abs(float(val - L_cont)))
    del const
    if ok:
        assert errs[1] < 1e-5
    else:
        assert errs[1] > 0.1 * float(0.5 * jnp.dot(P, B * P))


def _del_residual(system, ell, ys, gs):
    """max |∂/∂g_k [L(g_{k−1}, g_k) + L(g_k, g_{k+1})]| for the unreduced L (seed 000, (3.2))."""
    d_so = so(gs.shape[-1])
    n = gs.shape[-1]
    left = system.sign == -1
    advected = ys.shape[-1] > d_so.dim if n > 3 else ys.shape[-1] > 3
    d = ys.shape[-1] - n if advected else ys.shape[-1]
    v = ys[0, d:] if advected else None  # P_0 = g_0⁻¹ p (left) or a_0 = g_0 A (right), g_0 = I

    def L(g, gn):
        if left:
            return ell(g.T @ gn, None if v is None else g.T @ v, DT)
        return ell(gn @ g.T, g @ v, DT)

    def stationarity(k):
        def S(x):
            gk = cayley_matrix(d_so.hat(x)) @ gs[k]
            return L(gs[k - 1], gk) + L(gk, gs[k + 1])

        return jax.grad(S)(jnp.zeros(d_so.dim))

    return float(jnp.max(jnp.abs(jax.vmap(stationarity)(jnp.arange(1, gs.shape[0] - 1)))))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_reconstructed_attitudes_solve_the_discrete_euler_lagrange_equations(case):
    """g_k carried by the explicit maps make the unreduced action (3.1) stationary."""
    _, system, ref, ell, y0 = case
    sol = lpjax.integrate(system, type(ref)(reconstruct=True), y0, DT, 20)
    n = sol.gs.shape[-1]
    assert sol.gs.shape == (21, n, n)
    scale = float(jnp.max(jnp.abs(sol.ys)))
    assert _del_residual(system, ell, sol.ys, sol.gs) <= 1e-12 * scale
