"""lpjax.LiePoissonSplitting: each piece's flow is the exact coadjoint flow (against scipy's
expm of the generator read off the system's own vector field), the free rigid body's step is
McLachlan's sequence of rotations (scipy's Rotation), orders 2 and, composed, 4 to 8, the
Casimirs over 10⁶ heavy-top steps, refusals of Hamiltonians that do not split."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

import lpjax
from lpjax.diagnostics import empirical_order
from lpjax.systems import clebsch_case, heavy_top, rigid_body, rigid_body_n

from .reference import euler_top_exact, states_at

I = np.array([1.0, 2.0, 3.0])
RB = rigid_body(jnp.asarray(I))
M0 = np.array([0.4, -0.8, 1.5])
HT = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
HT0 = np.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386])


def _expm_long(X: np.ndarray) -> np.ndarray:
    """exp(X) in 80-bit long double: scaling, a Taylor series of 30 terms, squaring (the
    reference for flows of angle up to a few hundred radians, where float64 expm loses digits)."""
    X = np.asarray(X, np.longdouble)
    s = max(0, int(np.ceil(np.log2(max(float(np.max(np.abs(X))), 1e-300)))) + 4)
    Y = X / np.longdouble(2) ** s
    out, term = np.eye(len(X), dtype=np.longdouble), np.eye(len(X), dtype=np.longdouble)
    for j in range(1, 30):
        term = term @ Y / j
        out = out + term
    for _ in range(s):
        out = out @ out
    return out


def _generator(algebra, sign, k):
    """The matrix of the vector field of the Hamiltonian μ_k, by autodiff of the system's own field."""
    system = lpjax.LiePoissonSystem(algebra, lambda mu: mu[k], sign)
    return np.asarray(jax.jacfwd(system.vector_field)(jnp.zeros(algebra.dim)))


@pytest.mark.parametrize("algebra, k, kind", [(lpjax.algebras.so3(), 1, "q"), (lpjax.algebras.se3(), 2, "q"),
                                              (lpjax.algebras.se3(), 4, "l"), (lpjax.algebras.se3(), 1, "l"),
                                              (lpjax.algebras.so(4), 3, "q")])
@pytest.mark.parametrize("dt", [0.1, 3.0, 40.0])
def test_a_single_piece_is_its_exact_coadjoint_flow_at_any_dt(algebra, k, kind, dt):
    c = 1.7
    h = (lambda mu: 0.5 * c * mu[k] ** 2) if kind == "q" else (lambda mu: c * mu[k])
    system = lpjax.LiePoissonSystem(algebra, h, -1)
    mu = jnp.asarray(np.random.default_rng(k).normal(size=algebra.dim))
    method = lpjax.LiePoissonSplitting((f"{kind}{k}",), flow="exact")
    method.check_system(system)  # a single-piece Hamiltonian is of the form
    got = np.asarray(method.step(system, mu, dt)[0])
    theta = dt * (c * float(mu[k]) if kind == "q" else c)
    want = (_expm_long(theta * _generator(algebra, -1, k)) @ np.asarray(mu, np.longdouble)).astype(np.float64)
    # the flow itself moves by |θ| ε under the rounding of θ: 1e-14 up to θ of about 10
    err = float(np.max(np.abs(got - want))) / max(1.0, float(np.max(np.abs(want))))
    assert err <= 1e-15 * max(10.0, abs(theta)), (theta, err)


def test_the_free_rigid_body_step_is_mclachlans_rotations():
    """Ṁ = M × Ω: the piece M_k²/2I_k rotates M about e_k by −M_k dt/I_k; the step is the
    rotations about axes 1, 2 (half steps), 3 (a whole step), 2, 1."""
    method = lpjax.LiePoissonSplitting.for_system(RB, flow="exact")
    assert method.pieces == ("q0", "q1", "q2")
    m, dt = M0.copy(), 0.3
    for k, share in ((0, 0.5), (1, 0.5), (2, 1.0), (1, 0.5), (0, 0.5)):
        m = Rotation.from_rotvec(-share * dt * m[k] / I[k] * np.eye(3)[k]).apply(m)
    np.testing.assert_allclose(method.step(RB, jnp.asarray(M0), dt)[0], m, rtol=0, atol=2e-15)


def _coadjoint(algebra, g: np.ndarray) -> np.ndarray:
    """The matrix of ``μ ↦ Ad*_{g⁻¹} μ`` in the algebra's basis: ``(Ad_g)ᵀ`` inverted, with
    ``Ad_g E_j = g E_j g⁻¹`` read off in the basis by least squares (numpy, long double-free)."""
    E = np.asarray(algebra.matrix_basis)
    flat = E.reshape(len(E), -1).T
    ad = np.linalg.lstsq(flat, np.stack([(g @ Ej @ np.linalg.inv(g)).ravel() for Ej in E], 1), rcond=None)[0]
    return np.linalg.inv(ad.T)


@pytest.mark.parametrize("algebra, k, kind", [(lpjax.algebras.so3(), 1, "q"), (lpjax.algebras.se3(), 2, "q"),
                                              (lpjax.algebras.se3(), 4, "l"), (lpjax.algebras.se3(), 1, "l"),
                                              (lpjax.algebras.so(4), 3, "q"), (lpjax.algebras.so21(), 0, "l"),
                                              (lpjax.algebras.so21(), 2, "q")])
@pytest.mark.parametrize("dt", [0.1, 0.7])
def test_a_single_piece_under_cayley_is_the_coadjoint_action_of_the_groups_cayley_map(algebra, k, kind, dt):
    """The reference takes the group element g = cay(θE_k) with a matrix inverse, and its
    coadjoint action from g E_j g⁻¹; which of g, g⁻¹ the system's sign picks is read off the
    exact flow at the same θ, against exp(θE_k) in scipy."""
    from scipy.linalg import expm
    c = 1.7
    h = (lambda mu: 0.5 * c * mu[k] ** 2) if kind == "q" else (lambda mu: c * mu[k])
    system = lpjax.LiePoissonSystem(algebra, h, -1)
    mu = np.random.default_rng(k).normal(size=algebra.dim)
    theta = dt * (c * mu[k] if kind == "q" else c)
    E = np.asarray(algebra.matrix_basis)[k]
    exact = np.asarray(lpjax.LiePoissonSplitting((f"{kind}{k}",), "exact").step(system, jnp.asarray(mu), dt)[0])
    sense = min((1, -1), key=lambda s: np.max(np.abs(_coadjoint(algebra, expm(s * theta * E)) @ mu - exact)))
    assert np.max(np.abs(_coadjoint(algebra, expm(sense * theta * E)) @ mu - exact)) <= 1e-12
    I_ = np.eye(len(E))
    g = np.linalg.solve(I_ - sense * theta * E / 2, I_ + sense * theta * E / 2)
    got = np.asarray(lpjax.LiePoissonSplitting((f"{kind}{k}",), "cayley").step(system, jnp.asarray(mu), dt)[0])
    np.testing.assert_allclose(got, _coadjoint(algebra, g) @ mu, rtol=0, atol=1e-13)
    assert abs(got[k] - mu[k]) <= 1e-14 * max(1.0, abs(mu[k]))  # μ_k is kept: g commutes with E_k


def test_the_cayley_flow_needs_the_groups_matrices_and_auto_falls_back_to_exact():
    bare = lpjax.algebras.LieAlgebra(np.asarray(lpjax.algebras.so3().structure_constants), name="bare so(3)")
    system = lpjax.LiePoissonSystem(bare, lambda m: 0.5 * jnp.sum(m ** 2 / jnp.asarray(I)), -1)
    with pytest.raises(ValueError, match=r'no Cayley variant \(flow="cayley"\) of piece q0 on bare so\(3\): the algebra has '
                                         "no matrix basis"):
        lpjax.LiePoissonSplitting(flow="cayley").check_system(system)
    y = jnp.asarray(M0)
    auto = lpjax.LiePoissonSplitting(("q0", "q1", "q2")).step(system, y, 0.3)[0]
    np.testing.assert_array_equal(auto, lpjax.LiePoissonSplitting(("q0", "q1", "q2"), "exact").step(system, y, 0.3)[0])
    on_so3 = lpjax.LiePoissonSplitting(("q0", "q1", "q2")).step(RB, y, 0.3)[0]
    np.testing.assert_array_equal(on_so3, lpjax.LiePoissonSplitting(("q0", "q1", "q2"), "cayley").step(RB, y, 0.3)[0])
    assert float(jnp.max(jnp.abs(on_so3 - auto))) > 1e-6  # the two flows are different maps
    with pytest.raises(ValueError, match="flow must be one of 'auto', 'exact', 'cayley', got 'rodrigues'"):
        lpjax.LiePoissonSplitting(flow="rodrigues")


def test_pieces_that_are_zero_for_a_system_are_dropped_and_the_default_has_every_one():
    assert lpjax.LiePoissonSplitting.for_system(HT).pieces == ("q0", "q1", "q2", "l5")
    full = lpjax.LiePoissonSplitting()
    np.testing.assert_allclose(full.step(HT, jnp.asarray(HT0), 0.1)[0],
                               lpjax.LiePoissonSplitting(("q0", "q1", "q2", "q3", "q4", "q5", "l0", "l1", "l2", "l3",
                                                          "l4", "l5")).step(HT, jnp.asarray(HT0), 0.1)[0],
                               rtol=0, atol=0)


@pytest.mark.parametrize("flow", ["exact", "cayley"])
def test_order_2_and_composed_orders_on_the_rigid_body(flow):
    T = 4.0
    split = lpjax.LiePoissonSplitting.for_system(RB, flow)
    _assert_orders(RB, M0, np.asarray(euler_top_exact(I, M0, T)), T,
                   ((split, 2, 0.1), (lpjax.Composition(split, "suzuki"), 4, 0.25),
                    (lpjax.Composition(split, "kahan-li6"), 6, 0.4), (lpjax.Composition(split, "kahan-li8"), 8, 0.8)))


def _assert_orders(system, y0, ref, T, cases) -> dict:
    """Each ``(method, order, dt_max)``: the empirical order over dt_max/1…4 within 0.2; the errors."""
    errs = {}
    for method, order, dt_max in cases:
        dts = [dt_max / k for k in (1, 2, 3, 4)]
        errs[method] = [float(np.max(np.abs(y - ref))) for y in states_at(system, method, jnp.asarray(y0), dts, T)]
        assert abs(empirical_order(dts, errs[method]) - order) <= 0.2, (order, errs[method])
    return errs


@pytest.mark.parametrize("flow", ["exact", "cayley"])
def test_composed_orders_on_the_heavy_top_against_gl6(flow):
    T = 2.0
    ref = np.asarray(lpjax.integrate(HT, lpjax.GaussLegendre(3), jnp.asarray(HT0), T / 4000, 4000).ys[-1])
    split = lpjax.LiePoissonSplitting.for_system(HT, flow)
    _assert_orders(HT, HT0, ref, T, ((split, 2, 0.02), (lpjax.Composition(split, "triple-jump"), 4, 0.05),
                                     (lpjax.Composition(split, "kahan-li6"), 6, 0.1)))


@pytest.mark.parametrize("flow", ["exact", "cayley"])
def test_the_heavy_tops_casimirs_over_a_million_steps(flow):
    sol = lpjax.integrate(HT, lpjax.LiePoissonSplitting.for_system(HT, flow), jnp.asarray(HT0), 0.05, 1_000_000,
                          save_every=100_000)
    c = np.asarray(jax.vmap(HT.casimirs)(sol.ys))
    assert np.max(np.abs(c - c[0]) / np.abs(c[0])) <= 1e-12
    e = np.asarray(jax.vmap(HT.energy)(sol.ys))
    assert np.max(np.abs(e - e[0])) <= 1e-2 * abs(e[0])  # bounded (a symplectic map): not drifting off


def test_hamiltonians_that_do_not_split_are_refused():
    K = jnp.array([[1.0, 0.3, 0.0], [0.3, 2.0, 0.0], [0.0, 0.0, 3.0]])
    coupled = lpjax.LiePoissonSystem(lpjax.algebras.so3(), lambda m: 0.5 * m @ K @ m, -1)
    with pytest.raises(ValueError, match=r"its quadratic part is not diagonal in the basis of so\(3\) \(largest off-diagonal Hessian entry "
                                         r"3.00e-01\)"):
        lpjax.integrate(coupled, lpjax.LiePoissonSplitting(), jnp.ones(3), 0.1, 2)
    with pytest.raises(ValueError, match="not quadratic plus linear in μ"):
        lpjax.LiePoissonSplitting().check_system(lpjax.systems.kida_vortex(0.5, -1.0))
    with pytest.raises(ValueError, match='pieces must be names "q<k>" or "l<k>"'):
        lpjax.LiePoissonSplitting(("x0",))
    with pytest.raises(ValueError, match="out of range"):
        lpjax.LiePoissonSplitting(("q5",)).check_system(RB)


@pytest.mark.parametrize("system", [rigid_body_n(jnp.array([0.5, 1.0, 1.5, 2.0])),
                                    clebsch_case(jnp.array([0.5, 1.2, 2.0]))],
                         ids=["so(4) rigid body", "Clebsch case e(3)"])
def test_other_algebras_keep_their_casimirs(system):
    y0 = jnp.asarray(0.5 * np.random.default_rng(3).normal(size=system.algebra.dim))
    sol = lpjax.integrate(system, lpjax.LiePoissonSplitting.for_system(system), y0, 0.05, 20_000, save_every=20_000)
    c0, c1 = np.asarray(system.casimirs(sol.ys[0])), np.asarray(system.casimirs(sol.ys[-1]))
    assert np.max(np.abs(c1 - c0) / np.maximum(1.0, np.abs(c0))) <= 1e-12


@pytest.mark.parametrize("scheme, flow", [(None, "exact"), (None, "cayley"), ("triple-jump", "exact"),
                                          ("triple-jump", "cayley"), ("blanes-moan-s10", "cayley")],
                         ids=["splitting-exact", "splitting-cayley", "Composition(splitting)-exact",
                              "Composition(splitting)-cayley", "S10(splitting)-cayley"])
def test_the_gradient_equals_direct_ad(scheme, flow):
    """integrate's default reverse mode (the splitting's own adjoint of a step, chained through
    the composition's stages; for S10 through Lie–Trotter halves of unequal lengths) against
    JAX's AD straight through the steps, in the rigid body's inertia (quadratic pieces), the
    heavy top's arrays (linear pieces), y0 and dt: measured 1e-13 relative or better."""
    split = lpjax.LiePoissonSplitting(("q0", "q1", "q2"), flow)
    method = lpjax.Composition(split, scheme) if scheme else split

    def loss(inertia, y0, dt, adjoint):
        ys = lpjax.integrate(rigid_body(inertia), method, y0, dt, 400, save_every=100, adjoint=adjoint).ys
        return jnp.sum(ys ** 2 * jnp.arange(1.0, 4.0)[None, :])

    args = (jnp.asarray(I), jnp.asarray(M0), jnp.asarray(0.05))
    got, want = (jax.grad(loss, argnums=(0, 1, 2))(*args, adj) for adj in ("auto", "direct"))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=0)

    def top_loss(chi, mgl, adjoint):
        top = heavy_top(jnp.array([1.0, 1.3, 0.7]), chi, mgl)
        # for_system of the traced top: every piece whose coefficient depends on chi (q0-q2, l3-l5),
        # where the concrete top has only l5 of the linear ones
        top_split = lpjax.LiePoissonSplitting.for_system(top, flow)
        assert top_split.pieces == ("q0", "q1", "q2", "l3", "l4", "l5")
        top_method = lpjax.Composition(top_split, scheme) if scheme else top_split
        ys = lpjax.integrate(top, top_method, jnp.asarray(HT0), 0.05, 400, save_every=100, adjoint=adjoint).ys
        return jnp.sum(ys ** 2 * jnp.arange(1.0, 7.0)[None, :])

    args = (jnp.array([0.0, 0.0, 1.0]), jnp.asarray(2.0))
    got, want = (jax.grad(top_loss, argnums=(0, 1))(*args, adj) for adj in ("auto", "direct"))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-13 * float(jnp.max(jnp.abs(w))))



def test_the_order_of_the_pieces_changes_the_error_constant_not_the_order():
    """Fassò (2003): the rigid body I = (1, 2, 3) to t = 4, rotations about the axes in the
    sequence 1, 2, 3, 2, 1 against 2, 1, 3, 1, 2. Measured: errors 10.0x apart (and at t = 100,
    dt = 0.01: 2.57e-5 against 2.57e-4)."""
    T = 4.0
    first, second = (lpjax.LiePoissonSplitting(p, "exact") for p in (("q0", "q1", "q2"), ("q1", "q0", "q2")))
    errs = _assert_orders(RB, M0, np.asarray(euler_top_exact(I, M0, T)), T, ((first, 2, 0.1), (second, 2, 0.1)))
    ratio = errs[first][-1] / errs[second][-1]
    assert not 1 / 3 <= ratio <= 3, ratio


@pytest.mark.parametrize("flow", ["exact", "cayley"])
def test_small_steps_do_not_drift_the_casimir(flow):
    """6.8 million pieces at small angles (Kahan-Li 8, dt = 0.0125, t = 1000): the Cayley flow,
    written as cos ψ, sin ψ, drifted |M|² by 1.2e-11 (a rounding of cos² + sin² each piece);
    written as the identity plus (cos ψ − 1, sin ψ), measured 5.7e-14 (the exact flow 2.5e-13)."""
    method = lpjax.Composition(lpjax.LiePoissonSplitting(("q0", "q1", "q2"), flow), "kahan-li8")
    y0 = jnp.array([1.0, 0.5, 0.8])
    y = lpjax.integrate(RB, method, y0, 0.0125, 80_000, save_every=80_000).ys[-1]
    assert abs(float(y @ y) / float(y0 @ y0) - 1) <= 1e-12
