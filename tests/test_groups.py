"""Lie groups SO(3), SO(n), SE(3): closed forms checked against scipy/numpy and theory.

Every group computation is jitted through a few shared helpers with one batch size, so each
(group, helper) pair compiles once; references are computed in NumPy/SciPy.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sla

from lpjax.algebras import se3, so, so3
from lpjax.groups import SE3, SO3, AbstractMatrixLieGroup, SOn

PI = np.pi
B = 8  # batch size used throughout

# (id, class, algebra, matrix size)
CASES = [
    ("SO3", SO3, so3(), 3),
    ("SO(3)", SOn, so(3), 3),
    ("SO(4)", SOn, so(4), 4),
    ("SO(5)", SOn, so(5), 5),
    ("SE3", SE3, se3(), 4),
]


# The compile-heavy derivative tests run on SO3, SE3 and SO(4) (the general SOn code path);
# SO(3) and SO(5) through SOn are covered by every other test.
HEAVY = [c for c in CASES if c[0] in ("SO3", "SO(4)", "SE3")]


@pytest.fixture(params=CASES, ids=[c[0] for c in CASES])
def case(request):
    return request.param


@pytest.fixture(params=HEAVY, ids=[c[0] for c in HEAVY])
def heavy_case(request):
    return request.param


def _rng(key, salt=0):
    return np.random.default_rng([*np.asarray(key).ravel().tolist(), salt])


def _tangents(rng, case, max_angle=PI - 0.05, batch=B):
    """Random tangents whose rotation part has every rotation angle below ``max_angle``.

    so(n) coordinates are orthonormal for -½tr, so ``|x|² = Σ θ_k²`` bounds every angle.
    """
    name, _, alg, _ = case
    d_rot = 3 if name == "SE3" else alg.dim
    u = rng.normal(size=(batch, d_rot))
    w = u / np.linalg.norm(u, axis=-1, keepdims=True) * rng.uniform(0, max_angle, (batch, 1))
    if name == "SE3":
        return np.concatenate([w, rng.normal(size=(batch, 3))], axis=-1)
    return w


def _hat(case, x):
    """Reference hat map from the algebra's matrix basis (NumPy)."""
    return np.einsum("...i,iab->...ab", x, case[2].matrix_basis)


def _vee(case, X):
    basis = case[2].matrix_basis
    return X.reshape(X.shape[:-2] + (-1,)) @ np.linalg.pinv(basis.reshape(basis.shape[0], -1))


def _orth_err(M, se3_flag=False):
    M = np.asarray(M)
    R = M[..., :3, :3] if se3_flag else M
    return np.max(np.abs(np.swapaxes(R, -1, -2) @ R - np.eye(R.shape[-1])))


# ------------------------------------------------------------- jitted helpers
def _from(cls, M):
    return SE3(M[..., :3, :3], M[..., :3, 3]) if cls is SE3 else cls(M)


@functools.partial(jax.jit, static_argnums=0)
def _exp(cls, x):
    return cls.exp(x).as_matrix()


@functools.partial(jax.jit, static_argnums=0)
def _cay(cls, x):
    return cls.cayley(x).as_matrix()


@functools.partial(jax.jit, static_argnums=0)
def _log(cls, M):
    return _from(cls, M).log()


@functools.partial(jax.jit, static_argnums=0)
def _icay(cls, M):
    return _from(cls, M).inverse_cayley()


@functools.partial(jax.jit, static_argnums=0)
def _Ads(cls, M):
    g = _from(cls, M)
    return g.Ad(), g.Ad_star(), g.inverse().Ad_star()


# ------------------------------------------------------------------ exp / log
def test_exp_matches_scipy_expm(case, key):
    cls = case[1]
    x = _tangents(_rng(key), case)
    M = np.asarray(_exp(cls, x))
    for i in range(B):
        np.testing.assert_allclose(M[i], sla.expm(_hat(case, x[i])), rtol=0, atol=1e-13)


def test_exp_log_roundtrip(case, key):
    cls = case[1]
    x = _tangents(_rng(key), case)
    M = _exp(cls, x)
    y = _log(cls, M)
    np.testing.assert_allclose(y, x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(_exp(cls, y), M, rtol=0, atol=1e-14)


def test_orthogonality_after_exp_and_cayley(case, key):
    cls = case[1]
    x = _tangents(_rng(key), case)
    assert _orth_err(_exp(cls, x), cls is SE3) < 1e-14
    assert _orth_err(_cay(cls, 3.0 * x), cls is SE3) < 1e-14
    np.testing.assert_allclose(np.linalg.det(np.asarray(_exp(cls, x))), 1.0, atol=1e-14)


def test_log_small_angles_accurate(case):
    """Both sides of the Taylor switch (|θ| = 0.1) and down to 0, to relative roundoff."""
    cls = case[1]
    e = np.zeros(case[2].dim)
    e[0], e[-1] = 1.0, -0.5
    scales = np.array([0.0, 1e-12, 1e-9, 1e-6, 1e-3, 0.05, 0.09, 0.11])
    x = scales[:, None] * e
    err = np.linalg.norm(np.asarray(_log(cls, _exp(cls, x))) - x, axis=-1)
    assert np.all(err <= 1e-14 * np.linalg.norm(x, axis=-1))


# -------------------------------------------------------------------- cayley
def test_cayley_matches_formula(case, key):
    cls = case[1]
    x = 3.0 * _tangents(_rng(key), case)
    M = np.asarray(_cay(cls, x))
    for i in range(B):
        X = _hat(case, x[i])
        eye = np.eye(X.shape[0])
        np.testing.assert_allclose(M[i], np.linalg.solve(eye - X, eye + X), rtol=0, atol=1e-13)


def test_inverse_cayley_roundtrip(case, key):
    cls = case[1]
    x = 3.0 * _tangents(_rng(key), case)
    np.testing.assert_allclose(_icay(cls, _cay(cls, x)), x, rtol=1e-12, atol=1e-12)


def test_cayley_is_second_order_exp(case, key):
    """cay(x) = exp(2x) + O(|x|³): the defect shrinks by ~8 when x halves."""
    cls = case[1]
    x = _tangents(_rng(key), case)
    h = np.array([1e-2, 5e-3, 1e-2, 5e-3, 1e-2, 5e-3, 1e-2, 5e-3])[:, None]
    xs = h * np.repeat(x[:4], 2, axis=0)
    errs = np.max(np.abs(np.asarray(_cay(cls, xs) - _exp(cls, 2 * xs))), axis=(-2, -1))
    ratios = errs[0::2] / errs[1::2]
    assert np.all((7.0 < ratios) & (ratios < 9.0))


# --------------------------------------------------------------- Ad and Ad*
def test_Ad_is_conjugation(case, key):
    cls = case[1]
    rng = _rng(key)
    M = np.asarray(_exp(cls, _tangents(rng, case)))
    xi = rng.normal(size=(B, case[2].dim))
    Ad, _, _ = _Ads(cls, M)
    Ad_xi = np.einsum("bij,bj->bi", np.asarray(Ad), xi)
    rhs = M @ _hat(case, xi) @ np.linalg.inv(M)
    np.testing.assert_allclose(_hat(case, Ad_xi), rhs, rtol=0, atol=1e-13)
    # exp(Ad_g ξ) = g exp(ξ) g⁻¹
    conj = M @ np.asarray(_exp(cls, xi)) @ np.linalg.inv(M)
    np.testing.assert_allclose(_exp(cls, Ad_xi), conj, atol=1e-12)


def test_Ad_star_pairing_and_antihomomorphism(case, key):
    cls = case[1]
    rng = _rng(key)
    M = np.asarray(_exp(cls, _tangents(rng, case)))
    N = np.asarray(_exp(cls, _tangents(rng, case)))
    xi = rng.normal(size=(B, case[2].dim))
    mu = rng.normal(size=(B, case[2].dim))
    _, Ad_star_g, _ = _Ads(cls, M)
    # <Ad*_g μ, ξ> = <μ, vee(g hat(ξ) g⁻¹)>, independent of Ad()
    ad_xi = _vee(case, M @ _hat(case, xi) @ np.linalg.inv(M))
    lhs = np.einsum("bij,bj,bi->b", np.asarray(Ad_star_g), mu, xi)
    np.testing.assert_allclose(lhs, np.einsum("bi,bi->b", mu, ad_xi), rtol=1e-12, atol=1e-12)
    # Ad*_{gh} = Ad*_h Ad*_g
    _, Ad_star_h, _ = _Ads(cls, N)
    _, Ad_star_gh, _ = _Ads(cls, M @ N)
    expected = np.asarray(Ad_star_h) @ np.asarray(Ad_star_g)
    np.testing.assert_allclose(Ad_star_gh, expected, atol=1e-12)


def test_coadjoint_casimirs(case, key):
    """Coadjoint orbits: |μ| for so(n)* (orthonormal coordinates); |p|² and π·p for se(3)*."""
    cls = case[1]
    rng = _rng(key)
    _, _, coAd = _Ads(cls, _exp(cls, _tangents(rng, case)))
    mu = rng.normal(size=(B, case[2].dim))
    nu = np.einsum("bij,bj->bi", np.asarray(coAd), mu)
    if cls is SE3:
        p_nu, p_mu = nu[:, 3:], mu[:, 3:]
        np.testing.assert_allclose(np.sum(p_nu**2, -1), np.sum(p_mu**2, -1), rtol=1e-13)
        np.testing.assert_allclose(
            np.sum(nu[:, :3] * p_nu, -1), np.sum(mu[:, :3] * p_mu, -1), rtol=1e-12, atol=1e-13
        )
    else:
        norm = np.linalg.norm
        np.testing.assert_allclose(norm(nu, axis=-1), norm(mu, axis=-1), rtol=1e-13)


# -------------------------------------------------------------- group axioms
@functools.partial(jax.jit, static_argnums=0)
def _axioms(cls, A, Bm, C, P):
    a, b, c = _from(cls, A), _from(cls, Bm), _from(cls, C)
    e = cls.identity(A.shape[-1]) if cls is SOn else cls.identity()
    m = lambda g: g.as_matrix()  # noqa: E731
    return dict(
        ab=m(a.compose(b)),
        ab_c=m((a @ b) @ c),
        a_bc=m(a @ (b @ c)),
        ae=m(a @ e),
        ea=m(e @ a),
        a_ainv=m(a @ a.inverse()),
        ainv_a=m(a.inverse() @ a),
        act=a.act(P),
        matmul_act=a @ P,
        roundtrip=a.inverse() @ (a @ P),
    )


def test_group_axioms(case, key):
    cls = case[1]
    rng = _rng(key)
    A, Bm, C = (np.asarray(_exp(cls, _tangents(rng, case))) for _ in range(3))
    k = 3 if cls is SE3 else case[3]
    P = rng.normal(size=(B, k))
    r = _axioms(cls, A, Bm, C, P)
    eye = np.broadcast_to(np.eye(case[3]), A.shape)
    np.testing.assert_allclose(r["ab"], A @ Bm, atol=1e-14)
    np.testing.assert_allclose(r["ab_c"], r["a_bc"], atol=1e-13)
    np.testing.assert_allclose(r["ae"], A, atol=0)
    np.testing.assert_allclose(r["ea"], A, atol=0)
    np.testing.assert_allclose(r["a_ainv"], eye, atol=1e-14)
    np.testing.assert_allclose(r["ainv_a"], eye, atol=1e-14)
    # the action agrees with the matrix (homogeneous coordinates for SE3)
    Ph = np.concatenate([P, np.ones((B, 1))], -1) if cls is SE3 else P
    expected = np.einsum("bij,bj->bi", A, Ph)[:, :k]
    np.testing.assert_allclose(r["act"], expected, atol=1e-14)
    np.testing.assert_allclose(r["matmul_act"], expected, atol=1e-14)
    np.testing.assert_allclose(r["roundtrip"], P, atol=1e-14)


def test_batch_broadcasting(case):
    """Batch axes broadcast in compose and act (shapes only, via jax.eval_shape)."""
    cls, n = case[1], case[3]
    k = 3 if cls is SE3 else n
    ident = (lambda *s: cls.identity(n, *s)) if cls is SOn else cls.identity
    shape = jax.eval_shape
    assert shape(lambda: ident((4,)) @ ident()).batch_shape == (4,)
    assert shape(lambda: ident() @ ident((4,))).batch_shape == (4,)
    assert shape(lambda: ident((4,)) @ jnp.ones((7, 1, k))).shape == (7, 4, k)
    assert shape(lambda: ident().act(jnp.ones((5, k)))).shape == (5, k)
    assert shape(lambda: ident((2, 3)).log()).shape == (2, 3, case[2].dim)
    assert shape(lambda: ident((2, 3)).Ad_star()).shape == (2, 3, case[2].dim, case[2].dim)
    e = shape(lambda: ident((2, 3)))
    assert e.batch_shape == (2, 3)
    assert isinstance(e, AbstractMatrixLieGroup)
    assert e.tangent_dim == case[2].dim and e.matrix_dim == n


@pytest.mark.parametrize("n", [4])
def test_vmap_matches_batched(n, key):
    """SOn.log (eigh + custom JVP) under vmap equals the batched call."""
    case = next(c for c in CASES if c[0] == f"SO({n})")
    M = _exp(SOn, _tangents(_rng(key), case))
    f = jax.jit(jax.vmap(lambda m: SOn(m).log()))
    np.testing.assert_allclose(f(M), _log(SOn, M), atol=1e-14)


# ----------------------------------------------------------------- gradients
@functools.partial(jax.jit, static_argnums=0)
def _grads(cls, x0):
    """Reverse-mode Jacobians (where a NaN from an unused ``where`` branch would show up)."""

    def via_exp(y):
        g = cls.exp(y)
        return g.as_matrix(), g.log()

    def via_cay(y):
        g = cls.cayley(y)
        return g.as_matrix(), g.inverse_cayley()

    J_exp, J_loop = jax.jacrev(via_exp)(x0)
    J_cay, J_icay = jax.jacrev(via_cay)(x0)
    return J_exp, J_cay, J_loop, J_icay


@pytest.mark.parametrize("scale", [0.0, 1e-9])
def test_gradients_finite_near_identity(heavy_case, scale):
    case = heavy_case
    cls = case[1]
    d = case[2].dim
    x0 = scale * np.linspace(1.0, -0.7, d)
    basis = np.moveaxis(case[2].matrix_basis, 0, -1)  # (m, m, d)
    J_exp, J_cay, J_loop, J_icay = _grads(cls, x0)
    for J in (J_exp, J_cay, J_loop, J_icay):
        assert np.all(np.isfinite(J))
    # d exp|_0 = hat and d cay|_0 = 2 hat; log∘exp and icay∘cay are the identity
    np.testing.assert_allclose(J_exp, basis, atol=1e-8)
    np.testing.assert_allclose(J_cay, 2 * basis, atol=1e-8)
    np.testing.assert_allclose(J_loop, np.eye(d), atol=1e-12)
    np.testing.assert_allclose(J_icay, np.eye(d), atol=1e-12)


def test_so3_gradients_near_pi():
    x = np.array([0.0, 0.6, 0.8]) * (PI - 1e-7)
    _, _, J_loop, _ = _grads(SO3, x)
    np.testing.assert_allclose(J_loop, np.eye(3), atol=1e-6)


def test_derivatives_match_finite_differences(heavy_case, key):
    """At a random point: d exp·η and d cay·η against central differences of the compiled
    maps; then d(log∘exp) = I and d(icay∘cay) = I check the derivatives of log and icay."""
    case = heavy_case
    cls = case[1]
    rng = _rng(key)
    x = _tangents(rng, case, max_angle=2.5)[0]
    eta = rng.normal(size=case[2].dim)
    J_exp, J_cay, J_loop, J_icay = _grads(cls, x)
    h = 1e-5
    pts = np.stack([x + h * eta, x - h * eta] * (B // 2))  # one batch shape for all helpers
    for J, f in ((J_exp, _exp), (J_cay, _cay)):
        F = np.asarray(f(cls, pts))
        np.testing.assert_allclose(np.asarray(J) @ eta, (F[0] - F[1]) / (2 * h), rtol=0, atol=1e-8)
    np.testing.assert_allclose(J_loop, np.eye(case[2].dim), atol=1e-10)
    np.testing.assert_allclose(J_icay, np.eye(case[2].dim), atol=1e-10)


# -------------------------------------------------------------- log near π
def _plane_tangents(rng, case, angles):
    """Coordinates of rotations with prescribed plane angles in random frames."""
    name, _, _, n = case
    n = 3 if name in ("SO3", "SE3") else n
    out = []
    for _ in range(B):
        Q, _ = np.linalg.qr(rng.normal(size=(n, n)))
        X = np.zeros((n, n))
        for k, a in enumerate(angles):
            X[2 * k, 2 * k + 1], X[2 * k + 1, 2 * k] = -a, a
        X = Q @ X @ Q.T
        if name == "SE3":
            out.append(np.concatenate([[X[2, 1], X[0, 2], X[1, 0]], rng.normal(size=3)]))
        elif name == "SO3":
            out.append(np.array([X[2, 1], X[0, 2], X[1, 0]]))
        else:
            out.append(_vee(case, X))
    return np.stack(out)


@pytest.mark.parametrize("delta", [1e-4, 1e-7, 1e-10, 1e-14])
def test_log_near_pi(case, key, delta):
    """Angle π - δ round-trips to roundoff (a second plane at 0.8 rad for n ≥ 4)."""
    cls = case[1]
    angles = [PI - delta] + ([0.8] if case[3] >= 4 and cls is SOn else [])
    x = _plane_tangents(_rng(key), case, angles)
    M = _exp(cls, x)
    y = np.asarray(_log(cls, M))
    np.testing.assert_allclose(_exp(cls, y), M, atol=1e-13)
    rot = slice(0, 3) if cls is SE3 else slice(None)
    np.testing.assert_allclose(
        np.linalg.norm(y[:, rot], axis=-1), np.linalg.norm(x[:, rot], axis=-1), rtol=1e-14
    )
    # the log is unique for δ > 0; below δ ~ 1e-12 the sign of the axis is roundoff
    np.testing.assert_allclose(y, x, rtol=0, atol=1e-10 if delta > 1e-12 else 1e-6)


def test_log_exactly_pi(case, key):
    """At angle π (two planes at π for SO(n), n ≥ 4) log returns *a* valid logarithm."""
    cls = case[1]
    angles = [PI] + ([PI] if case[3] >= 4 and cls is SOn else [])
    x = _plane_tangents(_rng(key), case, angles)
    M = _exp(cls, x)
    y = np.asarray(_log(cls, M))
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(_exp(cls, y), M, atol=1e-13)
    rot = slice(0, 3) if cls is SE3 else slice(None)
    np.testing.assert_allclose(
        np.linalg.norm(y[:, rot], axis=-1), np.linalg.norm(x[:, rot], axis=-1), rtol=1e-14
    )


# ------------------------------------------------------------------ float32
@pytest.mark.parametrize("cls,d", [(SO3, 3), (SOn, 6)])
def test_float32(cls, d, key):
    x = (0.4 * _rng(key).normal(size=(B, d))).astype(np.float32)
    M = _exp(cls, x)
    assert M.dtype == jnp.float32
    assert _orth_err(M, cls is SE3) < 1e-6
    y = _log(cls, M)
    assert y.dtype == jnp.float32
    np.testing.assert_allclose(y, x, atol=2e-6)


# ---------------------------------------------------------------- bad input
def test_bad_shapes_raise():
    with pytest.raises(ValueError, match=r"SO3\.exp expects shape \(\.\.\., 3\), got \(4,\)"):
        SO3.exp(jnp.zeros(4))
    with pytest.raises(ValueError, match=r"SO3\.cayley expects shape \(\.\.\., 3\)"):
        SO3.cayley(jnp.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"SE3\.exp expects shape \(\.\.\., 6\), got \(3,\)"):
        SE3.exp(jnp.zeros(3))
    with pytest.raises(ValueError, match=r"SOn\.exp expects shape \(\.\.\., n\(n-1\)/2\)"):
        SOn.exp(jnp.zeros(4))
    with pytest.raises(ValueError, match=r"SOn\.exp expects shape \(\.\.\., 6\), got \(3,\)"):
        SOn.exp(jnp.zeros(3), n=4)
    with pytest.raises(ValueError, match=r"SO3 expects shape \(\.\.\., 3, 3\), got \(3, 4\)"):
        SO3(jnp.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"SOn expects shape \(\.\.\., n, n\)"):
        SOn(jnp.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"SE3 translation expects shape \(\.\.\., 3\)"):
        SE3(jnp.eye(3), jnp.zeros(4))
    with pytest.raises(ValueError, match=r"SE3\.from_matrix expects shape \(\.\.\., 4, 4\)"):
        SE3.from_matrix(jnp.eye(3))
    with pytest.raises(ValueError, match=r"SO3\.act expects shape \(\.\.\., 3\), got \(5, 2\)"):
        SO3.identity().act(jnp.zeros((5, 2)))
    with pytest.raises(ValueError, match=r"SOn\.act expects shape \(\.\.\., 4\)"):
        SOn.identity(4).act(jnp.zeros(3))
    with pytest.raises(ValueError, match="real floating-point"):
        SO3.exp(jnp.zeros(3, jnp.complex128))
    with pytest.raises(ValueError, match="n >= 2"):
        SOn.identity(1)
    with pytest.raises(ValueError, match=r"SO\(4\) with SO\(3\)"):
        SOn.identity(4).compose(SOn.identity(3))
    with pytest.raises(TypeError, match="expects an SO3"):
        SO3.identity().compose(SE3.identity())


def test_from_matrix_checks_membership():
    R = np.asarray(_exp(SO3, np.array([[0.3, -0.2, 1.0]])))[0]
    np.testing.assert_allclose(SO3.from_matrix(R).R, R)
    np.testing.assert_allclose(SOn.from_matrix(R).R, R)
    with pytest.raises(ValueError, match="not orthogonal"):
        SO3.from_matrix(R + 1e-3)
    with pytest.raises(ValueError, match="not orthogonal"):
        SOn.from_matrix(np.eye(4) * 1.01)
    with pytest.raises(ValueError, match="det <= 0"):
        SO3.from_matrix(-R)
    with pytest.raises(ValueError, match="non-finite"):
        SO3.from_matrix(np.full((3, 3), np.nan))
    T = np.eye(4)
    T[:3, :3], T[:3, 3] = R, [1.0, 2.0, 3.0]
    np.testing.assert_allclose(SE3.from_matrix(T).as_matrix(), T)
    g = SE3.from_rotation_translation(SO3(R), T[:3, 3])
    np.testing.assert_allclose(g.as_matrix(), T)
    np.testing.assert_allclose(g.rotation().R, R)
    T[3, 0] = 0.5
    with pytest.raises(ValueError, match=r"bottom row must be \[0, 0, 0, 1\]"):
        SE3.from_matrix(T)
    # traced input: checked at run time, under jax.jit as under eqx.filter_jit
    check = jax.jit(lambda M: SO3.from_matrix(M).R)
    np.testing.assert_allclose(check(jnp.asarray(R)), R)
    with pytest.raises(jax.errors.JaxRuntimeError, match="ValueError: SO3.from_matrix: matrix is not orthogonal"):
        check(jnp.asarray(R + 1e-3))
    T[3, 0] = 0.5
    with pytest.raises(jax.errors.JaxRuntimeError, match="bottom row"):
        eqx.filter_jit(lambda M: SE3.from_matrix(M).t)(jnp.asarray(T))
