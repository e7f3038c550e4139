"""Structural families: what a method needs of a system, stated without the model zoo.

A method that only fits some systems names a family (``method.family``); the family checks a
system by its structure — the kind of system, its bracket sign, the structure of its algebra
(:meth:`lpjax.algebras.LieAlgebra.rotation_structure`) and the abstract Hamiltonian family its
Hamiltonian belongs to — never by names or concrete zoo classes. The zoo's Hamiltonians are
final subclasses of the abstract Hamiltonian families below, and so can a user's be.
"""

from __future__ import annotations

import abc
from typing import Callable, ClassVar, Literal, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from .._algebra import LieAlgebra, RotationFrame, group_split
from ._base import AbstractLiePoissonSystem, AbstractSystem
from ._declared import data_guard, data_mismatch

__all__ = [
    "AbstractFreeRigidBody",
    "AbstractLagrangeTop",
    "AbstractClebschFlow",
    "AbstractFamily",
    "AnySystem",
    "LiePoissonFamily",
    "MatrixGroupFamily",
    "FreeRigidBodyFamily",
    "LagrangeTopFamily",
    "ClebschFlowFamily",
]


# ------------------------------------------------------------------ Hamiltonian families


class AbstractFreeRigidBody(eqx.Module):
    r"""The free rigid body on so(n)*: ``h(M) = ½<M, Ω>`` with ``M = JΩ + ΩJ`` (seed 000, (4.4)–(4.7)).

    A member gives its mass tensor ``J = diag(J_1, …, J_n)`` (:attr:`mass_tensor`) and its
    energy ``__call__(M)`` in the coordinates of the system's so(n) algebra. For the so(3)
    cross-product coordinates, principal moments ``I_i = J_j + J_k``.
    """

    @property
    @abc.abstractmethod
    def mass_tensor(self) -> Float[Array, " n"]:
        """``(J_1, …, J_n)``."""

    @abc.abstractmethod
    def __call__(self, M: Float[Array, " d"]) -> Scalar:
        ...


class AbstractLagrangeTop(eqx.Module):
    r"""The n-dimensional Lagrange top on e(n)* (seed 000, sec. 5), in one of two frames.

    ``frame = "rest"``: state ``(m, a)``, ``H = ½<m, m> + <a, p>`` (5.15), (+) bracket, with
    the constant gravity :attr:`gravity` ``= p``. ``frame = "moving"``: state ``(M, P)``,
    ``H = ½<M, Ω> + <P, A>`` with ``A = e_n`` and Ω from (5.7), (−) bracket. ``alpha`` is the
    anisotropy α of ``J = (α/2, …, α/2, 1 − α/2)`` (5.1).
    """

    frame: eqx.AbstractClassVar[Literal["rest", "moving"]]
    alpha: eqx.AbstractVar[Scalar]

    @property
    @abc.abstractmethod
    def n(self) -> int:
        """The dimension n."""

    @property
    @abc.abstractmethod
    def gravity(self) -> Float[Array, " n"]:
        """``p`` (rest frame) or ``A = e_n`` (moving frame)."""

    @abc.abstractmethod
    def __call__(self, y: Float[Array, " d"]) -> Scalar:
        ...


class AbstractClebschFlow(eqx.Module):
    r"""The Clebsch flow ``c_jk = 1`` on e(n)*: ``H = ½<M, M> − ½<P, BP>`` (seed 000, (7.12)–(7.13))."""

    B: eqx.AbstractVar[Float[Array, " n"]]

    @abc.abstractmethod
    def __call__(self, y: Float[Array, " d"]) -> Scalar:
        ...


# ------------------------------------------------------------------ system families


def _label(system) -> str:
    return getattr(system, "name", type(system).__name__)


class AbstractFamily(eqx.Module):
    """A structural family of systems; ``check`` raises a clear error for a non-member."""

    description: eqx.AbstractClassVar[str]

    @abc.abstractmethod
    def mismatch(self, system) -> Optional[Exception]:
        """``None`` for a member, otherwise the error to raise (it says why). What depends on
        values is decided here where they are concrete, and left to :meth:`guard` where they
        are traced (:func:`values_traced`)."""

    @abc.abstractmethod
    def guard(self, system) -> Optional[Callable[[], tuple]]:
        """The checks of :meth:`mismatch` that need values, for a system whose values are traced:
        ``None`` where the family has none (decided without computing anything), else a function
        returning ``(bad, message)``, ``bad`` a boolean JAX scalar computed from the system, which
        the caller checks in the program that runs (:func:`guarded`)."""

    def check(self, system, who: str, verb: str = "steps only") -> None:
        """Raise (``TypeError`` by default) unless ``system`` is a member; ``who`` is the caller."""
        err = self.mismatch(system)
        if err is not None:
            raise type(err)(f"{who} {verb} {self.description}; got {_label(system)}: {err}")


def _not_lie_poisson(system) -> Optional[Exception]:
    if not isinstance(system, AbstractLiePoissonSystem):
        return TypeError(f"it is a {type(system).__name__}, not a LiePoissonSystem")
    return None


def _structure_mismatch(system, vectors: tuple[int, ...], hamiltonian: Optional[type] = None,
                        sign: Optional[int] = None) -> Optional[Exception]:
    """Why ``system`` is not a Lie–Poisson system on so(n) ⋉ (Rⁿ)^k, k in ``vectors``, with the
    given bracket ``sign`` and a Hamiltonian of class ``hamiltonian`` (``None``: any)."""
    err = _not_lie_poisson(system)
    if err is not None:
        return err
    rs = system.algebra.rotation_structure
    if rs is None or rs[1] not in vectors:
        want = " or ".join("so(n)" if k == 0 else "so(n) ⋉ (Rⁿ)" + ("" if k == 1 else f"^{k}") for k in vectors)
        return TypeError(f"its algebra {system.algebra.name} is not {want} in a basis of skew matrices")
    if sign is not None and system.sign != sign:
        return TypeError(f"it uses the ({'+' if system.sign > 0 else '−'}) bracket; this needs sign = {sign}")
    h = system.hamiltonian
    if hamiltonian is not None and not isinstance(h, hamiltonian):
        return TypeError(f"its Hamiltonian {type(h).__name__} is not an {hamiltonian.__name__}")
    return None


def _dimension_mismatch(system, n: int, what: str) -> Optional[Exception]:
    so_n = system.algebra.rotation_structure[0].so_n
    return None if n == so_n else TypeError(f"{what} has dimension {n} but the algebra's rotations are so({so_n})")


def _omega(J, frame: RotationFrame, m):
    """``Ω`` with ``M = JΩ + ΩJ`` (seed 000, (4.6)): ``Ω_ij = M_ij / (J_i + J_j)``, in elementary coordinates."""
    return m / frame.pair_sums(jnp.asarray(J, m.dtype))


def _rigid_body_gradient(h, frame: RotationFrame, y):
    return _omega(h.mass_tensor, frame, y)


def _lagrange_top_gradient(h, frame: RotationFrame, y):
    d, n = frame.algebra.dim, h.n
    if h.frame == "rest":  # (5.15): H = ½<m, m> + <a, p>
        return jnp.concatenate([y[:d], jnp.asarray(h.gravity, y.dtype)])
    alpha = jnp.asarray(h.alpha, y.dtype)  # (5.1), (5.7): J = (α/2, …, α/2, 1 − α/2), A = e_n
    J = jnp.concatenate([jnp.full(n - 1, 0.5, y.dtype) * alpha, (1 - 0.5 * alpha)[None]])
    return jnp.concatenate([_omega(J, frame, y[:d]), jnp.zeros(n, y.dtype).at[-1].set(1.0)])


def _clebsch_flow_gradient(h, frame: RotationFrame, y):
    d = frame.algebra.dim  # (7.12): H = ½<M, M> − ½<P, BP>
    return jnp.concatenate([y[:d], -jnp.asarray(h.B, y.dtype) * y[d:]])


class AnySystem(AbstractFamily):
    description: ClassVar[str] = "lpjax systems (LiePoissonSystem, CanonicalSystem, ...)"

    def guard(self, system) -> None:
        return None

    def mismatch(self, system) -> Optional[Exception]:
        if not isinstance(system, AbstractSystem):
            return TypeError(f"{type(system).__name__} is not an lpjax system")
        return None


class LiePoissonFamily(AbstractFamily):
    """Lie–Poisson systems; with ``dual_pair=True`` only those whose Clebsch canonization has
    ``dim 𝔥 = dim 𝔤`` (seed 002, Theorem 3.2 (iii)), checked by the caller-supplied ``dim_h``."""

    description: ClassVar[str] = "Lie–Poisson systems (a LiePoissonSystem on 𝔤*)"

    def guard(self, system) -> None:
        return None

    def mismatch(self, system) -> Optional[Exception]:
        return _not_lie_poisson(system)


class MatrixGroupFamily(AbstractFamily):
    """Lie–Poisson systems on (𝔤 ⋉ (Rʳ)^k)* for a matrix Lie algebra 𝔤 (:func:`group_split`):
    a configuration in the matrix group G, with k advected vectors."""

    group: Optional[LieAlgebra] = None
    chart: str = eqx.field(static=True, default="cayley")
    description: ClassVar[str] = (
        "Lie–Poisson systems on (g ⋉ (R^r)^k)* for a Lie algebra g with a matrix basis (so(n), se(3), so(2,1), "
        "e(n), se(3) x R^3; a matrix group G, with k advected vectors)"
    )

    def guard(self, system) -> None:
        return None

    def mismatch(self, system) -> Optional[Exception]:
        err = _not_lie_poisson(system)
        if err is not None:
            return err
        try:
            group_split(system.algebra, self.group, self.chart)
        except (TypeError, ValueError) as e:
            return e
        return None


class FreeRigidBodyFamily(AbstractFamily):
    description: ClassVar[str] = (
        "the free rigid body: a LiePoissonSystem on so(n)* with the (−) bracket whose Hamiltonian "
        "is an lpjax.AbstractFreeRigidBody (lpjax.systems.rigid_body, rigid_body_n)"
    )

    def mismatch(self, system) -> Optional[Exception]:
        err = _structure_mismatch(system, (0,), AbstractFreeRigidBody, -1)
        if err is not None:
            return err
        J = system.hamiltonian.mass_tensor
        return _dimension_mismatch(system, jnp.shape(J)[0], "the mass tensor") or data_mismatch(
            system, _rigid_body_gradient, lambda: (
                f"its mass_tensor J = {np.asarray(J)} disagrees with its energy: ∂h/∂M differs from Ω "
                "(M = JΩ + ΩJ, seed 000 (4.6))", ""),
        )

    def guard(self, system) -> Callable[[], tuple]:
        return lambda: data_guard(system, _rigid_body_gradient, "the free rigid body's mass_tensor disagrees with its energy "
                           "(∂h/∂M ≠ Ω, M = JΩ + ΩJ, seed 000 (4.6))")


def _moving_gravity(h) -> Optional[Exception]:
    """The moving-frame maps use ``A = e_n`` (seed 000, (5.1)); a declared gravity must be it."""
    if h.frame != "moving":
        return None
    with jax.ensure_compile_time_eval():
        g = h.gravity
    if isinstance(g, jax.core.Tracer):
        return None
    e_n = np.zeros(h.n)
    e_n[-1] = 1.0
    if np.array_equal(np.asarray(g), e_n):
        return None
    return ValueError(f"in the moving frame gravity is A = e_n (seed 000, (5.1)), the map's own; its gravity is {np.asarray(g)}")


class LagrangeTopFamily(AbstractFamily):
    description: ClassVar[str] = (
        "the Lagrange top: a LiePoissonSystem on e(n)* whose Hamiltonian is an "
        "lpjax.AbstractLagrangeTop (lpjax.systems.lagrange_top)"
    )

    def mismatch(self, system) -> Optional[Exception]:
        h = getattr(system, "hamiltonian", None)
        sign = (1 if h.frame == "rest" else -1) if isinstance(h, AbstractLagrangeTop) else None
        return _structure_mismatch(system, (1,), AbstractLagrangeTop, sign) or _dimension_mismatch(
            system, h.n, "the top"
        ) or _moving_gravity(h) or data_mismatch(
            system, _lagrange_top_gradient, lambda: (
                f"its frame {h.frame!r} and alpha = {np.asarray(h.alpha)} disagree with its Hamiltonian: ∂H/∂M differs "
                + ("from m (the rest frame, seed 000 (5.15))" if h.frame == "rest" else "from Ω of (5.7) (the moving frame)"),
                f"its gravity {np.asarray(h.gravity)} disagrees with its Hamiltonian: ∂H/∂"
                + ("a differs from p (5.15)" if h.frame == "rest" else "P differs from A = e_n (5.1)")),
        )

    def guard(self, system) -> Callable[[], tuple]:
        h = system.hamiltonian

        def check():
            bad = False
            if h.frame == "moving":  # A = e_n, the map's own (seed 000, (5.1))
                g = jnp.asarray(h.gravity)
                bad = jnp.any(g != jnp.zeros(h.n, g.dtype).at[-1].set(1))
            return data_guard(system, _lagrange_top_gradient, f"the Lagrange top's alpha or gravity (frame "
                               f"{h.frame!r}) disagrees with its Hamiltonian (seed 000 (5.1), (5.7), (5.15))", bad)

        return check


class ClebschFlowFamily(AbstractFamily):
    description: ClassVar[str] = (
        "the Clebsch flow c_jk = 1: a LiePoissonSystem on e(n)* with the (−) bracket whose "
        "Hamiltonian is an lpjax.AbstractClebschFlow (lpjax.systems.clebsch_case(B), neumann(B))"
    )

    def mismatch(self, system) -> Optional[Exception]:
        return _structure_mismatch(system, (1,), AbstractClebschFlow, -1) or _dimension_mismatch(
            system, jnp.shape(system.hamiltonian.B)[0], "B"
        ) or data_mismatch(
            system, _clebsch_flow_gradient, lambda: (
                "its Hamiltonian's M-part is not ½<M, M>: ∂H/∂M differs from M (seed 000 (7.12))",
                f"its B = {np.asarray(system.hamiltonian.B)} disagrees with its Hamiltonian: ∂H/∂P differs from −BP "
                "(seed 000 (7.12))"),
        )

    def guard(self, system) -> Callable[[], tuple]:
        return lambda: data_guard(system, _clebsch_flow_gradient, "the Clebsch flow's B disagrees with its Hamiltonian "
                           "(∂H/∂M ≠ M or ∂H/∂P ≠ −BP, seed 000 (7.12))")
