"""Seed 002 Fig. 3: errors of J₀ = p·q (16) and J₁, J₂ (20) along GL4 on the canonized Kida system (25)."""

from __future__ import annotations

import numpy as np

from ._common import _j_figure, _kida_params, _Runs, _Spec


def kida_sigmas() -> np.ndarray:
    """σ for J₀ = p·q (16), J₁ = q₁² + q₂² − q₃², J₂ = p₁² + p₂² − p₃² (20); ``J = ½ zᵀσz``."""
    K = np.diag([1.0, 1.0, -1.0])
    S0 = np.block([[np.zeros((3, 3)), np.eye(3)], [np.eye(3), np.zeros((3, 3))]])
    S1 = np.block([[2 * K, np.zeros((3, 3))], [np.zeros((3, 3)), np.zeros((3, 3))]])
    S2 = np.block([[np.zeros((3, 3)), np.zeros((3, 3))], [np.zeros((3, 3)), 2 * K]])
    return np.stack([S0, S1, S2])


def _fig3(runs: _Runs, spec: _Spec, t1: float):
    names = ["J0", "J1", "J2"]
    formulas = ["J_0 = p\\cdot q", "J_1 = q_1^2 + q_2^2 - q_3^2", "J_2 = p_1^2 + p_2^2 - p_3^2"]
    fig, rec = _j_figure(runs, spec, t1, "kida", names, formulas, kida_sigmas(), 3, 3, "Kida vortex")
    rec = {"description": "Kida vortex: errors of J0 = p.q (16), J1 = q1^2+q2^2-q3^2, J2 = p1^2+p2^2-p3^2 (20); "
                          "absolute for J0, relative for J1, J2",
           "system": "canonized kida_vortex (25)", "parameters": _kida_params(), **rec}
    return fig, rec
