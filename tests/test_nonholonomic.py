"""Seed 001's nonholonomic systems: the 3D fields against the formulas of 001-equations.md
written here in numpy, trajectories against DOP853, the invariant densities by div(ρf) = 0 and
the integrals' rates. (Integrators on them: test_nonholonomic_integrators.py.)"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import lpjax
from lpjax.diagnostics import divergence_defect
from lpjax.systems import (
    chaplygin_sphere, lplusr, rubber_chaplygin_sphere, spherical_support, veselova, veselova_n,
)

I3 = np.array([1.0, 2.0, 3.0])
D = 0.5
RNG = np.random.default_rng(1)


def _unit(n):
    g = RNG.normal(size=n)
    return g / np.linalg.norm(g)


def _points(system, count):
    """Random points on the invariant manifold: unit γ_i, the constraint satisfied; ξ_a of
    norm ~ 1 (kept small enough that J stays positive)."""
    g = RNG.normal(size=(count, system.r, system.n))
    g = jnp.asarray(g / np.linalg.norm(g, axis=-1, keepdims=True))
    xi = jnp.asarray(RNG.normal(size=(count, system.m, system.algebra.dim)) / np.sqrt(system.algebra.dim))
    Om = jnp.asarray(RNG.normal(size=(count, system.algebra.dim)))

    return jax.jit(jax.vmap(system.from_velocity))(Om, g, xi)


# ------------------------------------------------------------------ the 3D formulas, in numpy


def _veselova_np(x, I):
    M, g = x[:3], x[3:]
    w = M / I
    lam = -((np.cross(M, w) / I) @ g) / ((g / I) @ g)
    return np.concatenate([np.cross(M, w) + lam * g, np.cross(g, w)])


def _chaplygin_J(g, I, D):
    return np.diag(I) + D * (g @ g * np.eye(3) - np.outer(g, g))


def _chaplygin_np(x, I, D):
    k, g = x[:3], x[3:]
    w = np.linalg.solve(_chaplygin_J(g, I, D), k)
    return np.concatenate([np.cross(k, w), np.cross(g, w)])


def _general_lplusr_np(x, I, weights):
    """001-equations.md, general L+R: k = (I + Σ r_a ξ_a ⊗ ξ_a)ω, k' = k × ω, ξ_a' = ξ_a × ω."""
    k, xi = x[:3], x[3:].reshape(-1, 3)
    w = np.linalg.solve(np.diag(I) + np.einsum("a,ai,aj->ij", weights, xi, xi), k)
    return np.concatenate([np.cross(k, w), np.cross(xi, w).reshape(-1)])


def _rubber_np(x, I, D, jdot_sign=-1.0):
    """The rubber sphere; ``jdot_sign=+1`` is the table's printed λ (an erratum, see below)."""
    k, g = x[:3], x[3:]
    J = _chaplygin_J(g, I, D)
    w = np.linalg.solve(J, k)
    gp = np.cross(g, w)
    Jdot_w = D * (2 * (g @ gp) * w - gp * (g @ w) - g * (gp @ w))
    Ji = np.linalg.inv(J)
    lam = -((Ji @ (np.cross(k, w) + jdot_sign * Jdot_w)) @ g) / ((Ji @ g) @ g)
    return np.concatenate([np.cross(k, w) + lam * g, gp])


R3 = np.array([[0.6, 0.2, -0.1], [0.2, -0.3, 0.15], [-0.1, 0.15, 0.4]])  # indefinite, rank 3
GENERAL = lplusr(I3, R=R3)
_B = np.linalg.qr(np.random.default_rng(7).normal(size=(6, 3)))[0]
R4 = _B @ np.diag([0.5, -0.2, 0.3]) @ _B.T  # so(4), rank 3


@pytest.mark.parametrize("name", ["veselova", "chaplygin", "rubber", "general L+R"])
def test_3d_fields_are_the_formulas(name):
    """At 100 random points (|γ| = 1, ω arbitrary: off the constraint too) to 1e-12 relative."""
    system, ref = {
        "veselova": (veselova(I3), lambda x: _veselova_np(x, I3)),
        "chaplygin": (chaplygin_sphere(I3, D), lambda x: _chaplygin_np(x, I3, D)),
        "rubber": (rubber_chaplygin_sphere(I3, D), lambda x: _rubber_np(x, I3, D)),
        "general L+R": (GENERAL, lambda x: _general_lplusr_np(x, I3, np.asarray(GENERAL.R))),
    }[name]
    xs = np.stack([np.concatenate([RNG.normal(size=3)] + [_unit(3) for _ in range(max(system.r, system.m))])
                   for _ in range(100)])
    got = np.asarray(jax.jit(jax.vmap(lambda x: system.vector_field(x)))(jnp.asarray(xs)))
    want = np.stack([ref(x) for x in xs])
    assert np.max(np.abs(got - want) / np.max(np.abs(want), axis=1, keepdims=True)) <= 1e-12


def test_rubber_multiplier_sign_erratum():
    """001-equations.md prints λ = −(J⁻¹(k × ω + J̇ω), γ)/(J⁻¹γ, γ). Differentiating
    k = Jω gives ω' = J⁻¹(k' − J̇ω), so the sign of J̇ω is minus: with the printed sign the
    constraint function (ω, γ) changes along the field off the constraint (measured rate 0.23
    at these points), with the minus sign it stays put (≤ 1e-15). On the constraint J̇ω = 0."""
    I, Dm = I3, D

    def rate(field, x):
        def c(z):
            w = jnp.linalg.solve(jnp.diag(jnp.asarray(I)) + Dm * (z[3:] @ z[3:] * jnp.eye(3) - jnp.outer(z[3:], z[3:])), z[:3])
            return jnp.dot(w, z[3:])
        return abs(float(jax.jvp(c, (jnp.asarray(x),), (jnp.asarray(field(x)),))[1]))

    xs = [np.concatenate([RNG.normal(size=3), _unit(3)]) for _ in range(20)]
    assert max(rate(lambda x: _rubber_np(x, I, Dm, -1.0), x) for x in xs) < 1e-13
    assert max(rate(lambda x: _rubber_np(x, I, Dm, +1.0), x) for x in xs) > 1e-2


@pytest.mark.parametrize("system", [veselova(I3), chaplygin_sphere(I3, D), rubber_chaplygin_sphere(I3, D)],
                         ids=["veselova", "chaplygin", "rubber"])
def test_trajectory_against_dop853(system):
    """GL6 (dt = 0.025) against DOP853 at rtol = atol = 1e-13, t = 50: within 1e-9."""
    x0 = system.default_state()
    f = jax.jit(lambda x: system.vector_field(x))
    ref = solve_ivp(lambda t, x: np.asarray(f(x)), (0.0, 50.0), np.asarray(x0), method="DOP853", rtol=1e-13,
                    atol=1e-13).y[:, -1]
    sol = lpjax.integrate(system, lpjax.GaussLegendre(3), x0, 0.025, 2000, save_every=2000)
    assert np.max(np.abs(np.asarray(sol.ys[-1]) - ref)) <= 1e-9


# ------------------------------------------------------------------ invariant measures

DENSITY_CASES = [
    ("veselova n=3", veselova(I3)),
    ("veselova n=4", veselova_n([1.0, 1.5, 2.0, 2.5])),
    ("veselova n=5", veselova_n([1.0, 1.3, 1.7, 2.2, 2.9])),
    ("veselova n=4 AΩA", veselova_n(n=4, A=[1.0, 1.2, 1.5, 2.0])),
    ("chaplygin", chaplygin_sphere(I3, D)),
    ("rubber n=3", rubber_chaplygin_sphere(I3, D)),
    ("rubber n=4", rubber_chaplygin_sphere([1.0, 1.5, 2.0, 2.5], D, n=4)),
    ("L+R n=3", lplusr(I3, [0.5, 0.3], [0.2, 0.1])),
    ("L+R n=4", lplusr([1.0, 1.5, 2.0, 2.5], [0.5, 0.3], [0.2, 0.1], n=4)),
    ("spherical support n=3", spherical_support(I3, [(0.2, 0.5), (0.3, 0.4), (0.1, 0.3)], rubber=True)),
    ("spherical support n=4", spherical_support([1.0, 1.5, 2.0, 2.5], [(0.2, 0.5), (0.3, 0.4)], n=4)),
    ("general L+R n=3", GENERAL),
    ("general L+R n=4", lplusr([1.0, 1.5, 2.0, 2.5], n=4, R=R4)),
]


@pytest.mark.parametrize("name, system", DENSITY_CASES, ids=[c[0] for c in DENSITY_CASES])
def test_invariant_density(name, system):
    """div(ρf) ≤ 1e-11 (scaled) at 100 points of the invariant manifold; the controls (ρ = 1
    and ρ⁻¹) fail by more than 1e-2 (except where ρ is constant: Veselova with I(Ω) = JΩ + ΩJ
    is not, the control holds for all)."""
    xs = _points(system, 100)

    class Powered(eqx.Module):  # ρ^p: ρ and both controls in one program (p traced)
        power: jax.Array

        def density(self, x):
            return system.density(x) ** self.power

        def vector_field(self, x):
            return system.vector_field(x)

    defects = jax.vmap(lambda p: jax.vmap(lambda x: divergence_defect(Powered(p), x))(xs))(jnp.array([1.0, 0.0, -1.0]))
    assert float(jnp.max(defects[0])) <= 1e-11
    assert float(jnp.min(jnp.max(defects[1:], axis=1))) > 1e-2


@eqx.filter_jit
def _field_and_rates(system, xs):
    """The field at ``xs`` and the rate of each integral along it (one program per system)."""
    fs = jax.vmap(system.vector_field)(xs)
    return fs, jax.vmap(lambda x, f: jax.jvp(system.integrals, (x,), (f,))[1])(xs, fs)


def test_integrals_and_constraint_are_kept_by_the_field():
    """Every listed integral has zero rate along the field at points of the invariant manifold
    (each kind of system once)."""
    for name, system in DENSITY_CASES:
        if name in ("veselova n=5", "veselova n=4", "L+R n=3", "spherical support n=3"):
            continue
        fs, rates = _field_and_rates(system, _points(system, 5))
        scale = (1 + np.max(np.abs(fs))) ** 2
        for k, v in rates.items():
            assert np.max(np.abs(v)) <= 1e-12 * scale, (system.name, k)


def test_general_lplusr_contains_the_chaplygin_sphere():
    """In 3D, pr(γ) = 1 − γγᵀ on |γ| = 1, so the Chaplygin sphere (I, D) is the general L+R
    system with inertia I + D and R = −D γγᵀ (ξ = γ advected the same way): equal fields."""
    g0 = _unit(3)
    general = lplusr(I3 + D, -D * np.outer(g0, g0))  # positional: a matrix is the general R
    assert general.m == 1 and np.allclose(np.abs(np.asarray(general.xis(general.default_state()))[0]), np.abs(g0))
    xs = np.stack([np.concatenate([RNG.normal(size=3), _unit(3)]) for _ in range(50)])
    a = jax.jit(jax.vmap(lambda x: general.vector_field(x)))(jnp.asarray(xs))
    b = jax.jit(jax.vmap(lambda x: chaplygin_sphere(I3, D).vector_field(x)))(jnp.asarray(xs))
    assert np.max(np.abs(a - b)) <= 1e-13 * np.max(np.abs(b))


@pytest.mark.parametrize("kwargs, match", [
    (dict(), "give the couplings D"),
    (dict(R=np.ones((2, 2))), r"symmetric \(3, 3\)"),
    (dict(R=np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])), "must be symmetric"),
    (dict(R=np.zeros((3, 3))), "R is zero"),
    (dict(T=[0.1]), "T .* needs D"),
])
def test_lplusr_refuses_bad_couplings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        lplusr(I3, **kwargs)


def test_indefinite_total_inertia_is_refused():
    """R = −5 ξξᵀ with |ξ| = 1 makes J = I − 5ξξᵀ indefinite: the state is refused by name."""
    system = lplusr(I3, R=-0.5 * np.diag([1.0, 0.0, 0.0]))
    x = system.default_state().at[3:].multiply(np.sqrt(10.0))
    with pytest.raises(ValueError, match="total inertia J at this state is not positive definite"):
        lpjax.integrate(system, lpjax.RK4(), x, 0.1, 2)
