"""Generic discrete Euler–Poincaré maps, reconstruction of the attitude (seed 003, seed 000 sec. 3)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import equinox as eqx

import lpjax
from lpjax import lagrangians
from lpjax.algebras import from_matrix_basis, se3, so, so21
from lpjax.diagnostics import poisson_defect
from lpjax.systems import clebsch_case, heavy_top, kida_vortex, lagrange_top, rigid_body, rigid_body_n
from lpjax._small import cayley_matrix

from .reference import states_at

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
    for n in (3, 5):
        d = n * (n - 1) // 2
        y0 = jax.random.normal(jax.random.PRNGKey(10 + n), (d + n,))
        s = lagrange_top(n, 0.7, frame="moving")
        out.append((f"suris_moving_{n}", s, lpjax.SurisLagrangeTop(), lagrangians.suris_lagrange_top(s), y0))
    for n in (3,):
        d = n * (n - 1) // 2
        y0 = _unit_a(jax.random.normal(jax.random.PRNGKey(20 + n), (d + n,)), n)
        s = lagrange_top(n, 0.3, frame="rest")
        out.append((f"suris_rest_{n}", s, lpjax.SurisLagrangeTop(), lagrangians.suris_lagrange_top(s, 0.3), y0))
    return out


CASES = _cases()
IDS = [c[0] for c in CASES]


DEP_CASES = [c for c in CASES if c[0] not in ("moser_veselov_so4", "suris_moving_5")]  # compile time


@pytest.mark.parametrize("case", DEP_CASES, ids=[c[0] for c in DEP_CASES])
def test_dep_reproduces_the_explicit_maps_step_for_step(case):
    """Same states as the explicit map over 100 steps; attitudes solve the DEL equations."""
    _, system, ref, ell, y0 = case
    a = np.asarray(lpjax.integrate(system, ref, y0, DT, 100).ys)
    sol = lpjax.integrate(system, lpjax.DiscreteEulerPoincare(ell, reconstruct=True), y0, DT, 100)
    scale = np.max(np.abs(a))
    ys, gs = np.asarray(sol.ys), np.asarray(sol.gs.R)
    assert np.max(np.abs(ys - a)) <= 1e-10 * scale
    assert int(sol.stats["max_iterations"]) == lpjax.DiscreteEulerPoincare(ell).max_iters  # fixed count: the updates made
    assert _del_residual(system, ell, ys[:21], gs[:21]) <= 1e-12 * scale


def test_printed_clebsch_lagrangian_does_not_give_7_17():
    """(7.16) as printed (4/ε) has twice the potential of (7.10); its DEP map is not (7.17)."""
    s = clebsch_case(jnp.array([0.5, 1.0, 2.0]))
    y0 = jax.random.normal(jax.random.PRNGKey(3), (6,))
    step = jax.jit(lambda method: method.step(s, y0, DT)[0])
    ref = step(lpjax.SurisClebsch())
    printed = step(lpjax.DiscreteEulerPoincare(lagrangians.suris_clebsch(s, 4.0)))
    fixed = step(lpjax.DiscreteEulerPoincare(lagrangians.suris_clebsch(s)))
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
    ys, gs = jnp.asarray(ys), jnp.asarray(gs)
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

    return float(np.max(np.abs(jax.jit(jax.vmap(stationarity))(jnp.arange(1, gs.shape[0] - 1)))))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_reconstructed_attitudes_solve_the_discrete_euler_lagrange_equations(case):
    """g_k carried by the explicit maps make the unreduced action (3.1) stationary."""
    _, system, ref, ell, y0 = case
    sol = lpjax.integrate(system, type(ref)(reconstruct=True), y0, DT, 20)
    n = sol.gs.R.shape[-1]
    assert sol.gs.R.shape == (21, n, n)
    scale = np.max(np.abs(sol.ys))
    assert _del_residual(system, ell, sol.ys, sol.gs.R) <= 1e-12 * scale


# det g - 1 for Moser-Veselov so(3) is 1.10e-13 without FMA contraction: XLA's default settings
_ATTITUDE = [pytest.param(CASES[i], id=IDS[i], marks=[pytest.mark.xla_default] if i == 0 else []) for i in (0, 3, 4, 6)]


@pytest.mark.parametrize("case", _ATTITUDE)
def test_attitude_stays_in_so_n_and_noether_momentum_is_kept(case):
    """10⁴ steps: |gᵀg − I| and det g at roundoff; the spatial momentum g M gᵀ (free body),
    or the spatial gravity g P (tops, Clebsch), or a_k = g_k a_0 (rest frame) is conserved."""
    _, system, ref, _, y0 = case
    sol = lpjax.integrate(system, type(ref)(reconstruct=True), y0, DT, 10_000, save_every=100)
    gs, ys = sol.gs.R, sol.ys
    n = gs.shape[-1]
    eye = jnp.eye(n)
    assert float(jnp.max(jnp.abs(jnp.einsum("tji,tjk->tik", gs, gs) - eye[None]))) < 1e-13
    assert float(jnp.max(jnp.abs(jnp.linalg.det(gs) - 1))) < 1e-13
    d = so(n).dim
    if ys.shape[-1] == d:  # free rigid body: m = g M gᵀ
        spatial = jnp.einsum("tij,tjk,tlk->til", gs, system.algebra.hat(ys), gs)
    elif system.sign == -1:  # body frame: p = g P
        spatial = jnp.einsum("tij,tj->ti", gs, ys[:, d:])
    else:  # rest frame: a_k = g_k a_0
        spatial = ys[:, d:] - jnp.einsum("tij,j->ti", gs, ys[0, d:])
    drift = spatial - spatial[:1] if system.sign == -1 else spatial
    assert float(jnp.max(jnp.abs(drift))) < 1e-12 * float(jnp.max(jnp.abs(ys[0])))


def test_moser_veselov_attitude_converges_with_order_2():
    """g_k against DOP853 on Ṁ = M × Ω, Ṙ = R Ω̂ (Ω = I⁻¹M) at t = 2."""
    from scipy.integrate import solve_ivp

    inertia = np.array([1.0, 2.0, 3.0])
    M0 = np.array([1.0, 0.5, 0.8])
    hat = lambda w: np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])  # noqa: E731

    def rhs(t, z):
        M, R = z[:3], z[3:].reshape(3, 3)
        Om = M / inertia
        return np.concatenate([np.cross(M, Om), (R @ hat(Om)).ravel()])

    ref = solve_ivp(rhs, (0, 2.0), np.concatenate([M0, np.eye(3).ravel()]), method="DOP853", rtol=1e-13, atol=1e-13)
    R_ref = ref.y[3:, -1].reshape(3, 3)
    system = rigid_body(jnp.asarray(inertia))
    dts = [0.1, 0.05, 0.025]
    errs = [np.max(np.abs(R - R_ref))
            for R in states_at(system, lpjax.MoserVeselov(reconstruct=True), M0, dts, 2.0, out=lambda sol: sol.gs.R)]
    assert abs(lpjax.diagnostics.empirical_order(dts, errs) - 2) < 0.2


def test_dep_gradient_matches_finite_differences():
    """d/dB of a final-state functional through 20 DEP steps of Suris' Clebsch Lagrangian."""
    y0 = jnp.array([0.3, -0.2, 0.5, 0.6, -0.4, 0.7])

    @jax.jit
    def loss(B):
        s = clebsch_case(B)
        ys = lpjax.integrate(s, lpjax.DiscreteEulerPoincare(lagrangians.suris_clebsch(s)), y0, 0.1, 20).ys
        return jnp.sum(ys[-1] ** 2 * jnp.arange(1, 7))

    B = jnp.array([0.5, 1.0, 2.0])
    g = jax.grad(loss)(B)
    h = 1e-6
    fd = jnp.array([(loss(B.at[i].add(h)) - loss(B.at[i].add(-h))) / (2 * h) for i in range(3)])
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_dep_is_a_poisson_map():
    _, system, _, ell, y0 = CASES[4]  # moving-frame Lagrange top, n = 3
    assert poisson_defect(lpjax.DiscreteEulerPoincare(ell), system, y0, 0.1) < 1e-12
    assert poisson_defect(lpjax.RK4(), system, y0, 0.1) > 1e-8


def test_bad_input():
    with pytest.raises(TypeError, match="callable"):
        lpjax.DiscreteEulerPoincare(3.0)
    with pytest.raises(ValueError, match="max_iters"):
        lpjax.DiscreteEulerPoincare(lambda W, P, dt: 0.0, max_iters=0)
    dep = lpjax.DiscreteEulerPoincare(lambda W, P, dt: -jnp.trace(W) / dt)
    with pytest.raises(TypeError, match=r"the group's algebra se\(3\) x R\^4 has no matrix basis"):
        lpjax.integrate(lpjax.systems.movable_base_top_x3(), dep, jnp.ones(10), 0.1, 2)
    with pytest.raises(TypeError, match=r"its algebra so\(2,1\) is not so\(3\) ⋉ \(Rʳ\)\^k"):
        lpjax.integrate(kida_vortex(0.1, 0.05), lpjax.DiscreteEulerPoincare(dep.ell, group=so(3)), jnp.ones(3), 0.1, 2)
    with pytest.raises(TypeError, match="group must be an lpjax.algebras.LieAlgebra"):
        lpjax.DiscreteEulerPoincare(dep.ell, group="se3")
    with pytest.raises(ValueError, match="chart must be"):
        lpjax.DiscreteEulerPoincare(dep.ell, chart="log")
    with pytest.raises(TypeError, match="rigid_body"):
        lagrangians.moser_veselov(heavy_top(jnp.ones(3), jnp.array([0.0, 0.0, 1.0]), 1.0))
    with pytest.raises(TypeError, match="clebsch_case"):
        lagrangians.suris_clebsch(rigid_body(jnp.ones(3)))
    with pytest.raises(TypeError, match="lagrange_top"):
        lagrangians.suris_lagrange_top(rigid_body(jnp.ones(3)))
    system = rigid_body(jnp.array([1.0, 2.0, 3.0]))
    state = lpjax.MoserVeselov().init(system, jnp.ones(3), 0.1)
    with pytest.raises(ValueError, match="reconstruct=False"):
        lpjax.MoserVeselov().attitude(system, state)


_SPLIT = [("heavy_top", lagrangians.heavy_top, heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0),
           jnp.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386])),
          ("heavy_top_n4", lagrangians.heavy_top,
           lpjax.systems.heavy_top_n(jnp.array([1.0, 1.5, 2.0, 2.5]), jnp.array([0.2, 0.0, 1.0, -0.3])),
           jnp.asarray(0.5 * np.random.default_rng(1).normal(size=10))),
          ("kirchhoff_general_C", lagrangians.kirchhoff,
           clebsch_case(jnp.array([0.5, 1.2, 2.0]), A=jnp.array([0.1, -0.4, 0.9])),
           jnp.asarray(0.5 * np.random.default_rng(2).normal(size=6))),
          ("kirchhoff_flow_n4", lagrangians.kirchhoff, clebsch_case(jnp.array([0.5, 1.0, 1.5, 2.0])),
           jnp.asarray(0.5 * np.random.default_rng(2).normal(size=10)))]


@pytest.mark.parametrize("name, make, system, y0", _SPLIT, ids=[c[0] for c in _SPLIT])
def test_the_ready_made_split_lagrangians_are_second_order_and_keep_the_casimirs(name, make, system, y0):
    """lagrangians.heavy_top and kirchhoff: order 2 against GL6 (measured 2.002, 2.000, 2.001,
    2.002), every Casimir over 10⁴ steps of 0.05 to 1e-13 (measured ≤ 7.0e-14, M·P of the
    general-C Clebsch case), the energy bounded."""
    method = lpjax.DiscreteEulerPoincare(make(system), order=2)
    ref = lpjax.integrate(system, lpjax.GaussLegendre(3), y0, 1 / 400, 400).ys[-1]
    dts = [1 / 20, 1 / 40, 1 / 80, 1 / 160]
    errs = [float(jnp.max(jnp.abs(lpjax.integrate(system, method, y0, dt, round(1 / dt)).ys[-1] - ref))) for dt in dts]
    assert abs(lpjax.diagnostics.empirical_order(dts, errs) - 2) <= 0.2, errs
    sol = lpjax.integrate(system, method, y0, DT, 10_000, save_every=100)
    rel = lpjax.diagnostics.relative_invariant_error
    assert float(jnp.max(rel(system.casimirs, sol.ys))) <= 1e-13
    assert float(jnp.max(rel(system.energy, sol.ys))) <= 1e-2


def test_the_split_lagrangians_need_their_systems():
    with pytest.raises(TypeError, match="heavy_top needs"):
        lagrangians.heavy_top(rigid_body(jnp.ones(3)))
    with pytest.raises(TypeError, match="kirchhoff needs"):
        lagrangians.kirchhoff(rigid_body(jnp.ones(3)))
    general_n4 = clebsch_case(jnp.array([0.5, 1.0, 1.5, 2.0]), A=jnp.array([0.3, -0.1, 0.7, 0.2]))
    with pytest.raises(ValueError, match=r"no Λ with Λ_j \+ Λ_k = 1/c_jk"):
        lagrangians.kirchhoff(general_n4)


class _Quadratic(eqx.Module):
    """``h(μ) = ½ μᵀKμ``: a user's Hamiltonian on any algebra."""

    K: jax.Array

    def __call__(self, mu):
        return 0.5 * mu @ self.K @ mu


def _kirchhoff_se3():
    """A Kirchhoff body with a full 6 × 6 inertia (M–P coupling) on se(3)*, as SE(3) itself."""
    rng = np.random.default_rng(3)
    B = rng.normal(size=(6, 6))
    return lpjax.LiePoissonSystem(se3(), _Quadratic(jnp.asarray(B @ B.T / 6 + np.eye(6))), -1)


_MIDPOINT = [("so21", lpjax.LiePoissonSystem(so21(), _Quadratic(jnp.array([[1.0, 0.2, 0.1], [0.2, 0.7, 0.0],
                                                                          [0.1, 0.0, 1.5]])), -1),
              None, jnp.array([1.0, 0.5, 0.3])),
             ("movable_base_top", lpjax.systems.movable_base_top(rho=1.14), None,
              jnp.array([0.1, -0.2, 0.05, 0.02, 0.01, -0.03, 0.1, 0.05, 0.99])),
             ("kirchhoff_se3", _kirchhoff_se3(), se3(), jnp.array([0.3, -0.6, 0.4, 0.8, -0.2, 0.5]))]


@pytest.mark.parametrize("name, system, group, y0", _MIDPOINT, ids=[c[0] for c in _MIDPOINT])
def test_the_midpoint_lagrangian_is_second_order_and_keeps_the_casimirs_on_any_matrix_group(name, system, group, y0):
    """lagrangians.midpoint on SO(2,1) (a user's quadratic Hamiltonian; f₁ = μ₁² + μ₂² − μ₃²), on
    SO(3) with two advected vectors (the movable-base top, uncontrolled gain ρ = M + m: |P|², P·Γ,
    |Γ|²) and on SE(3) with its translations (a Kirchhoff body with M–P coupling: |P|², M·P):
    order 2 against GL6 (measured 1.999, 1.983, 1.973), the Casimirs over 10⁴ steps of 0.05 to
    1e-13 relative (measured 2.2e-14, 1.7e-14, 9.1e-14), and the energy error does not grow: its
    largest value over the second half is below twice that over the first (measured energy errors
    2.3e-4, 2.0e-2, 7.1e-3). y0 of the so(2,1) case has |f₁| comparable to |μ|²."""
    method = lpjax.DiscreteEulerPoincare(lagrangians.midpoint(system, group), order=2)
    ref = lpjax.integrate(system, lpjax.GaussLegendre(3), y0, 1 / 400, 400).ys[-1]
    dts = [1 / 20, 1 / 40, 1 / 80]
    errs = [float(jnp.max(jnp.abs(lpjax.integrate(system, method, y0, dt, round(1 / dt)).ys[-1] - ref))) for dt in dts]
    assert abs(lpjax.diagnostics.empirical_order(dts, errs) - 2) <= 0.2, errs
    sol = lpjax.integrate(system, method, y0, DT, 10_000, save_every=100)
    rel = lpjax.diagnostics.relative_invariant_error
    assert float(jnp.max(rel(system.casimirs, sol.ys))) <= 1e-13
    energy = rel(system.energy, sol.ys)
    assert float(jnp.max(energy[51:])) <= 2 * float(jnp.max(energy[:51]))


def test_the_map_on_se3_and_its_reconstruction():
    """The controlled movable-base top stepped on SE(3) (Γ advected by the affine group's linear part) is the
    map on SO(3) with P and Γ advected; the chart is only the solver's coordinates (Cayley and exp
    give one map); the reconstructed g_k ∈ SE(3) keep the spatial momentum Ad*_{g_k⁻¹} μ_k of the
    SE(3)-invariant Kirchhoff body (Noether) to roundoff."""
    system, y0 = lpjax.systems.movable_base_top(), _MIDPOINT[1][3]  # the paper's stabilising gain 0.9 ρc
    one = lpjax.integrate(system, lpjax.DiscreteEulerPoincare(lagrangians.movable_base_top(system)), y0, DT, 20).ys
    two = lpjax.integrate(system, lpjax.DiscreteEulerPoincare(lagrangians.movable_base_top(system, se3())), y0, DT, 20).ys
    assert float(jnp.max(jnp.abs(one - two))) < 1e-13
    system, _, y0 = _MIDPOINT[0][1:]
    ell = lagrangians.midpoint(system)
    cay = lpjax.integrate(system, lpjax.DiscreteEulerPoincare(ell), y0, DT, 20).ys
    exp = lpjax.integrate(system, lpjax.DiscreteEulerPoincare(ell, chart="exp"), y0, DT, 20).ys
    assert float(jnp.max(jnp.abs(cay - exp))) < 1e-13
    system, group, y0 = _MIDPOINT[2][1:]
    sol = lpjax.integrate(system, lpjax.DiscreteEulerPoincare(lagrangians.midpoint(system, group), reconstruct=True),
                          y0, DT, 200, save_every=10)
    assert isinstance(sol.gs, lpjax.groups.SE3)
    g = sol.gs.as_matrix()
    ginv = jnp.linalg.inv(g)
    E = jnp.asarray(se3().matrix_basis)
    # <Ad*_{g⁻¹} μ, ζ> = <μ, Ad_{g⁻¹} ζ>: J_i = μ · vee(g⁻¹ E_i g)
    spatial = jnp.einsum("tj,tij->ti", sol.ys, se3().vee(jnp.einsum("tab,ibc,tcd->tiad", ginv, E, g), check=False))
    assert float(jnp.max(jnp.abs(spatial - spatial[:1]))) < 1e-13 * float(jnp.max(jnp.abs(spatial[0])))
    assert float(jnp.max(jnp.abs(sol.ys[-1] - y0))) > 0.1  # the body momentum itself moves


def test_the_midpoint_lagrangian_and_the_charts_refuse_what_they_cannot_do():
    with pytest.raises(ValueError, match="quadratic in the momentum of so\\(2,1\\); KidaHamiltonian is not"):
        lagrangians.midpoint(kida_vortex(0.1, 0.05))
    top = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
    with pytest.raises(ValueError, match="Hessian of HeavyTopHamiltonian in the momentum of se\\(3\\) is singular"):
        lagrangians.midpoint(top, se3())  # Γ has no velocity: the rotations must be the group
    with pytest.raises(TypeError, match="movable_base_top needs"):
        lagrangians.movable_base_top(top)
    with pytest.raises(TypeError, match="midpoint needs"):
        lagrangians.midpoint(lpjax.systems.veselova(jnp.array([1.0, 2.0, 3.0])))
    line = from_matrix_basis(np.array([[[0.0, 1.0], [1.0, 1.0]]]), name="line")  # E³ is not in span(E)
    system = lpjax.LiePoissonSystem(line, _Quadratic(jnp.eye(1)), -1)
    with pytest.raises(ValueError, match="Cayley map does not take line into its group .*chart='exp'"):
        lpjax.integrate(system, lpjax.DiscreteEulerPoincare(lambda W, a, dt: jnp.sum(W) / dt), jnp.ones(1), 0.1, 2)
