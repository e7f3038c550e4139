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
