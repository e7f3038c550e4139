"""Chaplygin's reducing multiplier: Veselova's problem becomes Hamiltonian on T*S^{n−1} after a
change of time for n = 3 (any inertia) and n ≥ 4 with I(Ω) = AΩA, and not for a generic n = 4
rigid body, which hamiltonize refuses."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.systems import rubber_chaplygin_sphere, veselova, veselova_n

RNG = np.random.default_rng(5)


def _points(system, count):
    """States on the constraint with |γ| = 1 in the upper hemisphere of the chart."""
    g = RNG.normal(size=(count, system.n))
    g[:, -1] = np.abs(g[:, -1]) + 0.3
    g = jnp.asarray(g / np.linalg.norm(g, axis=1, keepdims=True))
    Om = jnp.asarray(RNG.normal(size=(count, system.algebra.dim)))
    return jax.jit(jax.vmap(lambda g, Om: system.from_velocity(Om, g)))(g, Om)


def _jit_vmap(f):
    return jax.jit(jax.vmap(lambda x: f(x)))


CASES = [
    ("n=3, I = (0.4, 2.5, 1.1)", veselova([0.4, 2.5, 1.1])),
    ("n=4, AΩA", veselova_n(n=4, A=[1.0, 1.2, 1.5, 2.0])),
    ("n=5, AΩA", veselova_n(n=5, A=[1.0, 1.2, 1.5, 2.0, 2.4])),
]


@pytest.mark.parametrize("name, system", CASES, ids=[c[0] for c in CASES])
def test_the_multiplier_makes_it_hamiltonian(name, system):
    """Hamiltonian defect ≤ 1e-8 at 10 states (measured ≤ 2e-15); the maps to and from
    (q, p̃) are inverse to each other; H̃ is the energy. (n = 3 with I = (1, 2, 3): below.)"""
    h = lpjax.hamiltonize(system)
    xs = _points(system, 8)  # the shape hamiltonize checked: its compiled defects are reused
    assert float(jnp.max(h.defects(xs))) <= 1e-8

    @jax.jit
    @jax.vmap
    def round_trip(x):
        z = h.to_canonical(x)
        return h.from_canonical(z), h.hamiltonian(z), system.energy(x)

    back, H, energy = round_trip(xs)
    np.testing.assert_allclose(back, xs, rtol=0, atol=1e-12)
    np.testing.assert_allclose(H, energy, rtol=1e-12)


def test_a_generic_four_dimensional_rigid_body_is_refused():
    """JΩ + ΩJ with n = 4: the defect reaches 1e-3 (measured 1e-4 to 1.4e-3 over the points),
    and hamiltonize raises."""
    system = veselova_n([1.0, 1.5, 2.0, 2.5])
    h = lpjax.Hamiltonized(system)
    assert float(jnp.max(h.defects(_points(system, 8)))) >= 1e-3
    with pytest.raises(ValueError, match="no Chaplygin reducing multiplier"):
        lpjax.hamiltonize(system)
    with pytest.raises(ValueError, match="inertia I \\+ D"):
        lpjax.hamiltonize(rubber_chaplygin_sphere([1.0, 2.0, 3.0], 0.5))


def test_symplectic_path_follows_the_nonholonomic_flow():
    """GL4 on the canonical system in τ (τ = 1: γ stays in the chart's hemisphere), mapped back at
    t(τ) (trapezoidal quadrature of 1/ν), against GL6 on the nonholonomic system run to the
    same t: within 1e-6; the canonical run keeps H̃ to 1e-12."""
    system = veselova([1.0, 2.0, 3.0])
    h = lpjax.Hamiltonized(system)
    g = np.array([0.2, -0.1, 1.0]) / np.linalg.norm([0.2, -0.1, 1.0])
    x0 = system.from_velocity(jnp.array([0.3, 0.5, -0.2]), jnp.asarray(g))
    assert float(h.defects(jnp.tile(x0, (8, 1)))[0]) <= 1e-8  # 8 rows: the program of the n = 3 case above
    dtau, n = 0.005, 200
    sol = lpjax.integrate(h.canonical, lpjax.GaussLegendre(2), jax.jit(lambda x: h.to_canonical(x))(x0), dtau, n)
    t = h.time(sol.ys, dtau)
    x_end = jax.jit(lambda z: h.from_canonical(z))(sol.ys[-1])
    direct = lpjax.integrate(system, lpjax.GaussLegendre(3), x0, float(t[-1]) / 400, 400, save_every=400).ys[-1]
    assert float(jnp.max(jnp.abs(x_end - direct))) <= 1e-6
    H = _jit_vmap(h.hamiltonian)(sol.ys)
    assert float(jnp.max(jnp.abs(H - H[0]))) <= 1e-12
