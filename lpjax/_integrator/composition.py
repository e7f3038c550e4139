"""Symmetric composition of a symmetric one-step method (Hairer, Lubich & Wanner, *Geometric
Numerical Integration*, V.3): ``Ψ_dt = Φ_{γ_s dt} ∘ … ∘ Φ_{γ_1 dt}`` with palindromic
``γ`` (``γ_i = γ_{s+1−i}``) raises a symmetric method of order 2 to the scheme's order, and
keeps what every stage keeps (a Poisson map, the Casimirs, symmetry)."""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple, Optional, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree, Scalar

from .._system import AbstractFamily, AbstractSystem
from ._base import RESULTS, AbstractComposable, AbstractIntegrator, AbstractSteppedAdjoint, StepInfo, stepped_inner
from .gauss_legendre import GaussLegendre

__all__ = ["Composition", "COMPOSITION_SCHEMES", "ORDER_RAISING"]


class _Scheme(NamedTuple):
    order: int
    source: str
    outer: tuple  # γ_1 … γ_m, from the outside in; the middle γ_{m+1} = 1 − 2 Σ γ_i makes Σ γ = 1
    middle: float  # the middle coefficient as published (tests/test_composition.py checks it)


_C2, _C4 = 2.0 ** (1 / 3), 4.0 ** (1 / 3)

COMPOSITION_SCHEMES: dict[str, _Scheme] = {
    "triple-jump": _Scheme(4, "Yoshida (1990), Suzuki (1990), Creutz & Gocksch (1989); HLW (V.3.5)",
                           (1 / (2 - _C2),), -_C2 / (2 - _C2)),
    "suzuki": _Scheme(4, "Suzuki (1990), the fractal of five; HLW (V.3.6)", (1 / (4 - _C4),) * 2, -_C4 / (4 - _C4)),
    "triple-jump-2": _Scheme(4, "the triple jump for an inner method of order 2", (1 / (2 - _C2),), -_C2 / (2 - _C2)),
    "suzuki-2": _Scheme(4, "Suzuki's fractal for an inner method of order 2", (1 / (4 - _C4),) * 2, -_C4 / (4 - _C4)),
    "yoshida6": _Scheme(6, "Yoshida (1990), solution A; HLW (V.3.11)",
                        (0.78451361047755726381949763, 0.23557321335935813368479318,
                         -1.17767998417887100694641568), 1.31518632068391121888424973),
    "kahan-li6": _Scheme(6, "Kahan & Li (1997), s9odr6a; HLW (V.3.12)",
                         (0.39216144400731413927925056, 0.33259913678935943859974864,
                          -0.70624617255763935980996482, 0.08221359629355080023149045),
                         0.79854399093482996339895035),
    "mclachlan8": _Scheme(8, "McLachlan (1995), SS 15 stages; HLW (V.3.13)",
                          (0.74167036435061295344822780, -0.40910082580003159399730010,
                           0.19075471029623837995387626, -0.57386247111608226665638773,
                           0.29906418130365592384446354, 0.33462491824529818378495798,
                           0.31529309239676659663205666), -0.79688793935291635401978884),
    "kahan-li8": _Scheme(8, "Kahan & Li (1997), s17odr8a; HLW (V.3.14)",
                         (0.13020248308889008087881763, 0.56116298177510838456196441,
                          -0.38947496264484728640807860, 0.15884190655515560089621075,
                          -0.39590389413323757733623154, 0.18453964097831570709183254,
                          0.25837438768632204729397911, 0.29501172360931029887096624),
                         -0.60550853383003451169892108),
    "sofroniou-spaletta10": _Scheme(10, "Sofroniou & Spaletta (2005), 35 stages",
                                    (0.07879572252168641926390768, 0.31309610341510852776481247,
                                     0.02791838323507806610952027, -0.22959284159390709415121340,
                                     0.13096206107716486317465686, -0.26973340565451071434460973,
                                     0.07497334315589143566613711, 0.11199342399981020488957508,
                                     0.36613344954622675119314812, -0.39910563013603589787862981,
                                     0.10308739852747107731580277, 0.41143087395589023782070412,
                                     -0.00486636058313526176219566, -0.39203335370863990644808194,
                                     0.05194250296244964703718290, 0.05066509075992449633587434,
                                     0.04967437063972987905456880), 0.04931773575959453791768001),
}
"""The schemes by name: ``(order, source, γ_1 … γ_m, γ_{m+1})``; the middle coefficient used is
``1 − 2 Σ γ_i`` (so that the steps add up to ``dt`` exactly), the published one agrees to
1e-15. Their orders hold for a symmetric inner method of order 2; every one meets
``Σ γ_i^k = 0`` for the odd ``3 ≤ k < order``. ``"triple-jump"`` and ``"suzuki"`` are listed with
their coefficients for an inner method of order 2; :class:`Composition` uses their forms for the
inner method's order p (:data:`ORDER_RAISING`), ``"triple-jump-2"`` and ``"suzuki-2"`` the
order-2 ones whatever the inner method."""

ORDER_RAISING = {"triple-jump": 2, "suzuki": 4}
"""The schemes whose coefficients follow the inner method's order p (even): ``k`` steps of
``γ = 1/(k − k^{1/(p+1)})`` around a middle one of ``−k^{1/(p+1)}/(k − k^{1/(p+1)})``, k = 2 (the
triple jump) or 4 (Suzuki's five), raise a symmetric method of order p to p + 2 (Yoshida 1990,
Suzuki 1990; HLW, Section II.4): the error term of order p + 1 cancels, ``Σ γ_i^{p+1} = 0``."""


def composition_coefficients(scheme: str, inner_order: int = 2) -> np.ndarray:
    """The whole palindrome ``γ_1 … γ_s`` of ``scheme`` (float64), for an inner method of order
    ``inner_order`` where the scheme depends on it (:data:`ORDER_RAISING`)."""
    if scheme in ORDER_RAISING:
        k = ORDER_RAISING[scheme]
        root = float(k) ** (1.0 / (inner_order + 1))
        outer = np.full(k // 2, 1.0 / (k - root))
    else:
        outer = np.asarray(COMPOSITION_SCHEMES[scheme].outer, np.float64)
    return np.concatenate([outer, [1.0 - 2.0 * outer.sum()], outer[::-1]])


def _combined(infos: list) -> StepInfo:
    """One step's statistics from its stages': the largest residual, the iterations summed."""
    if all(i.explicit_step for i in infos):
        return infos[0]
    return StepInfo(jnp.max(jnp.stack([i.residual for i in infos])), sum(i.iterations for i in infos))


@final
class Composition(AbstractSteppedAdjoint):
    r"""The symmetric composition ``Φ_{γ_s dt} ∘ … ∘ Φ_{γ_1 dt}`` of a symmetric method ``inner``
    (HLW V.3; the coefficients of :data:`COMPOSITION_SCHEMES`, by name):

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
    ========================  =====  ======  ==================================

    ``p`` is the order of ``inner``: the triple jump and Suzuki's five take the coefficients that
    raise it to ``p + 2`` (:data:`ORDER_RAISING`; for GL4, order 6). ``"triple-jump-2"`` and
    ``"suzuki-2"`` keep the coefficients for a second-order ``inner`` whatever it is; the other
    orders are those of a second-order ``inner``, and with a higher-order one the order is at
    least the larger of the two. Which to use: for a second-order ``inner`` (Moser–Veselov, a
    splitting, GL2) the fixed tables of the order wanted, Kahan–Li's the most accurate at equal
    work; for a higher-order one the triple jump or Suzuki's five of its order.

    Each stage is one step of ``inner``, so the composition keeps what ``inner`` keeps
    (Casimirs, the Poisson structure) and is itself symmetric. ``inner`` must be symmetric
    (:attr:`lpjax.AbstractIntegrator.symmetric`: a step of ``dt`` then one of ``−dt`` returns
    the state): composing a method that is not (RK4, the Suris maps) does not raise its order,
    and is refused. A step's result is its first failing stage's; its statistics sum the
    stages' iterations.

    Reverse-mode gradients (``integrate(..., adjoint="auto")``) chain the inner method's adjoint
    of a step through the stages, backwards, where it has one (:class:`lpjax.AbstractSteppedAdjoint`:
    Gauss–Legendre, Moser–Veselov, Collective); otherwise JAX's.
    """

    inner: AbstractIntegrator
    scheme: str = eqx.field(static=True, default="kahan-li6")
    symmetric: ClassVar[bool] = True

    def __check_init__(self):
        if not isinstance(self.inner, AbstractIntegrator):
            raise TypeError(f"Composition: inner must be an lpjax integrator, got {type(self.inner).__name__}")
        if self.scheme not in COMPOSITION_SCHEMES:
            raise ValueError(f"Composition: unknown scheme {self.scheme!r}; the schemes are "
                             f"{', '.join(map(repr, COMPOSITION_SCHEMES))}")
        if not self.inner.symmetric:
            raise ValueError(f"Composition: {type(self.inner).__name__} is not symmetric (a step of dt then one of -dt "
                             "does not return the state), so composing it does not raise its order; compose a "
                             "symmetric method (GaussLegendre, MoserVeselov, LiePoissonSplitting, or Collective of "
                             "one of them)")

    @property
    def order(self) -> int:
        if self.scheme in ORDER_RAISING:
            return self.inner.order + 2
        return max(COMPOSITION_SCHEMES[self.scheme].order, self.inner.order)

    @property
    def family(self) -> AbstractFamily:
        return self.inner.family

    @property
    def nonfinite_lasts(self) -> bool:
        return self.inner.nonfinite_lasts

    @property
    def coefficients(self) -> np.ndarray:
        """``γ_1 … γ_s`` (float64), for the inner method's order."""
        return composition_coefficients(self.scheme, self.inner.order)

    @property
    def _joined(self) -> Optional[AbstractIntegrator]:
        """``inner``'s own form of the whole composition, one step of its kind, if it has one
        (:class:`AbstractComposable`: a splitting, whose stages join into one sequence)."""
        return self.inner.composed(tuple(self.coefficients)) if isinstance(self.inner, AbstractComposable) else None

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
        return self.inner.init(system, y0, self.coefficients[0] * dt)

    def init_or_fail(self, system: AbstractSystem, y0: Float[Array, " n"], dt: Scalar) -> tuple[PyTree, Any]:
        return self.inner.init_or_fail(system, y0, self.coefficients[0] * dt)

    def step(self, system: AbstractSystem, state: PyTree, dt: Scalar):
        if self._joined is not None:
            return self._joined.step(system, state, dt)
        result, infos, gammas = RESULTS.successful, [], self.coefficients
        for i, g in enumerate(gammas):  # unrolled: every kernel sees straight-line stages
            state = self._predicted(system, state, dt, gammas, i)
            state, r, info = self.inner.step(system, state, float(g) * dt)
            result = RESULTS.where(result == RESULTS.successful, r, result)
            infos.append(info)
        return state, result, _combined(infos)

    def _predicted(self, system, state, dt, gammas: np.ndarray, i: int):
        """The state entering stage ``i``, its stage predictor following the stage's size where
        the inner method has one (:meth:`lpjax.GaussLegendre.predicted_for`; the ratio of the two
        γ, known when traced: the palindrome's last stage is as long as the next step's first)."""
        if not isinstance(self.inner, GaussLegendre):
            return state
        ratio = float(gammas[i] / gammas[i - 1]) if i else 1.0
        return self.inner.predicted_for(system, state, float(gammas[i]) * dt, ratio)

    def observe(self, system: AbstractSystem, state: PyTree) -> Float[Array, " n"]:
        return self.inner.observe(system, state)

    def save(self, system: AbstractSystem, state: PyTree):
        return self.inner.save(system, state)

    # ------------------------------------------------------------------ the adjoint of a step

    def _stepped_inner(self) -> AbstractSteppedAdjoint:
        return stepped_inner(self, self.inner)

    def step_residuals(self, system: AbstractSystem, state: PyTree, dt: Scalar):
        """:meth:`step`, keeping each stage's entering state and the inner method's residuals."""
        if self._joined is not None:
            return self._joined.step_residuals(system, state, dt)
        inner, result, infos, kept, gammas = self._stepped_inner(), RESULTS.successful, [], [], self.coefficients
        for i, g in enumerate(gammas):
            state = self._predicted(system, state, dt, gammas, i)
            entering = state
            state, r, info, res = inner.step_residuals(system, state, float(g) * dt)
            result = RESULTS.where(result == RESULTS.successful, r, result)
            infos.append(info)
            kept.append((entering, res))
        return state, result, _combined(infos), tuple(kept)

    def step_linearize(self, system: AbstractSystem, dt: Scalar, state: PyTree, residuals):
        if self._joined is not None:
            return self._joined.step_linearize(system, dt, state, residuals)
        inner = self._stepped_inner()
        return tuple((entering, inner.step_linearize(system, float(g) * dt, entering, res))
                     for g, (entering, res) in zip(self.coefficients, residuals))

    def step_vjp(self, system: AbstractSystem, dt: Scalar, state: PyTree, linearization, ct_state,
                 robust: bool = False):
        """The stages' adjoints, last stage first."""
        if self._joined is not None:
            return self._joined.step_vjp(system, dt, state, linearization, ct_state, robust)
        inner, seeds, converged = self._stepped_inner(), [], jnp.asarray(True)
        for g, (entering, lin) in reversed(list(zip(self.coefficients, linearization))):
            ct_state, seed, ok = inner.step_vjp(system, float(g) * dt, entering, lin, ct_state, robust)
            seeds.append(seed)
            converged = converged & ok
        return ct_state, tuple(seeds[::-1]), converged

    def parameter_vjp(self, system: AbstractSystem, dt: Scalar, seed):
        """The stages' cotangents summed; a stage's step is ``γ_i dt``, so its ``dt`` cotangent
        counts ``γ_i`` times."""
        if self._joined is not None:
            return self._joined.parameter_vjp(system, dt, seed)
        inner, total = self._stepped_inner(), None
        for g, stage_seed in zip(self.coefficients, seed):
            ct_system, ct_inner, ct_dt = inner.parameter_vjp(system, float(g) * dt, stage_seed)
            ct = (ct_system, ct_inner, None if ct_dt is None else float(g) * ct_dt)
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
