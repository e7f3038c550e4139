"""Seed 002 Fig. 5: heavy top on a movable base (30), relative errors of h_c (28) and f₁, f₂, f₃ (31),
collective GL4 vs RK4; t ∈ [0, 30], Δt = 0.01."""

from __future__ import annotations

import numpy as np

from ._common import _DASHED, _SOLID, _SOLID_THICK, _errors_figure, _fmt_span, _rel_err, _Runs, _Spec, _top_params


def _fig5(runs: _Runs, spec: _Spec, t1: float):
    n = int(round(t1 / spec.dt))
    rc, rr = runs.get("top", "collective", n), runs.get("top", "rk4", n)
    s = rc["system"]
    e = {}
    for m, r in (("collective", rc), ("rk4", rr)):
        e[f"{m}_rel_err_h_c"] = _rel_err(s.energy, r["ys"])
        c = _rel_err(s.casimirs, r["ys"])
        for k in range(3):
            e[f"{m}_rel_err_f{k + 1}"] = c[:, k]
    ts = rc["ts"]
    names = [("h_c", "$h_c$"), ("f1", "$f_1 = |P|^2$"), ("f2", "$f_2 = P\\cdot\\Gamma$"), ("f3", "$f_3 = |\\Gamma|^2$")]
    panels = [(f"relative error of {lab}",
               [(ts, e[f"collective_rel_err_{nm}"], _SOLID if nm == "h_c" else _SOLID_THICK, "collective GL4"),
                (ts, e[f"rk4_rel_err_{nm}"], _DASHED, "RK4 on (30)")]) for nm, lab in names]
    fig = _errors_figure(panels, f"Seed 002 Fig. 5: heavy top on a movable base, collective GL4 (solid) vs RK4 "
                                 f"(dashed), {_fmt_span(spec, t1)}", ncols=2)
    maxima = {k: float(v.max()) for k, v in e.items()}
    maxima["final"] = {k: float(v[-1]) for k, v in e.items()}
    for nm, _ in names:
        maxima[f"rk4_over_collective_{nm}"] = maxima[f"rk4_rel_err_{nm}"] / maxima[f"collective_rel_err_{nm}"]
    record = {
        "description": "heavy top on a movable base: relative errors of h_c (28) and the Casimirs f1, f2, f3 (31)",
        "system": "movable_base_top (seed 002, eqs (28)-(31); h_c from the locked inertia K(rho), see errata)",
        "methods": {"collective": "Collective(GaussLegendre(2)) = GL4 on the canonized system",
                    "rk4": "RK4 on the Lie-Poisson equation (30)"},
        "parameters": _top_params(s), "mu0": rc["mu0"].tolist(),
        "casimirs_at_t0": np.asarray(s.casimirs(rc["mu0"])).tolist(),
        "dt": spec.dt, "t_span": [0.0, float(ts[-1])], "n_steps": n,
        "maxima": maxima,
        "solver_stats": {"collective": rc["stats"], "rk4": rr["stats"]},
    }
    return fig, record
