"""Seed 002 Fig. 6: errors of J₀ … J₈ of (32) along GL4 on the canonized heavy top on a movable base."""

from __future__ import annotations

import numpy as np

from ._common import _j_figure, _Runs, _Spec, _top_params


def _sym(n: int, q_blocks=(), p_blocks=(), qp_blocks=(), b: int = 3) -> np.ndarray:
    """σ ∈ sym(2n) with ``½ zᵀσz = Σ q_i·q_j + Σ p_i·p_j + Σ q_i·p_j`` over the listed R^b blocks."""
    S = np.zeros((2 * n, 2 * n))
    I = np.eye(b)

    def put(r, c):
        S[r:r + b, c:c + b] += I
        S[c:c + b, r:r + b] += I

    for i, j in q_blocks:
        put(b * i, b * j)
    for i, j in p_blocks:
        put(n + b * i, n + b * j)
    for i, j in qp_blocks:
        S[b * i:b * i + b, n + b * j:n + b * j + b] += I
        S[n + b * j:n + b * j + b, b * i:b * i + b] += I
    return S


def movable_base_sigmas() -> np.ndarray:
    """The nine σ of seed 002, eq. (32), with blocks q = (q₁, q₂, q₃), p = (p₁, p₂, p₃) ∈ (R³)³.

    J₀ = p·q, J₁ = q₁·p₂, J₂ = q₁·p₃, J₃ = |q₁|², J₄ = q₁·q₂, J₅ = q₁·q₃, J₆ = |p₂|², J₇ = p₂·p₃,
    J₈ = |p₃|² (bold 3-blocks; the paper's scalar indices 1..9). The paper lists the σ₁₁ block of
    J₄ as ``[[0, I, 0], 0, 0]``, which is not symmetric; its symmetric part (used here) is meant.
    """
    n = 9
    S0 = np.block([[np.zeros((n, n)), np.eye(n)], [np.eye(n), np.zeros((n, n))]])
    return np.stack([
        S0,
        _sym(n, qp_blocks=[(0, 1)]),
        _sym(n, qp_blocks=[(0, 2)]),
        _sym(n, q_blocks=[(0, 0)]),
        _sym(n, q_blocks=[(0, 1)]),
        _sym(n, q_blocks=[(0, 2)]),
        _sym(n, p_blocks=[(1, 1)]),
        _sym(n, p_blocks=[(1, 2)]),
        _sym(n, p_blocks=[(2, 2)]),
    ])


def _fig6(runs: _Runs, spec: _Spec, t1: float):
    names = [f"J{k}" for k in range(9)]
    formulas = ["J_0 = p\\cdot q", "J_1 = q_1p_4 + q_2p_5 + q_3p_6", "J_2 = q_1p_7 + q_2p_8 + q_3p_9",
                "J_3 = q_1^2 + q_2^2 + q_3^2", "J_4 = q_1q_4 + q_2q_5 + q_3q_6", "J_5 = q_1q_7 + q_2q_8 + q_3q_9",
                "J_6 = p_4^2 + p_5^2 + p_6^2", "J_7 = p_4p_7 + p_5p_8 + p_6p_9", "J_8 = p_7^2 + p_8^2 + p_9^2"]
    fig, rec = _j_figure(runs, spec, t1, "top", names, formulas, movable_base_sigmas(), 6, 3,
                         "heavy top on a movable base")
    rec = {"description": "heavy top on a movable base: errors of J0..J8 (32); absolute for J0, relative for J1..J8",
           "system": "canonized movable_base_top", "parameters": _top_params(runs.system("top")), **rec}
    return fig, rec
