"""The Poisson structure on the group (seed 003, sec. 3; seed 004): the discrete Legendre
transform made public, its regularity check, and the Casimirs pulled back to G, constant along
the sequences W_k of Moser-Veselov and of a DEP map with an advected vector."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.diagnostics import group_casimir
from lpjax.groups import SO3
from lpjax.lagrangians import legendre, moser_veselov, suris_lagrange_top
from lpjax.systems import lagrange_top, rigid_body

RB, DT = rigid_body(jnp.array([1.0, 2.0, 3.0])), 0.05


def _increments(sol) -> np.ndarray:
    """``W_k = g_k⁻¹ g_{k+1}`` from the reconstructed attitudes."""
    R = np.asarray(sol.gs.R)
    return np.einsum("kji,kjl->kil", R[:-1], R[1:])


def test_the_group_casimir_is_constant_along_moser_veselov():
    """10⁴ steps: Tr(W_k Λ W_k Λ) (3.10) moves by 3.7e-14 (relative, measured), the pulled-back
    Casimir by 3.7e-13 (it is Tr(Λ²) − Tr(WΛWΛ) over dt², a difference of O(1) numbers), and
    Fℓ(W_k) is the state M_k."""
    ell = moser_veselov(RB)
    sol = lpjax.integrate(RB, lpjax.MoserVeselov(reconstruct=True), jnp.array([0.3, -0.8, 1.1]), DT, 10_000, save_every=1)
    W, lam = _increments(sol), np.asarray(ell.lam)
    tr = np.einsum("kij,j,kji,i->k", W, lam, W, lam)
    assert np.max(np.abs(tr - tr[0])) <= 1e-12 * abs(tr[0])
    casimir = np.asarray(jax.vmap(lambda w: group_casimir(RB, ell, w, DT))(jnp.asarray(W)))
    assert casimir.shape == (W.shape[0], 1)
    assert np.max(np.abs(casimir - casimir[0])) <= 1e-12 * np.abs(casimir[0]).max()
    momenta = jax.vmap(lambda w: legendre(RB, ell, w, DT, check=False))(jnp.asarray(W[:100]))
    np.testing.assert_allclose(momenta, sol.ys[:100], atol=1e-13)


def test_the_rigid_body_casimir_on_the_group_is_tr_f_lam_f_lam():
    """(3.10): the pulled-back Casimir is an affine function of Tr(fΛfΛ) on SO(3)."""
    ell = moser_veselov(RB)
    lam = np.asarray(ell.lam)
    fs = np.asarray(SO3.exp(jnp.asarray(np.random.default_rng(3).normal(size=(8, 3)))).R)
    tr = np.einsum("kij,j,kji,i->k", fs, lam, fs, lam)
    c = np.asarray(jax.vmap(lambda f: group_casimir(RB, ell, f, DT))(jnp.asarray(fs)))[:, 0]
    slope, offset = np.polyfit(tr, c, 1)
    np.testing.assert_allclose(slope * tr + offset, c, rtol=0, atol=1e-12 * np.abs(c).max())
    assert slope < 0  # |Fℓ(f)|² = (2 Tr Λ² − 2 Tr(fΛfΛ)) / dt² up to the pairing's factor


def test_the_casimirs_of_e3_on_the_group_are_constant_along_a_dep_map():
    """Suris' moving-frame Lagrangian (6.16) through DiscreteEulerPoincare, 10⁴ steps: |P|² and
    M·P at (Fℓ(W_k, P_k), P_k) move by 2.6e-13 and 1.8e-14 (relative, measured)."""
    top = lagrange_top(3, frame="moving")
    ell = suris_lagrange_top(top)
    sol = lpjax.integrate(top, lpjax.DiscreteEulerPoincare(ell, reconstruct=True),
                          jnp.array([0.3, -0.2, 0.5, 0.1, 0.6, 0.8]), DT, 10_000, save_every=1)
    W, P = _increments(sol), np.asarray(sol.ys[:-1, 3:])
    casimirs = np.asarray(jax.vmap(lambda w, p: group_casimir(top, ell, w, DT, p))(jnp.asarray(W), jnp.asarray(P)))
    assert casimirs.shape == (W.shape[0], 2)
    assert np.all(np.max(np.abs(casimirs - casimirs[0]), axis=0) <= 1e-12 * np.abs(casimirs[0]))


def test_the_legendre_transform_checks_its_input():
    ell = moser_veselov(RB)
    with pytest.raises(ValueError, match="not regular at W: the Jacobian of its Legendre transform has rank 0 < 3"):
        legendre(RB, lambda W, P, dt: 0.0 * jnp.sum(W), jnp.eye(3), DT)
    with pytest.raises(ValueError, match=r"W must have shape \(3, 3\)"):
        legendre(RB, ell, jnp.eye(4), DT)
    with pytest.raises(ValueError, match="advects nothing"):
        legendre(RB, ell, jnp.eye(3), DT, jnp.ones(3))
    with pytest.raises(ValueError, match="advects vectors: pass P"):
        legendre(lagrange_top(3, frame="moving"), ell, jnp.eye(3), DT)
    with pytest.raises(TypeError, match="legendre needs .* has no matrix basis"):
        legendre(lpjax.systems.movable_base_top_x3(), ell, jnp.eye(3), DT)
