"""Lie groups SO(3), SO(n), SE(3): closed forms checked against scipy/numpy and theory."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sla

from lpjax.algebras import se3, so, so3
from lpjax.groups import SE3, SO3, AbstractMatrixLieGroup, SOn

PI = np.pi

# (id, class, algebra, matrix size)
CASES = [
    ("SO3", SO3, so3(), 3),
    ("SO(3)", SOn, so(3), 3),
    ("SO(4)", SOn, so(4), 4),
    ("SO(5)", SOn, so(5), 5),
    ("SE3", SE3, se3(), 4),
]
IDS = [c[0] for c in CASES]


@pytest.fixture(params=CASES, ids=IDS)
def case(request):
    return request.param


def _tangents(key, case, batch, max_angle=PI - 0.05):
    """Random tangents whose rotation part has all angles below ``max_angle``.

    For so(n) the coordinates are orthonormal for -½tr, so ``|x|² = Σ θ_k²`` and
    ``|x| < π`` bounds every rotation angle.
    """
    name, _, alg, _ = case
    k1, k2, k3 = jax.random.split(key, 3)
    d_rot = 3 if name == "SE3" else alg.dim
    u = jax.random.normal(k1, (batch, d_rot))
    u = u / jnp.linalg.norm(u, axis=-1, keepdims=True)
    r = jax.random.uniform(k2, (batch, 1), minval=0.0, maxval=max_angle)
    w = u * r
    if name == "SE3":
        return jnp.concatenate([w, jax.random.normal(k3, (batch, 3))], axis=-1)
    return w


def _hat(case, x):
    return np.asarray(case[2].hat(jnp.asarray(x)))


def _vee(case, X):
    return np.asarray(case[2].vee(jnp.asarray(X)))


def _orth_err(M, se3=False):
    M = np.asarray(M)
    R = M[..., :3, :3] if se3 else M
    eye = np.eye(R.shape[-1])
    return np.max(np.abs(np.swapaxes(R, -1, -2) @ R - eye))


# ------------------------------------------------------------------ exp / log
def test_exp_matches_scipy_expm(case, key):
    cls = case[1]
    x = _tangents(key, case, 8)
    M = np.asarray(cls.exp(x).as_matrix())
    for i in range(x.shape[0]):
        np.testing.assert_allclose(M[i], sla.expm(_hat(case, x[i])), rtol=0, atol=1e-13)


def test_exp_log_roundtrip(case, key):
    cls = case[1]
    x = _tangents(key, case, 16)
    g = cls.exp(x)
    np.testing.assert_allclose(g.log(), x, rtol=0, atol=1e-11)
    np.testing.assert_allclose(cls.exp(g.log()).as_matrix(), g.as_matrix(), rtol=0, atol=1e-14)


def test_orthogonality_after_exp_and_cayley(case, key):
    cls = case[1]
    x = _tangents(key, case, 16)
    assert _orth_err(cls.exp(x).as_matrix(), cls is SE3) < 1e-14
    assert _orth_err(cls.cayley(3.0 * x).as_matrix(), cls is SE3) < 1e-14
    det = np.linalg.det(np.asarray(cls.exp(x).as_matrix()))
    np.testing.assert_allclose(det, 1.0, atol=1e-14)


def test_log_small_angles_accurate(case):
    cls = case[1]
    d = case[2].dim
    e = np.zeros(d)
    e[0] = 1.0
    e[-1] = -0.5
    for s in (0.0, 1e-12, 1e-9, 1e-6, 1e-3, 0.09, 0.11):
        x = jnp.asarray(s * e)
        np.testing.assert_allclose(cls.exp(x).log(), x, rtol=1e-13, atol=1e-300)


# -------------------------------------------------------------------- cayley
def test_cayley_matches_formula(case, key):
    cls = case[1]
    x = 3.0 * _tangents(key, case, 8)
    M = np.asarray(cls.cayley(x).as_matrix())
    for i in range(x.shape[0]):
        X = _hat(case, x[i])
        eye = np.eye(X.shape[0])
        np.testing.assert_allclose(M[i], np.linalg.solve(eye - X, eye + X), rtol=0, atol=1e-13)


def test_inverse_cayley_roundtrip(case, key):
    cls = case[1]
    x = 3.0 * _tangents(key, case, 16)
    np.testing.assert_allclose(cls.cayley(x).inverse_cayley(), x, rtol=1e-12, atol=1e-12)


def test_cayley_is_second_order_exp(case, key):
    """cay(x) = exp(2x) + O(|x|³): the defect shrinks by ~8 when x halves."""
    cls = case[1]
    x = _tangents(key, case, 1)[0]
    errs = []
    for h in (1e-2, 5e-3):
        diff = cls.cayley(h * x).as_matrix() - cls.exp(2 * h * x).as_matrix()
        errs.append(float(jnp.max(jnp.abs(diff))))
    assert 7.0 < errs[0] / errs[1] < 9.0


# --------------------------------------------------------------- Ad and Ad*
def test_Ad_is_conjugation(case, key):
    cls = case[1]
    k1, k2 = jax.random.split(key)
    g = cls.exp(_tangents(k1, case, 6))
    xi = jax.random.normal(k2, (6, case[2].dim))
    lhs = np.asarray(case[2].hat((g.Ad() @ xi[..., None])[..., 0]))
    M = np.asarray(g.as_matrix())
    rhs = M @ _hat(case, xi) @ np.linalg.inv(M)
    np.testing.assert_allclose(lhs, rhs, rtol=0, atol=1e-13)
    # exp(Ad_g ξ) = g exp(ξ) g⁻¹
    conj = g.compose(cls.exp(xi)).compose(g.inverse()).as_matrix()
    np.testing.assert_allclose(cls.exp((g.Ad() @ xi[..., None])[..., 0]).as_matrix(), conj, atol=1e-12)


def test_Ad_star_pairing_and_antihomomorphism(case, key):
    cls = case[1]
    k1, k2, k3, k4 = jax.random.split(key, 4)
    g = cls.exp(_tangents(k1, case, 5))
    h = cls.exp(_tangents(k2, case, 5))
    xi = np.asarray(jax.random.normal(k3, (5, case[2].dim)))
    mu = np.asarray(jax.random.normal(k4, (5, case[2].dim)))
    # <Ad*_g μ, ξ> = <μ, vee(g hat(ξ) g⁻¹)>, independent of Ad()
    M = np.asarray(g.as_matrix())
    ad_xi = _vee(case, M @ _hat(case, xi) @ np.linalg.inv(M))
    lhs = np.einsum("bi,bi->b", np.asarray((g.Ad_star() @ mu[..., None])[..., 0]), xi)
    np.testing.assert_allclose(lhs, np.einsum("bi,bi->b", mu, ad_xi), rtol=1e-12, atol=1e-12)
    # Ad*_{gh} = Ad*_h Ad*_g
    np.testing.assert_allclose(g.compose(h).Ad_star(), h.Ad_star() @ g.Ad_star(), atol=1e-12)


def test_coadjoint_casimirs(case, key):
    """Coadjoint orbits: |μ| for so(n)* (orthonormal coordinates); |p|² and π·p for se(3)*."""
    cls = case[1]
    k1, k2 = jax.random.split(key)
    g = cls.exp(_tangents(k1, case, 5))
    mu = jax.random.normal(k2, (5, case[2].dim))
    nu = (g.inverse().Ad_star() @ mu[..., None])[..., 0]
    if case[0] == "SE3":
        np.testing.assert_allclose(jnp.sum(nu[:, 3:] ** 2, -1), jnp.sum(mu[:, 3:] ** 2, -1), rtol=1e-13)
        np.testing.assert_allclose(
            jnp.sum(nu[:, :3] * nu[:, 3:], -1), jnp.sum(mu[:, :3] * mu[:, 3:], -1), rtol=1e-12, atol=1e-13
        )
    else:
        np.testing.assert_allclose(jnp.linalg.norm(nu, axis=-1), jnp.linalg.norm(mu, axis=-1), rtol=1e-13)


# -------------------------------------------------------------- group axioms
def test_group_axioms(case, key):
    cls = case[1]
    k1, k2, k3, k4 = jax.random.split(key, 4)
    a, b, c = (cls.exp(_tangents(k, case, 4)) for k in (k1, k2, k3))
    m = lambda g: np.asarray(g.as_matrix())  # noqa: E731
    np.testing.assert_allclose(m(a.compose(b)), m(a) @ m(b), atol=1e-14)
    np.testing.assert_allclose(m((a @ b) @ c), m(a @ (b @ c)), atol=1e-13)
    e = cls.identity(case[3]) if cls is SOn else cls.identity()
    np.testing.assert_allclose(m(a @ e), m(a), atol=0)
    np.testing.assert_allclose(m(e @ a), m(a), atol=0)
    eye = np.broadcast_to(np.eye(case[3]), (4, case[3], case[3]))
    np.testing.assert_allclose(m(a @ a.inverse()), eye, atol=1e-14)
    np.testing.assert_allclose(m(a.inverse() @ a), eye, atol=1e-14)
    # action agrees with the matrix (homogeneous coordinates for SE3)
    k = 3 if cls is SE3 else case[3]
    p = jax.random.normal(k4, (4, k))
    ph = np.concatenate([p, np.ones((4, 1))], -1) if cls is SE3 else np.asarray(p)
    expected = np.einsum("bij,bj->bi", m(a), ph)[:, :k]
    np.testing.assert_allclose(a.act(p), expected, atol=1e-14)
    np.testing.assert_allclose(a @ p, expected, atol=1e-14)
    np.testing.assert_allclose(a.inverse() @ (a @ p), p, atol=1e-14)


def test_batch_broadcasting(case, key):
    cls = case[1]
    g = cls.exp(_tangents(key, case, 4))
    single = cls.exp(_tangents(jax.random.fold_in(key, 1), case, 1)[0])
    assert (g @ single).batch_shape == (4,)
    assert (single @ g).batch_shape == (4,)
    k = 3 if cls is SE3 else case[3]
    pts = jnp.ones((7, 1, k))
    assert (g @ pts).shape == (7, 4, k)
    assert single.act(jnp.ones((5, k))).shape == (5, k)
    e = cls.identity(case[3], (2, 3)) if cls is SOn else cls.identity((2, 3))
    assert e.batch_shape == (2, 3)
    assert isinstance(e, AbstractMatrixLieGroup)


def test_jit_and_vmap_match_batched(case, key):
    cls = case[1]
    x = _tangents(key, case, 6)
    f = lambda y: cls.exp(y).log()  # noqa: E731
    np.testing.assert_allclose(jax.vmap(f)(x), f(x), atol=1e-14)
    np.testing.assert_allclose(jax.jit(f)(x), f(x), atol=1e-14)
    g = jax.jit(lambda y: cls.cayley(y))(x)
    assert type(g) is cls
    np.testing.assert_allclose(g.as_matrix(), cls.cayley(x).as_matrix(), atol=1e-15)


# ----------------------------------------------------------------- gradients
@pytest.mark.parametrize("scale", [0.0, 1e-9])
def test_gradients_finite_near_identity(case, scale):
    cls = case[1]
    d = case[2].dim
    x0 = jnp.asarray(scale * np.linspace(1.0, -0.7, d))
    basis = np.moveaxis(case[2].matrix_basis, 0, -1)  # (m, m, d)

    J_exp = jax.jacfwd(lambda y: cls.exp(y).as_matrix())(x0)
    J_cay = jax.jacfwd(lambda y: cls.cayley(y).as_matrix())(x0)
    J_loop = jax.jacfwd(lambda y: cls.exp(y).log())(x0)
    J_icay = jax.jacrev(lambda y: cls.cayley(y).inverse_cayley())(x0)
    for J in (J_exp, J_cay, J_loop, J_icay):
        assert np.all(np.isfinite(J))
    # d exp|_0 = hat (and d cay|_0 = 2 hat); log∘exp and icay∘cay are the identity
    np.testing.assert_allclose(J_exp, basis, atol=1e-8)
    np.testing.assert_allclose(J_cay, 2 * basis, atol=1e-8)
    np.testing.assert_allclose(J_loop, np.eye(d), atol=1e-12)
    np.testing.assert_allclose(J_icay, np.eye(d), atol=1e-12)
    # reverse mode through log with respect to the matrix itself
    M0 = cls.exp(x0).as_matrix()
    from_mat = (lambda M: SE3(M[:3, :3], M[:3, 3])) if cls is SE3 else cls
    G = jax.grad(lambda M: jnp.sum(jnp.sin(from_mat(M).log())))(M0)
    assert np.all(np.isfinite(G))


def test_log_derivative_matches_finite_differences(case, key):
    """d/dε log(g exp(εη)) at ε = 0 by autodiff against a central difference."""
    cls = case[1]
    k1, k2 = jax.random.split(key)
    g = cls.exp(_tangents(k1, case, 1, max_angle=2.5)[0])
    eta = jax.random.normal(k2, (case[2].dim,))
    f = lambda e: g.compose(cls.exp(e * eta)).log()  # noqa: E731
    _, jvp = jax.jvp(f, (0.0,), (1.0,))
    h = 1e-5
    fd = (f(h) - f(-h)) / (2 * h)
    np.testing.assert_allclose(jvp, fd, rtol=1e-8, atol=1e-8)


# -------------------------------------------------------------- log near π
def _plane_tangent(case, key, angles):
    """so(n) or so(3) coordinates of a rotation with prescribed plane angles, random frame."""
    name, _, alg, n = case
    n = 3 if name in ("SO3", "SE3") else n
    Q, _ = np.linalg.qr(np.asarray(jax.random.normal(key, (n, n))))
    X = np.zeros((n, n))
    for k, a in enumerate(angles):
        X[2 * k, 2 * k + 1], X[2 * k + 1, 2 * k] = -a, a
    X = Q @ X @ Q.T
    if name in ("SO3", "SE3"):
        return np.array([X[2, 1], X[0, 2], X[1, 0]])
    return _vee(case, X)


@pytest.mark.parametrize("delta", [1e-7, 1e-12])
def test_log_near_pi(case, key, delta):
    cls = case[1]
    angles = [PI - delta] + ([0.8] if case[3] >= 4 and cls is SOn else [])
    errs = []
    for i in range(4):
        k = jax.random.fold_in(key, i)
        w = _plane_tangent(case, k, angles)
        x = np.concatenate([w, [0.3, -1.0, 2.0]]) if cls is SE3 else w
        g = cls.exp(jnp.asarray(x))
        y = g.log()
        # unique up to the ±π ambiguity, which only arises at delta -> 0
        errs.append(float(np.max(np.abs(np.asarray(y) - x))))
        np.testing.assert_allclose(cls.exp(y).as_matrix(), g.as_matrix(), atol=1e-13)
    # SO3/SE3 use the symmetric-part formula (accurate to roundoff); SOn is ~ε/δ
    tol = 1e-10 if cls is not SOn else max(1e-6, 1e-14 / delta)
    if cls is SOn and delta < 1e-9:
        tol = 1e-6  # pair fallback: accurate again
    assert max(errs) < tol


def test_log_exactly_pi(case, key):
    cls = case[1]
    angles = [PI] + ([PI] if case[3] >= 4 and cls is SOn else [])
    w = _plane_tangent(case, key, angles)
    x = np.concatenate([w, [0.3, -1.0, 2.0]]) if cls is SE3 else w
    g = cls.exp(jnp.asarray(x))
    y = g.log()
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(cls.exp(y).as_matrix(), g.as_matrix(), atol=1e-13)
    if cls is SO3:
        np.testing.assert_allclose(np.linalg.norm(y), PI, rtol=1e-15)


def test_so3_log_gradient_finite_near_pi():
    x = jnp.array([0.0, 0.6, 0.8]) * (PI - 1e-7)
    J = jax.jacfwd(lambda y: SO3.exp(y).log())(x)
    np.testing.assert_allclose(J, np.eye(3), atol=1e-6)
    G = jax.grad(lambda R: jnp.sum(SO3(R).log()))(SO3.exp(x).R)
    assert np.all(np.isfinite(G))


# ------------------------------------------------------------------ float32
@pytest.mark.parametrize("cls,d", [(SO3, 3), (SOn, 6), (SE3, 6)])
def test_float32(cls, d, key):
    x = (0.4 * jax.random.normal(key, (8, d))).astype(jnp.float32)
    g = cls.exp(x)
    assert g.as_matrix().dtype == jnp.float32
    y = g.log()
    assert y.dtype == jnp.float32
    np.testing.assert_allclose(y, x, atol=2e-5)
    np.testing.assert_allclose(cls.cayley(x).inverse_cayley(), x, atol=2e-5)


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
    R = np.asarray(SO3.exp(jnp.array([0.3, -0.2, 1.0])).R)
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
    g = SE3.from_matrix(T)
    np.testing.assert_allclose(g.as_matrix(), T)
    T[3, 0] = 0.5
    with pytest.raises(ValueError, match=r"bottom row must be \[0, 0, 0, 1\]"):
        SE3.from_matrix(T)
    # traced input: eqx.error_if
    with pytest.raises(eqx.EquinoxRuntimeError, match="not orthogonal"):
        jax.jit(lambda M: SO3.from_matrix(M).R)(jnp.asarray(R + 1e-3))
