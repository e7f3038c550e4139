"""Seed 002 Fig. 2: Kida vortex, relative errors of h (22) and f₁ (19), collective GL4 vs RK4 on (23);
t ∈ [0, 1000], Δt = 0.1."""

from __future__ import annotations

from ._common import _DASHED, _SOLID, _SOLID_THICK, _errors_figure, _fmt_span, _kida_params, _rel_err, _Runs, _Spec


def _fig2(runs: _Runs, spec: _Spec, t1: float):
    n = int(round(t1 / spec.dt))
    rc, rr = runs.get("kida", "collective", n), runs.get("kida", "rk4", n)
    s = rc["system"]
    e = {f"{m}_rel_err_{name}": _rel_err(fn, r["ys"]).reshape(len(r["ys"]), -1)[:, 0]
         for m, r in (("collective", rc), ("rk4", rr)) for name, fn in (("h", s.energy), ("f1", s.casimirs))}
    ts = rc["ts"]
    panels = [
        ("relative error of h", [(ts, e["collective_rel_err_h"], _SOLID, "collective GL4"),
                                 (ts, e["rk4_rel_err_h"], _DASHED, "RK4 on (23)")]),
        ("relative error of $f_1$", [(ts, e["collective_rel_err_f1"], _SOLID_THICK, "collective GL4"),
                                     (ts, e["rk4_rel_err_f1"], _DASHED, "RK4 on (23)")]),
    ]
    fig = _errors_figure(panels, f"Seed 002 Fig. 2: Kida vortex, collective GL4 (solid) vs RK4 (dashed), "
                                 f"{_fmt_span(spec, t1)}", ncols=2)
    maxima = {k: float(v.max()) for k, v in e.items()}
    maxima["final"] = {k: float(v[-1]) for k, v in e.items()}
    maxima["rk4_over_collective_f1"] = maxima["rk4_rel_err_f1"] / maxima["collective_rel_err_f1"]
    maxima["rk4_over_collective_h"] = maxima["rk4_rel_err_h"] / maxima["collective_rel_err_h"]
    record = {
        "description": "Kida vortex: relative errors of h (22) and f1 (19)",
        "system": "kida_vortex (seed 002, eqs (19), (22), (23), (25))",
        "methods": {"collective": "Collective(GaussLegendre(2)) = GL4 on the canonized system (25)",
                    "rk4": "RK4 on the Lie-Poisson equation (23)"},
        "parameters": _kida_params(), "mu0": rc["mu0"].tolist(),
        "dt": spec.dt, "t_span": [0.0, float(ts[-1])], "n_steps": n,
        "maxima": maxima,
        "solver_stats": {"collective": rc["stats"], "rk4": rr["stats"]},
    }
    return fig, record
