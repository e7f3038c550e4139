"""Seed 002 Fig. 1: Kida vortex (23) by the collective GL4 method on (25); μ(t) and the orbit in
so(2,1)* with the level sets of h (22) and f₁ (19); t ∈ [0, 100], Δt = 0.1."""

from __future__ import annotations

import numpy as np

from ._common import (
    KIDA_EPS,
    KIDA_F1,
    KIDA_H,
    KIDA_OMEGA,
    _RED,
    _fmt_span,
    _kida_params,
    _new_figure,
    _rel_err,
    _Runs,
    _Spec,
)


def _fig1(runs: _Runs, spec: _Spec, t1: float):
    n = int(round(t1 / spec.dt))
    r = runs.get("kida", "collective", n)
    s, ts, ys = r["system"], r["ts"], r["ys"]
    eh, ef = _rel_err(s.energy, ys), _rel_err(s.casimirs, ys)[:, 0]

    fig = _new_figure(13, 5.2)
    ax = fig.add_subplot(1, 2, 1)
    for k, c in enumerate(("tab:blue", "tab:orange", "tab:green")):
        ax.plot(ts, ys[:, k], color=c, lw=1.2, label=f"$\\mu_{k + 1}$")
    ax.set_xlabel("t")
    ax.set_ylabel("$\\mu$")
    ax.legend(loc="lower right")
    ax.set_title("(a) $\\mu(t)$")

    ax = fig.add_subplot(1, 2, 2, projection="3d")
    lo, hi = ys.min(axis=0), ys.max(axis=0)
    pad = 0.15 * (hi - lo)
    lo, hi = lo - pad, hi + pad
    # Casimir f1 = -1/4: the lower sheet mu3 = -sqrt(mu1^2 + mu2^2 + 1/4)  (19)
    a, b = np.meshgrid(np.linspace(lo[0], hi[0], 60), np.linspace(lo[1], hi[1], 60))
    c = -np.sqrt(a**2 + b**2 - KIDA_F1)
    c = np.where(c >= lo[2], c, np.nan)  # 3-d axes do not clip: drop the part below the box
    ax.plot_surface(a, b, c, color="tab:orange", alpha=0.25, linewidth=0)
    # h (22) does not depend on mu1: h = 1 is a cylinder along mu1 over mu2 = (1 - ω mu3 + (π/8) ln(π/8 - mu3)) / ε
    a, c = np.meshgrid(np.linspace(lo[0], hi[0], 30), np.linspace(lo[2], min(hi[2], np.pi / 8 - 1e-3), 60))
    b = (KIDA_H - KIDA_OMEGA * c + (np.pi / 8) * np.log(np.pi / 8 - c)) / KIDA_EPS
    b = np.where((b >= lo[1]) & (b <= hi[1]), b, np.nan)
    ax.plot_surface(a, b, c, color="tab:green", alpha=0.25, linewidth=0)
    ax.plot(ys[:, 0], ys[:, 1], ys[:, 2], color=_RED, lw=2.0, zorder=10)
    ax.set_xlim(lo[0], hi[0])
    ax.set_ylim(lo[1], hi[1])
    ax.set_zlim(lo[2], hi[2])
    ax.set_xlabel("$\\mu_1$")
    ax.set_ylabel("$\\mu_2$")
    ax.set_zlabel("$\\mu_3$")
    from matplotlib.ticker import MaxNLocator

    for axis in (ax.xaxis, ax.yaxis, ax.zaxis):
        axis.set_major_locator(MaxNLocator(5))
    ax.view_init(elev=20, azim=-60)
    ax.set_title("(b) orbit (red), $h = 1$ (green), $f_1 = -1/4$ (orange)")
    fig.suptitle(f"Seed 002 Fig. 1: Kida vortex (ε = 1/2, ω = −1), collective GL4 on (25), {_fmt_span(spec, t1)}")
    fig.tight_layout()
    record = {
        "description": "Kida vortex: mu(t) and the orbit with the level sets of h and f1",
        "system": "kida_vortex (seed 002, eqs (19), (22), (23), (25))",
        "methods": {"collective": "Collective(GaussLegendre(2)) = GL4 on the canonized system (25)"},
        "parameters": _kida_params(),
        "mu0": r["mu0"].tolist(),
        "dt": spec.dt, "t_span": [0.0, float(ts[-1])], "n_steps": n,
        "maxima": {
            "mu_min": ys.min(axis=0).tolist(), "mu_max": ys.max(axis=0).tolist(),
            "collective_rel_err_h": float(eh.max()), "collective_rel_err_f1": float(ef.max()),
        },
        "solver_stats": {"collective": r["stats"]},
    }
    return fig, record
