"""Seed 002, eq. (26): the heavy top on a movable base without control, with the base's height
x₃, on (se(3) × R⁴)*; with the potential-shaping control it is movable_base_top(rho = M + m)."""

import jax
import jax.numpy as jnp
import numpy as np

import lpjax
from lpjax.diagnostics import relative_invariant_error
from lpjax.systems import movable_base_top, movable_base_top_x3

MU = jnp.asarray(np.concatenate([np.random.default_rng(26).normal(size=6) * 0.3, [0.1, 0.2, 0.97], [0.5]]))


def test_the_vector_field_is_26():
    """Written out: Π' = Π×h_Π + P×h_P + Γ×h_Γ, P' = P×h_Π − h_x₃ Γ, Γ' = Γ×h_Π, x₃' = Γ·h_P."""
    system = movable_base_top_x3()
    dh = jax.grad(system.hamiltonian)(MU)
    Pi, P, G = MU[:3], MU[3:6], MU[6:9]
    hPi, hP, hG, hx = dh[:3], dh[3:6], dh[6:9], dh[9]
    expected = jnp.concatenate([jnp.cross(Pi, hPi) + jnp.cross(P, hP) + jnp.cross(G, hG), jnp.cross(P, hPi) - hx * G,
                                jnp.cross(G, hPi), jnp.dot(G, hP)[None]])
    np.testing.assert_allclose(system.vector_field(MU), expected, atol=1e-14)
    assert float(dh[9]) == float((0.44 + 0.7) * 9.8)  # ∂h/∂x₃ = m̄ g


def test_potential_shaping_leaves_the_uncontrolled_top_of_movable_base_top():
    """(26) plus uᵖ = (∂h/∂x₃) Γ in P' is (30) at ρ = M + m on the first nine components."""
    system, reduced = movable_base_top_x3(), movable_base_top(0.44 + 0.7)
    f = system.vector_field(MU)
    control = jnp.zeros(10).at[3:6].set(jax.grad(system.hamiltonian)(MU)[9] * MU[6:9])
    np.testing.assert_allclose((f + control)[:9], reduced.vector_field(MU[:9]), atol=1e-14)


def test_gl6_keeps_the_casimir_and_the_energy():
    """|Γ|² (the algebra's quadratic Casimir) and h along 2000 GL6 steps of 0.005: both to
    1e-12 (GL6 keeps quadratic invariants exactly; h is not quadratic, its error is that of
    order 6)."""
    system = movable_base_top_x3()
    S = system.algebra.quadratic_casimirs()
    assert S.shape == (1, 10, 10)  # ½ μᵀSμ ∝ |Γ|²: S is a multiple of the identity on Γ, zero elsewhere
    expected = np.zeros((10, 10))
    expected[6:9, 6:9] = S[0, 6, 6] * np.eye(3)
    np.testing.assert_allclose(S[0], expected, atol=1e-14)
    sol = lpjax.integrate(system, lpjax.GaussLegendre(3), MU, 0.005, 2000, save_every=100)
    assert float(jnp.max(relative_invariant_error(system.casimirs, sol.ys))) <= 1e-12
    assert float(jnp.max(relative_invariant_error(system.energy, sol.ys))) <= 1e-10
