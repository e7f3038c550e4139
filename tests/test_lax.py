"""Lax matrices of Suris' maps (seed 000, Theorems 7, 9, 10) and their spectral invariants."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.algebras import so
from lpjax.diagnostics import charpoly, lax_invariants, suris_clebsch_lax, suris_lagrange_lax
from lpjax.systems import clebsch_case, lagrange_top, rigid_body

LAMS = jnp.array([0.7, 1.3, 2.0])
KINDS = ("rest", "moving", "clebsch")


def _case(kind, n, seed=0):
    d = n * (n - 1) // 2
    rng = np.random.default_rng(100 * seed + n)
    y = jnp.asarray(rng.standard_normal(d + n))  # |a|, |P| ≠ 1
    if kind == "clebsch":
        return clebsch_case(jnp.asarray(rng.uniform(0.5, 2.0, n))), lpjax.SurisClebsch(), suris_clebsch_lax, y
    p = jnp.asarray(rng.standard_normal(n)) if kind == "rest" else None
    return lagrange_top(n, alpha=0.6, frame=kind, p=p), lpjax.SurisLagrangeTop(), suris_lagrange_lax, y


def _wedge(a, b):
    return np.outer(a, b) - np.outer(b, a)


def _block(m, col):
    return jnp.block([[m, col[:, None]], [col[None, :], jnp.zeros((1, 1))]])


def _drift(inv):
    """max over λ of ``max_j |c_j(t) − c_j(0)| / max_j |c_j(0)|``; ``inv`` has shape (..., T, K, N)."""
    inv = np.asarray(inv)
    ref = inv[..., :1, :, :]
    return float(np.max(np.max(np.abs(inv - ref), axis=-1) / np.max(np.abs(ref), axis=-1)))


def _invariants(system, lax, eps, y):
    return lax_invariants(lambda y, lam: lax(system, y, eps, lam), y, LAMS)


# ---------------------------------------------------------------- characteristic polynomial


def test_charpoly_matches_numpy_jacobi_and_vmap():
    Ls = jnp.asarray(np.random.default_rng(0).standard_normal((4, 6, 6)))

    @jax.jit
    def run(Ls):
        # c_N = (−1)^N det L, so by Jacobi's formula grad c_N = (−1)^N det(L) L⁻ᵀ = det(L) L⁻ᵀ (N = 6)
        g = jax.grad(lambda L: charpoly(L)[-1])(Ls[0])
        return jax.vmap(charpoly)(Ls), g, jnp.linalg.det(Ls[0]) * jnp.linalg.inv(Ls[0]).T

    cs, g, jacobi = run(Ls)
    for L, c in zip(Ls, cs):
        ref = np.poly(np.asarray(L))[1:]
        np.testing.assert_allclose(c, ref, rtol=1e-11, atol=1e-12 * np.max(np.abs(ref)))
    np.testing.assert_allclose(g, jacobi, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="square matrix"):
        charpoly(jnp.ones((2, 3)))


# ---------------------------------------------------------------- the printed forms


def _printed_rest(system, y, eps, lam):  # (6.14), (6.15) as printed
    p = system.hamiltonian.p
    n = p.shape[0]
    d = n * (n - 1) // 2
    m, a = so(n).hat(y[:d]), y[d:]
    b = (jnp.eye(n) - 0.5 * eps * m) @ a + 0.25 * eps**2 * p
    return _block(m, lam * b - p / lam)


def _printed_moving(system, y, eps, lam):  # (6.24), (6.26) as printed, A = e_n
    n = system.hamiltonian.n
    d = n * (n - 1) // 2
    M, P = so(n).hat(y[:d]), y[d:]
    B = (jnp.eye(n) + 0.5 * eps * M) @ jnp.eye(n)[-1] + 0.25 * eps**2 * P
    return _block(M, lam * B - P / lam)


def _printed_clebsch(system, y, eps, lam):  # (7.19), (7.20) as printed
    B = jnp.diag(system.hamiltonian.B)
    n = B.shape[0]
    d = n * (n - 1) // 2
    M, P = so(n).hat(y[:d]), y[d:]
    eye = jnp.eye(n)
    Pc = (eye + 0.5 * eps * M) @ jnp.outer(P, P) @ (eye - 0.5 * eps * M)
    return jnp.linalg.solve(eye + 0.25 * eps**2 * B, lam * B + M + Pc / lam)  # K⁻¹(…)


PRINTED = {"rest": _printed_rest, "moving": _printed_moving, "clebsch": _printed_clebsch}


_charpolys = jax.jit(jax.vmap(charpoly))  # compiled once per matrix size


@functools.lru_cache(maxsize=None)
def _runs(kind, n):
    """One compiled run per case: 2000 steps at ε = 0.05, 0.1, 0.3 from a random state (|a|,
    |P| ≠ 1) and at ε = 0.1 from its projection to the unit leaf. The corrected Lax matrices at
    λ ∈ LAMS every 100 steps and after the first step, the printed ones at the start and after
    the first step, and the spectral invariants of both."""
    system, method, lax, y0 = _case(kind, n)
    printed, d = PRINTED[kind], n * (n - 1) // 2
    y0 = np.asarray(y0)
    unit = np.concatenate([y0[:d], y0[d:] / np.linalg.norm(y0[d:])])

    @jax.jit
    def run(e, y):
        ys = lpjax.integrate(system, method, y, e, 2000, throw=False).ys
        mats = lambda fn, ys: jax.vmap(lambda x: jax.vmap(lambda lam: fn(system, x, e, lam))(LAMS))(ys)  # noqa: E731
        return mats(lax, jnp.concatenate([ys[:2], ys[100::100]])), mats(printed, ys[:2]), ys[:2]

    out = [run(e, y) for e, y in ((0.05, y0), (0.1, y0), (0.3, y0), (0.1, unit))]
    lax_mats, printed_mats, states = (np.stack([np.asarray(o[i]) for o in out]) for i in range(3))
    N = lax_mats.shape[-1]
    both = np.concatenate([lax_mats.reshape(-1, N, N), printed_mats.reshape(-1, N, N)])
    inv = np.asarray(_charpolys(both))
    return dict(
        norm=float(np.linalg.norm(y0[d:])),
        corrected=inv[: lax_mats[..., 0].size // N].reshape(lax_mats.shape[:-1]),
        printed=inv[lax_mats[..., 0].size // N :].reshape(printed_mats.shape[:-1]),
        difference=np.max(np.abs(lax_mats[:, :2] - printed_mats)[:, 0], axis=(1, 2, 3)),
        lax=lax_mats[:, :2],
        states=states,
        system=system,
    )


# ---------------------------------------------------------------- long orbits


@pytest.mark.parametrize("n", [3, 4, 5])
@pytest.mark.parametrize("kind", KINDS)
def test_corrected_lax_spectrum_is_kept_over_2000_steps(kind, n):
    inv = _runs(kind, n)["corrected"]
    assert inv.shape == (4, 22, 3, n + 1 if kind != "clebsch" else n)
    assert _drift(inv) <= 1e-12  # measured ≤ 1.0e-13 here, ≤ 3.3e-13 over 1e4 steps
    if kind != "clebsch":  # diag(I, −1) L diag(I, −1) = −Lᵀ: c_1, c_3, … vanish identically
        scale = np.max(np.abs(inv), axis=-1, keepdims=True)
        assert np.max(np.abs(inv[..., 0::2]) / scale) <= 1e-13
        assert np.min(np.max(np.abs(inv[..., 1::2]) / scale, axis=-1)) > 1e-3


@pytest.mark.parametrize("n", [3, 4, 5])
@pytest.mark.parametrize("kind", ["rest", "clebsch"])
def test_printed_form_fails_off_the_unit_leaf_and_holds_on_it(kind, n):
    r = _runs(kind, n)
    random, unit = r["printed"][1, :2], r["printed"][3, :2]  # one step of ε = 0.1
    assert abs(r["norm"] - 1) > 0.2
    # measured 1.3e-4, 3.1e-4, 8.6e-4 (rest) and 7.1e-6, 1.7e-5, 4.3e-5 (Clebsch) for n = 3, 4, 5
    assert _drift(random) > (1e-5 if kind == "rest" else 1e-6)
    assert _drift(r["corrected"][1, :2]) <= 1e-13  # measured ≤ 5.8e-15
    assert _drift(unit) <= 1e-13  # measured ≤ 1.4e-15
    assert float(r["difference"][3]) <= 1e-14  # the corrected form is the printed one on the leaf
    assert float(r["difference"][1]) > 1e-4


@pytest.mark.parametrize("n", [3, 4, 5])
def test_theorem_9_as_printed_is_the_corrected_form(n):
    r = _runs("moving", n)
    assert np.max(r["difference"]) <= 1e-15


# ---------------------------------------------------------------- the Lax equations themselves


def _cay_np(X):
    eye = np.eye(X.shape[0])
    return np.linalg.solve(eye - X, eye + X)


def _block_np(m, col):
    return np.block([[m, col[:, None]], [col[None, :], np.zeros((1, 1))]])


def test_lax_equations_with_their_v_matrices():
    """One step of ε = 0.1 from a random state (|a|, |P| ≠ 1), n = 4, λ = 1.3, in numpy."""
    n, eps, lam = 4, 0.1, float(LAMS[1])
    d, eye = n * (n - 1) // 2, np.eye(n)

    def data(kind):
        r = _runs(kind, n)
        (y, _), (l0, l1) = r["states"][1], r["lax"][1, :, 1]
        return r["system"], y, l0, l1

    # Theorem 7, (6.13): ℓ_{k+1} = v_k⁻¹ ℓ_k v_k with v_k, u_k as printed in (6.14)
    system, y, l0, l1 = data("rest")
    v = _cay_np(0.5 * eps * _block_np(np.zeros((n, n)), lam * y[d:]))
    e7 = np.max(np.abs(np.linalg.solve(v, l0 @ v) - l1))
    # Theorem 9, (6.23): V_k = diag(W_k, 1) cay(εU/2) needs U = [[0, λA], [λAᵀ, 0]]
    system, y, l0, l1 = data("moving")
    alpha, M, A = float(system.hamiltonian.alpha), np.asarray(so(n).hat(y[:d])), eye[-1]
    WA = _cay_np(0.5 * eps * M) @ A  # (6.22), then (6.20) solved for W (seed errata)
    W = _cay_np((0.5 * eps / alpha) * (M + (2 * (1 - alpha) / eps) * _wedge(A, WA) / (1 + A @ WA)))
    y1 = _runs("moving", n)["states"][1, 1]
    eP = np.max(np.abs(W.T @ y[d:] - y1[d:]))  # P_{k+1} = W⁻¹ P_k (6.19)
    D = np.eye(n + 1)
    D[:n, :n] = W
    U_sym = _block_np(np.zeros((n, n)), lam * A)
    U_printed = U_sym.copy()
    U_printed[n, :n] *= -1  # (6.25) as printed
    e9, e9_printed = (
        np.max(np.abs(np.linalg.solve(V, l0 @ V) - l1))
        for V in (D @ _cay_np(0.5 * eps * U) for U in (U_sym, U_printed))
    )
    # Theorem 10, (7.18): L_{k+1} = V_k L_k V_k⁻¹ with 𝒬_k of (7.21) carrying |P_k|²
    system, y, l0, l1 = data("clebsch")
    B, P = np.diag(np.asarray(system.hamiltonian.B)), y[d:]
    den = 1 + 0.25 * eps**2 * P @ B @ P
    e10, e10_printed = (
        np.max(np.abs(V @ l0 @ np.linalg.inv(V) - l1))
        for V in (
            _cay_np(0.5 * eps / lam * np.outer(P, P) @ (eye + 0.25 * eps**2 * s2 * B) / den)
            for s2 in (P @ P, 1.0)  # corrected, printed
        )
    )
    assert e7 <= 1e-13 and eP <= 1e-14  # measured 8.9e-16, 1.1e-16
    assert e9 <= 1e-13 < 0.1 < e9_printed  # measured 4.4e-16 and 0.45
    assert e10 <= 1e-13 < 1e-4 < e10_printed  # measured 1.3e-15 and 1.9e-3


# ---------------------------------------------------------------- continuous-time limit


def _continuous(kind, system, y):
    """(5.17), (5.9), (7.15) written out from the paper, in numpy."""
    y = np.asarray(y)
    n = int(np.sqrt(2 * y.size + 0.25) - 0.5)  # y.size = n(n − 1)/2 + n
    d = n * (n - 1) // 2
    m, v = np.asarray(so(n).hat(y[:d])), y[d:]
    if kind == "clebsch":
        return lambda lam: lam * np.diag(np.asarray(system.hamiltonian.B)) + m + np.outer(v, v) / lam
    if kind == "rest":
        return lambda lam: _block_np(m, lam * v - np.asarray(system.hamiltonian.p) / lam)
    return lambda lam: _block_np(m, lam * np.eye(n)[-1] - v / lam)


@pytest.mark.parametrize("kind", KINDS)
def test_continuous_limit_and_continuous_lax_pair(kind):
    system, _, lax, y = _case(kind, 4, seed=3)
    epss = jnp.array([0.0, 1e-2, 1e-3, 1e-4])

    def rel_rate(eps, y):
        """max_j |d/dt c_j| / max_j |c_j| along the continuous flow, for the Lax matrix at step eps."""
        c, dc = jax.jvp(lambda y: _invariants(system, lax, eps, y), (y,), (system.vector_field(y),))
        return jnp.max(jnp.abs(dc) / jnp.max(jnp.abs(c), axis=-1, keepdims=True))

    @jax.jit
    def run(y):
        mats = jax.vmap(lambda e: jax.vmap(lambda lam: lax(system, y, e, lam))(LAMS))(epss)
        return mats, jax.vmap(rel_rate, (0, None))(jnp.array([0.0, 0.1]), y)

    mats, (rate0, rate) = run(y)
    cont = np.stack([_continuous(kind, system, y)(float(lam)) for lam in LAMS])
    errs = np.max(np.abs(np.asarray(mats) - cont), axis=(1, 2, 3))
    assert errs[0] <= 1e-15  # dt = 0 is (5.17), (5.9), (7.15); measured ≤ 2.2e-16
    assert errs[3] < errs[2] < errs[1] < 1.0
    np.testing.assert_allclose(errs[1:3] / errs[2:], 10.0, rtol=0.05)  # L(ε) = L(0) + O(ε)
    # the continuous spectra are integrals of the flow; the discrete ones (the map's) are not
    assert float(rate0) <= 1e-13  # measured ≤ 4.2e-16
    assert float(rate) > 1e-4  # measured 0.14, 0.079, 2.9e-3


# ---------------------------------------------------------------- API


def test_lax_invariants_jit_vmap_grad():
    system, method, lax, y = _case("clebsch", 3)
    f = lambda y: lax_invariants(lambda y, lam: lax(system, y, 0.1, lam), y, LAMS)  # noqa: E731
    h, E, yn = 1e-6, np.eye(y.shape[0]), np.asarray(y)
    zs = jnp.asarray(np.concatenate([np.stack([yn, 2 * yn, -yn]), yn[None] + h * E, yn[None] - h * E]))

    @jax.jit
    def run(zs):
        mats = jax.vmap(lambda z: jax.vmap(lambda lam: lax(system, z, 0.1, lam))(LAMS))(zs[:3])
        return jax.vmap(f)(zs), mats, jax.grad(lambda y: f(y)[1, -1])(zs[0])

    inv, mats, g = map(np.asarray, run(zs))
    for c, Ls in zip(inv[:3], mats):  # vmapped under jit, against numpy
        ref = np.stack([np.poly(L)[1:] for L in Ls])
        np.testing.assert_allclose(c, ref, rtol=1e-12, atol=1e-13 * np.max(np.abs(ref)))
    assert np.max(np.abs(inv[1] - inv[0])) > 1e-2
    fd = (inv[3 : 3 + E.shape[0], 1, -1] - inv[3 + E.shape[0] :, 1, -1]) / (2 * h)
    assert np.max(np.abs(fd)) > 1e-3
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
    assert jax.eval_shape(lambda y: lax_invariants(lambda y, lam: lax(system, y, 0.1, lam), y, 1.3), y).shape == (1, 3)


def test_bad_input():
    rest, _, _, y = _case("rest", 3)
    clebsch = clebsch_case(jnp.ones(3))
    with pytest.raises(TypeError, match="suris_lagrange_lax needs the Lagrange top"):
        suris_lagrange_lax(clebsch, y, 0.1, 1.0)
    with pytest.raises(TypeError, match="suris_lagrange_lax needs the Lagrange top"):
        suris_lagrange_lax(rigid_body(jnp.ones(3)), jnp.ones(3), 0.1, 1.0)
    with pytest.raises(TypeError, match=r"suris_clebsch_lax needs the Clebsch flow c_jk = 1"):
        suris_clebsch_lax(rest, y, 0.1, 1.0)
    with pytest.raises(TypeError, match=r"suris_clebsch_lax needs the Clebsch flow c_jk = 1"):
        suris_clebsch_lax(clebsch_case(jnp.ones(3), 2 * jnp.ones((3, 3))), y, 0.1, 1.0)
    with pytest.raises(ValueError, match=r"state must have shape \(6,\)"):
        suris_lagrange_lax(rest, jnp.ones(7), 0.1, 1.0)
    with pytest.raises(ValueError, match=r"state must have shape \(6,\)"):
        suris_clebsch_lax(clebsch, jnp.ones((2, 6)), 0.1, 1.0)
    with pytest.raises(ValueError, match="lam must be a scalar"):
        suris_lagrange_lax(rest, y, 0.1, jnp.ones(2))
    with pytest.raises(ValueError, match="lam must be nonzero"):
        suris_clebsch_lax(clebsch, y, 0.1, 0.0)
    with pytest.raises(ValueError, match="dt must be a scalar"):
        suris_clebsch_lax(clebsch, y, jnp.ones(2), 1.0)
    with pytest.raises(ValueError, match="dt must be finite"):
        suris_lagrange_lax(rest, y, jnp.nan, 1.0)
    fn = lambda y, lam: suris_lagrange_lax(rest, y, 0.1, lam)  # noqa: E731
    with pytest.raises(ValueError, match="lams must be a non-empty 1-D array"):
        lax_invariants(fn, y, jnp.ones((2, 2)))
    with pytest.raises(ValueError, match="lams must be a non-empty 1-D array"):
        lax_invariants(fn, y, jnp.array([]))
    with pytest.raises(TypeError, match="lax_fn must be callable"):
        lax_invariants(jnp.eye(3), y, LAMS)
    with pytest.raises(ValueError, match="square matrix"):
        lax_invariants(lambda y, lam: jnp.ones((2, 3)), y, LAMS)
