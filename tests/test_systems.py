"""Systems: vector fields against the papers' equations, Casimirs, bad parameters."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax import algebras
from lpjax.systems import heavy_top, heavy_top_n, rigid_body, rigid_body_n

rng = np.random.default_rng(7)


def test_rigid_body_is_euler_equations():
    I = jnp.array([1.0, 2.0, 3.0])
    M = jnp.asarray(rng.standard_normal(3))
    np.testing.assert_allclose(rigid_body(I).vector_field(M), jnp.cross(M, M / I), atol=1e-15)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_rigid_body_n_is_seed000_4_5_without_gravity(n):
    J = jnp.asarray(rng.uniform(0.5, 2.0, n))
    s = rigid_body_n(J)
    mu = jnp.asarray(rng.standard_normal(s.dim))
    g = algebras.so(n)
    M = g.hat(mu)
    Om = g.hat(s.hamiltonian.omega(mu))
    np.testing.assert_allclose(J[:, None] * Om + Om * J[None, :], M, atol=1e-14)  # (4.4)
    np.testing.assert_allclose(g.hat(s.vector_field(mu)), M @ Om - Om @ M, atol=1e-13)


def test_heavy_top_equations():
    I, chi, mgl = jnp.array([1.0, 1.5, 2.5]), jnp.array([0.1, 0.2, 0.9]), 3.0
    y = jnp.asarray(rng.standard_normal(6))
    M, G = y[:3], y[3:]
    f = heavy_top(I, chi, mgl).vector_field(y)
    np.testing.assert_allclose(f[:3], jnp.cross(M, M / I) + mgl * jnp.cross(G, chi), atol=1e-14)
    np.testing.assert_allclose(f[3:], jnp.cross(G, M / I), atol=1e-14)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_heavy_top_n_is_seed000_4_5(n):
    J = jnp.asarray(rng.uniform(0.5, 2.0, n))
    A = jnp.asarray(rng.standard_normal(n))
    s = heavy_top_n(J, A)
    d = n * (n - 1) // 2
    y = jnp.asarray(rng.standard_normal(d + n))
    g = algebras.so(n)
    M, P = g.hat(y[:d]), y[d:]
    Om = g.hat(s.hamiltonian.kinetic.omega(y[:d]))
    f = s.vector_field(y)
    wedge = jnp.outer(A, P) - jnp.outer(P, A)
    np.testing.assert_allclose(g.hat(f[:d]), M @ Om - Om @ M + wedge, atol=1e-13)
    np.testing.assert_allclose(f[d:], -Om @ P, atol=1e-14)


SYSTEMS = {
    "rigid_body": lambda: rigid_body(jnp.array([1.0, 2.0, 3.0])),
    "rigid_body_n4": lambda: rigid_body_n(jnp.array([0.5, 1.0, 1.5, 2.0])),
    "rigid_body_n5": lambda: rigid_body_n(jnp.array([0.5, 1.0, 1.5, 2.0, 2.5])),
    "heavy_top": lambda: heavy_top(jnp.array([1.0, 1.5, 2.5]), jnp.array([0.0, 0.0, 1.0]), 2.0),
    "heavy_top_n4": lambda: heavy_top_n(jnp.array([0.5, 1.0, 1.5, 2.0]), jnp.array([0.0, 0.0, 0.0, 1.0])),
    "generic_so21": lambda: lpjax.LiePoissonSystem(algebras.so21(), lambda m: jnp.sum(m**3) + m[0], 1),
}


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_casimirs_and_energy_are_conserved_by_the_vector_field(name):
    s = SYSTEMS[name]()
    y = jnp.asarray(rng.standard_normal(s.dim))
    f = s.vector_field(y)
    dC = jax.jacobian(s.casimirs)(y)
    assert dC.shape[0] >= 1
    np.testing.assert_allclose(dC @ f, 0.0, atol=1e-12)
    assert abs(float(jax.grad(s.energy)(y) @ f)) < 1e-12


def test_canonical_system_is_hamiltonian():
    s = lpjax.CanonicalSystem(lambda y: 0.5 * y[1] ** 2 - jnp.cos(y[0]), n=1)
    y = jnp.array([0.3, -0.7])
    np.testing.assert_allclose(s.vector_field(y), [-0.7, -jnp.sin(0.3)], atol=1e-15)
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        s.check_state(jnp.zeros(3))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: rigid_body(jnp.array([1.0, -2.0, 3.0])), "inertia must be finite and > 0"),
        (lambda: rigid_body(jnp.array([1.0, 2.0])), r"inertia must have shape \(3,\)"),
        (lambda: rigid_body(jnp.array([1.0, jnp.nan, 3.0])), "inertia must be finite"),
        (lambda: heavy_top(jnp.ones(3), jnp.ones(2), 1.0), r"chi must have shape \(3,\)"),
        (lambda: heavy_top_n(jnp.ones(4), jnp.ones(3)), r"A must have shape \(4,\)"),
        (lambda: rigid_body_n(jnp.ones((2, 2))), r"J must have shape \(n,\)"),
        (lambda: lpjax.LiePoissonSystem(algebras.so3(), lambda m: m @ m, 0), "sign must be"),
        (lambda: lpjax.LiePoissonSystem(np.zeros((3, 3, 3)), lambda m: m @ m, 1), "must be a LieAlgebra"),
    ],
)
def test_bad_parameters_raise(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_traced_bad_parameters_raise_at_runtime():
    f = jax.jit(lambda I: rigid_body(I).energy(jnp.ones(3)))
    assert float(f(jnp.array([1.0, 2.0, 4.0]))) == pytest.approx(0.5 * (1 + 0.5 + 0.25))
    with pytest.raises(Exception, match="inertia must be finite and > 0"):
        jax.block_until_ready(f(jnp.array([1.0, 0.0, 3.0])))


def test_canonical_system_has_no_casimirs():
    s = lpjax.CanonicalSystem(lambda y: 0.5 * jnp.sum(y**2))
    assert s.casimirs(jnp.ones(4)).shape == (0,)
    assert s.casimir_names == ()


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_every_casimir_has_a_name(name):
    s = SYSTEMS[name]()
    assert len(s.casimir_names) == s.casimirs(jnp.ones(s.dim)).shape[0] and all(s.casimir_names)


def test_so4_casimirs_are_tr_m2_and_the_pfaffian():
    """rigid_body_n on so(4): ``tr M²`` and ``Pf M = M12 M34 − M13 M24 + M14 M23``. ``tr M⁴ =
    (tr M²)²/2 − 4 (Pf M)²`` is a function of the two and cannot tell the sign of Pf M, which
    changes under the reflection diag(−1, 1, 1, 1) (the other component of the orbit)."""
    s = rigid_body_n(jnp.array([0.5, 1.0, 1.5, 2.0]))
    assert s.casimir_names == ("tr M²", "Pf M")
    y = jnp.asarray(rng.standard_normal(6))  # (M12, M13, M14, M23, M24, M34)
    M = np.asarray(algebras.so(4).hat(y))
    pf = float(y[0] * y[5] - y[1] * y[4] + y[2] * y[3])
    np.testing.assert_allclose(s.casimirs(y), [np.trace(M @ M), pf], rtol=1e-14)
    assert np.trace(M @ M @ M @ M) == pytest.approx(np.trace(M @ M) ** 2 / 2 - 4 * pf**2, rel=1e-12)
    reflected = y * jnp.array([-1.0, -1, -1, 1, 1, 1])  # R M R with R = diag(−1, 1, 1, 1)
    np.testing.assert_allclose(s.casimirs(reflected), [np.trace(M @ M), -pf], rtol=1e-14)
    six = rigid_body_n(jnp.arange(1.0, 7.0))
    assert six.casimir_names == ("tr M²", "tr M⁴", "Pf M")
    z = jnp.asarray(rng.standard_normal(15))
    assert float(six.casimirs(z)[2]) ** 2 == pytest.approx(np.linalg.det(np.asarray(algebras.so(6).hat(z))), rel=1e-10)


def test_a_users_system_gets_its_algebras_casimirs_by_what_they_are():
    s = lpjax.LiePoissonSystem(algebras.so(4), lambda m: 0.5 * m @ m, -1)
    assert s.casimir_names == (
        "quadratic 1: ½ μᵀS1μ = 0.2041 μ1² + 0.2041 μ2² + 0.2041 μ3² + 0.2041 μ4² + 0.2041 μ5² + 0.2041 μ6²",
        "quadratic 2: ½ μᵀS2μ = 0.4082 μ1μ6 − 0.4082 μ2μ5 + 0.4082 μ3μ4",
    )
    y = jnp.asarray(rng.standard_normal(6))
    c = 1 / np.sqrt(6)  # S1 = I/√6 and S2 the Pfaffian's form over its Frobenius norm √6: as named
    np.testing.assert_allclose(s.casimirs(y), [0.5 * c * y @ y, c * (y[0] * y[5] - y[1] * y[4] + y[2] * y[3])], rtol=1e-14)
    named = lpjax.LiePoissonSystem(algebras.so3(), lambda m: m @ m, -1, casimirs=lambda m: m @ m, casimir_names=["|M|²"])
    assert named.casimir_names == ("|M|²",)
    assert lpjax.LiePoissonSystem(algebras.so3(), lambda m: m @ m, -1, casimirs=lambda m: m).casimir_names == (
        "casimir 1", "casimir 2", "casimir 3")
    with pytest.raises(ValueError, match="casimir_names has 2 names for 1 Casimirs"):
        lpjax.LiePoissonSystem(algebras.so3(), lambda m: m @ m, -1, casimirs=lambda m: m @ m, casimir_names=["a", "b"])
