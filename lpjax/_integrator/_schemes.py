"""The coefficients of composition, splitting and processed schemes, by name, each from its
source (``tests/test_composition.py``, ``tests/test_splitting_schemes.py`` and
``tests/test_processed.py`` check them against their order conditions and measured orders)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["COMPOSITION_SCHEMES", "SPLITTING_SCHEMES", "PROCESSED_SCHEMES", "ORDER_RAISING", "composition_coefficients",
           "splitting_alphas", "processor_fractions"]


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
    elif scheme in PROCESSED_SCHEMES:  # a processed scheme's kernel
        outer = np.asarray(PROCESSED_SCHEMES[scheme].kernel, np.float64)
    else:
        outer = np.asarray(COMPOSITION_SCHEMES[scheme].outer, np.float64)
    return np.concatenate([outer, [1.0 - 2.0 * outer.sum()], outer[::-1]])


class _Processed(NamedTuple):
    order: int  # the effective order, at the outputs
    source: str
    kernel: tuple  # the kernel's γ_1 … γ_m, its middle 1 − 2Σ left out (the kernel alone is of order 4)
    processor: tuple  # z_2 … z_k; z_1 = −Σ of them


PROCESSED_SCHEMES: dict[str, _Processed] = {
    "blanes6": _Processed(6, "Blanes (2001), Appl. Numer. Math. 37; Leimkuhler & Reich (2004), Table 6.3",
                          (0.513910778424374, 0.364193022833858, -0.867423280969274),
                          (-0.461165940466494, -0.074332422810238, 0.384998538774070, 0.375012038697862)),
    "blanes-casas-murua8": _Processed(
        8, "Blanes, Casas & Murua (2006), SIAM J. Sci. Comput. 27, 13 stages",
        (0.168, 0.168, 0.585550530805562, -0.460090457516872, 0.172863148729731, 0.179664539695039),
        (-0.008488123494574411, -0.337188967354338, 0.333987768164597, 0.588351189003849, 0.162324207599241,
         -0.511744926116413, 0.236885952363384, 0.598212975943381, -0.543415765371656)),
}
"""Processed schemes ``P⁻¹ ∘ K^N ∘ P`` of a symmetric method Φ of order 2, by name: the kernel
``K = Φ_{γ_s h} ∘ … ∘ Φ_{γ_1 h}`` (palindromic, of order 4 alone) and the processor
``P = Φ_{−z_k h} ∘ … ∘ Φ_{−z_1 h} ∘ Φ_{z_k h} ∘ … ∘ Φ_{z_1 h}`` (``Σ z = 0``), of the effective
order at the outputs; ``P⁻¹`` is ``P``'s steps reversed with their signs changed (Φ symmetric)."""


def processor_fractions(scheme: str) -> np.ndarray:
    """The steps of ``P`` in turn, as fractions of ``h``: ``z_1 … z_k, −z_1 … −z_k`` (float64)."""
    rest = np.asarray(PROCESSED_SCHEMES[scheme].processor, np.float64)
    z = np.concatenate([[-rest.sum()], rest])
    return np.concatenate([z, -z])
