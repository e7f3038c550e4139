"""Reproduction of seed 002's numerical figures 1, 2, 3, 5 and 6 (secs 5.2 and 5.3).

Seed 002 is Jayawardana, Morrison, Ohsawa, *Clebsch canonization of Lie–Poisson systems*.
Each figure is one PNG ``<out>/seed002-figN.png``; all share one JSON ``<out>/seed002.json``
with, per figure, the plotted maxima, the parameters, span, step size, solver statistics,
wall time and the lpjax version. Reproducing one figure updates only its entry in an existing
JSON. Files are written atomically; nothing is pickled.

* Fig. 1: Kida vortex (23) by the collective GL4 method on (25); μ(t) and the orbit in
  so(2,1)* with the level sets of h (22) and f₁ (19); t ∈ [0, 100], Δt = 0.1.
* Fig. 2: relative errors of h and f₁, collective GL4 vs RK4 on (23); t ∈ [0, 1000], Δt = 0.1.
* Fig. 3: errors of J₀ = p·q (16) and J₁, J₂ (20) along GL4 on the canonized system (25).
* Fig. 5: heavy top on a movable base (30): relative errors of h_c (28) and f₁, f₂, f₃ (31),
  collective GL4 vs RK4; t ∈ [0, 30], Δt = 0.01.
* Fig. 6: errors of J₀ … J₈ of (32) along GL4 on the canonized top.

Initial data (see the seed errata in ``docs``/the seeds README):

* Kida: μ₁(0) = 1, f₁(μ(0)) = −1/4, h(μ(0)) = 1 with ε = 1/2, ω = −1. Then
  ``μ₂² = μ₃² − 5/4``, so ``|μ₃| ≥ √5/2 > π/8`` and, as h needs ``μ₃ < π/8``, ``μ₃ ≤ −√5/2``
  (the lower sheet of the hyperboloid f₁ = −1/4). On the branch ``μ₂ = +√(μ₃² − 5/4)``,
  ``h`` is strictly decreasing in μ₃, so ``h = 1`` has exactly one root
  (:func:`lpjax.systems.kida_initial_state`):
  ``μ(0) ≈ (1, 0.08338560, −1.12113922)``. (The branch ``μ₂ < 0`` has another root,
  ``≈ (1, −2.3619, −2.6131)``, the other crossing of the same closed orbit with μ₁ = 1.) The paper's lift
  ``q(0) = (1, 0, 0)``, ``p₁(0) = 0`` cannot reach μ₁(0) = 1 (``⟨μ, q⟩`` must vanish), so
  ``(q(0), p(0))`` comes from :func:`lpjax.clebsch.lift`.
* Top: the paper's parameters (the defaults of :func:`lpjax.systems.movable_base_top`, gain
  ``ρ = 0.9 m²l²/I₁``), ``Ω(0) = (0.1, 0.2, 0.1)``, ``v(0) = 0``,
  ``Γ(0) = (cos θ₀ sin φ₀, sin θ₀ sin φ₀, cos φ₀)``, θ₀ = π/3, φ₀ = π/20; lifted by
  :func:`lpjax.clebsch.lift` (the collective integrator uses the same lift).

The library does not change global JAX configuration; callers (the CLI, tests) enable
float64, which :func:`reproduce` requires.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import time
from typing import Callable, Iterable, Optional

import numpy as np

from ._io import atomic_write, atomic_write_json

__all__ = [
    "FIGURES",
    "JSON_NAME",
    "movable_base_initial_state",
    "kida_sigmas",
    "movable_base_sigmas",
    "reproduce",
]

FIGURES = ("seed002-fig1", "seed002-fig2", "seed002-fig3", "seed002-fig5", "seed002-fig6")
JSON_NAME = "seed002.json"
_SEED = "002_6ff0b7d18e95d401"
_PAPER = "Jayawardana, Morrison, Ohsawa: Clebsch canonization of Lie-Poisson systems (seed 002)"

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
    from .systems import movable_base_mu

    Gamma = np.array([math.cos(theta0) * math.sin(phi0), math.sin(theta0) * math.sin(phi0), math.cos(phi0)])
    return np.asarray(movable_base_mu(system, np.asarray(Omega, float), np.asarray(v, float), Gamma))


# ----------------------------------------------------------------------------- invariants J


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


def kida_sigmas() -> np.ndarray:
    """σ for J₀ = p·q (16), J₁ = q₁² + q₂² − q₃², J₂ = p₁² + p₂² − p₃² (20); ``J = ½ zᵀσz``."""
    K = np.diag([1.0, 1.0, -1.0])
    S0 = np.block([[np.zeros((3, 3)), np.eye(3)], [np.eye(3), np.zeros((3, 3))]])
    S1 = np.block([[2 * K, np.zeros((3, 3))], [np.zeros((3, 3)), np.zeros((3, 3))]])
    S2 = np.block([[np.zeros((3, 3)), np.zeros((3, 3))], [np.zeros((3, 3)), 2 * K]])
    return np.stack([S0, S1, S2])


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
            from .systems import kida_vortex, movable_base_top

            self._systems[name] = kida_vortex(eps=KIDA_EPS, omega=KIDA_OMEGA) if name == "kida" else movable_base_top()
        return self._systems[name]

    def mu0(self, name: str) -> np.ndarray:
        from .systems import kida_initial_state

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
        from . import clebsch

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
    from .diagnostics import relative_invariant_error

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


# ----------------------------------------------------------------------------- figures


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


def _j_record(r, sigmas, names):
    from . import clebsch

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


def _fig3(runs: _Runs, spec: _Spec, t1: float):
    names = ["J0", "J1", "J2"]
    formulas = ["J_0 = p\\cdot q", "J_1 = q_1^2 + q_2^2 - q_3^2", "J_2 = p_1^2 + p_2^2 - p_3^2"]
    fig, rec = _j_figure(runs, spec, t1, "kida", names, formulas, kida_sigmas(), 3, 3, "Kida vortex")
    rec = {"description": "Kida vortex: errors of J0 = p.q (16), J1 = q1^2+q2^2-q3^2, J2 = p1^2+p2^2-p3^2 (20); "
                          "absolute for J0, relative for J1, J2",
           "system": "canonized kida_vortex (25)", "parameters": _kida_params(), **rec}
    return fig, rec


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


_FIGURE_FUNCS: dict[str, Callable] = {
    "seed002-fig1": _fig1, "seed002-fig2": _fig2, "seed002-fig3": _fig3, "seed002-fig5": _fig5, "seed002-fig6": _fig6,
}


# ----------------------------------------------------------------------------- driver


def _load_json(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} exists but is not valid JSON ({e}); move it away to regenerate it") from None
    if not isinstance(data, dict) or not isinstance(data.get("figures", {}), dict):
        raise ValueError(f"{path} does not look like a seed 002 results file (no 'figures' object)")
    return data


def reproduce(
    figures: Iterable[str],
    out_dir: str,
    *,
    spans: Optional[dict[str, float]] = None,
    log: Optional[Callable[[str], None]] = None,
) -> dict:
    """Reproduce the named seed 002 figures into ``out_dir`` and return the updated JSON content.

    Args:
        figures: names from :data:`FIGURES`.
        out_dir: directory for ``<name>.png`` and :data:`JSON_NAME` (created if needed).
        spans: optional ``{name: t1}`` overriding the paper's end time (for quick tests);
            the step size stays the paper's. The JSON records the span actually used.
        log: called with one progress line per figure.

    Needs float64 (``jax.config.update("jax_enable_x64", True)``), which it does not set itself.
    """
    import jax

    import lpjax

    figures = list(dict.fromkeys(figures))
    unknown = [f for f in figures if f not in _SPECS]
    if unknown:
        raise ValueError(f"unknown figure(s) {', '.join(map(repr, unknown))}; choose from {', '.join(FIGURES)}")
    if not jax.config.jax_enable_x64:
        raise RuntimeError('reproducing seed 002 needs float64: call jax.config.update("jax_enable_x64", True) first')
    spans = dict(spans or {})
    specs = {}
    for name in figures:
        spec = _SPECS[name]
        if name in spans:
            spec = dataclasses.replace(spec, t1=float(spans.pop(name)))
        _n_steps(spec)
        specs[name] = spec
    if spans:
        raise ValueError(f"spans given for figures not requested: {sorted(spans)}")

    os.makedirs(out_dir, exist_ok=True)
    json_path = os.path.join(out_dir, JSON_NAME)
    _load_json(json_path)  # fail early on a damaged results file, before the long runs
    runs = _Runs(specs)
    for name in figures:
        spec = specs[name]
        t = time.perf_counter()
        fig, record = _FIGURE_FUNCS[name](runs, spec, spec.t1)
        png = os.path.join(out_dir, f"{name}.png")
        atomic_write(png, lambda p: fig.savefig(p, dpi=110, format="png"))
        wall = time.perf_counter() - t
        record = {
            "figure": name,
            **record,
            "png": os.path.basename(png),
            "wall_time_s": wall,
            "wall_time_note": "includes the integrations this figure was the first to need "
                              "(runs are shared between figures of one invocation)",
            "lpjax_version": lpjax.__version__,
            "jax_version": jax.__version__,
            "dtype": "float64",
            "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        data = _load_json(json_path)  # read-modify-write: keep the other figures' entries
        entries = dict(data.get("figures", {}))
        entries[name] = record
        order = {f: i for i, f in enumerate(FIGURES)}
        entries = dict(sorted(entries.items(), key=lambda kv: order.get(kv[0], len(order))))
        data = {"seed": _SEED, "paper": _PAPER, **{k: v for k, v in data.items() if k not in ("seed", "paper", "figures")},
                "figures": entries}
        atomic_write_json(json_path, data)
        if log is not None:
            mx = record["maxima"]
            summary = ", ".join(f"{k} {v:.2e}" for k, v in mx.items() if isinstance(v, float) and "over" not in k)
            log(f"{name}: {wall:.1f} s -> {png}\n    {summary}")
    return _load_json(json_path)
