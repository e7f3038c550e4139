"""Stochastic Lie–Poisson systems (Stratonovich) under the stochastic midpoint rule and the
noise splitting: the exact solution of an isotropic body with one noise field (strong and weak
errors), strong order ½ with non-commuting noise, Casimirs on every path, the dissipation's
double bracket, the increments' keys, and clear refusals."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.linalg import expm

import lpjax
from lpjax.systems import heavy_top, rigid_body, stochastic_heavy_top, stochastic_rigid_body

XI = np.array([0.3, -0.5, 0.8])
ISO = lpjax.StochasticLiePoissonSystem(rigid_body(jnp.ones(3)), noise=XI)  # h = ½|M|²: no drift
M0 = jnp.array([0.3, -1.0, 0.7])
MID = lpjax.StochasticMidpoint()
SPLIT = lpjax.NoiseSplitting(lpjax.GaussLegendre(2))


def _tree(key, m, tol=2.0**-12):
    return diffrax.VirtualBrownianTree(0.0, 1.0, tol=tol, shape=(m,), key=key)


def _final(system, method, n, key, m, tol=2.0**-12):
    return lpjax.integrate(system, method, M0, 1.0 / n, n, save_every=n, brownian=_tree(key, m, tol)).ys[-1]


def test_the_noise_fields_are_lie_poisson_fields():
    """``M × ξ`` for the body (sign −1), the generator's product, and the Casimir's gradient
    orthogonal to every field (heavy top, its two Casimirs)."""
    np.testing.assert_allclose(ISO.noise_fields(M0)[0], np.cross(M0, XI), rtol=0, atol=1e-15)
    np.testing.assert_allclose(ISO.noise_generators()[0] @ M0, np.cross(M0, XI), rtol=0, atol=1e-15)
    top = lpjax.StochasticLiePoissonSystem(heavy_top(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 0.0, 1.0]), 1.0),
                                           noise=np.eye(6)[:3])
    y = jnp.array([0.3, -1.0, 0.7, 0.1, 0.2, 0.9])
    G = jax.jacfwd(top.casimirs)(y)
    np.testing.assert_allclose(G @ top.noise_fields(y).T, 0.0, atol=1e-15)
    zoo = stochastic_heavy_top(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 0.0, 1.0]), 1.0, np.eye(3))
    np.testing.assert_array_equal(zoo.noise_fields(y), top.noise_fields(y))
    np.testing.assert_array_equal(stochastic_rigid_body(jnp.ones(3), XI).noise_fields(M0), ISO.noise_fields(M0))


def test_the_splitting_is_the_exact_flow_and_the_midpoint_converges_with_strong_order_one():
    """One noise field, no drift: ``M(1) = exp(W A) M₀``. The splitting is within 1e-13 of it on
    every path; the midpoint's RMS error over 400 paths of one ``VirtualBrownianTree`` each falls
    with order 1 ± 0.1 from 8 to 128 steps."""
    A = np.asarray(ISO.noise_generators())[0]
    for seed in range(5):
        key = jax.random.key(seed)
        W = float(_tree(key, 1).evaluate(0.0, 1.0)[0])
        for n in (4, 32):
            np.testing.assert_allclose(_final(ISO, SPLIT, n, key, 1), expm(W * A) @ np.asarray(M0), rtol=0, atol=1e-13)
    keys = jax.random.split(jax.random.key(1), 400)
    ns = (8, 16, 32, 64, 128)
    rms = []
    for n in ns:
        def err(k):
            W = _tree(k, 1).evaluate(0.0, 1.0)[0]
            return jnp.sum((_final(ISO, MID, n, k, 1) - jax.scipy.linalg.expm(W * jnp.asarray(A)) @ M0) ** 2)

        rms.append(float(jnp.sqrt(jnp.mean(jax.jit(jax.vmap(err))(keys)))))
    order = -np.polyfit(np.log(ns), np.log(rms), 1)[0]
    assert abs(order - 1.0) <= 0.1, (order, rms)


def test_the_midpoint_s_mean_is_the_exact_mean():
    """E[M(1)] = exp(A²/2) M₀ (W ~ N(0, 1)); the midpoint's mean over 10⁵ paths of 100 steps
    (keys) is within 3 standard errors of it in each entry."""
    A = np.asarray(ISO.noise_generators())[0]
    run = jax.jit(jax.vmap(lambda k: lpjax.integrate(ISO, MID, M0, 0.01, 100, save_every=100, key=k).ys[-1]))
    ys = np.asarray(run(jax.random.split(jax.random.key(7), 100_000)))
    exact = expm(A @ A / 2) @ np.asarray(M0)
    se = ys.std(axis=0) / np.sqrt(ys.shape[0])
    assert np.all(np.abs(ys.mean(axis=0) - exact) <= 3 * se), (ys.mean(axis=0) - exact, se)


@pytest.mark.slow
def test_non_commuting_noise_gives_strong_order_one_half():
    """An anisotropic body (I = (1, 2, 3)) with three noise fields: RMS error over 200 paths
    against 4096 midpoint steps on the same tree, from 8 to 128 steps: order ½ ± 0.1 (measured
    0.53 midpoint, 0.52 splitting)."""
    xi = np.array([[1.0, 0, 0], [0, 0.7, 0], [0.2, 0, 0.5]])
    body = lpjax.StochasticLiePoissonSystem(rigid_body(jnp.array([1.0, 2.0, 3.0])), noise=xi)
    keys = jax.random.split(jax.random.key(2), 200)
    ref = jax.jit(jax.vmap(lambda k: _final(body, MID, 4096, k, 3, 2.0**-14)))(keys)
    ns = (8, 16, 32, 64, 128)
    for method in (MID, SPLIT):
        rms = [float(jnp.sqrt(jnp.mean(jnp.sum((jax.jit(jax.vmap(lambda k: _final(body, method, n, k, 3, 2.0**-14)))(keys)
                                                 - ref) ** 2, axis=1)))) for n in ns]
        order = -np.polyfit(np.log(ns), np.log(rms), 1)[0]
        assert abs(order - 0.5) <= 0.1, (method, order, rms)


@pytest.mark.parametrize("method", [MID, SPLIT], ids=["midpoint", "splitting"])
def test_the_heavy_top_s_casimirs_hold_on_every_path(method):
    """Stochastic heavy top, noise in the three components of the angular momentum, 32 paths ×
    10⁴ steps (dt = 10⁻³): |Γ|² and M·Γ within 1e-13 relative of their start on every path."""
    top = stochastic_heavy_top(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 0.0, 1.0]), 1.0, 0.5 * np.eye(3))
    y0 = jnp.array([0.3, -1.0, 0.7, 0.1, 0.2, 0.9])
    run = jax.jit(jax.vmap(lambda k: lpjax.integrate(top, method, y0, 1e-3, 10_000, save_every=1000, key=k).ys))
    ys = np.asarray(run(jax.random.split(jax.random.key(3), 32)))
    M, G = ys[..., :3], ys[..., 3:]
    assert np.min(np.max(np.abs(M[:, -1] - M[:, 0]), axis=1)) > 0.1  # (every path went somewhere)
    for values, start in ((np.sum(G * G, -1), float(y0[3:] @ y0[3:])), (np.sum(M * G, -1), float(y0[:3] @ y0[3:]))):
        np.testing.assert_allclose(values, start, rtol=1e-13, atol=0)


def test_the_double_bracket_keeps_the_casimir_and_lowers_the_energy():
    """θ = 0.2 and zero noise vectors: the midpoint's energy falls at every step, |M|² stays to
    1e-14, and the energy's rate at the start is −θ|M × Ω|²."""
    body = lpjax.StochasticLiePoissonSystem(rigid_body(jnp.array([1.0, 2.0, 3.0])), noise=np.zeros(3), dissipation=0.2)
    om = M0 / jnp.array([1.0, 2.0, 3.0])
    rate = jax.grad(body.energy)(M0) @ body.vector_field(M0)
    np.testing.assert_allclose(rate, -0.2 * np.sum(np.cross(M0, om) ** 2), rtol=1e-14)
    ys = lpjax.integrate(body, MID, M0, 0.01, 500, key=jax.random.key(0)).ys
    energy = jax.vmap(body.energy)(ys)
    assert np.all(np.diff(energy) < 0) and energy[-1] < 0.9 * energy[0]
    np.testing.assert_allclose(jnp.sum(ys**2, axis=1), jnp.sum(M0**2), rtol=1e-14)


def test_the_increments_are_counter_based_threefry_and_normal():
    """Threefry-2x32 equals JAX's (its words, and fold_in's); step n's increments from a key are
    those of the counter n (the second step from the first's end with them reproduces the run);
    2·10⁵ draws have the normal's first four moments (3 standard errors)."""
    import jax.extend as je

    from lpjax._noise import increments, key_words, member_key, threefry2x32

    key = jax.random.key(11)
    w, c = key_words(key), jnp.arange(16, dtype=jnp.uint32)
    np.testing.assert_array_equal(jnp.concatenate(threefry2x32(w[0], w[1], c[:8], c[8:])), je.random.threefry_2x32(w, c))
    np.testing.assert_array_equal(member_key(w, 7), jax.random.key_data(jax.random.fold_in(key, 7)))
    sol = lpjax.integrate(ISO, MID, M0, 0.01, 2, key=key)
    y2 = MID.step(ISO, sol.ys[1], 0.01, increments(w, 1, 0.01, 1, jnp.float64))[0]
    np.testing.assert_allclose(y2, sol.ys[2], rtol=0, atol=1e-15)
    z = np.asarray(jax.vmap(lambda n: increments(w, n, 1.0, 3, jnp.float64))(jnp.arange(200_000))).ravel()
    se = 1 / np.sqrt(z.size)
    assert abs(z.mean()) <= 3 * se and abs(z.var() - 1) <= 3 * np.sqrt(2) * se
    assert abs(np.mean(z**3)) <= 3 * np.sqrt(15) * se and abs(np.mean(z**4) - 3) <= 3 * np.sqrt(96) * se


def test_pathwise_gradients_are_central_differences():
    """d/d(mgl) of the mean of M₁(2)² over 8 paths (the increments fixed by their keys), by
    ``jax.grad`` through the midpoint's implicit steps, with the checkpointed loops differentiated
    by JAX (``adjoint="auto"``) and by their discrete adjoint (``"discrete"``), and by ``jax.jvp``:
    within 1e-8 relative of central differences (h = 1e-5; measured 3e-11), and of each other
    within 1e-12."""
    y0 = jnp.array([0.3, -1.0, 0.7, 0.1, 0.2, 0.9])
    keys = jax.random.split(jax.random.key(5), 8)

    def loss(mgl, adjoint="auto"):
        top = stochastic_heavy_top(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 0.0, 1.0]), mgl, 0.3 * np.eye(3))
        ys = jax.vmap(lambda k: lpjax.integrate(top, MID, y0, 0.01, 200, save_every=50, key=k, adjoint=adjoint).ys[-1])(keys)
        return jnp.mean(ys[:, 0] ** 2)

    fd = (loss(1.0 + 1e-5) - loss(1.0 - 1e-5)) / 2e-5
    auto, discrete = jax.grad(loss)(1.0), jax.grad(loss)(1.0, "discrete")
    np.testing.assert_allclose(auto, fd, rtol=1e-8)
    np.testing.assert_allclose(discrete, auto, rtol=1e-12)
    np.testing.assert_allclose(jax.jvp(loss, (1.0,), (1.0,))[1], auto, rtol=1e-12)


def test_refusals_name_what_is_expected():
    body = rigid_body(jnp.array([1.0, 2.0, 3.0]))
    key = jax.random.key(0)
    with pytest.raises(TypeError, match="stochastic method"):
        lpjax.integrate(ISO, lpjax.GaussLegendre(2), M0, 0.01, 10, key=key)
    with pytest.raises(TypeError, match="StochasticLiePoissonSystem"):
        lpjax.integrate(body, MID, M0, 0.01, 10, key=key)
    with pytest.raises(ValueError, match="exactly one"):
        lpjax.integrate(ISO, MID, M0, 0.01, 10)
    with pytest.raises(ValueError, match="takes no events"):
        lpjax.integrate(ISO, MID, M0, 0.01, 10, key=key, events=lpjax.Event(lambda t, y: y[0]))
    with pytest.raises(ValueError, match="shape"):
        lpjax.StochasticLiePoissonSystem(body, noise=np.ones((2, 4)))
    hamiltonian_noise = lpjax.StochasticLiePoissonSystem(body, noise=lambda m: m[0] ** 2)
    with pytest.raises(ValueError, match="linear noise"):
        lpjax.integrate(hamiltonian_noise, SPLIT, M0, 0.01, 10, key=key)
    with pytest.raises(ValueError, match="dissipation"):
        lpjax.StochasticLiePoissonSystem(body, noise=XI, dissipation=-1.0)
    with pytest.raises(ValueError, match="increments have shape"):
        lpjax.integrate(ISO, MID, M0, 0.01, 10, brownian=diffrax.VirtualBrownianTree(0.0, 1.0, 1e-3, (2,), key))


def test_diffrax_s_heun_solvers_drift_off_the_casimirs_on_the_same_paths():
    """The stochastic heavy top, 8 paths × 1000 steps of 0.01 (noise 0.3 eᵢ in M), the same
    increments read by diffrax through an ``AbstractPath``: |Γ|² within 1e-13 under the
    midpoint; off by more than 1e-4 somewhere under diffrax's Heun and ReversibleHeun (the
    benchmark measures 3.8e-3 and a median of 1.4e-2 over 10⁵ paths)."""
    from lpjax._noise import increments, key_words, member_key

    top = stochastic_heavy_top(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 0.0, 1.0]), 1.0, 0.3 * np.eye(3))
    y0, key = jnp.array([0.3, -1.0, 0.7, 0.1, 0.2, 0.9]), jax.random.key(2026)

    class Path(diffrax.AbstractPath):
        words: jax.Array
        t0 = 0.0
        t1 = 10.0

        def evaluate(self, t0, t1=None, left=True):
            return increments(self.words, jnp.round(t0 / 0.01).astype(jnp.int32), 0.01, 3, jnp.float64)

    words = [member_key(key_words(key), j) for j in range(8)]
    ours = np.stack([lpjax.integrate(top, MID, y0, 0.01, 1000, save_every=1000, key=w).ys[-1] for w in words])
    gamma0 = float(y0[3:] @ y0[3:])
    assert np.max(np.abs(np.sum(ours[:, 3:] ** 2, 1) / gamma0 - 1)) <= 1e-13
    for solver in (diffrax.Heun(), diffrax.ReversibleHeun()):
        def one(w, solver=solver):
            terms = diffrax.MultiTerm(diffrax.ODETerm(lambda t, y, args: top.vector_field(y)),
                                      diffrax.ControlTerm(lambda t, y, args: top.noise_fields(y).T, Path(w)))
            return diffrax.diffeqsolve(terms, solver, 0.0, 10.0, 0.01, y0, saveat=diffrax.SaveAt(t1=True),
                                       max_steps=1001).ys[-1]

        theirs = np.asarray(jax.jit(jax.vmap(one))(jnp.stack(words)))
        assert np.nanmax(np.abs(np.sum(theirs[:, 3:] ** 2, 1) / gamma0 - 1)) > 1e-4, solver
