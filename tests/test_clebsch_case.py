"""The Clebsch case in full (seed 000, sec. 7): the Clebsch condition (7.6) and C from A by
(7.7), the Lax pair (7.8)-(7.9) for a general C, and both Casimirs of e(3)*."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.algebras import euclidean
from lpjax.diagnostics import clebsch_lax
from lpjax.systems import ClebschHamiltonian, clebsch_case, clebsch_condition, heavy_top_n, lagrange_top

RNG = np.random.default_rng(76)


def _case(n):
    b, a = RNG.uniform(0.5, 2.0, n), RNG.uniform(-1.0, 1.0, n)
    d = n * (n - 1) // 2
    return b, a, 0.5 * RNG.standard_normal(d + n)


def _spectra(system, ys, lam, lax=clebsch_lax):
    return np.array([np.sort_complex(np.linalg.eigvals(np.asarray(lax(system, y, lam)))) for y in ys])


@pytest.mark.parametrize("n", [3, 4])
def test_the_spectrum_of_L_is_constant_for_a_general_C(n):
    """(7.8)-(7.9): along a GL6 trajectory (t = 20) the eigenvalues of L(λ) move by 3e-15 at
    most (measured); with λB for λA, as for the flow c_jk = 1, they drift."""
    b, a, y0 = _case(n)
    system = clebsch_case(b, A=a)
    ys = lpjax.integrate(system, lpjax.GaussLegendre(3), y0, 0.01, 2000, save_every=100).ys
    for lam in (0.7, -1.3, 2.5):
        spec = _spectra(system, ys, lam)
        assert np.max(np.abs(spec - spec[0])) <= 1e-10
    wrong = _spectra(system, ys, 0.7, lambda s, y, lam: clebsch_lax(s, y, lam) + lam * jnp.diag(b - a))
    assert np.max(np.abs(wrong - wrong[0])) > 1e-4


def test_C_from_A_meets_the_Clebsch_condition_and_other_C_are_refused():
    b, a, y0 = _case(4)
    C = (b[:, None] - b[None, :]) / (a[:, None] - a[None, :] + np.eye(4))
    assert clebsch_condition(b, C) <= 1e-15
    given, built = clebsch_case(b, C), clebsch_case(b, A=a)
    np.testing.assert_array_equal(given.hamiltonian.c, built.hamiltonian.c)
    bad = C.copy()
    bad[0, 1] = bad[1, 0] = 1.3 * C[0, 1]
    assert clebsch_condition(b, bad) > 0.01
    with pytest.raises(ValueError, match=r"violate the Clebsch condition \(7.6\).*relative residual"):
        clebsch_case(b, bad)
    with pytest.raises(ValueError, match="nonzero off-diagonal"):
        clebsch_case(b, np.zeros((4, 4)))
    with pytest.raises(ValueError, match="distinct entries"):
        clebsch_case(b, A=np.array([0.0, 1.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match="not both"):
        clebsch_case(b, C, A=a)
    clebsch_case(b[:2], np.array([[0.0, 5.0], [5.0, 0.0]]))  # n = 2: no triple, any C
    # a Hamiltonian built by hand with C outside (7.6) has no Lax pair
    by_hand = lpjax.LiePoissonSystem(euclidean(4), ClebschHamiltonian(jnp.asarray(b), jnp.asarray(bad[np.triu_indices(4, 1)])), -1)
    with pytest.raises(ValueError, match="Clebsch condition"):
        clebsch_lax(by_hand, y0, 1.0)
    with pytest.raises(TypeError, match="clebsch_lax needs"):
        clebsch_lax(heavy_top_n(jnp.ones(4), jnp.ones(4)), y0, 1.0)
    with pytest.raises(ValueError, match="nonzero"):
        clebsch_lax(built, y0, 0.0)


def test_the_flow_c_1_has_A_equal_to_B():
    b, _, y0 = _case(3)
    np.testing.assert_allclose(clebsch_lax(clebsch_case(b), y0, 0.9),
                               lpjax.diagnostics.suris_clebsch_lax(clebsch_case(b), y0, 0.0, 0.9), atol=1e-15)


@pytest.mark.parametrize("system", [clebsch_case(jnp.array([0.5, 1.2, 2.0]), A=jnp.array([0.1, -0.4, 0.9])),
                                    heavy_top_n(jnp.array([1.0, 1.5, 2.0]), jnp.array([0.2, 0.0, 1.0])),
                                    lagrange_top(3, frame="rest"), lagrange_top(3, frame="moving")],
                         ids=["clebsch", "heavy_top_n", "lagrange_rest", "lagrange_moving"])
def test_e3_systems_report_both_casimirs(system):
    """|P|² and M·P: each in the span of the algebra's quadratic Casimirs, annihilated by the
    Poisson tensor, and kept by GL6."""
    y = jnp.asarray(RNG.standard_normal(6))
    S = system.algebra.quadratic_casimirs()
    assert system.casimirs(y).shape == (2,)
    for k in range(2):
        grad = jax.grad(lambda x: system.casimirs(x)[k])(y)
        assert float(jnp.max(jnp.abs(system.algebra.poisson_tensor(y) @ grad))) <= 1e-14
        hessian = np.asarray(jax.hessian(lambda x: system.casimirs(x)[k])(y))
        coef = np.linalg.lstsq(S.reshape(2, -1).T, hessian.reshape(-1), rcond=None)[0]
        np.testing.assert_allclose(np.tensordot(coef, S, 1), hessian, atol=1e-13)
    ys = lpjax.integrate(system, lpjax.GaussLegendre(3), y, 0.01, 1000, save_every=1000).ys
    np.testing.assert_allclose(system.casimirs(ys[-1]), system.casimirs(ys[0]), rtol=1e-13, atol=1e-13)
