"""Methods that dispatch on a structural family, in every basis the family check accepts, and the
family's declared data checked against the Hamiltonian.

Each system here is written by hand in its own basis ``B``: the momentum's matrix is recovered
through the basis' Gram matrix ``G_ab = −½ tr(B_a B_b)``, ``M = Σ (G⁻¹μ)_b B_b``, and the
Hamiltonian is the physical one of ``M``. The reference is the same physical top in the standard
basis (the zoo), or GL6 in the same basis."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.algebras import from_matrix_basis, semidirect, so, so3
from lpjax.systems import clebsch_case, lagrange_top, rigid_body_n

J4 = jnp.array([1.0, 2.0, 3.0, 5.0])  # a Manakov top on so(4)
STD4 = so(4).matrix_basis  # E_(ij), (i, j) = (0,1), (0,2), (0,3), (1,2), (1,3), (2,3)


def _self_dual_basis() -> np.ndarray:
    """The orthonormal basis (E_01 ± E_23, E_02 ∓ E_13, E_03 ± E_12)/√2 of so(4) = so(3) ⊕ so(3)."""
    E = dict(zip([(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)], STD4))
    r = 1 / np.sqrt(2)
    return r * np.array([E[0, 1] + E[2, 3], E[0, 2] - E[1, 3], E[0, 3] + E[1, 2],
                         E[0, 1] - E[2, 3], E[0, 2] + E[1, 3], E[0, 3] - E[1, 2]])


BASES4 = {
    "permuted": STD4[[3, 0, 5, 1, 4, 2]],
    "sign-flipped": STD4 * np.array([1.0, -1, 1, -1, -1, 1])[:, None, None],
    "scaled x2": 2 * STD4,
    "self-dual/anti-self-dual": _self_dual_basis(),
}


def _static(B) -> tuple:
    """A basis as a hashable static field (``np.array(t)`` gives the (d, n·n) rows back)."""
    B = np.asarray(B)
    return tuple(map(tuple, B.reshape(len(B), -1).tolist()))


def _basis(t: tuple, n: int) -> np.ndarray:
    return np.array(t).reshape(-1, n, n)


def _gram(B):
    return 0.5 * np.einsum("aij,bij->ab", B, B)


def _matrix(B, mu):
    """The momentum's skew matrix ``M = Σ (G⁻¹μ)_b B_b`` (``μ_b = −½ tr(M B_b)``)."""
    return jnp.einsum("...a,ab,bij->...ij", mu, np.linalg.inv(_gram(B)), B)


def _momenta(B, M):
    return 0.5 * jnp.einsum("...ij,aij->...a", M, B)


class BasisRigidBody(lpjax.AbstractFreeRigidBody):
    """``h = ½ Σ_{i<j} M_ij²/(J_i + J_j)`` of the momentum's matrix, in the basis ``B``."""

    J: jax.Array
    B: tuple = eqx.field(static=True)

    @property
    def mass_tensor(self):
        return self.J

    def __call__(self, mu):
        M = _matrix(_basis(self.B, self.J.shape[0]), mu)
        i, j = np.triu_indices(self.J.shape[0], 1)
        return 0.5 * jnp.sum(M[i, j] ** 2 / (self.J[i] + self.J[j]))


@pytest.mark.parametrize("name", list(BASES4))
def test_moser_veselov_in_every_accepted_basis_is_the_standard_map(name):
    """The physical top (J = 1, 2, 3, 5) in four bases of so(4): MV succeeds, equals GL6 in the same
    basis to its own error, and its matrices equal those of MV on the zoo's top to roundoff, as do
    those of DEP with the Moser–Veselov Lagrangian (which works in any basis through the trace
    pairing)."""
    B = BASES4[name]
    g = from_matrix_basis(B, name=name)
    assert g.rotation_structure == (g, 0)  # the family check accepts the basis
    system = lpjax.LiePoissonSystem(g, BasisRigidBody(J4, _static(B)), -1)
    M0 = so(4).hat(jnp.array([0.3, -0.5, 0.8, 0.2, -0.4, 0.6]))
    mv = lpjax.integrate(system, lpjax.MoserVeselov(), _momenta(B, M0), 0.05, 200, save_every=20)
    gl6 = lpjax.integrate(system, lpjax.GaussLegendre(3), _momenta(B, M0), 0.05, 200, save_every=20)
    zoo = lpjax.integrate(rigid_body_n(J4), lpjax.MoserVeselov(), so(4).vee(M0), 0.05, 200, save_every=20)
    assert mv.result == lpjax.RESULTS.successful
    err = float(jnp.max(jnp.abs(_matrix(B, mv.ys) - _matrix(B, gl6.ys))))
    assert 1e-6 < err <= 5e-4  # MV's own error (second order): measured 1.31e-5 in every basis
    same = float(jnp.max(jnp.abs(_matrix(B, mv.ys) - so(4).hat(zoo.ys))))
    assert same <= 1e-13  # measured 0 to 3.1e-15
    dep = lpjax.integrate(system, lpjax.DiscreteEulerPoincare(lpjax.lagrangians.moser_veselov(system)),
                          _momenta(B, M0), 0.05, 200, save_every=20)  # the same map by the general DEP algorithm
    assert float(jnp.max(jnp.abs(_matrix(B, dep.ys) - so(4).hat(zoo.ys)))) <= 1e-13  # measured <= 2.4e-15


B_CLEBSCH = jnp.array([0.7, 1.3, 2.1])


def _rotated_so3():
    """so(3) in a rotated and scaled basis: ``B_a = 2 Σ_b Q_ab E_b`` for a rotation Q."""
    Q = np.linalg.qr(np.random.default_rng(3).standard_normal((3, 3)))[0]
    return 2 * np.einsum("ab,bij->aij", Q, so3().matrix_basis)


class _Top3(lpjax.AbstractLagrangeTop):
    """A three-dimensional top with gravity e_3."""

    @property
    def n(self):
        return 3

    @property
    def gravity(self):
        return jnp.array([0.0, 0.0, 1.0])


class BasisLagrangeTop(_Top3):
    """The Lagrange top of :func:`lagrange_top` (rest or moving frame) in the basis ``B`` of so(3)."""

    alpha: jax.Array
    B: tuple = eqx.field(static=True)

    def __call__(self, y):
        """Rest frame ``½<m, m> + <a, e_3>`` (seed 000, (5.15)); moving frame ``½<M, Ω> + <P, e_3>``
        with ``J = (α/2, α/2, 1 − α/2)`` (5.1)."""
        M = _matrix(_basis(self.B, 3), y[:3])
        i, j = np.triu_indices(3, 1)
        J = jnp.stack([self.alpha / 2, self.alpha / 2, 1 - self.alpha / 2])
        c = 1.0 if self.frame == "rest" else 1 / (J[i] + J[j])
        return 0.5 * jnp.sum(c * M[i, j] ** 2) + y[5]


class BasisLagrangeTopRest(BasisLagrangeTop):
    frame: ClassVar[str] = "rest"


class BasisLagrangeTopMoving(BasisLagrangeTop):
    frame: ClassVar[str] = "moving"


class BasisClebschFlow(lpjax.AbstractClebschFlow):
    B: jax.Array
    basis: tuple = eqx.field(static=True)

    def __call__(self, y):
        """``½<M, M> − ½<P, BP>`` (seed 000, (7.12))."""
        M = _matrix(_basis(self.basis, 3), y[:3])
        i, j = np.triu_indices(3, 1)
        return 0.5 * jnp.sum(M[i, j] ** 2) - 0.5 * jnp.sum(self.B * y[3:] ** 2)


def _suris_cases():
    B = np.asarray(_rotated_so3())
    e3 = semidirect(from_matrix_basis(B, name="so(3) rotated"), name="e(3) rotated")
    return B, e3, [
        ("rest", lpjax.SurisLagrangeTop(), lagrange_top(3, 0.5, "rest"), BasisLagrangeTopRest(jnp.asarray(0.5), _static(B)), 1),
        ("moving", lpjax.SurisLagrangeTop(), lagrange_top(3, 0.5, "moving"), BasisLagrangeTopMoving(jnp.asarray(0.5), _static(B)), -1),
        ("clebsch", lpjax.SurisClebsch(), clebsch_case(B_CLEBSCH), BasisClebschFlow(B_CLEBSCH, _static(B)), -1),
    ]


def test_suris_maps_on_e3_in_a_rotated_scaled_basis_are_the_standard_maps():
    B, e3, cases = _suris_cases()
    assert e3.rotation_structure is not None and e3.rotation_structure[1] == 1
    M0 = so(3).hat(jnp.array([0.4, -0.9, 0.3]))
    P0 = jnp.array([0.2, -0.6, 0.9])
    for label, method, zoo, h, sign in cases:
        system = lpjax.LiePoissonSystem(e3, h, sign)
        ours = lpjax.integrate(system, method, jnp.concatenate([_momenta(B, M0), P0]), 0.05, 400, save_every=40)
        ref = lpjax.integrate(zoo, method, jnp.concatenate([so(3).vee(M0), P0]), 0.05, 400, save_every=40)
        assert ours.result == lpjax.RESULTS.successful
        err = float(jnp.max(jnp.abs(_matrix(B, ours.ys[:, :3]) - so(3).hat(ref.ys[:, :3]))))
        # the change of basis rounds at every step, and the map amplifies a perturbation about
        # 100-fold over 400 steps (measured from y0 perturbed by 2e-16): roundoff times steps
        assert err <= 400 * 2.5e-14, label  # measured 4.0e-13, 1.5e-12, 9.4e-14 (rest, moving, Clebsch)
        assert float(jnp.max(jnp.abs(ours.ys[:, 3:] - ref.ys[:, 3:]))) <= 400 * 2.5e-14, label  # measured <= 8.3e-13
    # the zoo's Hamiltonian written for the standard basis is another physical top in this one: refused
    with pytest.raises(ValueError, match=r"M-part is not ½<M, M>: ∂H/∂M differs from M .* by [\d.]+ relative"):
        lpjax.integrate(lpjax.LiePoissonSystem(e3, clebsch_case(B_CLEBSCH).hamiltonian, -1), lpjax.SurisClebsch(), jnp.ones(6), 0.05, 2)


# ------------------------------------------------------------------ declared data against the Hamiltonian


class DoubledEnergyBody(lpjax.AbstractFreeRigidBody):
    """Declares the Euler top's mass tensor but returns twice its energy."""

    inertia: jax.Array

    @property
    def mass_tensor(self):
        return 0.5 * jnp.sum(self.inertia) - self.inertia

    def __call__(self, M):
        return jnp.sum(M * M / self.inertia)


def test_a_mass_tensor_that_disagrees_with_the_energy_is_refused_with_the_defect():
    system = lpjax.LiePoissonSystem(so3(), DoubledEnergyBody(jnp.array([1.0, 2.0, 3.0])), -1)
    with pytest.raises(ValueError, match=r"mass_tensor J = \[2\. 1\. 0\.\] disagrees with its energy.* by 1 relative"):
        lpjax.integrate(system, lpjax.MoserVeselov(), jnp.array([1.0, 0.5, 0.8]), 0.1, 10)
    # GL reads the Hamiltonian only: it runs the same system
    assert lpjax.integrate(system, lpjax.GaussLegendre(2), jnp.array([1.0, 0.5, 0.8]), 0.1, 10).result == lpjax.RESULTS.successful


class RestDeclaredMovingEnergy(_Top3):
    """Declares the rest frame (with the (+) bracket) but its energy is the moving frame's."""

    alpha: jax.Array
    moving: lpjax.AbstractLagrangeTop
    frame: ClassVar[str] = "rest"

    def __call__(self, y):
        return self.moving(y)


class WrongB(lpjax.AbstractClebschFlow):
    """Declares B but its energy has 2B."""

    B: jax.Array

    def __call__(self, y):
        return 0.5 * jnp.dot(y[:3], y[:3]) - jnp.dot(self.B * y[3:], y[3:])


def test_lagrange_top_frame_and_clebsch_b_that_disagree_with_the_hamiltonian_are_refused():
    e3 = lpjax.algebras.euclidean(3)
    wrong_frame = lpjax.LiePoissonSystem(e3, RestDeclaredMovingEnergy(jnp.asarray(0.5), lagrange_top(3, 0.5, "moving").hamiltonian), 1)
    # ∂H/∂M = Ω with Ω_12 = M_12/α = 2 M_12 against m: the defect is 1 relative to the largest entry
    with pytest.raises(ValueError, match=r"frame 'rest' and alpha = 0.5 disagree with its Hamiltonian.* by [\d.]+ relative"):
        lpjax.integrate(wrong_frame, lpjax.SurisLagrangeTop(), jnp.ones(6), 0.05, 2)
    wrong_b = lpjax.LiePoissonSystem(e3, WrongB(jnp.array([1.0, 2.0, 3.0])), -1)
    with pytest.raises(ValueError, match=r"B = \[1\. 2\. 3\.\] disagrees with its Hamiltonian: ∂H/∂P differs from −BP"):
        lpjax.integrate(wrong_b, lpjax.SurisClebsch(), jnp.ones(6), 0.05, 2)
    with pytest.raises(ValueError, match="disagree"):
        lpjax.ensemble(wrong_b, lpjax.SurisClebsch(), jnp.ones((4, 6)), 0.05, 2)


def test_kernels_agree_on_moser_veselov_in_the_self_dual_basis():
    """The change of basis is part of the member program: the native kernel runs it (no fallback)
    and equals the scan to roundoff."""
    B = BASES4["self-dual/anti-self-dual"]
    system = lpjax.LiePoissonSystem(from_matrix_basis(B), BasisRigidBody(J4, _static(B)), -1)
    y0s = np.random.default_rng(1).normal(size=(24, 6))
    ref = lpjax.ensemble(system, lpjax.MoserVeselov(), y0s, 0.05, 40, kernel="scan")
    got = lpjax.ensemble(system, lpjax.MoserVeselov(), y0s, 0.05, 40, kernel="native")
    assert got.settings["kernel"] == "native" and not got.failed.size
    assert float(np.max(np.abs(got.final_state - ref.final_state))) <= 1e-13  # measured 4.4e-15
