"""What is integrated: Lie–Poisson systems on 𝔤* and canonical systems on T*Rⁿ."""

from __future__ import annotations

import abc
import functools
from typing import Callable, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Scalar

from .. import _small as sm
from .._algebra import LieAlgebra
from .._checks import bracket_sign, float_vector, is_traced

__all__ = ["AbstractSystem", "AbstractLiePoissonSystem", "LiePoissonSystem", "CanonicalSystem", "NamedCasimirs"]

_ENTRYWISE_TERMS = 2048  # above this many nonzero structure constants, one einsum


def compiled_method(fn: Callable) -> Callable:
    """A system method as one compiled program (``eqx.filter_jit`` over the system and the state).

    Called eagerly it runs one program instead of dispatching each operation (each compiled
    on first use); called while tracing, JAX traces its body once per system structure and
    state shape and reuses that for every further call (an implicit stage solve calls the
    field many times). ``functools.wraps`` keeps the docstring on the bound method."""
    jitted = eqx.filter_jit(fn)

    @functools.wraps(fn)
    def method(self, *args):
        return jitted(self, *args)

    return method


class AbstractSystem(eqx.Module):
    """An autonomous ODE ``y' = f(y)`` on a flat state vector, with a Hamiltonian."""

    @abc.abstractmethod
    def vector_field(self, y: Float[Array, " n"]) -> Float[Array, " n"]:
        """The right-hand side ``f(y)``."""

    @abc.abstractmethod
    def energy(self, y: Float[Array, " n"]) -> Scalar:
        """The Hamiltonian."""

    @abc.abstractmethod
    def check_state(self, y: Array) -> None:
        """Raise ``ValueError`` if ``y`` has the wrong shape or dtype for this system."""

    @abc.abstractmethod
    def casimirs(self, y: Float[Array, " n"]) -> Float[Array, " r"]:
        """Known Casimir functions, as a vector (empty when none are known)."""

    @property
    @abc.abstractmethod
    def casimir_names(self) -> tuple[str, ...]:
        """One name per Casimir, in the order :meth:`casimirs` returns them."""


@final
class NamedCasimirs(eqx.Module):
    """Casimir functions ``fn(mu) -> (r,)`` with their names (what
    ``LiePoissonSystem(..., casimir_names=...)`` makes)."""

    fn: Callable[[Array], Array]
    names: tuple[str, ...] = eqx.field(static=True)

    def __call__(self, mu: Array) -> Array:
        return self.fn(mu)


class AbstractLiePoissonSystem(AbstractSystem):
    r"""Lie–Poisson system ``mu_dot = ∓ ad*_{∇h(mu)} mu`` on 𝔤* (seed 002, eqs (2), (9)).

    In coordinates ``mu_dot_i = ± c_ij^k mu_k ∂h/∂mu_j``, i.e. ``mu_dot = Π±(mu) ∇h(mu)``
    with the (±) Lie–Poisson tensor of :meth:`LieAlgebra.poisson_tensor`; the gradient comes
    from autodiff. Concrete systems give ``algebra``, ``hamiltonian``, ``sign``,
    ``casimir_fn``, ``name`` and their own :meth:`check_state`.
    """

    algebra: eqx.AbstractVar[LieAlgebra]
    hamiltonian: eqx.AbstractVar[Callable[[Array], Array]]
    sign: eqx.AbstractVar[int]
    casimir_fn: eqx.AbstractVar[Optional[Callable[[Array], Array]]]
    name: eqx.AbstractVar[str]

    def check_shape(self, y: Array) -> None:
        """Raise ``ValueError`` unless ``y`` is a floating vector of length ``dim 𝔤``."""
        float_vector(y, self.algebra.dim, f"{self.name} on {self.algebra.name}*")

    @property
    def dim(self) -> int:
        return self.algebra.dim

    @compiled_method
    def vector_field(self, mu: Float[Array, " n"]) -> Float[Array, " n"]:
        dh = jax.grad(self.energy)(mu)
        c = self.algebra.structure_constants
        if np.count_nonzero(c) > _ENTRYWISE_TERMS:
            return self.sign * jnp.einsum("ijk,k,j->i", jnp.asarray(c, mu.dtype), mu, dh)
        # entry by entry over the nonzero c_ijk: fused elementwise code under vmap
        return self.sign * sm.stack(sm.bilinear(c, sm.unstack(dh), sm.unstack(mu)))

    @compiled_method
    def energy(self, mu: Float[Array, " n"]) -> Scalar:
        return jnp.asarray(self.hamiltonian(mu))

    @compiled_method
    def casimirs(self, mu: Float[Array, " n"]) -> Float[Array, " r"]:
        if self.casimir_fn is not None:
            return jnp.atleast_1d(jnp.asarray(self.casimir_fn(mu)))
        S = jnp.asarray(self.algebra.quadratic_casimirs(), dtype=mu.dtype)
        return 0.5 * jnp.einsum("i,rij,j->r", mu, S, mu)

    @property
    def casimir_names(self) -> tuple[str, ...]:
        """Names of :meth:`casimirs`: the Casimir function's own (``names``: the zoo's, or
        ``casimir_names=`` given to :class:`LiePoissonSystem`), else ``"casimir 1"``, … for an
        unnamed function, else those of the algebra's quadratic Casimirs
        (:meth:`lpjax.algebras.LieAlgebra.quadratic_casimir_names`)."""
        if self.casimir_fn is None:
            return self.algebra.quadratic_casimir_names()
        names = getattr(self.casimir_fn, "names", None)
        if names is not None:
            return tuple(names)
        return tuple(f"casimir {i + 1}" for i in range(_count(self.casimir_fn, self.dim)))


def _count(fn: Callable[[Array], Array], dim: int) -> int:
    """How many Casimirs ``fn`` returns for a state of length ``dim`` (traced abstractly)."""
    out = jax.eval_shape(lambda mu: jnp.atleast_1d(jnp.asarray(fn(mu))), jax.ShapeDtypeStruct((dim,), jnp.result_type(float)))
    return int(out.shape[0])


@final
class LiePoissonSystem(AbstractLiePoissonSystem):
    r"""A Lie–Poisson system ``mu_dot = ∓ ad*_{∇h(mu)} mu`` on 𝔤* (seed 002, eqs (2), (9)).

    The Hamiltonian may be any differentiable function of ``mu``, including an ``eqx.Module``
    whose array fields are differentiable parameters (a member of a structural family such as
    :class:`lpjax.AbstractFreeRigidBody` makes the matching methods available).

    Arguments:
        algebra: the Lie algebra 𝔤.
        hamiltonian: ``h: 𝔤* -> R``.
        sign: ``+1`` for the (+) bracket (1), ``-1`` for the (−) bracket (9). The body-frame
            rigid body ``Ṁ = M × Ω`` is ``so3()`` with ``sign=-1``.
        casimirs: optional ``mu -> array`` of Casimir functions. By default the quadratic
            Casimirs of ``algebra`` (:meth:`LieAlgebra.quadratic_casimirs`) are used.
        casimir_names: optional names of ``casimirs``, one each (:attr:`casimir_names`).
        name: label used in messages and plots.

    A Hamiltonian defined on part of 𝔤* only may have a ``check_state(mu)`` method that raises
    ``ValueError`` outside its domain (:func:`lpjax.systems.kida_vortex`): :meth:`check_state`
    calls it on concrete states.
    """

    algebra: LieAlgebra
    hamiltonian: Callable[[Array], Array]
    sign: int = eqx.field(static=True)
    casimir_fn: Optional[Callable[[Array], Array]] = None
    name: str = eqx.field(static=True, default="LiePoissonSystem")

    def __init__(self, algebra, hamiltonian, sign, casimirs=None, name="LiePoissonSystem", casimir_names=None):
        if not isinstance(algebra, LieAlgebra):
            raise TypeError(f"algebra must be a LieAlgebra, got {type(algebra).__name__}")
        if not callable(hamiltonian):
            raise TypeError("hamiltonian must be callable: mu -> scalar")
        if casimir_names is not None:
            if casimirs is None:
                raise ValueError("casimir_names names the functions given as casimirs=; the algebra's own are "
                                 "named by algebra.quadratic_casimir_names()")
            casimir_names = tuple(str(c) for c in casimir_names)
            r = _count(casimirs, algebra.dim)
            if len(casimir_names) != r:
                raise ValueError(f"casimir_names has {len(casimir_names)} names for {r} Casimirs")
            casimirs = NamedCasimirs(casimirs, casimir_names)
        self.algebra = algebra
        self.hamiltonian = hamiltonian
        self.sign = bracket_sign(sign)
        self.casimir_fn = casimirs
        self.name = name

    def check_state(self, y: Array) -> None:
        self.check_shape(y)
        domain = getattr(self.hamiltonian, "check_state", None)
        if callable(domain) and not is_traced(y):
            domain(np.asarray(y))


@final
class CanonicalSystem(AbstractSystem):
    """Canonical Hamiltonian system on T*Rⁿ, state ``y = (q, p)`` of length 2n.

    ``q_dot = ∂H/∂p``, ``p_dot = −∂H/∂q`` (seed 002, eq. (12)), gradients by autodiff.
    ``n`` may be given to check the state length; otherwise any even length is accepted.
    """

    hamiltonian: Callable[[Array], Array]
    n: Optional[int] = eqx.field(static=True, default=None)
    name: str = eqx.field(static=True, default="CanonicalSystem")

    def check_state(self, y: Array) -> None:
        size = None if self.n is None else 2 * self.n
        float_vector(y, size, self.name)
        if jnp.shape(y)[0] % 2:
            raise ValueError(f"{self.name}: state (q, p) must have even length, got {jnp.shape(y)[0]}")

    @compiled_method
    def energy(self, y: Float[Array, " 2n"]) -> Scalar:
        return jnp.asarray(self.hamiltonian(y))

    @compiled_method
    def casimirs(self, y: Float[Array, " 2n"]) -> Float[Array, " 0"]:
        """The canonical bracket has no Casimirs: an empty vector."""
        return jnp.zeros((0,), dtype=jnp.asarray(y).dtype)

    @property
    def casimir_names(self) -> tuple[str, ...]:
        return ()

    @compiled_method
    def vector_field(self, y: Float[Array, " 2n"]) -> Float[Array, " 2n"]:
        g = jax.grad(self.energy)(y)
        n = y.shape[0] // 2
        return jnp.concatenate([g[n:], -g[:n]])
