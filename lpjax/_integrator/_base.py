"""The integrator contract: ``init / step / observe`` with result codes."""

from __future__ import annotations

import abc
import contextlib
import contextvars
from typing import Any, ClassVar, Iterator, Optional, Union

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PyTree, Scalar

from .._algebra import LieAlgebra, se3
from .._group import SE3, SO3, AbstractMatrixLieGroup, SOn
from .._system import AbstractFamily, AbstractSystem

__all__ = ["RESULTS", "StepInfo", "AbstractIntegrator", "AbstractSteppedAdjoint", "AbstractComposable", "AbstractStateIsY",
           "AbstractGroupMap", "AbstractAdjointPair",
           "finite_result", "first_failure", "stepped_inner", "deferred_finiteness", "finiteness_deferred"]


class RESULTS(eqx.Enumeration):
    """Outcome of a step or of a whole integration."""

    successful = "successful"  # never raised; it names the item in its repr (RESULTS<successful>)
    implicit_solve_failed = (
        "The implicit equations of a step did not converge to the tolerance within the "
        "fixed number of iterations. Reduce dt, raise max_iters, or for a stiff problem use "
        "GaussLegendre(solver='auto') (Newton where the fixed point does not contract) or "
        "solver='newton'."
    )
    nonfinite_state = "The state became non-finite (NaN or inf). Reduce dt."
    invalid_initial_state = (
        "The method cannot start from the initial state (for Collective: it is not in the image of "
        "the momentum map)."
    )
    max_steps_reached = (
        "The adaptive run took max_steps steps (accepted and rejected) before reaching its final time. Raise "
        "max_steps, or loosen the controller's tolerances."
    )
    dt_min_reached = "The controller asked for a step below dtmin (with force_dtmin=False)."
    event_occurred = "A terminal event occurred: the run stopped at it (not a failure: see the events' record)."


class StepInfo(eqx.Module):
    """Per-step solver statistics: final residual norm and iterations to reach ``tol``.

    ``explicit_step`` (static) marks the statistics of a step without a solve (both zero, known
    at trace time), which the running statistics skip: no work per step for them."""

    residual: Scalar
    iterations: Int[Array, ""]
    explicit_step: bool = eqx.field(static=True, default=False)

    @classmethod
    def explicit(cls, dtype) -> "StepInfo":
        return cls(jnp.zeros((), dtype), jnp.zeros((), jnp.int32), True)


class AbstractIntegrator(eqx.Module):
    """A one-step method. It holds only settings, never state or the system.

    ``state = init(system, y0, dt)``; ``state, result, info = step(system, state, dt)``;
    ``y = observe(system, state)``; ``save(system, state)`` is what :func:`lpjax.integrate`
    keeps at each save point: ``(y, attitude or None)``. ``step`` never raises: failures are
    reported through ``result`` (a :class:`RESULTS`), solver statistics through ``info``.
    ``family`` is the structural family of systems the method can step; :meth:`check_system`
    raises a clear error, naming it, for any other system (before anything is traced).
    """

    @property
    @abc.abstractmethod
    def order(self) -> int:
        """Classical order of accuracy."""

    @property
    @abc.abstractmethod
    def family(self) -> AbstractFamily:
        """The structural family of systems this method steps."""

    #: Whether a non-finite entry of the state stays in the state at every later step (every
    #: entry is updated as itself plus or times a value that depends on it, and inf or NaN
    #: propagates through both). Then the finiteness of a run of steps can be tested once, on
    #: the state after them (:func:`deferred_finiteness`); ``tests/test_reliability.py`` checks
    #: the claim for every method that makes it.
    nonfinite_lasts: ClassVar[bool] = False

    #: Whether the method is symmetric (time-reversible): a step of ``dt`` then a step of ``−dt``
    #: returns the state (HLW V.1). :class:`lpjax.Composition` composes only such methods;
    #: ``tests/test_composition.py`` checks the claim for every method that makes it.
    symmetric: ClassVar[bool] = False

    def check_system(self, system: AbstractSystem) -> None:
        """Raise ``TypeError`` (or ``ValueError``) if ``system`` is outside :attr:`family`."""
        self.family.check(system, type(self).__name__)

    @abc.abstractmethod
    def init(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar) -> PyTree:
        ...

    @abc.abstractmethod
    def init_or_fail(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar) -> tuple[PyTree, Any]:
        """``(init(...), result)`` without raising: for an initial state the method cannot start
        from, ``result`` is ``RESULTS.invalid_initial_state`` (what :func:`lpjax.ensemble` needs,
        where one member must not stop the others); ``init`` itself raises there."""

    @abc.abstractmethod
    def step(self, system: AbstractSystem, state: PyTree, dt: Scalar) -> tuple[PyTree, Any, StepInfo]:
        ...

    @abc.abstractmethod
    def observe(self, system: AbstractSystem, state: PyTree) -> Float[Array, " n"]:
        ...

    @abc.abstractmethod
    def save(self, system: AbstractSystem, state: PyTree) -> tuple[Float[Array, " n"], Optional[PyTree]]:
        """``(y, attitude)`` kept at a save point; ``attitude`` is ``None`` unless reconstructed."""


class AbstractSteppedAdjoint(AbstractIntegrator):
    """An integrator that supplies the discrete adjoint of its own step, which
    :func:`lpjax.integrate` uses for reverse-mode gradients (``adjoint="discrete"``): the
    backward pass recomputes each checkpoint group keeping :meth:`step_residuals`, linearizes
    every step of the group at once (:meth:`step_linearize` under ``vmap``), runs :meth:`step_vjp`
    backwards, without differentiating through the step's solve, and then forms the parameter
    cotangents of the whole group at once (:meth:`parameter_vjp` under ``vmap``). What does not
    depend on the cotangent belongs in :meth:`step_linearize`: the sweep is sequential, and on
    CPU each operation in it costs more than the same operation batched over the group."""

    #: Whether :meth:`parameter_vjp` is linear in its ``seed`` (the seed a cotangent, holding no
    #: value of the step): the sweep then sums the seeds of a group and :meth:`parameter_vjp` runs
    #: once for it, not once per step.
    linear_seed: ClassVar[bool] = False

    #: Whether the seed of each step is formed after the sweep, for many steps at once, by a
    #: method ``step_seed(system, dt, state, linearization, ct_state) -> seed`` under ``vmap``
    #: (``ct_state``: the cotangent of the step's new state), not by :meth:`step_vjp` in the
    #: sweep: where each entry of the seed sums a chain of the step that the sweep would
    #: otherwise recompute for it.
    batched_seed: ClassVar[bool] = False

    @abc.abstractmethod
    def step_residuals(self, system: AbstractSystem, state: PyTree, dt: Scalar) -> tuple[PyTree, Any, StepInfo, PyTree]:
        """:meth:`step`, and what :meth:`step_vjp` needs of it: ``(state, result, info, residuals)``."""

    @abc.abstractmethod
    def step_linearize(self, system: AbstractSystem, dt: Scalar, state: PyTree, residuals: PyTree) -> PyTree:
        """What :meth:`step_vjp` needs of the step from ``state`` (with its ``residuals``) that
        does not depend on the cotangent (Jacobians); run for many steps at once under ``vmap``."""

    @abc.abstractmethod
    def step_vjp(self, system: AbstractSystem, dt: Scalar, state: PyTree, linearization: PyTree, ct_state: PyTree,
                 robust: bool = False) -> tuple[PyTree, PyTree, Any]:
        """``(ct_state, seed, converged)``: the cotangent of the state entering the step from
        ``state`` (linearized by :meth:`step_linearize`), given its new state's cotangent; what
        :meth:`parameter_vjp` needs (``seed``);
        whether the adjoint solve converged. ``robust=True`` is the slower solve that
        :func:`lpjax.integrate` redoes a group with when a step's fast one did not converge."""

    @abc.abstractmethod
    def parameter_vjp(self, system: AbstractSystem, dt: Scalar, seed: PyTree) -> tuple[PyTree, PyTree, Scalar]:
        """The step's cotangents ``(system's inexact arrays, the method's, dt)`` from its
        ``seed`` (``None`` for zeros); run for many steps at once under ``vmap``, after the
        sequential sweep."""


class AbstractComposable(AbstractIntegrator):
    """A symmetric method that runs a composition of its own steps as one step of its own kind
    (:class:`lpjax.Composition` then uses it): an explicit splitting, whose stages join into one
    sequence of pieces."""

    @abc.abstractmethod
    def composed(self, halves: tuple, rkn: bool = False) -> AbstractIntegrator:
        """A method whose step from ``y`` with ``dt`` equals ``… ∘ χ*_{h_2 dt} ∘ χ_{h_1 dt}(y)``
        (``h`` = ``halves``, palindromic, of even length; ``χ`` a first-order method whose Strang
        step ``χ*_{dt/2} ∘ χ_{dt/2}`` is this method's step) to roundoff; ``rkn``: with ``χ`` the
        kick then the drift, for a Runge–Kutta–Nyström scheme."""


class AbstractAdjointPair(AbstractIntegrator):
    """A method that is not symmetric and declares its adjoint ``Φ*_dt = Φ_{−dt}⁻¹`` (HLW II.3.1),
    a method that steps the same state: :class:`lpjax.Composition` composes the two, and
    ``Φ_{dt/2} ∘ Φ*_{dt/2}`` is symmetric (HLW V.3.2). ``tests/test_composition.py`` checks
    ``Φ_{−dt} ∘ Φ*_dt = id`` for every method that declares one."""

    @property
    @abc.abstractmethod
    def adjoint(self) -> AbstractIntegrator:
        """The adjoint method, whose own :attr:`adjoint` is this one."""


class AbstractStateIsY(AbstractIntegrator):
    """An integrator whose internal state is the user's state ``y`` itself."""

    def init(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar) -> Float[Array, " n"]:
        return y0

    def init_or_fail(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar):
        return self.init(system, y0, dt), RESULTS.successful

    def observe(self, system: AbstractSystem, state: Float[Array, " n"]) -> Float[Array, " n"]:
        return state

    def save(self, system: AbstractSystem, state: Float[Array, " n"]):
        return state, None


def _as_group(W: Float[Array, "... m m"], algebra: LieAlgebra) -> Union[AbstractMatrixLieGroup, Array]:
    """``W`` as a group element of ``algebra``'s group: SO3, SOn, SE3, else the matrix itself."""
    if algebra.so_n is not None:
        return SO3(W) if W.shape[-1] == 3 else SOn(W)
    if algebra.dim == 6 and np.array_equal(algebra.matrix_basis, se3().matrix_basis):
        return SE3(W[..., :3, :3], W[..., :3, 3])
    return W


class AbstractGroupMap(AbstractIntegrator):
    r"""A discrete Lie–Poisson map ``y_k ↦ y_{k+1}`` driven by a group element ``W_k ∈ SO(n)``.

    With ``reconstruct=True`` the method also carries the attitude ``g_k ∈ SO(n)``, starting
    from ``g_0 = I``: ``g_{k+1} = g_k W_k`` for body-frame (left-invariant, ``sign = −1``)
    systems and ``g_{k+1} = w_k g_k`` for rest-frame (right-invariant, ``sign = +1``) ones
    (seed 000, eqs (3.8), (3.19); seed 003, eq. (2.7)). For another ``g_0`` multiply the
    attitudes by it on the left (body frame) or on the right (rest frame). The state is then
    ``(y, g)``; ``observe`` returns ``y`` and :meth:`attitude` returns ``g`` as an
    :class:`lpjax.groups.SO3` (n = 3) or :class:`lpjax.groups.SOn` element.
    """

    reconstruct: eqx.AbstractVar[bool]

    @abc.abstractmethod
    def group_step(self, system: AbstractSystem, y: Float[Array, " n"], dt: Scalar):
        """One step: ``(y_{k+1}, W_k, result, info)`` with ``W_k`` the (n, n) group element."""

    def init(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar) -> PyTree:
        if not self.reconstruct:
            return y0
        W = jax.eval_shape(lambda: self.group_step(system, y0, dt)[1])
        return y0, jnp.eye(W.shape[-1], dtype=W.dtype)

    def init_or_fail(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar):
        return self.init(system, y0, dt), RESULTS.successful

    def step(self, system: AbstractSystem, state: PyTree, dt: Scalar):
        y1, W, result, info = self.group_step(system, state[0] if self.reconstruct else state, dt)
        return self.carry_on(system, state, y1, W), result, info

    def carry_on(self, system: AbstractSystem, state: PyTree, y1: Float[Array, " n"], W: Float[Array, "n n"]) -> PyTree:
        """The state after a step to ``y1`` by ``W``: ``y1``, or ``(y1, g W)`` (``(y1, W g)`` in
        the rest frame) with the attitude."""
        if not self.reconstruct:
            return y1
        g = state[1]
        return y1, (g @ W if system.sign == -1 else W @ g)

    def observe(self, system: AbstractSystem, state: PyTree) -> Float[Array, " n"]:
        return state[0] if self.reconstruct else state

    @abc.abstractmethod
    def group_algebra(self, system: AbstractSystem) -> LieAlgebra:
        """The algebra of the group ``W_k`` lives in (its matrix basis says which group)."""

    def attitude(self, system: AbstractSystem, state: PyTree) -> Union[AbstractMatrixLieGroup, Array]:
        """The reconstructed group element ``g_k`` (needs ``reconstruct=True``)."""
        if not self.reconstruct:
            raise ValueError(f"{type(self).__name__}(reconstruct=False) carries no attitude")
        return _as_group(state[1], self.group_algebra(system))

    def save(self, system: AbstractSystem, state: PyTree):
        return self.observe(system, state), (self.attitude(system, state) if self.reconstruct else None)


_DEFERRED = contextvars.ContextVar("lpjax_deferred_finiteness", default=False)


@contextlib.contextmanager
def deferred_finiteness() -> Iterator[None]:
    """Within it (at trace time), a step does not test its new state for finiteness:
    :func:`finite_result` is ``successful`` and :func:`first_failure` the solver's own result. For
    a method whose non-finite entries last (:attr:`AbstractIntegrator.nonfinite_lasts`) the
    caller tests the state once after a run of steps and, where it is not finite, runs them
    again as written (:meth:`lpjax._member.FixedMember.advance`)."""
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


def finiteness_deferred() -> bool:
    return _DEFERRED.get()


def finite_result(y: Array) -> Any:
    """``RESULTS.nonfinite_state`` where ``y`` has a NaN/inf entry, else ``successful``."""
    if _DEFERRED.get():
        return RESULTS.successful
    return RESULTS.where(jnp.all(jnp.isfinite(y)), RESULTS.successful, RESULTS.nonfinite_state)


def stepped_inner(owner: AbstractIntegrator, inner: AbstractIntegrator) -> AbstractSteppedAdjoint:
    """``inner``, the method ``owner`` wraps, if it supplies its own adjoint of a step; else a
    ``TypeError`` (``integrate`` then uses JAX's adjoint for ``owner``)."""
    if not isinstance(inner, AbstractSteppedAdjoint):
        raise TypeError(f"{type(owner).__name__}: the inner method {type(inner).__name__} has no adjoint of a step "
                        "(lpjax.AbstractSteppedAdjoint); integrate uses JAX's adjoint for it")
    return inner


def first_failure(result, y: Array) -> Any:
    """``result`` if it is a failure, else :func:`finite_result` of ``y``."""
    if _DEFERRED.get():
        return result
    return RESULTS.where(result == RESULTS.successful, finite_result(y), result)
