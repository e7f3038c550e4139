"""Lie algebras: structure constants, brackets, duals, hat/vee, Casimirs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lpjax import algebras as A

ALGEBRAS = {
    "so3": A.so3(),
    "so2": A.so(2),
    "so3n": A.so(3),
    "so4": A.so(4),
    "so5": A.so(5),
    "se3": A.se3(),
    "e3": A.euclidean(3),
    "e4": A.euclidean(4),
    "so21": A.so21(),
}
MATRIX_ALGEBRAS = list(ALGEBRAS)


def _rand(rng, *shape):
    return jnp.asarray(rng.standard_normal(shape))


@pytest.mark.parametrize("name", list(ALGEBRAS))
def test_structure_constants_antisymmetric_and_jacobi(name):
    c = ALGEBRAS[name].structure_constants
    assert np.max(np.abs(c + np.swapaxes(c, 0, 1))) == 0.0
    t = np.einsum("ijl,lkm->ijkm", c, c)
    jac = t + np.transpose(t, (1, 2, 0, 3)) + np.transpose(t, (2, 0, 1, 3))
    assert np.max(np.abs(jac), initial=0.0) < 1e-13


@pytest.mark.parametrize("name", MATRIX_ALGEBRAS)
@pytest.mark.parametrize("batch", [(), (4,), (2, 3)])
def test_bracket_is_matrix_commutator_and_hat_vee_roundtrip(name, batch):
    g = ALGEBRAS[name]
    rng = np.random.default_rng(1)
    x, y = _rand(rng, *batch, g.dim), _rand(rng, *batch, g.dim)
    X, Y = g.hat(x), g.hat(y)
    np.testing.assert_allclose(g.hat(g.bracket(x, y)), X @ Y - Y @ X, atol=1e-13)
    np.testing.assert_allclose(g.vee(X), x, atol=1e-13)
    np.testing.assert_allclose(jnp.einsum("...ij,...j->...i", g.ad(x), y), g.bracket(x, y), atol=1e-13)


@pytest.mark.parametrize("name", list(ALGEBRAS))
def test_ad_star_definition_and_dual_jacobi(name):
    """<ad*_x mu, y> = <mu, [x, y]>, and eq. (5) of seed 002: ad*_η ad*_ξ − ad*_ξ ad*_η = ad*_[ξ,η]."""
    g = ALGEBRAS[name]
    rng = np.random.default_rng(2)
    x, y, mu = (_rand(rng, g.dim) for _ in range(3))
    assert jnp.dot(g.ad_star(x, mu), y) == pytest.approx(float(jnp.dot(mu, g.bracket(x, y))), abs=1e-13)
    lhs = g.ad_star(y, g.ad_star(x, mu)) - g.ad_star(x, g.ad_star(y, mu))
    np.testing.assert_allclose(lhs, g.ad_star(g.bracket(x, y), mu), atol=1e-12)


@pytest.mark.parametrize("name", list(ALGEBRAS))
def test_poisson_tensor_sign_and_casimirs(name):
    g = ALGEBRAS[name]
    rng = np.random.default_rng(3)
    mu, dh = _rand(rng, g.dim), _rand(rng, g.dim)
    Pp, Pm = g.poisson_tensor(mu, 1), g.poisson_tensor(mu, -1)
    np.testing.assert_allclose(Pp, -jnp.swapaxes(Pp, 0, 1), atol=0)
    np.testing.assert_allclose(Pm, -Pp, atol=0)
    # (2b): Π+ ∇h = −ad*_{∇h} mu
    np.testing.assert_allclose(Pp @ dh, -g.ad_star(dh, mu), atol=1e-13)
    # quadratic Casimirs: ∇C = S mu is in the kernel of Π(mu)
    for S in g.quadratic_casimirs():
        np.testing.assert_allclose(Pp @ (S @ mu), 0.0, atol=1e-12)


@pytest.mark.parametrize(
    "name, expected",
    [("so3", 1), ("se3", 2), ("so21", 1), ("so4", 2), ("e3", 2), ("e4", 1), ("so5", 1)],
)
def test_number_of_quadratic_casimirs(name, expected):
    assert ALGEBRAS[name].quadratic_casimirs().shape[0] == expected


def test_so21_matches_seed002_table_and_killing_form():
    """Seed 002, sec. 5.2: mu_k c_ij^k and κ(x, y) = 2(x1y1 + x2y2 − x3y3)."""
    g = A.so21()
    m1, m2, m3 = 0.3, -1.2, 0.7
    table = np.array([[0, m3, m2], [-m3, 0, -m1], [-m2, m1, 0]])
    np.testing.assert_allclose(np.einsum("k,ijk->ij", [m1, m2, m3], g.structure_constants), table, atol=1e-15)
    np.testing.assert_allclose(g.killing_form(), np.diag([2.0, 2.0, -2.0]), atol=1e-14)


@pytest.mark.parametrize("n", [2, 3, 4, 6])
def test_son_basis_orthonormal_and_killing(n):
    g = A.so(n)
    E = g.matrix_basis
    gram = -0.5 * np.einsum("iab,jba->ij", E, E)
    np.testing.assert_allclose(gram, np.eye(g.dim), atol=1e-15)
    # Killing form of so(n) = (n − 2) tr(XY) = −2(n − 2) <X, Y>
    np.testing.assert_allclose(g.killing_form(), -2.0 * (n - 2) * np.eye(g.dim), atol=1e-12)


def test_so3_hat_is_cross_product_and_se3_bracket():
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal(3), rng.standard_normal(3)
    np.testing.assert_allclose(A.so3().hat(x) @ y, np.cross(x, y), atol=1e-15)
    xi, u, eta, v = (rng.standard_normal(3) for _ in range(4))
    br = A.se3().bracket(np.r_[xi, u], np.r_[eta, v])
    np.testing.assert_allclose(br, np.r_[np.cross(xi, eta), np.cross(xi, v) - np.cross(eta, u)], atol=1e-14)


def test_jacobi_violation_raises():
    c = np.zeros((3, 3, 3))
    c[0, 1, 2], c[1, 0, 2] = 1.0, -1.0
    c[1, 2, 0], c[2, 1, 0] = 1.0, -1.0
    c[2, 0, 0], c[0, 2, 0] = 1.0, -1.0  # [E3, E1] = E1 breaks Jacobi with the others
    with pytest.raises(ValueError, match="Jacobi identity"):
        A.LieAlgebra(c)


def test_antisymmetry_and_shape_violations_raise():
    c = np.zeros((2, 2, 2))
    c[0, 1, 0] = 1.0
    with pytest.raises(ValueError, match="antisymmetric"):
        A.LieAlgebra(c)
    with pytest.raises(ValueError, match=r"shape \(n, n, n\)"):
        A.LieAlgebra(np.zeros((2, 3, 2)))
    with pytest.raises(ValueError, match="integer n >= 2"):
        A.so(1)


def test_semidirect_rejects_non_representation():
    rho = np.stack([np.diag([1.0, 2.0, 3.0])] * 3)  # commuting matrices cannot represent so(3)
    with pytest.raises(ValueError, match="Jacobi identity"):
        A.semidirect(A.so3(), rho)


def test_semidirect_with_explicit_representation_equals_default():
    g = A.so3()
    np.testing.assert_array_equal(
        A.semidirect(g, g.matrix_basis).structure_constants, A.se3().structure_constants
    )


def test_vee_rejects_non_skew_matrix_eagerly_and_under_jit():
    g = A.so(3)
    bad = jnp.asarray(np.arange(9.0).reshape(3, 3))
    with pytest.raises(ValueError, match="not skew-symmetric"):
        g.vee(bad)
    with pytest.raises(Exception, match="not skew-symmetric"):
        jax.block_until_ready(jax.jit(g.vee)(bad))
    with pytest.raises(ValueError, match=r"expects shape \(\.\.\., 3, 3\)"):
        g.vee(jnp.zeros((4, 4)))
    with pytest.raises(ValueError, match="no matrix representation"):
        A.LieAlgebra(np.zeros((2, 2, 2))).hat(jnp.zeros(2))


def test_algebra_is_static_and_hashable():
    g = A.se3()
    assert jax.tree_util.tree_leaves(g) == []
    assert hash(g) == hash(A.se3()) and g == A.se3()
