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
EPS = jnp.array([0.05, 0.1, 0.3])
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
    return jnp.outer(a, b) - jnp.outer(b, a)


def _cay(X):
    eye = jnp.eye(X.shape[0])
    return jnp.linalg.solve(eye - X, eye + X)


def _block(m, col):
    return jnp.block([[m, col[:, None]], [col[None, :], jnp.zeros((1, 1))]])


def _drift(inv):
    """max over λ of ``max_j |c_j(t) − c_j(0)| / max_j |c_j(0)|``; ``inv`` has shape (..., T, K, N)."""
    ref = inv[..., :1, :, :]
    return float(jnp.max(jnp.max(jnp.abs(inv - ref), axis=-1) / jnp.max(jnp.abs(ref), axis=-1)))


def _one_step(system, method, y, eps):
    return lpjax.integrate(system, method, y, eps, 1, throw=False).ys[-1]


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
    return jnp.linalg.solve(eye + 0.25 * eps**2 * B, lam * B + M + Pc / lam)


PRINTED = {"rest": _printed_rest, "moving": _printed_moving, "clebsch": _printed_clebsch}


@functools.lru_cache(maxsize=None)
def _runs(kind, n):
    """One compiled run per case: 5000 steps at each ε of EPS from a random state (|a|, |P| ≠ 1)
    and from its projection to the unit leaf, with spectral invariants of the corrected and of
    the printed Lax matrices."""
    system, method, lax, y0 = _case(kind, n)
    printed, d = PRINTED[kind], n * (n - 1) // 2
    starts = jnp.stack([y0, y0.at[d:].divide(jnp.linalg.norm(y0[d:]))])

    @jax.jit
    def run(starts):
        orbit = lambda y, e: lpjax.integrate(system, method, y, e, 5000, throw=False).ys  # noqa: E731
        orbits = jax.vmap(lambda e: jax.vmap(lambda y: orbit(y, e))(starts))(EPS)

        def inv(fn, ys):  # ys: (ε, start, T, d)
            per_eps = lambda e, ys: jax.vmap(jax.vmap(lambda y: _invariants(system, fn, e, y)))(ys)  # noqa: E731
            return jax.vmap(per_eps)(EPS, ys)

        diff = jax.vmap(lambda y: jnp.max(jnp.abs(lax(system, y, 0.1, 1.3) - printed(system, y, 0.1, 1.3))))(starts)
        return inv(lax, orbits[:, :, ::100]), inv(printed, orbits[:, :, :2]), diff

    corrected, printed_inv, diff = run(starts)
    return dict(norm=float(jnp.linalg.norm(y0[d:])), corrected=corrected, printed=printed_inv, difference=diff)


# ---------------------------------------------------------------- long orbits


@pytest.mark.parametrize("n", [3, 4, 5])
@pytest.mark.parametrize("kind", KINDS)
def test_corrected_lax_spectrum_is_kept_over_5000_steps(kind, n):
    inv = _runs(kind, n)["corrected"]
    assert inv.shape == (3, 2, 51, 3, n + 1 if kind != "clebsch" else n)
    assert _drift(inv) <= 1e-12  # measured ≤ 3.3e-13 over 1e4 steps, n = 3, 4, 5, ε = 0.05, 0.1, 0.3


@pytest.mark.parametrize("n", [3, 4, 5])
@pytest.mark.parametrize("kind", ["rest", "clebsch"])
def test_printed_form_fails_off_the_unit_leaf_and_holds_on_it(kind, n):
    r = _runs(kind, n)
    random, unit = r["printed"][1]  # one step of ε = 0.1
    assert abs(r["norm"] - 1) > 0.2
    # measured 1.3e-4, 3.1e-4, 8.6e-4 (rest) and 7.1e-6, 1.7e-5, 4.3e-5 (Clebsch) for n = 3, 4, 5
    assert _drift(random) > (1e-5 if kind == "rest" else 1e-6)
    assert _drift(r["corrected"][1, 0, :2]) <= 1e-13  # measured ≤ 1.5e-15
    assert _drift(unit) <= 1e-13  # measured ≤ 1.8e-15
    assert float(r["difference"][1]) <= 1e-15  # the corrected form is the printed one on the leaf
    assert float(r["difference"][0]) > 1e-4


@pytest.mark.parametrize("n", [3, 4, 5])
def test_theorem_9_as_printed_is_the_corrected_form(n):
    r = _runs("moving", n)
    assert float(jnp.max(r["difference"])) <= 1e-15
    assert _drift(r["printed"]) <= 1e-13  # one step; measured ≤ 1.8e-15


# ---------------------------------------------------------------- the Lax equations themselves


def test_lax_equations_with_their_v_matrices():
    n = 4
    d, eps, lam = n * (n - 1) // 2, 0.2, 1.3
    eye = jnp.eye(n)
    rest, moving, clebsch = (_case(kind, n, seed=2) for kind in KINDS)

    @jax.jit
    def errors(y_rest, y_moving, y_clebsch):
        # Theorem 7, (6.13): ℓ_{k+1} = v_k⁻¹ ℓ_k v_k with v_k, u_k as printed in (6.14)
        system, method, lax, _ = rest
        y, y1 = y_rest, _one_step(system, method, y_rest, eps)
        v = _cay(0.5 * eps * _block(jnp.zeros((n, n)), lam * y[d:]))
        e7 = jnp.linalg.solve(v, lax(system, y, eps, lam) @ v) - lax(system, y1, eps, lam)
        # Theorem 9, (6.23): V_k = diag(W_k, 1) cay(εU/2) needs U = [[0, λA], [λAᵀ, 0]]
        system, method, lax, _ = moving
        y, y1 = y_moving, _one_step(system, method, y_moving, eps)
        alpha, M, A = system.hamiltonian.alpha, so(n).hat(y[:d]), eye[-1]
        WA = _cay(0.5 * eps * M) @ A  # (6.22), then (6.20) solved for W (seed errata)
        W = _cay((0.5 * eps / alpha) * (M + (2 * (1 - alpha) / eps) * _wedge(A, WA) / (1 + A @ WA)))
        eP = W.T @ y[d:] - y1[d:]  # P_{k+1} = W⁻¹ P_k (6.19)
        D = jnp.eye(n + 1).at[:n, :n].set(W)
        U_sym = _block(jnp.zeros((n, n)), lam * A)
        U_printed = U_sym.at[n, :n].multiply(-1)  # (6.25) as printed
        l0, l1 = lax(system, y, eps, lam), lax(system, y1, eps, lam)
        e9 = [jnp.linalg.solve(V, l0 @ V) - l1 for V in (D @ _cay(0.5 * eps * U) for U in (U_sym, U_printed))]
        # Theorem 10, (7.18): L_{k+1} = V_k L_k V_k⁻¹ with 𝒬_k of (7.21) carrying |P_k|²
        system, method, lax, _ = clebsch
        y, y1 = y_clebsch, _one_step(system, method, y_clebsch, eps)
        B, P = jnp.diag(system.hamiltonian.B), y[d:]
        l0, l1 = lax(system, y, eps, lam), lax(system, y1, eps, lam)
        e10 = []
        for s2 in (P @ P, 1.0):  # corrected, printed
            V = _cay(0.5 * eps / lam * jnp.outer(P, P) @ (eye + 0.25 * eps**2 * s2 * B) / (1 + 0.25 * eps**2 * P @ B @ P))
            e10.append(V @ l0 @ jnp.linalg.inv(V) - l1)
        return [jnp.max(jnp.abs(e)) for e in (e7, eP, *e9, *e10)]

    e7, eP, e9, e9_printed, e10, e10_printed = map(float, errors(rest[3], moving[3], clebsch[3]))
    assert e7 <= 1e-13 and eP <= 1e-14  # measured ≤ 1e-15
    assert e9 <= 1e-13 < 0.1 < e9_printed  # measured ≤ 1e-15 and ~1
    assert e10 <= 1e-13 < 1e-4 < e10_printed  # measured ≤ 2e-15 and ~1e-2


# ---------------------------------------------------------------- continuous-time limit


def _continuous(kind, system, y):
    """(5.17), (5.9), (7.15) written out from the paper."""
    if kind == "clebsch":
        n = system.hamiltonian.B.shape[0]
        d = n * (n - 1) // 2
        M, P = so(n).hat(y[:d]), y[d:]
        return lambda lam: lam * jnp.diag(system.hamiltonian.B) + M + jnp.outer(P, P) / lam
    n = system.hamiltonian.p.shape[0] if kind == "rest" else system.hamiltonian.n
    d = n * (n - 1) // 2
    m, v = so(n).hat(y[:d]), y[d:]
    if kind == "rest":
        return lambda lam: _block(m, lam * v - system.hamiltonian.p / lam)
    return lambda lam: _block(m, lam * jnp.eye(n)[-1] - v / lam)


@pytest.mark.parametrize("kind", KINDS)
def test_continuous_limit_and_continuous_lax_pair(kind):
    system, _, lax, y = _case(kind, 4, seed=3)
    epss = jnp.array([1e-2, 1e-3, 1e-4])

    def rel_rate(eps, y):
        """max_j |d/dt c_j| / max_j |c_j| along the continuous flow, for the Lax matrix at step eps."""
        inv = lambda y: lax_invariants(lambda y, lam: lax(system, y, eps, lam), y, LAMS)  # noqa: E731
        c, dc = jax.jvp(inv, (y,), (system.vector_field(y),))
        return jnp.max(jnp.abs(dc) / jnp.max(jnp.abs(c), axis=-1, keepdims=True))

    @jax.jit
    def run(y):
        cont = _continuous(kind, system, y)
        at0 = jnp.stack([lax(system, y, 0.0, lam) - cont(lam) for lam in (0.7, 1.3)])
        errs = jnp.stack([jnp.max(jnp.abs(lax(system, y, e, 1.3) - cont(1.3))) for e in epss])
        return jnp.max(jnp.abs(at0)), errs, rel_rate(0.0, y), rel_rate(0.1, y)

    at0, errs, rate0, rate = run(y)
    assert float(at0) <= 1e-15  # dt = 0 is (5.17), (5.9), (7.15) exactly
    assert errs[2] < errs[1] < errs[0] < 1.0
    np.testing.assert_allclose(errs[:2] / errs[1:], 10.0, rtol=0.05)  # L(ε) = L(0) + O(ε)
    # the continuous spectra are integrals of the flow; the discrete ones (the map's) are not
    assert float(rate0) <= 1e-13  # measured ≤ 1e-15
    assert float(rate) > 1e-4


# ---------------------------------------------------------------- API


def test_lax_invariants_jit_vmap_grad():
    system, method, lax, y = _case("clebsch", 3)
    fn = lambda y, lam: lax(system, y, 0.1, lam)  # noqa: E731
    ys = jnp.stack([y, 2 * y, -y])
    batched = jax.jit(jax.vmap(lambda y: lax_invariants(fn, y, LAMS)))(ys)
    one = jax.jit(lambda y: lax_invariants(fn, y, LAMS))
    for yy, row in zip(ys, batched):
        np.testing.assert_allclose(row, one(yy), rtol=1e-14)
    assert lax_invariants(fn, y, 1.3).shape == (1, 3)
    f = jax.jit(lambda y: lax_invariants(fn, y, LAMS)[1, -1])
    g = jax.jit(jax.grad(f))(y)
    h = 1e-6
    fd = jnp.array([(f(y + h * ei) - f(y - h * ei)) / (2 * h) for ei in jnp.eye(y.shape[0])])
    assert float(jnp.max(jnp.abs(fd))) > 1e-3
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)


def test_bad_input():
    rest, _, _, y = _case("rest", 3)
    clebsch = clebsch_case(jnp.ones(3))
    with pytest.raises(TypeError, match="needs an lpjax.systems.lagrange_top"):
        suris_lagrange_lax(clebsch, y, 0.1, 1.0)
    with pytest.raises(TypeError, match="needs an lpjax.systems.lagrange_top"):
        suris_lagrange_lax(rigid_body(jnp.ones(3)), jnp.ones(3), 0.1, 1.0)
    with pytest.raises(TypeError, match=r"needs lpjax.systems.clebsch_case\(B\)"):
        suris_clebsch_lax(rest, y, 0.1, 1.0)
    with pytest.raises(TypeError, match=r"needs lpjax.systems.clebsch_case\(B\)"):
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
