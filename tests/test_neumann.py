"""The Neumann system as the smallest leaf of the Clebsch flow (7.12), and Adler's map (7.17)
on it (seed 000, sec. 7, closing remark)."""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import lpjax
from lpjax.diagnostics import empirical_order
from lpjax.systems import neumann, neumann_coordinates, neumann_state

METHOD = lpjax.SurisClebsch()


def _data(n, seed=0):
    """Distinct ``b_k`` of both signs and a random point of T*S^{n-1}."""
    rng = np.random.default_rng(100 * n + seed)
    B = rng.uniform(-1.0, 2.0, n)
    x = rng.standard_normal(n)
    x /= np.linalg.norm(x)
    p = rng.standard_normal(n)
    p -= (x @ p) * x
    return B, x, p


def _neumann_rhs(B):
    """ẋ = p, ṗ = Bx − (|p|² + <x, Bx>) x in R^{2n}: force Bx plus the constraint force λx."""

    def f(t, z):
        n = z.size // 2
        x, p = z[:n], z[n:]
        return np.concatenate([p, B * x - (p @ p + x @ (B * x)) * x])

    return f


def _uhlenbeck(B, x, p, sign=-1.0):
    """``F_k = x_k² + sign · Σ_{j≠k} (x_j p_k − x_k p_j)² / (b_k − b_j)`` for x, p of shape (T, n)."""
    L = x[:, :, None] * p[:, None, :] - p[:, :, None] * x[:, None, :]  # L[t, j, k] = x_j p_k − x_k p_j
    diff = B[:, None] - B[None, :]  # b_j − b_k at [j, k]
    np.fill_diagonal(diff, np.inf)
    return x**2 + sign * np.sum(L**2 / (-diff), axis=1)


@jax.jit
def _energy_jit(s, ys):
    return jax.vmap(s.energy)(ys)


def _energy(s, ys):
    return np.asarray(_energy_jit(s, jnp.asarray(ys)))


@jax.jit
def _casimirs(s, y):
    return s.casimirs(y)


def _jit_field(system):
    vf = jax.jit(lambda s, y: s.vector_field(y))
    return lambda t, y: np.asarray(vf(system, jnp.asarray(y)))


def _three_form(y, n):
    """The 3-form P ∧ M written out entry by entry from the upper-triangle coordinates."""
    d = n * (n - 1) // 2
    M = np.zeros((n, n))
    M[np.triu_indices(n, 1)] = y[:d]
    M = M - M.T
    P = y[d:]
    return np.array(
        [P[i] * M[j, k] + P[j] * M[k, i] + P[k] * M[i, j] for i, j, k in itertools.combinations(range(n), 3)]
    )


@pytest.mark.parametrize("n", [2, 3, 4])
def test_state_and_coordinates_are_inverse(n):
    B, x, p = _data(n)
    y = neumann_state(x, p)
    d = n * (n - 1) // 2
    np.testing.assert_allclose(y[d:], x, atol=0)  # P = x
    M = np.zeros((n, n))
    M[np.triu_indices(n, 1)] = y[:d]
    np.testing.assert_allclose(M - M.T, np.outer(x, p) - np.outer(p, x), atol=1e-15)  # M = x ∧ p
    x1, p1 = neumann_coordinates(y)
    np.testing.assert_allclose(x1, x, atol=1e-15)
    np.testing.assert_allclose(p1, p, atol=1e-14)  # p = −Mx/|x|², not +Mx/|x|²
    assert np.max(np.abs(p1 + p)) > 0.1
    s = neumann(B)
    s.check_state(y)
    assert float(s.leaf_defect(y)) <= 1e-15
    np.testing.assert_allclose(_casimirs(s, y)[0], 1.0, rtol=1e-15)
    if n >= 3:
        assert abs(float(_casimirs(s, y)[1])) <= 1e-15  # |P ∧ M|² vanishes on the leaf
    # on the leaf H = ½|p|² − ½<x, Bx>
    np.testing.assert_allclose(_energy(s, y[None])[0], 0.5 * p @ p - 0.5 * x @ (B * x), rtol=1e-14)
    # a leaf point on the sphere of radius 2 (the leaf is every |P| > 0): p is recovered too
    y2 = 2 * y  # P = 2x, M = (2x) ∧ p
    s.check_state(y2)
    x2, p2 = neumann_coordinates(y2)
    np.testing.assert_allclose(x2, 2 * x, atol=1e-15)
    np.testing.assert_allclose(p2, p, atol=1e-14)
    # batched
    xb, pb = neumann_coordinates(jnp.stack([y, y2]))
    np.testing.assert_allclose(pb, np.stack([p, p]), atol=1e-14)


def _three_form_jax(y, n):
    d = n * (n - 1) // 2
    M = jnp.zeros((n, n)).at[np.triu_indices(n, 1)].set(y[:d])
    M = M - M.T
    P = y[d:]
    triples = itertools.combinations(range(n), 3)
    return jnp.stack([P[i] * M[j, k] + P[j] * M[k, i] + P[k] * M[i, j] for i, j, k in triples])


@jax.jit
def _local(s, y):
    """Vector field, Poisson tensor, Casimirs and their derivatives along the field at ``y``."""
    n = s.n
    f = s.vector_field(y)
    dC = jax.jacobian(s.casimirs)(y) @ f
    dW = jax.jacobian(lambda u: _three_form_jax(u, n))(y) @ f
    return f, s.algebra.poisson_tensor(y, s.sign), s.casimirs(y), dC, dW


@pytest.mark.parametrize("n", [3, 4])
def test_leaf_geometry(n):
    B, x, p = _data(n)
    s = neumann(B)
    d = n * (n - 1) // 2
    y = neumann_state(x, p)
    rng = np.random.default_rng(n)
    y_off = jnp.asarray(rng.standard_normal(d + n))
    w = _three_form(np.asarray(y_off), n)
    # the relative defect is the 3-form condition, checked against the entrywise formula
    np.testing.assert_allclose(
        s.leaf_defect(y_off), np.max(np.abs(w)) / (np.linalg.norm(y_off[d:]) * np.linalg.norm(y_off[:d])), rtol=1e-14
    )
    assert float(s.leaf_defect(y_off)) > 0.05
    f, Pi, C, dC, dW = _local(s, y)
    f_off, Pi_off, C_off, dC_off, _ = _local(s, y_off)
    np.testing.assert_allclose(C_off[1], np.sum(w**2), rtol=1e-12)  # |P ∧ M|² = Σ (3-form)²
    # the leaf is 2(n − 1)-dimensional (rank of the Lie–Poisson tensor); generic leaves of
    # e(n)*, n = 3, 4, have codimension 2 (the two Casimirs), so for n = 4 the leaf is smaller
    assert np.linalg.matrix_rank(np.asarray(Pi), tol=1e-10) == 2 * n - 2
    assert np.linalg.matrix_rank(np.asarray(Pi_off), tol=1e-10) == d + n - 2
    # Casimirs are conserved by the vector field (also off the leaf); it is tangent to the leaf
    np.testing.assert_allclose(dC, 0.0, atol=1e-12)
    np.testing.assert_allclose(dC_off, 0.0, atol=1e-12)
    np.testing.assert_allclose(dW, 0.0, atol=1e-13)
    # the vector field is (7.12), Ṁ = P ∧ (BP), Ṗ = −MP, written out in numpy
    M = np.zeros((n, n))
    M[np.triu_indices(n, 1)] = y_off[:d]
    M, P = M - M.T, np.asarray(y_off[d:])
    np.testing.assert_allclose(f_off[:d], (np.outer(P, B * P) - np.outer(B * P, P))[np.triu_indices(n, 1)], atol=1e-14)
    np.testing.assert_allclose(f_off[d:], -M @ P, atol=1e-14)
    # F_k = P_k² − Σ_{j≠k} M_jk² / (b_k − b_j) (Uhlenbeck's integrals in (M, P)) are quadratic
    # first integrals of (7.12) on all of e(n)*: dF_k/dt = 2 P_k Ṗ_k − 2 Σ_j M_jk Ṁ_jk / (b_k − b_j)
    Mdot = np.zeros((n, n))
    Mdot[np.triu_indices(n, 1)] = f_off[:d]
    Mdot = Mdot - Mdot.T
    diff = B[None, :] - B[:, None]  # b_k − b_j at [j, k]
    np.fill_diagonal(diff, np.inf)
    dF = 2 * P * np.asarray(f_off[d:]) - 2 * np.sum(M * Mdot / diff, axis=0)
    np.testing.assert_allclose(dF, 0.0, atol=1e-12)
    assert np.max(np.abs(2 * P * np.asarray(f_off[d:]))) > 0.1
    # on the leaf ẋ = p; on the leaf of radius 2, ẋ = |x|² p
    np.testing.assert_allclose(f[d:], p, atol=1e-15)
    f2 = _local(s, 2 * y)[0]  # P = 2x, M = (2x) ∧ p
    np.testing.assert_allclose(f2[d:], 4.0 * p, atol=1e-14)


@pytest.mark.parametrize("n", [3, 4])
def test_flow_is_the_neumann_system(n):
    B, x, p = _data(n)
    s = neumann(B)
    y0 = neumann_state(x, p)
    ts = np.linspace(0.0, 5.0, 26)
    kw = dict(method="DOP853", rtol=1e-12, atol=1e-12, t_eval=ts)
    ys = solve_ivp(_jit_field(s), (0, 5.0), np.asarray(y0), **kw).y.T
    ref = solve_ivp(_neumann_rhs(B), (0, 5.0), np.concatenate([x, p]), **kw).y.T
    X, Pm = (np.asarray(a) for a in neumann_coordinates(jnp.asarray(ys)))
    assert np.max(np.abs(ref[-1] - ref[0])) > 0.5  # the motion is not trivial
    np.testing.assert_allclose(X, ref[:, :n], atol=1e-9)  # measured 5e-12
    np.testing.assert_allclose(Pm, ref[:, n:], atol=1e-9)
    # Uhlenbeck's integrals with a_k = −b_k are invariants; with the opposite sign they are not
    F = _uhlenbeck(B, ref[:, :n], ref[:, n:])
    np.testing.assert_allclose(F, np.broadcast_to(F[0], F.shape), atol=3e-10)  # measured 3.2e-11, 4.8e-11
    np.testing.assert_allclose(F.sum(axis=1), 1.0, atol=1e-10)  # Σ F_k = |x|²; measured 1.7e-11
    np.testing.assert_allclose(-0.5 * F[0] @ B, _energy(s, y0[None])[0], rtol=1e-12)  # H = −½ Σ b_k F_k
    G = _uhlenbeck(B, ref[:, :n], ref[:, n:], sign=+1.0)
    assert np.max(np.abs(G - G[0])) > 0.1  # measured 2.0 (n = 3), 1.2 (n = 4)


@pytest.mark.parametrize("n", [3, 4])
def test_adler_map_keeps_the_leaf_and_bounds_the_integrals(n):
    B, x, p = _data(n)
    s = neumann(B)
    dt = 0.05
    y0 = neumann_state(x, p)
    ys = lpjax.integrate(s, METHOD, y0, dt, 10_000, save_every=10).ys
    assert float(jnp.max(s.leaf_defect(ys))) <= 1e-12  # measured 5.8e-15 (n = 3), 7.8e-15 (n = 4)
    r2 = jnp.sum(ys[:, -n:] ** 2, axis=1)
    assert float(jnp.max(jnp.abs(r2 - 1.0))) <= 1e-12  # measured 7.3e-15, 1.2e-14
    X, Pm = (np.asarray(a) for a in neumann_coordinates(ys))
    e = np.abs(_energy(s, ys) - _energy(s, ys[:1]))
    F = _uhlenbeck(B, X, Pm)
    f = np.max(np.abs(F - F[0]), axis=1)
    tenth = e.size // 10
    # measured max/dt: energy 0.30 (n = 3), 0.87 (n = 4); Uhlenbeck 0.81, 1.88
    for err, bound in ((e, 2.0), (f, 3.0)):
        assert 1e-2 * dt < err.max() <= bound * dt  # O(ε), not conserved exactly
        assert err[-tenth:].max() < 1.5 * err[1 : tenth + 1].max()  # no drift


def test_order_one_against_dop853():
    n = 3
    B, x, p = _data(n)
    s = neumann(B)
    y0 = neumann_state(x, p)
    ref = solve_ivp(_neumann_rhs(B), (0, 1.0), np.concatenate([x, p]), method="DOP853", rtol=1e-13, atol=1e-13)
    xr, pr = ref.y[:n, -1], ref.y[n:, -1]
    dts = np.array([0.004, 0.002, 0.001])
    # one compiled run of 1000 steps, called with each dt; t = 1 is save number 0.1 / dt
    run = jax.jit(lambda dt: lpjax.integrate(s, METHOD, y0, dt, 1000, save_every=10).ys)
    errs, energy_errs, uhlenbeck_errs = [], [], []
    for dt in dts:
        ys = np.asarray(run(dt))[: int(round(0.1 / dt)) + 1]  # saves on [0, 1]
        X, Pm = (np.asarray(a) for a in neumann_coordinates(ys))
        errs.append(max(np.max(np.abs(X[-1] - xr)), np.max(np.abs(Pm[-1] - pr))))
        energy_errs.append(np.max(np.abs(_energy(s, ys) - _energy(s, ys[:1]))))
        F = _uhlenbeck(B, X, Pm)
        uhlenbeck_errs.append(np.max(np.abs(F - F[0])))
    assert abs(empirical_order(dts, errs) - METHOD.order) <= 0.1  # measured 0.99
    assert abs(empirical_order(dts, energy_errs) - 1.0) <= 0.1  # measured 1.00
    assert abs(empirical_order(dts, uhlenbeck_errs) - 1.0) <= 0.1


def test_leaf_check_runs_on_concrete_states_only():
    B, x, p = _data(3)
    s = neumann(B)
    y_off = neumann_state(x, p).at[0].add(0.3)
    with pytest.raises(ValueError, match="off the Neumann leaf"):
        s.check_state(y_off)
    with pytest.raises(ValueError, match="off the Neumann leaf"):
        lpjax.integrate(s, METHOD, y_off, 0.1, 2)
    # under jit only shape and dtype can be checked: the traced state passes through
    out = jax.jit(lambda y: (s.check_state(y), y)[1])(y_off)
    np.testing.assert_array_equal(out, y_off)
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        jax.jit(lambda y: (s.check_state(y), y)[1])(jnp.zeros(7))


def test_bad_input():
    B, x, p = _data(3)
    s = neumann(B)
    for bad_B, match in [
        (np.ones((3, 3)), r"B must have shape \(n,\)"),
        (np.ones(1), r"B must have shape \(n,\)"),
        (np.array([1.0, np.nan, 2.0]), "B must be finite"),
        (np.array([1.0, np.inf, 2.0]), "B must be finite"),
    ]:
        with pytest.raises(ValueError, match=match):
            neumann(bad_B)
    with pytest.raises(ValueError, match=r"p must have shape \(3,\)"):
        neumann_state(x, np.zeros(4))
    with pytest.raises(ValueError, match=r"x must have shape \(n,\)"):
        neumann_state(np.ones((3, 1)) / np.sqrt(3), p)
    with pytest.raises(ValueError, match="unit sphere"):
        neumann_state(2 * x, p)
    with pytest.raises(ValueError, match="tangent"):
        neumann_state(x, p + x)
    with pytest.raises(ValueError, match="x must be finite"):
        neumann_state(np.array([np.nan, 1.0, 0.0]), p)
    with pytest.raises(jax.errors.JaxRuntimeError, match="ValueError: x must lie on the unit sphere"):
        eqx.filter_jit(neumann_state)(jnp.asarray(2 * x), jnp.asarray(p))
    # a 4-dimensional point for a 3-dimensional system
    _, x4, p4 = _data(4)
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        lpjax.integrate(s, METHOD, neumann_state(x4, p4), 0.1, 2)
    y = neumann_state(x, p)
    with pytest.raises(ValueError, match="P = 0"):
        s.check_state(y.at[3:].set(0.0))
    with pytest.raises(ValueError, match="finite"):
        s.check_state(y.at[0].set(jnp.nan))
    with pytest.raises(ValueError, match="floating dtype"):
        s.check_state(jnp.arange(6))
    y_off = y.at[0].add(0.3)
    with pytest.raises(ValueError, match="off the Neumann leaf"):
        neumann_coordinates(y_off)
    x1, p1 = neumann_coordinates(y_off, check=False)  # projection: p ⟂ x
    assert abs(float(x1 @ p1)) <= 1e-15
    with pytest.raises(ValueError, match="P = 0"):
        neumann_coordinates(y.at[3:].set(0.0))
    with pytest.raises(ValueError, match=r"n\(n\+1\)/2"):
        neumann_coordinates(jnp.ones(5))
    with pytest.raises(ValueError, match="finite"):
        neumann_coordinates(y.at[1].set(jnp.inf))
