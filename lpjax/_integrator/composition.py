"""Symmetric composition of a symmetric one-step method (Hairer, Lubich & Wanner, *Geometric
Numerical Integration*, V.3): ``Ψ_dt = Φ_{γ_s dt} ∘ … ∘ Φ_{γ_1 dt}`` with palindromic
``γ`` (``γ_i = γ_{s+1−i}``) raises a symmetric method of order 2 to the scheme's order, and
keeps what every stage keeps (a Poisson map, the Casimirs, symmetry)."""

from __future__ import annotations

from typing import Any, ClassVar, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree, Scalar

from .._system import AbstractFamily, AbstractSystem
from ._base import (RESULTS, AbstractAdjointPair, AbstractComposable, AbstractIntegrator, AbstractStateIsY,
                    AbstractSteppedAdjoint, StepInfo, stepped_inner)
from ._implicit import AbstractImplicitMethod
from ._schemes import (COMPOSITION_SCHEMES, ORDER_RAISING, PROCESSED_SCHEMES, SPLITTING_SCHEMES,
                       composition_coefficients, splitting_alphas)
from .adjoint import Adjoint
from .gauss_legendre import GaussLegendre

__all__ = ["Composition", "COMPOSITION_SCHEMES", "SPLITTING_SCHEMES", "ORDER_RAISING"]


def _combined(infos: list) -> StepInfo:
    """One step's statistics from its stages': the largest residual, the iterations summed."""
    if all(i.explicit_step for i in infos):
        return infos[0]
    return StepInfo(jnp.max(jnp.stack([i.residual for i in infos])), sum(i.iterations for i in infos))


def adjoint_of(inner: AbstractIntegrator) -> Optional[AbstractIntegrator]:
    """The adjoint method of ``inner``: itself if symmetric, the one it declares, the implicit
    :class:`lpjax.Adjoint` of an explicit method whose state is ``y``; else None."""
    if inner.symmetric:
        return inner
    if isinstance(inner, AbstractAdjointPair):
        return inner.adjoint
    if isinstance(inner, AbstractStateIsY) and not isinstance(inner, AbstractImplicitMethod):
        return Adjoint(inner)
    return None


@final
class Composition(AbstractSteppedAdjoint):
    r"""The composition ``Φ_{γ_s dt} ∘ … ∘ Φ_{γ_1 dt}`` of a one-step method ``inner`` (HLW V.3;
    the coefficients of :data:`COMPOSITION_SCHEMES`, by name):

    ========================  =====  ======  ==================================
    ``scheme``                order  stages  source
    ========================  =====  ======  ==================================
    ``"triple-jump"``         p + 2  3       Yoshida (1990)
    ``"suzuki"``              p + 2  5       Suzuki (1990)
    ``"triple-jump-2"``       4      3       Yoshida (1990)
    ``"suzuki-2"``            4      5       Suzuki (1990)
    ``"yoshida6"``            6      7       Yoshida (1990), solution A
    ``"kahan-li6"``           6      9       Kahan & Li (1997)
    ``"mclachlan8"``          8      15      McLachlan (1995)
    ``"kahan-li8"``           8      17      Kahan & Li (1997)
    ``"sofroniou-spaletta10"``10     35      Sofroniou & Spaletta (2005)
    ``"blanes-moan-s6"``      4      6       Blanes & Moan (2002), S6
    ``"blanes-moan-s10"``     6      10      Blanes & Moan (2002), S10
    ``"blanes-moan-srkn6"``   4      6       Blanes & Moan (2002), SRKN6, RKN
    ``"blanes-moan-srkn11"``  6      11      Blanes & Moan (2002), SRKN11, RKN
    ========================  =====  ======  ==================================

    The Blanes–Moan schemes (:data:`lpjax.SPLITTING_SCHEMES`) are splittings of two operators,
    run as compositions of ``inner`` (``χ``) and its adjoint in turn, of a splitting its
    Lie–Trotter step (stages: evaluations of the second operator); the Runge–Kutta–Nyström ones
    only of a :class:`lpjax.LiePoissonSplitting` whose linear pieces (the kick) lie in an abelian
    ideal and whose quadratic ones (the drift) commute, checked with the system.

    ``p`` is the order of ``inner``: the triple jump and Suzuki's five take the coefficients that
    raise it to ``p + 2`` (:data:`ORDER_RAISING`; for GL4, order 6). ``"triple-jump-2"`` and
    ``"suzuki-2"`` keep the coefficients for a second-order ``inner`` whatever it is; the other
    orders are those of a second-order ``inner``, and with a higher-order one the order is at
    least the larger of the two. Which to use: for a second-order ``inner`` (Moser–Veselov, a
    splitting, GL2) the fixed tables of the order wanted, Kahan–Li's the most accurate at equal
    work; for a higher-order one the triple jump or Suzuki's five of its order.

    ``inner`` symmetric (:attr:`lpjax.AbstractIntegrator.symmetric`: a step of ``dt`` then one
    of ``−dt`` returns the state), each stage is one step of it. Otherwise each stage is
    ``Φ*_{γ dt/2} ∘ Φ_{γ dt/2}``, with ``Φ*`` the adjoint method (``Φ*_dt = Φ_{−dt}⁻¹``,
    HLW V.3.2): symmetric, of order ``p`` rounded up to even. The adjoint is the method's own
    where it declares one (:class:`lpjax.AbstractAdjointPair`: the Suris maps, the map in the
    other order; RK4, :class:`lpjax.Adjoint` of it), or :class:`lpjax.Adjoint` of any other
    explicit method whose state is ``y``; other methods are refused. So Kahan–Li 6 of a Suris
    map is an explicit Poisson map of order 6.

    Each stage is a step of ``inner`` or its adjoint, so the composition keeps what they keep
    (Casimirs, the Poisson structure) and is itself symmetric. A step's result is its first
    failing stage's; its statistics sum the stages' iterations.

    Reverse-mode gradients (``integrate(..., adjoint="auto")``) chain the inner method's adjoint
    of a step through the stages, backwards, where it has one (:class:`lpjax.AbstractSteppedAdjoint`:
    Gauss–Legendre, Moser–Veselov, Collective); otherwise JAX's.
    """

    inner: AbstractIntegrator
    scheme: str = eqx.field(static=True, default="kahan-li6")
    # (internal) the kernel of the processed scheme ``scheme`` (:class:`lpjax.Processed`), of order 4 alone
    _kernel: bool = eqx.field(static=True, default=False)
    symmetric: ClassVar[bool] = True

    def __check_init__(self):
        if not isinstance(self.inner, AbstractIntegrator):
            raise TypeError(f"Composition: inner must be an lpjax integrator, got {type(self.inner).__name__}")
        known = PROCESSED_SCHEMES if self._kernel else {**COMPOSITION_SCHEMES, **SPLITTING_SCHEMES}
        if self.scheme not in known:
            raise ValueError(f"Composition: unknown scheme {self.scheme!r}; the schemes are "
                             f"{', '.join(map(repr, known))}")
        if self.scheme in SPLITTING_SCHEMES and SPLITTING_SCHEMES[self.scheme].rkn and not isinstance(
                self.inner, AbstractComposable):
            raise ValueError(f"Composition: {self.scheme!r} is a Runge–Kutta–Nyström scheme, of its order only for a "
                             "splitting into a kick and a drift; compose a LiePoissonSplitting with it, or use "
                             "'blanes-moan-s10' or 'kahan-li6'")
        if adjoint_of(self.inner) is None:
            raise ValueError(f"Composition: {type(self.inner).__name__} is not symmetric (a step of dt then one of -dt "
                             "does not return the state) and has no adjoint method to compose it with; compose a "
                             "symmetric method (GaussLegendre, MoserVeselov, LiePoissonSplitting, or Collective of "
                             "one of them), or one with an adjoint (SurisLagrangeTop, SurisClebsch, RK4)")

    @property
    def order(self) -> int:
        p = self.inner.order + self.inner.order % 2  # Φ*_{h/2} ∘ Φ_{h/2} is symmetric: of even order
        if self.scheme in ORDER_RAISING:
            return p + 2
        if self._kernel:
            return max(4, p)
        scheme = COMPOSITION_SCHEMES.get(self.scheme) or SPLITTING_SCHEMES[self.scheme]
        return max(scheme.order, p)

    @property
    def family(self) -> AbstractFamily:
        return self.inner.family if self._joined is None else self._joined.family

    @property
    def nonfinite_lasts(self) -> bool:
        return self.inner.nonfinite_lasts

    @property
    def coefficients(self) -> np.ndarray:
        """``γ_1 … γ_s`` (float64), for the inner method's order; for a splitting scheme the
        ``α_1 … α_{2m}`` of ``χ`` and ``χ*`` in turn (:func:`splitting_alphas`)."""
        if self.scheme in SPLITTING_SCHEMES:
            return splitting_alphas(self.scheme)
        return composition_coefficients(self.scheme, self.inner.order + self.inner.order % 2)

    @property
    def _halves(self) -> tuple:
        """The stages as ``χ_{h_1} , χ*_{h_2}, …`` of a first-order ``χ`` (a Strang step of ``γ``
        is ``χ*_{γ/2} ∘ χ_{γ/2}``)."""
        if self.scheme in SPLITTING_SCHEMES:
            return tuple(float(a) for a in self.coefficients)
        return tuple(0.5 * float(g) for g in self.coefficients for _ in range(2))

    @property
    def stages(self) -> tuple:
        """The stages in turn, first first: ``(method, fraction of dt)``, the method ``inner``
        or its adjoint."""
        inner = self.inner
        if inner.symmetric and self.scheme not in SPLITTING_SCHEMES:
            return tuple((inner, float(g)) for g in self.coefficients)
        pair = (inner, adjoint_of(inner))
        return tuple((pair[i % 2], h) for i, h in enumerate(self._halves))

    @property
    def _joined(self) -> Optional[AbstractIntegrator]:
        """``inner``'s own form of the whole composition, one step of its kind, if it has one
        (:class:`AbstractComposable`: a splitting, whose stages join into one sequence)."""
        if not isinstance(self.inner, AbstractComposable):
            return None
        rkn = self.scheme in SPLITTING_SCHEMES and SPLITTING_SCHEMES[self.scheme].rkn
        return self.inner.composed(self._halves, rkn)

    @property
    def linear_seed(self) -> bool:
        return isinstance(self.inner, AbstractSteppedAdjoint) and self.inner.linear_seed

    @property
    def batched_seed(self) -> bool:
        return self._joined is not None and self._joined.batched_seed

    def step_seed(self, system: AbstractSystem, dt: Scalar, state: PyTree, linearization, ct_state):
        """The joined form's (:attr:`batched_seed`: only with one)."""
        return self._joined.step_seed(system, dt, state, linearization, ct_state)

    def init(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar) -> PyTree:
        method, f = self.stages[0]
        return method.init(system, y0, f * dt)

    def init_or_fail(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar) -> tuple[PyTree, Any]:
        method, f = self.stages[0]
        return method.init_or_fail(system, y0, f * dt)

    def step(self, system: AbstractSystem, state: PyTree, dt: Scalar):
        if self._joined is not None:
            return self._joined.step(system, state, dt)
        result, infos, stages = RESULTS.successful, [], self.stages
        for i, (method, f) in enumerate(stages):  # unrolled: every kernel sees straight-line stages
            state = self._predicted(system, state, dt, i)
            state, r, info = method.step(system, state, f * dt)
            result = RESULTS.where(result == RESULTS.successful, r, result)
            infos.append(info)
        return state, result, _combined(infos)

    def _predicted(self, system, state, dt, i: int):
        """The state entering stage ``i``, its stage predictor following the stage's size where
        the inner method has one (:meth:`lpjax.GaussLegendre.predicted_for`; the ratio of the two
        fractions, known when traced: the palindrome's last stage is as long as the next step's
        first)."""
        if not isinstance(self.inner, GaussLegendre):
            return state
        fractions = [f for _, f in self.stages]
        ratio = fractions[i] / fractions[i - 1] if i else 1.0
        return self.inner.predicted_for(system, state, fractions[i] * dt, ratio)

    def observe(self, system: AbstractSystem, state: PyTree) -> Float[Array, " n"]:
        return self.inner.observe(system, state)

    def save(self, system: AbstractSystem, state: PyTree):
        return self.inner.save(system, state)

    # ------------------------------------------------------------------ the adjoint of a step

    def _stepped_stages(self) -> list:
        """:attr:`stages`, each method supplying its own adjoint of a step (else ``TypeError``:
        ``integrate`` then uses JAX's)."""
        return [(stepped_inner(self, m), f) for m, f in self.stages]

    def step_residuals(self, system: AbstractSystem, state: PyTree, dt: Scalar):
        """:meth:`step`, keeping each stage's entering state and the inner method's residuals."""
        if self._joined is not None:
            return self._joined.step_residuals(system, state, dt)
        result, infos, kept = RESULTS.successful, [], []
        for i, (method, f) in enumerate(self._stepped_stages()):
            state = self._predicted(system, state, dt, i)
            entering = state
            state, r, info, res = method.step_residuals(system, state, f * dt)
            result = RESULTS.where(result == RESULTS.successful, r, result)
            infos.append(info)
            kept.append((entering, res))
        return state, result, _combined(infos), tuple(kept)

    def step_linearize(self, system: AbstractSystem, dt: Scalar, state: PyTree, residuals):
        if self._joined is not None:
            return self._joined.step_linearize(system, dt, state, residuals)
        return tuple((entering, method.step_linearize(system, f * dt, entering, res))
                     for (method, f), (entering, res) in zip(self._stepped_stages(), residuals))

    def step_vjp(self, system: AbstractSystem, dt: Scalar, state: PyTree, linearization, ct_state,
                 robust: bool = False):
        """The stages' adjoints, last stage first."""
        if self._joined is not None:
            return self._joined.step_vjp(system, dt, state, linearization, ct_state, robust)
        seeds, converged = [], jnp.asarray(True)
        for (method, f), (entering, lin) in reversed(list(zip(self._stepped_stages(), linearization))):
            ct_state, seed, ok = method.step_vjp(system, f * dt, entering, lin, ct_state, robust)
            seeds.append(seed)
            converged = converged & ok
        return ct_state, tuple(seeds[::-1]), converged

    def parameter_vjp(self, system: AbstractSystem, dt: Scalar, seed):
        """The stages' cotangents summed; a stage's step is ``f_i dt``, so its ``dt`` cotangent
        counts ``f_i`` times. (Only a symmetric ``inner`` supplies a stepped adjoint here: every
        stage is a step of it.)"""
        if self._joined is not None:
            return self._joined.parameter_vjp(system, dt, seed)
        total = None
        for (method, f), stage_seed in zip(self._stepped_stages(), seed):
            ct_system, ct_inner, ct_dt = method.parameter_vjp(system, f * dt, stage_seed)
            ct = (ct_system, ct_inner, None if ct_dt is None else f * ct_dt)
            total = ct if total is None else tuple(_add(a, b) for a, b in zip(total, ct))
        ct_system, ct_inner, ct_dt = total
        ct_method = None if ct_inner is None else eqx.tree_at(lambda m: m.inner, eqx.filter(self, eqx.is_inexact_array),
                                                              ct_inner)
        return ct_system, ct_method, ct_dt


def _add(a, b):
    """The sum of two cotangents (None: zero)."""
    if a is None or b is None:
        return b if a is None else a
    return jax.tree.map(lambda x, y: x + y, a, b)
