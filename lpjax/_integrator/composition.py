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
from ._base import (RESULTS, AbstractAdjointPair, AbstractComposable, AbstractIntegrator, AbstractStateIsY,
                    AbstractSteppedAdjoint, StepInfo, stepped_inner)
from ._implicit import AbstractImplicitMethod
from .adjoint import Adjoint
from .gauss_legendre import GaussLegendre

__all__ = ["Composition", "COMPOSITION_SCHEMES", "SPLITTING_SCHEMES", "ORDER_RAISING"]


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

class _Splitting(NamedTuple):
    order: int
    source: str
    first: tuple  # the first operator's coefficients f_1 … f_k, the palindrome's closing one left out
    second: tuple  # the second operator's, likewise
    rkn: bool  # a Runge–Kutta–Nyström scheme: the first operator the kick B, with [B, [B, [B, A]]] = 0


_BM = "Blanes & Moan (2002), J. Comput. Appl. Math. 142"
SPLITTING_SCHEMES: dict[str, _Splitting] = {
    "blanes-moan-s6": _Splitting(4, f"{_BM}, S6", (0.0792036964311957, 0.353172906049774, -0.0420650803577195),
                                 (0.209515106613362, -0.143851773179818), False),
    "blanes-moan-s10": _Splitting(6, f"{_BM}, S10", (0.0502627644003922, 0.413514300428344, 0.0450798897943977,
                                                     -0.188054853819569, 0.541960678450780),
                                  (0.148816447901042, -0.132385865767784, 0.067307604692185, 0.432666402578175), False),
    "blanes-moan-srkn6": _Splitting(4, f"{_BM}, SRKN6 (b)", (0.0829844064174052, 0.396309801498368, -0.0390563049223486),
                                    (0.245298957184271, 0.604872665711080), True),
    "blanes-moan-srkn11": _Splitting(6, f"{_BM}, SRKN11 (b)",
                                     (0.0414649985182624, 0.198128671918067, -0.0400061921041533,
                                      0.0752539843015807, -0.0115113874206879),
                                     (0.123229775946271, 0.290553797799558, -0.127049212625417,
                                      -0.246331761062075, 0.357208872795928), True),
}
"""Splitting schemes ``e^{f_1 h X} e^{s_1 h Y} e^{f_2 h X} … e^{f_1 h X}`` for two operators
(the published coefficients; the palindrome closes with ``1 − 2Σ`` in the middle of the operator
with an odd count and ``½ − Σ`` twice around it for the other). :class:`Composition` runs one
as the composition ``… ∘ χ*_{α_2 h} ∘ χ_{α_1 h}`` of a first-order method ``χ`` and its adjoint
(McLachlan 1995; HLW III.5), ``f_1 = α_1``, ``s_1 = α_1 + α_2``, ``f_2 = α_2 + α_3``, …: for a
splitting ``χ = φ^Y ∘ φ^X`` it is the splitting itself. ``"blanes-moan-s6"`` (6 stages, order 4)
and ``"blanes-moan-s10"`` (10 stages, order 6) hold for any ``χ``; the Runge–Kutta–Nyström
``"blanes-moan-srkn6"`` (order 4) and ``"blanes-moan-srkn11"`` (order 6) only for a splitting
into a kick ``X = B`` and a drift ``Y = A`` with ``[B, [B, [B, A]]] = 0`` (otherwise order 4)."""


def _palindrome(xs: tuple, odd: bool) -> list:
    x = [float(v) for v in xs]
    return x + [1.0 - 2.0 * sum(x)] + x[::-1] if odd else x + [0.5 - sum(x)] * 2 + x[::-1]


def splitting_alphas(scheme: str) -> np.ndarray:
    """The ``α_1 … α_{2m}`` of a splitting scheme (:data:`SPLITTING_SCHEMES`) as a composition
    of ``χ`` and ``χ*`` (float64): ``α_1 = f_1``, ``α_{2i} = s_i − α_{2i−1}``,
    ``α_{2i+1} = f_{i+1} − α_{2i}``, the first half mirrored."""
    s = SPLITTING_SCHEMES[scheme]
    odd_first = len(s.first) == len(s.second) + 1  # the closing 1 − 2Σ is the first operator's
    first, second = _palindrome(s.first, odd_first), _palindrome(s.second, not odd_first)
    alphas = [first[0]]
    for f, y in zip(first[1:], second):
        alphas += [y - alphas[-1]]
        alphas += [f - alphas[-1]]
    half = np.asarray(alphas[: len(second)])
    return np.concatenate([half, half[::-1]])


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
    explicit = StepInfo.explicit(infos[0].residual.dtype)
    infos = [explicit if i.explicit_step else i for i in infos]
    return StepInfo(jnp.max(jnp.stack([i.residual for i in infos])), sum(i.iterations for i in infos))


def _adjoint_of(inner: AbstractIntegrator) -> Optional[AbstractIntegrator]:
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
    ========================  =====  ======  ==================================

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
    symmetric: ClassVar[bool] = True

    def __check_init__(self):
        if not isinstance(self.inner, AbstractIntegrator):
            raise TypeError(f"Composition: inner must be an lpjax integrator, got {type(self.inner).__name__}")
        if self.scheme not in COMPOSITION_SCHEMES and self.scheme not in SPLITTING_SCHEMES:
            raise ValueError(f"Composition: unknown scheme {self.scheme!r}; the schemes are "
                             f"{', '.join(map(repr, [*COMPOSITION_SCHEMES, *SPLITTING_SCHEMES]))}")
        if self.scheme in SPLITTING_SCHEMES and SPLITTING_SCHEMES[self.scheme].rkn and not isinstance(
                self.inner, AbstractComposable):
            raise ValueError(f"Composition: {self.scheme!r} is a Runge–Kutta–Nyström scheme, of its order only for a "
                             "splitting into a kick and a drift; compose a LiePoissonSplitting with it, or use "
                             "'blanes-moan-s10' or 'kahan-li6'")
        if _adjoint_of(self.inner) is None:
            raise ValueError(f"Composition: {type(self.inner).__name__} is not symmetric (a step of dt then one of -dt "
                             "does not return the state) and has no adjoint method to compose it with; compose a "
                             "symmetric method (GaussLegendre, MoserVeselov, LiePoissonSplitting, or Collective of "
                             "one of them), or one with an adjoint (SurisLagrangeTop, SurisClebsch, RK4)")

    @property
    def order(self) -> int:
        p = self.inner.order + self.inner.order % 2  # Φ*_{h/2} ∘ Φ_{h/2} is symmetric: of even order
        if self.scheme in ORDER_RAISING:
            return p + 2
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
        pair = (inner, _adjoint_of(inner))
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
