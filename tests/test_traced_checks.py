"""Checks a trace cannot skip: the splitting under jit, vmap and grad is right or refused before
any work (its Hamiltonian read by structure, so a traced parameter cannot hide a coupling or a
piece), ``pieces=`` cannot drop a nonzero piece, closures over traced values run, declared
family data are checked in traced programs and in every member of a batched system, and the
exact flows on so(4) cost what the Cayley ones do."""

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax._structure import monomials
from lpjax.systems import heavy_top, rigid_body, rigid_body_n

I = jnp.array([1.0, 1.5, 2.2])
Y0 = jnp.array([0.4, -0.8, 1.5])
SO3 = lpjax.algebras.so3()
GL6 = lpjax.GaussLegendre(3)


class Coupled(eqx.Module):
    """h = ½ Σ M²/I + c M₀M₁: not splittable for any c ≠ 0."""

    I: jax.Array
    c: jax.Array

    def __call__(self, m):
        return 0.5 * jnp.sum(m ** 2 / self.I) + self.c * m[0] * m[1]


class Quartic(eqx.Module):
    I: jax.Array
    p: jax.Array

    def __call__(self, m):
        return 0.5 * jnp.sum(m ** 2 / self.I) + self.p * m[0] ** 4


class Splittable(eqx.Module):
    """h = ½ Σ M²/I + c M₀² + c M₂: splits for every c (pieces q0-q2, l2)."""

    I: jax.Array
    c: jax.Array

    def __call__(self, m):
        return 0.5 * jnp.sum(m ** 2 / self.I) + self.c * m[0] ** 2 + self.c * m[2]


def _end(h, method, n=1000, T=10.0):
    return lpjax.integrate(lpjax.LiePoissonSystem(SO3, h, -1), method, Y0, T / n, n).ys[-1]


# ------------------------------------------------------------------ right or refused under every transform

TRANSFORMS = {
    "jit": lambda f: jax.jit(f)(0.3),
    "vmap": lambda f: jax.vmap(f)(jnp.array([0.3, 0.6])),
    "grad": lambda f: jax.grad(lambda c: f(c)[0])(0.3),
}


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("flow", ["exact", "cayley"])
def test_a_coupling_with_a_traced_coefficient_is_refused_before_any_work(transform, flow):
    """Before: jit at c = 0.3 ended 2.2 from GL6 at t = 10, reported successful, and the
    gradient in c was 0.000 (GL6's finite difference 5.387)."""
    steps = []
    split = lpjax.LiePoissonSplitting(flow=flow)
    with pytest.raises(ValueError, match=r"its quadratic part may not be diagonal .* it may contain μ_0μ_1 .*traced"):
        TRANSFORMS[transform](lambda c: steps.append(c) or _end(Coupled(I, c), split))
    assert len(steps) == 1  # traced once, refused there: no step was compiled or run


@pytest.mark.parametrize("transform", ["jit", "vmap"])
def test_a_quartic_term_with_a_traced_coefficient_is_refused(transform):
    with pytest.raises(ValueError, match=r"not quadratic plus linear in μ: it may depend otherwise on μ_0 \(through integer_pow;"):
        TRANSFORMS[transform](lambda p: _end(Quartic(I, p), lpjax.LiePoissonSplitting()))


def test_a_splittable_hamiltonian_with_traced_coefficients_is_right_under_jit_vmap_and_grad():
    """Measured: 2.8e-5 from GL6 at t = 10 under jit and vmap (dt = 0.01, order 2), the
    gradient 4.1e-4 relative from GL6's central difference."""
    split = lpjax.LiePoissonSplitting()
    gl = jax.jit(lambda c: _end(Splittable(I, c), GL6))
    assert float(jnp.max(jnp.abs(jax.jit(lambda c: _end(Splittable(I, c), split))(0.3) - gl(0.3)))) <= 1e-3
    cs = jnp.array([0.3, 0.6])
    got = jax.vmap(lambda c: _end(Splittable(I, c), split))(cs)
    assert float(jnp.max(jnp.abs(got - jax.vmap(gl)(cs)))) <= 1e-3
    grad = float(jax.grad(lambda c: _end(Splittable(I, c), split)[0])(0.3))
    fd = float((gl(0.3 + 1e-5)[0] - gl(0.3 - 1e-5)[0]) / 2e-5)
    assert abs(grad - fd) <= 1e-2 * abs(fd), (grad, fd)


def test_for_system_under_a_transform_keeps_every_piece_a_traced_value_reaches():
    def pieces(chi):
        top = heavy_top(jnp.array([1.0, 1.3, 0.7]), chi, 2.0)
        assert lpjax.LiePoissonSplitting.for_system(top).pieces == ("q0", "q1", "q2", "l3", "l4", "l5")
        return chi

    jax.jit(pieces)(jnp.array([0.0, 0.0, 1.0]))
    assert lpjax.LiePoissonSplitting.for_system(heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]),
                                                          2.0)).pieces == ("q0", "q1", "q2", "l5")


# ------------------------------------------------------------------ pieces= cannot drop a term

def test_pieces_that_leave_out_a_nonzero_piece_are_refused():
    """Before: the heavy top with pieces q0-q2 dropped gravity, ended 1.84 off at t = 5 and
    reported successful."""
    top = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
    y0 = jnp.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386])
    split = lpjax.LiePoissonSplitting(pieces=("q0", "q1", "q2"))
    with pytest.raises(ValueError, match=r"leaves out l5: they are not zero for this system"):
        lpjax.integrate(top, split, y0, 0.01, 500)
    with pytest.raises(ValueError, match=r"leaves out l3, l4: their coefficients depend on values traced"):
        jax.jit(lambda chi: lpjax.integrate(heavy_top(jnp.array([1.0, 1.3, 0.7]), chi, 2.0),
                                            lpjax.LiePoissonSplitting(pieces=("q0", "q1", "q2", "l5")), y0, 0.01,
                                            500).ys)(jnp.array([0.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match=r"leaves out q2"):
        lpjax.LiePoissonSplitting(pieces=("q0", "q1")).check_system(rigid_body(I))


# ------------------------------------------------------------------ closures over traced values

def test_a_hamiltonian_closing_over_a_traced_value_runs_under_jit_as_it_does_concretely():
    """Before: TracerArrayConversionError in the family check, even at c = 0."""

    def run(c):
        h = lambda m: 0.5 * jnp.sum(m ** 2 / I) + c * m[2]  # noqa: E731
        return lpjax.integrate(lpjax.LiePoissonSystem(SO3, h, -1), lpjax.LiePoissonSplitting(), Y0, 0.01, 1000).ys

    for c in (0.0, 0.3):
        np.testing.assert_allclose(jax.jit(run)(c), run(c), rtol=0, atol=1e-13)


# ------------------------------------------------------------------ family data in traced programs

class Declared(lpjax.AbstractFreeRigidBody):
    """A free rigid body whose energy uses ``I`` and declares ``J``: consistent only for
    ``J_i = (I_j + I_k − I_i)/2``."""

    I: jax.Array
    J: jax.Array

    @property
    def mass_tensor(self):
        return self.J

    def __call__(self, M):
        return 0.5 * jnp.sum(M ** 2 / self.I)


def _mass(I):
    return jnp.array([I[1] + I[2] - I[0], I[0] + I[2] - I[1], I[0] + I[1] - I[2]]) / 2


def test_a_free_rigid_body_whose_mass_tensor_contradicts_its_energy_raises_under_jit():
    def run(inertia, J):
        system = lpjax.LiePoissonSystem(SO3, Declared(inertia, J), -1)
        return lpjax.integrate(system, lpjax.MoserVeselov(), Y0, 0.01, 100).ys[-1]

    want = run(I, _mass(I))  # consistent: checked by value, and runs
    np.testing.assert_allclose(jax.jit(run)(I, _mass(I)), want, rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match="mass_tensor J = .* disagrees with its energy"):
        run(I, I)
    with pytest.raises(Exception, match="mass_tensor disagrees with its energy"):
        jax.block_until_ready(jax.jit(run)(I, I))
    with pytest.raises(Exception, match="mass_tensor disagrees with its energy"):
        jax.block_until_ready(jax.jit(lambda inertia: run(inertia, inertia))(I))


class DeclaredClebsch(lpjax.AbstractClebschFlow):
    """H = ½<M, M> − ½<P, EP>, declaring B: consistent only for B = E."""

    B: jax.Array
    E: jax.Array

    def __call__(self, y):
        return 0.5 * jnp.dot(y[:3], y[:3]) - 0.5 * jnp.dot(self.E * y[3:], y[3:])


def test_the_clebsch_flows_declared_b_is_checked_under_jit():
    y0 = jnp.array([0.3, -0.2, 0.5, 0.4, 0.1, 0.9])
    E = jnp.array([0.5, 1.2, 2.0])

    def run(B, E):
        system = lpjax.LiePoissonSystem(lpjax.algebras.euclidean(3), DeclaredClebsch(B, E), -1)
        return lpjax.integrate(system, lpjax.SurisClebsch(), y0, 0.01, 100).ys[-1]

    np.testing.assert_allclose(jax.jit(run)(E, E), run(E, E), rtol=0, atol=1e-14)
    with pytest.raises(Exception, match="the Clebsch flow's B disagrees with its Hamiltonian"):
        jax.block_until_ready(jax.jit(run)(E.at[1].set(1.5), E))


def test_every_member_of_a_batched_system_is_checked():
    """Member 0 is uncoupled (it passed alone before); member 1 is coupled."""
    y0s = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3)))
    coupled = lpjax.LiePoissonSystem(SO3, Coupled(jnp.tile(I, (4, 1)), jnp.array([0.0, 0.3, 0.0, 0.0])), -1)
    with pytest.raises(ValueError, match="may contain μ_0μ_1"):
        lpjax.ensemble(coupled, lpjax.LiePoissonSplitting(), y0s, 0.01, 10, batched_system=True)
    J = jnp.tile(_mass(I), (4, 1))
    make = lambda inertia, j: lpjax.LiePoissonSystem(SO3, Declared(inertia, j), -1)  # noqa: E731
    good = eqx.filter_vmap(make)(jnp.tile(I, (4, 1)), J)
    bad = eqx.filter_vmap(make)(jnp.tile(I, (4, 1)), J.at[2, 0].set(5.0))
    with pytest.raises(ValueError, match=r"ensemble: members \[2\] of the batched system: the free rigid body's mass_tensor"):
        lpjax.ensemble(bad, lpjax.MoserVeselov(), y0s, 0.01, 10, batched_system=True)
    f = lpjax.ensemble_function(good, lpjax.MoserVeselov(), 0.01, 10, batched_system=True)
    ok = f(y0s, eqx.filter(good, eqx.is_array)).final_state
    np.testing.assert_allclose(jax.jit(f)(y0s, eqx.filter(good, eqx.is_array)).final_state, ok, rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match=r"ensemble function: members \[2\]"):
        f(y0s, eqx.filter(bad, eqx.is_array))
    out = jax.jit(f)(y0s, eqx.filter(bad, eqx.is_array))  # traced members: the bad one fails alone
    code = int(lpjax.RESULTS.invalid_initial_state._value)
    assert (np.asarray(out.result) == code).tolist() == [False, False, True, False]
    np.testing.assert_allclose(np.asarray(out.final_state)[[0, 1, 3]], np.asarray(ok)[[0, 1, 3]], rtol=0, atol=1e-14)


# ------------------------------------------------------------------ no cliff on so(4)

def test_exact_flows_on_so4_cost_what_the_cayley_flows_do():
    """Before: 30 ms a step with the exact flows (XLA recomputed every entry for each use along
    the chain of 23 flows, doubling with each), against 46 µs with the Cayley flows; now both
    about 4 µs (200 steps, best of 7)."""
    system = rigid_body_n(jnp.array([1.0, 1.5, 2.2, 3.1]))
    y0 = jnp.asarray(0.5 * np.random.default_rng(0).normal(size=6))

    def best(flow):
        method = lpjax.LiePoissonSplitting(flow=flow)
        jax.block_until_ready(lpjax.integrate(system, method, y0, 0.01, 200).ys)
        times = []
        for _ in range(7):
            t = time.perf_counter()
            jax.block_until_ready(lpjax.integrate(system, method, y0, 0.01, 200).ys)
            times.append(time.perf_counter() - t)
        return min(times)

    exact, cayley = best("exact"), best("cayley")
    assert exact <= 3 * cayley, (exact, cayley)


# ------------------------------------------------------------------ the structure reading itself

@pytest.mark.parametrize("h, want", [
    (lambda m, c: 0.5 * jnp.sum(m ** 2) + c * m[0] * m[1], ({}, {0, 1, 2}, {(0, 1)}, set())),
    (lambda m, c: c * m @ jnp.diag(jnp.array([1.0, 0.0, 2.0])) @ m + m[1], ({1}, {0, 2}, set(), set())),
    (lambda m, c: jnp.where(c > 0, c, 0.0) * m[2] ** 2 + jnp.sin(c) * m[0], ({0}, {2}, set(), set())),
    (lambda m, c: jnp.linalg.norm(m[1:]) + c * m.at[0].set(3.0).sum(), ({1, 2}, set(), set(), {1, 2})),
    (lambda m, c: c * m[0] ** 3 + m[1] / c, ({1}, set(), set(), {0})),
    (lambda m, c: jnp.dot(jnp.array([[0.0, c], [0.0, 0.0]]) @ m[:2], m[:2]), ({}, set(), {(0, 1)}, set())),
])
def test_monomials_read_from_the_jaxpr_hold_for_every_value_of_a_traced_coefficient(h, want):
    """The monomials read with c traced against the Hessian and gradient at μ = 0 and the
    defect of the quadratic Taylor form, computed by autodiff at random μ and c."""
    linear, squares, products, other = want

    def read(c):
        m = monomials(lambda mu: h(mu, c), 3, jnp.float64)
        assert (set(m.linear), set(m.squares), set(m.products), set(m.other)) == (set(linear), squares, products, other)
        return c

    jax.jit(read)(0.7)
    rng = np.random.default_rng(1)
    for c in rng.uniform(0.5, 2.0, size=3):
        f = lambda mu: h(mu, c)  # noqa: E731
        H = np.asarray(jax.hessian(f)(jnp.asarray(rng.normal(size=3))))
        present = {(i, j) for i in range(3) for j in range(i + 1, 3) if abs(H[i, j]) > 1e-12}
        if not other:  # a polynomial of degree 2: the Hessian is constant, and its pattern is what was read
            assert present == products
            assert {i for i in range(3) if abs(H[i, i]) > 1e-12} == squares


class ClosedOver(lpjax.AbstractFreeRigidBody):
    """Declares ``J``; its energy is a function closing over an inertia (traced under jit)."""

    J: jax.Array
    energy: object

    @property
    def mass_tensor(self):
        return self.J

    def __call__(self, M):
        return self.energy(M)


def test_declared_data_against_an_energy_closing_over_traced_values():
    """Before: TracerArrayConversionError in the family check; now checked in the program, for
    the method and for the Lagrangian the discrete Euler–Poincaré map is built from."""

    def run(inertia, J, dep=False):
        system = lpjax.LiePoissonSystem(SO3, ClosedOver(J, lambda M: 0.5 * jnp.sum(M ** 2 / inertia)), -1)
        method = (lpjax.DiscreteEulerPoincare(lpjax.lagrangians.moser_veselov(system)) if dep
                  else lpjax.MoserVeselov())
        return lpjax.integrate(system, method, Y0, 0.01, 50).ys[-1]

    for dep in (False, True):
        np.testing.assert_allclose(jax.jit(run, static_argnums=2)(I, _mass(I), dep), run(I, _mass(I), dep), rtol=0,
                                   atol=1e-13)
        with pytest.raises(Exception, match="mass_tensor disagrees with its energy"):
            jax.block_until_ready(jax.jit(run, static_argnums=2)(I, I, dep))


def test_ensemble_under_a_transform_names_its_transformable_form():
    """Before: a raw TracerArrayConversionError."""
    y0s = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3)))

    def loss(inertia):
        return jnp.sum(lpjax.ensemble(rigid_body(inertia), lpjax.GaussLegendre(2), y0s, 0.01, 10).final_state)

    for transform in (jax.grad, jax.jit):
        with pytest.raises(TypeError, match=r"ensemble runs eagerly .* Its transformable form is lpjax.ensemble_function"):
            transform(loss)(I)
    with pytest.raises(TypeError, match="ensemble_function"):
        jax.jit(lambda y: lpjax.ensemble(rigid_body(I), lpjax.GaussLegendre(2), y, 0.01, 10).final_state)(y0s)


def _first_chars(run, n=400) -> str:
    with pytest.raises(Exception) as info:
        jax.block_until_ready(run())
    return str(info.value)[:n]


def test_a_check_inside_a_users_jit_leads_its_error_with_lpjax_message():
    """Before: a CpuCallback traceback of the user's whole stack, the message at its end."""
    rb = rigid_body(I)

    def run(y, dt):
        return lpjax.integrate(rb, lpjax.GaussLegendre(2), y, dt, 10).ys

    assert "ValueError: integrate: dt must be finite and > 0" in _first_chars(lambda: jax.jit(run)(Y0, -0.1))
    assert "y0 must be finite" in _first_chars(lambda: jax.jit(run)(Y0.at[1].set(jnp.nan), 0.1))
    assert "dt must be finite" in _first_chars(lambda: jax.jit(jax.vmap(run, (None, 0)))(Y0, jnp.array([0.1, -0.1])))
    assert "dt must be finite" in _first_chars(lambda: jax.jit(jax.grad(lambda dt: run(Y0, dt).sum()))(-0.1))
    # a family's declared data, checked in the program
    assert "mass_tensor disagrees with its energy" in _first_chars(
        lambda: jax.jit(lambda inertia: lpjax.integrate(lpjax.LiePoissonSystem(SO3, Declared(inertia, inertia), -1),
                                                        lpjax.MoserVeselov(), Y0, 0.01, 10).ys)(I))
    # the good path is unchanged under grad
    g = jax.grad(lambda dt: run(Y0, dt)[-1].sum())(0.1)
    h = 1e-6
    fd = (run(Y0, 0.1 + h)[-1].sum() - run(Y0, 0.1 - h)[-1].sum()) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6)
