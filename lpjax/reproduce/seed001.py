"""Seed 001 (Jovanović, *LR and L+R systems*): the nonholonomic rigid bodies, checked.

The paper has no numerical figures; this target draws what its statements predict
(``docs/seeds/seed001-equations.md``), one PNG ``seed001-fig1.png`` of four panels:

* (a) the rubber Chaplygin sphere (I, D) and Veselova's problem with inertia I + D·1 from one
  state: the same trajectory γ(t) (sec. 6; their difference is recorded);
* (b) the drift of the constraint (ω, γ) = 0 of 3D Veselova under GL4 and RK4, Δt = 0.1
  (GL4 keeps a bilinear constraint to roundoff, RK4 does not);
* (c) the relative energy error and the error of |M × γ|² of the same runs;
* (d) the invariant-measure check: max div(ρf)/(|ρ||∂f|) at random points of the invariant
  manifold for every system family, against the control div f (ρ = 1).
"""

from __future__ import annotations

import numpy as np

from ._common import _BLUE, _RED, _fmt_span, _new_figure, _positive, _Spec, _stats

I3, D = (1.0, 2.0, 3.0), 0.5
_POINTS = 50


def _density_systems():
    from ..systems import chaplygin_sphere, lplusr, rubber_chaplygin_sphere, spherical_support, veselova, veselova_n

    R = np.array([[0.6, 0.2, -0.1], [0.2, -0.3, 0.15], [-0.1, 0.15, 0.4]])
    return {
        "Veselova n=3": veselova(I3),
        "Veselova n=4": veselova_n([1.0, 1.5, 2.0, 2.5]),
        "Chaplygin sphere": chaplygin_sphere(I3, D),
        "rubber sphere": rubber_chaplygin_sphere(I3, D),
        "L+R": lplusr(I3, [0.5, 0.3], [0.2, 0.1]),
        "spherical support": spherical_support(I3, [(0.2, 0.5), (0.3, 0.4)], rubber=True),
        "general L+R": lplusr(I3, R=R),
    }


def _measure_check(rng) -> dict:
    """``{name: (max div(ρf) defect, max div f defect)}`` at ``_POINTS`` states per system."""
    import jax
    import jax.numpy as jnp

    from ..diagnostics import divergence_defect

    class _Flat:  # the control: the same field with ρ = 1
        def __init__(self, system):
            self.vector_field, self.density = system.vector_field, lambda x: jnp.ones((), x.dtype)

    out = {}
    for name, s in _density_systems().items():
        g = rng.normal(size=(_POINTS, s.r, s.n))
        g /= np.linalg.norm(g, axis=-1, keepdims=True)
        xi = rng.normal(size=(_POINTS, s.m, s.algebra.dim)) / np.sqrt(s.algebra.dim)
        Om = rng.normal(size=(_POINTS, s.algebra.dim))
        xs = jax.jit(jax.vmap(s.from_velocity))(jnp.asarray(Om), jnp.asarray(g), jnp.asarray(xi))
        check = jax.jit(jax.vmap(lambda x: jnp.stack([divergence_defect(s, x), divergence_defect(_Flat(s), x)])))
        worst = np.asarray(check(xs)).max(axis=0)
        out[name] = (float(worst[0]), float(worst[1]))
    return out


def _fig1(runs, spec: _Spec, t1: float):
    import jax

    import lpjax
    from ..systems import rubber_chaplygin_sphere, veselova

    n = int(round(t1 / spec.dt))
    every = max(1, n // 1000)
    ves = veselova(I3)
    x0 = ves.default_state()
    sols = {name: lpjax.integrate(ves, m, x0, spec.dt, n, save_every=every)
            for name, m in (("GL4", lpjax.GaussLegendre(2)), ("RK4", lpjax.RK4()))}
    ts = np.asarray(sols["GL4"].ts)
    # one compiled program each (eagerly, every operation would be dispatched and compiled alone)
    constraint = {k: np.abs(np.asarray(jax.jit(jax.vmap(ves.constraint))(s.ys)))[:, 0] for k, s in sols.items()}
    integrals = {k: jax.tree.map(np.asarray, jax.vmap(ves.integrals)(s.ys)) for k, s in sols.items()}
    energy = {k: np.abs(np.asarray(v["energy"] / v["energy"][0] - 1)) for k, v in integrals.items()}
    mg = {k: np.abs(np.asarray(v["k_gamma"][:, 0] - v["k_gamma"][0, 0])) for k, v in integrals.items()}
    gnorm = {k: np.abs(np.asarray(v["gamma_norms"][:, 0] - 1)) for k, v in integrals.items()}

    # (a) the rubber sphere is Veselova with inertia I + D, up to t = 50 (GL6, Δt/4)
    t_eq = min(50.0, t1)
    n_eq = int(round(4 * t_eq / spec.dt))
    rubber = rubber_chaplygin_sphere(I3, D)
    r0 = rubber.default_state()
    a = lpjax.integrate(rubber, lpjax.GaussLegendre(3), r0, spec.dt / 4, n_eq, save_every=4)
    b = lpjax.integrate(veselova(np.asarray(I3) + D), lpjax.GaussLegendre(3), r0, spec.dt / 4, n_eq, save_every=4)
    a, b = (jax.tree.map(np.asarray, sol) for sol in (a, b))
    equivalence = float(np.max(np.abs(a.ys - b.ys)))

    measure = _measure_check(np.random.default_rng(1))

    fig = _new_figure(12, 8.4)
    ax = fig.add_subplot(2, 2, 1)
    for k, c in enumerate(("tab:red", "tab:green", "tab:blue")):
        ax.plot(a.ts, a.ys[:, 3 + k], color=c, lw=1.0, label=f"rubber sphere $\\gamma_{k + 1}$")
        ax.plot(b.ts[::10], b.ys[::10, 3 + k], "o", color=c, ms=2.5, label=f"Veselova(I + D) $\\gamma_{k + 1}$")
    ax.set(xlabel="t", title=f"(a) rubber sphere = Veselova with inertia I + D (max diff {equivalence:.1e})")
    ax.legend(fontsize=6, ncol=2)
    styles = {"GL4": dict(color=_RED, lw=1.0), "RK4": dict(color=_BLUE, lw=1.0, ls="--")}
    ax = fig.add_subplot(2, 2, 2)
    for k in sols:
        ax.semilogy(ts, _positive(constraint[k]), label=k, **styles[k])
    ax.set(xlabel="t", ylabel="|(ω, γ)|", title=f"(b) constraint, Veselova, {_fmt_span(spec, t1)}")
    ax.legend()
    ax = fig.add_subplot(2, 2, 3)
    for k in sols:
        ax.semilogy(ts, _positive(energy[k]), label=f"{k}: energy (relative)", **styles[k])
        ax.semilogy(ts, _positive(mg[k]), label=f"{k}: |M × γ|²", **{**styles[k], "lw": 0.6, "alpha": 0.6})
    ax.set(xlabel="t", title="(c) integrals")
    ax.legend(fontsize=7)
    ax = fig.add_subplot(2, 2, 4)
    names = list(measure)
    y = np.arange(len(names))
    ax.barh(y + 0.2, [max(measure[k][0], 1e-18) for k in names], 0.4, color=_RED, label="div(ρf), ρ of the table")
    ax.barh(y - 0.2, [measure[k][1] for k in names], 0.4, color=_BLUE, label="control: div f")
    ax.set_xscale("log")
    ax.set_yticks(y, names, fontsize=8)
    ax.set(xlabel=f"max scaled divergence over {_POINTS} states", title="(d) invariant measures")
    ax.legend(fontsize=7)
    fig.suptitle("Seed 001: nonholonomic LR and L+R systems (I = (1, 2, 3), D = 0.5)")
    fig.tight_layout()

    record = {
        "description": "nonholonomic LR and L+R systems: constraint and integrals under GL4 vs RK4, the rubber "
                       "sphere as Veselova with inertia I + D, invariant densities by div(rho f)",
        "system": "veselova, rubber_chaplygin_sphere, chaplygin_sphere, lplusr, spherical_support (seed 001; "
                  "docs/seeds/seed001-equations.md)",
        "parameters": {"inertia": list(I3), "D": D, "points_per_density": _POINTS},
        "methods": {"GL4": "GaussLegendre(2)", "RK4": "RK4", "equivalence": "GaussLegendre(3), dt/4"},
        "x0": np.asarray(x0).tolist(),
        "dt": spec.dt, "t_span": [0.0, float(ts[-1])], "n_steps": n,
        "maxima": {
            **{f"{k}_constraint": float(v.max()) for k, v in constraint.items()},
            **{f"{k}_gamma_norm_err": float(v.max()) for k, v in gnorm.items()},
            **{f"{k}_rel_err_energy": float(v.max()) for k, v in energy.items()},
            **{f"{k}_err_M_cross_gamma_sq": float(v.max()) for k, v in mg.items()},
            "rubber_vs_veselova_I_plus_D": equivalence,
            "rubber_vs_veselova_t_span": [0.0, t_eq],
        },
        "invariant_measure": {k: {"div_rho_f": v[0], "control_div_f": v[1]} for k, v in measure.items()},
        "solver_stats": {k: _stats(s) for k, s in sols.items()},
    }
    return fig, record
