"""Clebsch canonization (seed 002): Poisson property, equivariance, 𝔥, invariants J, lifting."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax import algebras as A
from lpjax import clebsch
from lpjax.groups import SO3

ALGEBRAS = {
    "so3": A.so3(),
    "so21": A.so21(),
    "se3": A.se3(),
    "se3xR3": A.se3_x_r3(),
    "so4": A.so(4),
    "e3": A.euclidean(3),
}
SEMISIMPLE = ["so3", "so21", "so4"]


def _random_poly(rng, n, degree):
    """A random polynomial of the given degree (2 or 3) on R^n."""
    Q = rng.standard_normal((n, n))
    T = rng.standard_normal((n, n, n)) if degree == 3 else np.zeros((n, n, n))
    a = rng.standard_normal(n)
    return lambda x: a @ x + x @ Q @ x + jnp.einsum("ijk,i,j,k->", T, x, x, x)


def _canonical_bracket(F, G, z):
    n = z.shape[0] // 2
    dF, dG = jax.grad(F)(z), jax.grad(G)(z)
    return dF[:n] @ dG[n:] - dG[:n] @ dF[n:]


@pytest.mark.parametrize("name", list(ALGEBRAS))
@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("degree", [2, 3])
def test_momentum_map_is_poisson(name, sign, degree):
    """{f∘M, g∘M}_can = {f, g}± ∘ M (seed 002, eqs (8), (11))."""
    g = ALGEBRAS[name]
    n = g.dim
    rng = np.random.default_rng(10 * n + degree + (sign > 0))
    M = clebsch.momentum_map(g, sign)
    for _ in range(3):
        f, h = _random_poly(rng, n, degree), _random_poly(rng, n, degree)
        z = jnp.asarray(rng.standard_normal(2 * n))
        lhs = _canonical_bracket(lambda z: f(M(z)), lambda z: h(M(z)), z)
        mu = M(z)
        rhs = jax.grad(f)(mu) @ g.poisson_tensor(mu, sign) @ jax.grad(h)(mu)
        assert abs(float(lhs - rhs)) <= 1e-12 * max(1.0, abs(float(rhs)))


@pytest.mark.parametrize("name", list(ALGEBRAS))
def test_infinitesimal_equivariance(name):
    """T M+ · (ad_ξ q, −ad*_ξ p) = −ad*_ξ M+ (sec. 3.2); T M− · (−ad_ξ q, ad*_ξ p) = ad*_ξ M− (sec. 3.3)."""
    g = ALGEBRAS[name]
    n = g.dim
    rng = np.random.default_rng(3)
    z, xi = jnp.asarray(rng.standard_normal(2 * n)), jnp.asarray(rng.standard_normal(n))
    q, p = z[:n], z[n:]
    gen = jnp.concatenate([g.bracket(xi, q), -g.ad_star(xi, p)])
    for sign in (1, -1):
        M = clebsch.momentum_map(g, sign)
        _, dM = jax.jvp(M, (z,), (sign * gen,))
        np.testing.assert_allclose(dM, -sign * g.ad_star(xi, M(z)), atol=1e-12)


def test_group_equivariance_so3():
    """M+(Ad_g q, Ad*_{g⁻¹} p) = Ad*_{g⁻¹} M+(q, p) with SO3 from lpjax.groups."""
    rng = np.random.default_rng(4)
    R = SO3.exp(jnp.asarray(rng.standard_normal(3)))
    Ad, coAd = R.Ad(), R.inverse().Ad_star()
    M = clebsch.momentum_map(A.so3(), 1)
    z = jnp.asarray(rng.standard_normal(6))
    np.testing.assert_allclose(M(jnp.concatenate([Ad @ z[:3], coAd @ z[3:]])), coAd @ M(z), atol=1e-13)


def test_momentum_map_seed002_coordinates():
    """Eq. (24) for so(2,1) and the M− formula of sec. 5.3 for se(3) × R³."""
    rng = np.random.default_rng(5)
    q, p = rng.standard_normal(3), rng.standard_normal(3)
    expect = [q[1] * p[2] + q[2] * p[1], -q[2] * p[0] - q[0] * p[2], -q[0] * p[1] + q[1] * p[0]]
    np.testing.assert_allclose(clebsch.momentum_map(A.so21(), 1)(np.r_[q, p]), expect, atol=1e-14)
    q, p = rng.standard_normal(9), rng.standard_normal(9)
    c = np.cross
    expect = -np.r_[c(q[:3], p[:3]) + c(q[3:6], p[3:6]) + c(q[6:], p[6:]), c(q[:3], p[3:6]), c(q[:3], p[6:])]
    np.testing.assert_allclose(clebsch.momentum_map(A.se3_x_r3(), -1)(np.r_[q, p]), expect, atol=1e-14)


def test_se3_x_r3_matches_seed002_table():
    g = A.se3_x_r3()
    rng = np.random.default_rng(6)
    mu = rng.standard_normal(9)
    hat = A.so3().hat
    Pi, P, G = (np.asarray(hat(mu[i : i + 3])) for i in (0, 3, 6))
    Z = np.zeros((3, 3))
    table = -np.block([[Pi, P, G], [P, Z, Z], [G, Z, Z]])
    np.testing.assert_allclose(np.einsum("k,ijk->ij", mu, g.structure_constants), table, atol=1e-15)


@pytest.mark.parametrize("name, dim", [("so21", 3), ("se3xR3", 9)])
def test_dimension_of_symmetry_algebra_as_in_paper(name, dim):
    assert clebsch.symmetry_algebra(ALGEBRAS[name]).shape == (dim, 2 * ALGEBRAS[name].dim, 2 * ALGEBRAS[name].dim)


@pytest.mark.parametrize("name", list(ALGEBRAS))
def test_proposition_1_elements_in_h(name):
    g = ALGEBRAS[name]
    n = g.dim
    Z, I = np.zeros((n, n)), np.eye(n)
    kappa = g.killing_form()
    sigma0 = np.block([[Z, I], [I, Z]])
    varkappa = np.block([[kappa, Z], [Z, Z]])
    assert clebsch.in_symmetry_algebra(g, sigma0)
    assert clebsch.in_symmetry_algebra(g, varkappa)
    basis = clebsch.symmetry_algebra(g).reshape(-1, 4 * n * n)
    for s in (sigma0, varkappa):  # and they lie in the span of the computed basis
        coef, *_ = np.linalg.lstsq(basis.T, s.ravel(), rcond=None)
        assert np.max(np.abs(basis.T @ coef - s.ravel())) < 1e-10
    if name in SEMISIMPLE:
        assert clebsch.in_symmetry_algebra(g, np.block([[Z, Z], [Z, np.linalg.inv(kappa)]]))
    S = np.random.default_rng(0).standard_normal((2 * n, 2 * n))
    assert not clebsch.in_symmetry_algebra(g, S + S.T)  # membership is a real condition


def test_paper_sigmas_of_eq32_are_in_h_and_bad_sigma_rejected():
    g = A.se3_x_r3()
    E = lambda i, j: np.kron(np.eye(3)[i][:, None] * np.eye(3)[j][None, :], np.eye(3))  # noqa: E731
    Z = np.zeros((9, 9))
    sym = lambda a: a + a.T  # noqa: E731
    sigmas = [
        np.block([[Z, np.eye(9)], [np.eye(9), Z]]),
        np.block([[Z, E(0, 1)], [E(0, 1).T, Z]]),
        np.block([[Z, E(0, 2)], [E(0, 2).T, Z]]),
        np.block([[2 * E(0, 0), Z], [Z, Z]]),
        np.block([[sym(E(0, 1)), Z], [Z, Z]]),
        np.block([[sym(E(0, 2)), Z], [Z, Z]]),
        np.block([[Z, Z], [Z, 2 * E(1, 1)]]),
        np.block([[Z, Z], [Z, sym(E(1, 2))]]),
        np.block([[Z, Z], [Z, 2 * E(2, 2)]]),
    ]
    J = clebsch.invariants(g, np.array(sigmas))
    z = np.random.default_rng(7).standard_normal(18)
    q, p = z[:9], z[9:]
    expect = [p @ q, q[:3] @ p[3:6], q[:3] @ p[6:], q[:3] @ q[:3], q[:3] @ q[3:6], q[:3] @ q[6:],
              p[3:6] @ p[3:6], p[3:6] @ p[6:], p[6:] @ p[6:]]
    np.testing.assert_allclose(J(z), expect, atol=1e-13)
    with pytest.raises(ValueError, match=r"sigmas\[0\] is not in the symmetry algebra"):
        clebsch.invariants(g, np.eye(18))


@pytest.mark.parametrize("name", list(ALGEBRAS))
def test_canonized_flow_projects_to_lie_poisson_flow(name):
    """T_z M± · X_H(z) = mu_dot(M±(z)) (Theorem 3.1)."""
    g = ALGEBRAS[name]
    n = g.dim
    rng = np.random.default_rng(8)
    W = rng.standard_normal((n, n))
    for sign in (1, -1):
        system = lpjax.LiePoissonSystem(g, lambda m: jnp.sum(jnp.tanh(W @ m)) + m @ m, sign)
        can = clebsch.canonize(system)
        z = jnp.asarray(rng.standard_normal(2 * n))
        M = clebsch.momentum_map(g, sign)
        _, dM = jax.jvp(M, (z,), (can.vector_field(z),))
        np.testing.assert_allclose(dM, system.vector_field(M(z)), atol=1e-12)


@pytest.mark.parametrize("name", ["so21", "se3xR3", "so4"])
def test_invariants_J_conserved_by_gauss_legendre_on_canonized_system(name):
    g = ALGEBRAS[name]
    n = g.dim
    rng = np.random.default_rng(9)
    W = rng.standard_normal((n, n)) / n
    system = lpjax.LiePoissonSystem(g, lambda m: 0.5 * m @ m + 0.1 * jnp.sum((W @ m) ** 3), -1)
    can = clebsch.canonize(system)
    z0 = jnp.asarray(rng.standard_normal(2 * n)) * 0.5
    sol = lpjax.integrate(can, lpjax.GaussLegendre(2), z0, 0.02, 1000, save_every=50)
    J = jax.vmap(clebsch.invariants(g))(sol.ys)
    # relative to |z0|²: individual basis elements may have J(z0) ≈ 0
    assert float(jnp.max(jnp.abs(J - J[:1]))) <= 1e-12 * float(z0 @ z0)
    # a generic quadratic (outside 𝔥) is not conserved, so the check above can fail
    S = rng.standard_normal((2 * n, 2 * n))
    Q = jnp.einsum("ta,ab,tb->t", sol.ys, S + S.T, sol.ys)
    assert float(jnp.max(jnp.abs(Q - Q[0]))) > 1e-6 * float(z0 @ z0)


@pytest.mark.parametrize("name", list(ALGEBRAS))
@pytest.mark.parametrize("sign", [1, -1])
def test_lift_reaches_mu_and_q_annihilates_mu(name, sign):
    g = ALGEBRAS[name]
    rng = np.random.default_rng(11)
    for _ in range(3):
        mu = jnp.asarray(3 * rng.standard_normal(g.dim))
        q, p = clebsch.lift(g, mu, sign)
        M = clebsch.momentum_map(g, sign)(jnp.concatenate([q, p]))
        assert float(jnp.max(jnp.abs(M - mu))) <= 1e-12 * float(jnp.max(jnp.abs(mu)))
        assert abs(float(mu @ q)) <= 1e-12 * float(jnp.linalg.norm(mu) * jnp.linalg.norm(q))


def test_lift_with_given_q():
    """Sec. 5.3's choice q1 = Γ × P, p1 = 0 works; sec. 5.2's q(0) = (1, 0, 0) cannot reach mu_1 = 1."""
    g = A.so21()
    mu = jnp.array([1.0, 0.4, -1.3])
    with pytest.raises(ValueError, match="q must annihilate mu"):
        clebsch.lift(g, mu, 1, q=jnp.array([1.0, 0.0, 0.0]))
    q = jnp.cross(mu, jnp.array([0.0, 1.0, 0.0]))  # <mu, q> = 0 in these coordinates
    q_out, p = clebsch.lift(g, mu, 1, q=q)
    np.testing.assert_array_equal(q_out, q)
    np.testing.assert_allclose(clebsch.momentum_map(g, 1)(jnp.concatenate([q, p])), mu, atol=1e-12)


def test_lift_unreachable_raises():
    abelian = A.LieAlgebra(np.zeros((2, 2, 2)), name="R^2")
    with pytest.raises(ValueError, match="not in the image of the momentum map"):
        clebsch.lift(abelian, jnp.array([1.0, 0.0]), 1)
    with pytest.raises(ValueError, match=r"expects mu of shape \(3,\)"):
        clebsch.lift(A.so3(), jnp.ones(4), 1)
    with pytest.raises(ValueError, match="sign must be"):
        clebsch.lift(A.so3(), jnp.ones(3), 2)
