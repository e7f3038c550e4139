"""Shared machinery of the seed 002 reproduction: parameters, figure specs, the runs shared
between figures, numeric and plotting helpers, the JSON results file and :func:`reproduce`.

Initial data (derivation and seed errata: ``docs/errata.md``, "Reproduction: ..."):

* Kida: μ₁(0) = 1, f₁(μ(0)) = −1/4, h(μ(0)) = 1 with ε = 1/2, ω = −1; the unique root with
  μ₂ > 0 (:func:`lpjax.systems.kida_initial_state`), ``μ(0) ≈ (1, 0.08338560, −1.12113922)``,
  lifted by :func:`lpjax.clebsch.lift` (the paper's printed lift cannot reach μ₁(0) = 1).
* Top: the paper's parameters (the defaults of :func:`lpjax.systems.movable_base_top`, gain
  ``ρ = 0.9 m²l²/I₁``), ``Ω(0) = (0.1, 0.2, 0.1)``, ``v(0) = 0``,
  ``Γ(0) = (cos θ₀ sin φ₀, sin θ₀ sin φ₀, cos φ₀)``, θ₀ = π/3, φ₀ = π/20; lifted by
  :func:`lpjax.clebsch.lift` (the collective integrator uses the same lift).

The library does not change global JAX configuration; callers (the CLI, tests) enable
float64, which :func:`reproduce` requires.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np


FIGURES = ("seed001-fig1", "seed002-fig1", "seed002-fig2", "seed002-fig3", "seed002-fig5", "seed002-fig6")
JSON_NAME = "seed002.json"
# per seed: (seed file, paper); each seed's figures share one JSON, ``<seed>.json``
SEEDS = {
    "seed001": ("001_6c756a0daff602ba", "Jovanovic: LR and L+R systems (seed 001)"),
    "seed002": ("002_6ff0b7d18e95d401", "Jayawardana, Morrison, Ohsawa: Clebsch canonization of Lie-Poisson systems "
                                        "(seed 002)"),
}


def json_name(figure: str) -> str:
    """The results file a figure's entry goes to: ``seed001.json``, ``seed002.json``."""
    return f"{figure.split('-')[0]}.json"

# ----------------------------------------------------------------------------- parameters

KIDA_EPS, KIDA_OMEGA = 0.5, -1.0
KIDA_MU1, KIDA_F1, KIDA_H = 1.0, -0.25, 1.0
TOP_OMEGA0 = (0.1, 0.2, 0.1)
TOP_V0 = (0.0, 0.0, 0.0)
TOP_THETA0, TOP_PHI0 = math.pi / 3, math.pi / 20


@dataclasses.dataclass(frozen=True)
class _Spec:
    system: str  # "kida" or "top"
    dt: float
    t1: float
    runs: tuple[str, ...]  # "collective", "rk4", "canonical"


_SPECS = {
    "seed001-fig1": _Spec("veselova", 0.1, 1000.0, ()),  # its runs are its own (seed001.py)
    "seed002-fig1": _Spec("kida", 0.1, 100.0, ("collective",)),
    "seed002-fig2": _Spec("kida", 0.1, 1000.0, ("collective", "rk4")),
    "seed002-fig3": _Spec("kida", 0.1, 1000.0, ("canonical",)),
    "seed002-fig5": _Spec("top", 0.01, 30.0, ("collective", "rk4")),
    "seed002-fig6": _Spec("top", 0.01, 30.0, ("canonical",)),
}

_RED, _BLUE = "tab:red", "tab:blue"


def _n_steps(spec: _Spec) -> int:
    n = int(round(spec.t1 / spec.dt))
    if n < 1 or not math.isclose(n * spec.dt, spec.t1, rel_tol=1e-9):
        raise ValueError(f"span {spec.t1} is not a positive multiple of dt = {spec.dt}")
    return n


# ----------------------------------------------------------------------------- initial data


def movable_base_initial_state(system, Omega=TOP_OMEGA0, v=TOP_V0, theta0=TOP_THETA0, phi0=TOP_PHI0) -> np.ndarray:
    """μ(0) = (Π, P, Γ) of seed 002, sec. 5.3: Ω(0), v(0) and Γ(0) = (cos θ₀ sin φ₀, sin θ₀ sin φ₀, cos φ₀)."""
    from ..systems import movable_base_mu

    Gamma = np.array([math.cos(theta0) * math.sin(phi0), math.sin(theta0) * math.sin(phi0), math.cos(phi0)])
    return np.asarray(movable_base_mu(system, np.asarray(Omega, float), np.asarray(v, float), Gamma))


# ----------------------------------------------------------------------------- runs


def _stats(sol) -> dict:
    return {k: (int(v) if np.issubdtype(np.asarray(v).dtype, np.integer) else float(v)) for k, v in sol.stats.items()}


class _Runs:
    """Integrations shared between figures: each (system, kind) runs once, for the longest span needed."""

    def __init__(self, specs: dict[str, _Spec]):
        self.plan: dict[tuple[str, str], tuple[float, int]] = {}
        for spec in specs.values():
            for kind in spec.runs:
                key = (spec.system, kind)
                dt, n = self.plan.get(key, (spec.dt, 0))
                if dt != spec.dt:
                    raise ValueError(f"figures sharing the {key} run need the same dt")
                self.plan[key] = (dt, max(n, _n_steps(spec)))
        self.cache: dict[tuple[str, str], dict] = {}
        self._systems: dict[str, object] = {}

    def system(self, name: str):
        if name not in self._systems:
            from ..systems import kida_vortex, movable_base_top

            self._systems[name] = kida_vortex(eps=KIDA_EPS, omega=KIDA_OMEGA) if name == "kida" else movable_base_top()
        return self._systems[name]

    def mu0(self, name: str) -> np.ndarray:
        from ..systems import kida_initial_state

        s = self.system(name)
        return kida_initial_state(KIDA_EPS, KIDA_OMEGA) if name == "kida" else movable_base_initial_state(s)

    def get(self, name: str, kind: str, n_steps: int) -> dict:
        key = (name, kind)
        if key not in self.cache:
            self.cache[key] = self._run(name, kind, *self.plan[key])
        run = self.cache[key]
        if n_steps > run["n_steps"]:
            raise ValueError(f"run {key} has {run['n_steps']} steps, {n_steps} requested")
        out = dict(run)
        out["ts"], out["ys"] = run["ts"][: n_steps + 1], run["ys"][: n_steps + 1]
        out["n_steps"] = n_steps
        return out

    def _run(self, name: str, kind: str, dt: float, n_steps: int) -> dict:
        import jax.numpy as jnp

        import lpjax
        from .. import clebsch

        system = self.system(name)
        mu0 = self.mu0(name)
        t = time.perf_counter()
        extra = {}
        if kind == "collective":
            sol = lpjax.integrate(system, lpjax.Collective(lpjax.GaussLegendre(2)), mu0, dt, n_steps)
        elif kind == "rk4":
            sol = lpjax.integrate(system, lpjax.RK4(), mu0, dt, n_steps)
        elif kind == "canonical":
            q0, p0 = clebsch.lift(system.algebra, mu0, system.sign)
            z0 = jnp.concatenate([q0, p0])
            extra = {"q0": np.asarray(q0).tolist(), "p0": np.asarray(p0).tolist()}
            sol = lpjax.integrate(clebsch.canonize(system), lpjax.GaussLegendre(2), z0, dt, n_steps)
        else:  # pragma: no cover - internal
            raise ValueError(kind)
        ys = np.asarray(sol.ys)
        wall = time.perf_counter() - t
        return dict(ts=np.asarray(sol.ts), ys=ys, n_steps=n_steps, dt=dt, stats=_stats(sol), wall_time_s=wall,
                    system=system, mu0=mu0, **extra)


# ----------------------------------------------------------------------------- helpers


def _rel_err(fn, ys) -> np.ndarray:
    from ..diagnostics import relative_invariant_error

    return np.asarray(relative_invariant_error(fn, ys))


def _abs_err(fn, ys) -> np.ndarray:
    import jax

    v = np.asarray(jax.vmap(fn)(ys))
    return np.abs(v - v[:1])


def _positive(e: np.ndarray) -> np.ndarray:
    """Zeros (exact preservation, the t = 0 point) cannot be drawn on a log axis: mask them."""
    e = np.asarray(e, dtype=float)
    return np.where(e > 0, e, np.nan)


def _new_figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def _fmt_span(spec: _Spec, t1: float) -> str:
    return f"Δt = {spec.dt:g}, t ∈ [0, {t1:g}]"


def _kida_params() -> dict:
    return {"eps": KIDA_EPS, "omega": KIDA_OMEGA, "mu1(0)": KIDA_MU1, "f1(mu(0))": KIDA_F1, "h(mu(0))": KIDA_H,
            "root": "mu2(0) = +sqrt(mu3(0)^2 - 5/4), mu3(0) <= -sqrt(5)/2 (unique root of h = 1 on this branch)"}


def _top_params(system) -> dict:
    H = system.hamiltonian
    return {"M": 0.44, "m": float(H.m), "I1": float(H.inertia[0]), "I2": float(H.inertia[1]), "I3": float(H.inertia[2]),
            "l": float(H.l), "g": float(H.g), "rho": float(H.rho), "rho_formula": "0.9 m^2 l^2 / I1",
            "Omega(0)": list(TOP_OMEGA0), "v(0)": list(TOP_V0), "theta0": TOP_THETA0, "phi0": TOP_PHI0}


# ----------------------------------------------------------------------------- shared figure kinds


def _errors_figure(panels, title: str, ncols: int):
    """Log-scale error panels; ``panels`` = [(ylabel, [(t, e, style, label), ...][, title]), ...]."""
    nrows = -(-len(panels) // ncols)
    fig = _new_figure(5.2 * ncols, 3.4 * nrows + 0.6)
    for i, (ylabel, curves, *sub) in enumerate(panels):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        for t, e, style, label in curves:
            ax.semilogy(t, _positive(e), label=label, **style)
        ax.set_xlabel("t")
        ax.set_ylabel(ylabel)
        ax.set_title(f"({chr(ord('a') + i)}) {sub[0]}" if sub else f"({chr(ord('a') + i)})")
        if any(c[3] for c in curves):
            ax.legend(loc="best", fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


_SOLID = dict(color=_RED, lw=1.0, ls="-")
_SOLID_THICK = dict(color=_RED, lw=2.5, ls="-")
_DASHED = dict(color=_BLUE, lw=1.0, ls="--")


def _j_record(r, sigmas, names):
    from .. import clebsch

    s = r["system"]
    J = clebsch.invariants(s.algebra, sigmas)  # checks each σ lies in 𝔥 (eq. (15))
    ys = r["ys"]
    err_abs0 = _abs_err(lambda z: J(z)[0], ys)
    rel = _rel_err(J, ys)
    errs = [err_abs0] + [rel[:, k] for k in range(1, len(names))]
    J0 = np.asarray(J(ys[0]))
    # do the σ span all of 𝔥? (rank of the σ's together with a basis of 𝔥)
    basis = clebsch.symmetry_algebra(s.algebra)
    flat = lambda A: np.asarray(A).reshape(len(A), -1)  # noqa: E731
    rank_s = int(np.linalg.matrix_rank(flat(sigmas), tol=1e-9))
    rank_all = int(np.linalg.matrix_rank(np.concatenate([flat(sigmas), flat(basis)]), tol=1e-9))
    h_info = {"dim_h": int(len(basis)), "rank_of_sigmas": rank_s, "sigmas_span_h": rank_s == rank_all == len(basis),
              "each_sigma_in_h": [bool(clebsch.in_symmetry_algebra(s.algebra, S)) for S in sigmas]}
    return errs, J0, h_info


def _j_figure(runs, spec, t1, system, names, formulas, sigmas, fig_no, ncols, label):
    """Errors of the invariants J = ½ zᵀσz along GL4 on the canonized system (figs 3 and 6)."""
    n = int(round(t1 / spec.dt))
    r = runs.get(system, "canonical", n)
    errs, J0, h_info = _j_record(r, sigmas, names)
    panels = [((f"|{nm}(t) − {nm}(0)|" if k == 0 else f"relative error of {nm}"),
               [(r["ts"], e, dict(color=_RED, lw=1.0), None)], f"${fm}$")
              for k, (nm, e, fm) in enumerate(zip(names, errs, formulas))]
    fig = _errors_figure(panels, f"Seed 002 Fig. {fig_no}: {label}, invariants J, GL4 on the canonized system, "
                                 f"{_fmt_span(spec, t1)}", ncols=ncols)
    maxima = {(f"abs_err_{nm}" if k == 0 else f"rel_err_{nm}"): float(e.max())
              for k, (nm, e) in enumerate(zip(names, errs))}
    record = {
        "dt": spec.dt, "t_span": [0.0, float(r["ts"][-1])], "n_steps": n,
        "methods": {"canonical": "GaussLegendre(2) = GL4 on clebsch.canonize(system), z0 = clebsch.lift(mu0)"},
        "mu0": r["mu0"].tolist(), "q0": r["q0"], "p0": r["p0"],
        "J_at_t0": {nm: float(v) for nm, v in zip(names, J0)},
        "maxima": maxima,
        "symmetry_algebra": h_info,
        "solver_stats": {"canonical": r["stats"]},
    }
    return fig, record
