"""The systems and methods the command line reaches, by name: every constructor of
:mod:`lpjax.systems` with its parameters and a default initial state, and every method with
its aliases. Which pairs work is each method's own ``check_system``; ``lpjax list`` prints
:data:`LISTED_METHODS` instead of building every system (seconds of JAX work), and
``tests/test_cli.py`` checks that table against ``check_system``."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Callable, Optional

import numpy as np

__all__ = ["SYSTEMS", "METHODS", "LISTED_METHODS", "find_system", "find_method", "parse_params", "supported_methods",
           "format_value", "listing"]

_NONHOLONOMIC = ("rk4", "gl2", "gl4", "projected-gl4")
# the methods that run each system with its default parameters (what supported_methods finds)
LISTED_METHODS = {
    "rigid_body": ("rk4", "gl2", "gl4", "mv", "dep", "collective", "splitting"),
    "rigid_body_n": ("rk4", "gl2", "gl4", "mv", "dep", "collective", "splitting"),
    "heavy_top": ("rk4", "gl2", "gl4", "dep", "collective", "splitting"),
    "heavy_top_n": ("rk4", "gl2", "gl4", "dep", "splitting"),
    "lagrange_top": ("rk4", "gl2", "gl4", "suris", "dep", "collective", "splitting"),
    "clebsch_case": ("rk4", "gl2", "gl4", "suris-clebsch", "dep", "collective", "splitting"),
    "neumann": ("rk4", "gl2", "gl4", "suris-clebsch", "dep", "collective", "splitting"),
    "kida_vortex": ("rk4", "gl2", "gl4", "collective"),
    "movable_base_top": ("rk4", "gl2", "gl4", "dep", "collective"),
    **{name: _NONHOLONOMIC for name in ("veselova", "veselova_n", "chaplygin_sphere", "rubber_chaplygin_sphere",
                                        "lplusr", "spherical_support")},
}


def format_value(v) -> str:
    """A parameter as the command line takes it (JSON), floats to 6 significant digits."""
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    return json.dumps(v)


@dataclasses.dataclass(frozen=True)
class SystemEntry:
    name: str
    summary: str
    params: dict[str, Any]  # name -> default (float, int, bool, str or a list of floats)
    build: Callable[[dict], Any]
    state: Callable[[Any, dict], np.ndarray]  # (system, params) -> default initial state
    aliases: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class MethodEntry:
    name: str
    summary: str
    build: Callable[[Any], Any]  # system -> method (may raise TypeError for a system it does not fit)
    aliases: tuple[str, ...] = ()


def _zoo():
    from . import systems

    return systems


def _cycle(d: int, scale: float = 1.0) -> np.ndarray:
    """A fixed, generic vector of length d (default states of systems whose size is a parameter)."""
    return scale * np.cos(1.0 + 1.3 * np.arange(d))


def _algebra_and_unit(system, n: int) -> np.ndarray:
    """(M, P) on e(n)*: a generic M and a unit P."""
    d = system.algebra.dim - n
    P = _cycle(n) + 2.0 * (np.arange(n) == n - 1)
    return np.concatenate([0.5 * _cycle(d), P / np.linalg.norm(P)])


def _neumann_state(system, p: dict) -> np.ndarray:
    n = len(p["B"])
    x = _cycle(n) + 2.0 * (np.arange(n) == n - 1)
    x /= np.linalg.norm(x)
    v = np.sin(0.5 + np.arange(n))
    v -= (v @ x) * x
    return np.asarray(_zoo().neumann_state(x, 0.5 * v / np.linalg.norm(v)))


def _movable_state(system, p: dict) -> np.ndarray:
    from .reproduce import movable_base_initial_state

    return movable_base_initial_state(system)


def _default(system, p: dict) -> np.ndarray:
    return np.asarray(system.default_state())


def _fixed(values):
    return lambda system, p: np.asarray(values, dtype=float)


def _rigid_n_state(system, p: dict) -> np.ndarray:
    return _cycle(system.algebra.dim)


def _systems() -> dict[str, SystemEntry]:
    z = _zoo
    entries = [
        SystemEntry("rigid_body", "Euler top on so(3)*", {"inertia": [1.0, 2.0, 3.0]},
                    lambda p: z().rigid_body(p["inertia"]), _fixed([1.0, 0.5, 0.8]), ("rb", "euler_top")),
        SystemEntry("rigid_body_n", "free rigid body on so(n)*, I(Ω) = JΩ + ΩJ", {"J": [0.5, 1.0, 1.5, 2.0]},
                    lambda p: z().rigid_body_n(p["J"]), _rigid_n_state, ("rigid_body_4d",)),
        SystemEntry("heavy_top", "heavy top on se(3)*", {"inertia": [1.0, 1.3, 0.7], "chi": [0.0, 0.0, 1.0], "mgl": 2.0},
                    lambda p: z().heavy_top(p["inertia"], p["chi"], p["mgl"]),
                    _fixed([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386]), ("ht",)),
        SystemEntry("heavy_top_n", "heavy top on e(n)* (seed 000, sec. 4)",
                    {"J": [0.5, 0.5, 0.5, 1.0], "A": [0.0, 0.0, 0.0, 1.0]},
                    lambda p: z().heavy_top_n(p["J"], p["A"]), lambda s, p: _algebra_and_unit(s, len(p["J"])),
                    ("heavy_top_4d",)),
        SystemEntry("lagrange_top", "n-dimensional Lagrange top on e(n)* (seed 000, secs 5-6)",
                    {"n": 3, "alpha": 0.5, "frame": "rest"},
                    lambda p: z().lagrange_top(p["n"], p["alpha"], p["frame"]), lambda s, p: _algebra_and_unit(s, p["n"]),
                    ("lagrange",)),
        SystemEntry("clebsch_case", "Clebsch case of a body in an ideal fluid on e(3)* (seed 000, sec. 7)",
                    {"B": [1.0, 2.0, 3.0]}, lambda p: z().clebsch_case(p["B"]),
                    _fixed([0.3, -0.2, 0.5, 0.0, 0.6, 0.8]), ("clebsch",)),
        SystemEntry("neumann", "Neumann system, the smallest leaf of the Clebsch flow (seed 000, sec. 7)",
                    {"B": [1.0, 2.0, 3.0]}, lambda p: z().neumann(p["B"]), _neumann_state),
        SystemEntry("kida_vortex", "Kida vortex on so(2,1)* (seed 002, sec. 5.2)", {"eps": 0.5, "omega": -1.0},
                    lambda p: z().kida_vortex(p["eps"], p["omega"]),
                    lambda s, p: np.asarray(z().kida_initial_state(p["eps"], p["omega"])), ("kida",)),
        SystemEntry("movable_base_top", "heavy top on a movable base with kinetic shaping (seed 002, sec. 5.3)",
                    {"rho": 0.9 * 0.7**2 * 0.215**2 / 0.2}, lambda p: z().movable_base_top(rho=p["rho"]), _movable_state,
                    ("movable_top",)),
        SystemEntry("veselova", "Veselova's nonholonomic problem, 3D (seed 001)", {"inertia": [1.0, 2.0, 3.0]},
                    lambda p: z().veselova(p["inertia"]), _default),
        SystemEntry("veselova_n", "Veselova's problem on so(n) × S^{n-1} (seed 001)", {"J": [1.0, 1.5, 2.0, 2.5]},
                    lambda p: z().veselova_n(p["J"]), _default),
        SystemEntry("chaplygin_sphere", "Chaplygin's rolling ball (seed 001)", {"inertia": [1.0, 2.0, 3.0], "D": 0.5},
                    lambda p: z().chaplygin_sphere(p["inertia"], p["D"]), _default, ("chaplygin",)),
        SystemEntry("rubber_chaplygin_sphere", "the rubber Chaplygin sphere (seed 001)",
                    {"inertia": [1.0, 2.0, 3.0], "D": 0.5, "n": 3},
                    lambda p: z().rubber_chaplygin_sphere(p["inertia"], p["D"], p["n"]), _default, ("rubber_sphere",)),
        SystemEntry("lplusr", "an L+R system (seed 001)", {"inertia": [1.0, 2.0, 3.0], "D": [0.5, 0.3], "T": [0.2, 0.1]},
                    lambda p: z().lplusr(p["inertia"], p["D"], p["T"]), _default, ("l_plus_r",)),
        SystemEntry("spherical_support", "a ball on a spherical support of balls (seed 001)",
                    {"inertia": [1.0, 2.0, 3.0], "balls": [[0.2, 0.5], [0.3, 0.4]], "rubber": False},
                    lambda p: z().spherical_support(p["inertia"], p["balls"], p["rubber"]), _default),
    ]
    return {e.name: e for e in entries}


def _lagrangian(system):
    """The discrete Lagrangian of seed 000/003 that fits ``system`` (DiscreteEulerPoincare)."""
    from . import lagrangians

    for make in (lagrangians.moser_veselov, lagrangians.suris_lagrange_top, lagrangians.suris_clebsch,
                 lagrangians.heavy_top, lagrangians.kirchhoff, lagrangians.midpoint):
        try:
            return make(system)
        except (TypeError, ValueError):
            continue
    raise TypeError("DiscreteEulerPoincare has no discrete Lagrangian for this system (it has them for free rigid "
                    "bodies, Lagrange tops, Clebsch cases, heavy tops and any Hamiltonian quadratic in the momentum "
                    "of a matrix group, lpjax.lagrangians.midpoint)")


def _methods() -> dict[str, MethodEntry]:
    from . import _integrator as lpjax

    entries = [
        MethodEntry("rk4", "classical Runge-Kutta 4 (any system)", lambda s: lpjax.RK4()),
        MethodEntry("gl2", "Gauss-Legendre, 1 stage (implicit midpoint; any system)",
                    lambda s: lpjax.GaussLegendre(1), ("midpoint",)),
        MethodEntry("gl4", "Gauss-Legendre, 2 stages (any system); gl<2s> for s stages",
                    lambda s: lpjax.GaussLegendre(2), ("gauss-legendre",)),
        MethodEntry("mv", "Moser-Veselov (free rigid bodies)", lambda s: lpjax.MoserVeselov(), ("moser-veselov",)),
        MethodEntry("suris", "Suris' map (6.5), (6.19)-(6.20) (Lagrange tops)", lambda s: lpjax.SurisLagrangeTop(),
                    ("suris-lagrange-top",)),
        MethodEntry("suris-clebsch", "Suris' map (7.17) (Clebsch flows, the Neumann system)",
                    lambda s: lpjax.SurisClebsch()),
        MethodEntry("dep", "discrete Euler-Poincare from the system's discrete Lagrangian",
                    lambda s: lpjax.DiscreteEulerPoincare(_lagrangian(s)), ("discrete-euler-poincare",)),
        MethodEntry("collective", "collective Gauss-Legendre (GL4) via Clebsch canonization (Lie-Poisson systems)",
                    lambda s: lpjax.Collective(lpjax.GaussLegendre(2))),
        MethodEntry("projected-gl4", "GL4 followed by the projection onto a constraint (nonholonomic systems)",
                    lambda s: lpjax.Projected(lpjax.GaussLegendre(2)), ("projected",)),
        MethodEntry("splitting", "explicit Lie-Poisson splitting into exact coadjoint flows, the pieces the system has "
                    "(H = sum A_kk mu_k^2 / 2 + b_k mu_k: rigid bodies, heavy and Lagrange tops, Clebsch cases)",
                    lambda s: lpjax.LiePoissonSplitting.for_system(s), ("lie-poisson-splitting",)),
    ]
    return {e.name: e for e in entries}


SYSTEMS = _systems()
METHODS = _methods()


def _lookup(table: dict, name: str, what: str):
    key = name.lower().replace("-", "_") if what == "system" else name.lower()
    for entry in table.values():
        if key == entry.name or key in entry.aliases:
            return entry
    names = ", ".join(table)
    raise ValueError(f"unknown {what} {name!r}; choose one of {names} (aliases: lpjax list)")


def find_system(name: str) -> SystemEntry:
    return _lookup(SYSTEMS, name, "system")


def find_method(name: str) -> MethodEntry:
    key = name.lower()
    inner, sep, scheme = key.partition(":")
    if sep:  # INNER:SCHEME, a composition of the inner method's steps
        from ._integrator import COMPOSITION_SCHEMES, Composition
        from ._integrator.composition import ORDER_RAISING, SPLITTING_SCHEMES

        schemes = {**COMPOSITION_SCHEMES, **SPLITTING_SCHEMES}
        if scheme not in schemes:
            raise ValueError(f"unknown composition scheme {scheme!r} in {name!r}; choose one of {', '.join(schemes)}")
        base = find_method(inner)
        order = "p + 2 from" if scheme in ORDER_RAISING else f"{schemes[scheme].order} from"
        return MethodEntry(key, f"{base.name} composed by {scheme} (order {order} a symmetric method of order p)"
                           if scheme in ORDER_RAISING else f"{base.name} composed by {scheme} (order {order} a method "
                           "of order 1 or 2)", lambda s: Composition(base.build(s), scheme))
    if key.startswith("gl") and key[2:].isdigit():
        order = int(key[2:])
        if order < 2 or order % 2:
            raise ValueError(f"unknown method {name!r}: Gauss-Legendre has even orders, gl2, gl4, gl6, ...")
        from ._integrator import GaussLegendre

        return MethodEntry(key, f"Gauss-Legendre, {order // 2} stages", lambda s: GaussLegendre(order // 2))
    return _lookup(METHODS, name, "method")


def _coerce(name: str, text: str, default):
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ValueError(f"--param {name}: expected true or false, got {text!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"--param {name}: expected an integer, got {text!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"--param {name}: expected a finite number, got {text!r}")
        return float(value)
    if isinstance(default, str):
        return str(value)
    arr = np.asarray(value, dtype=object)
    if arr.size == 0 or arr.ndim != np.ndim(default) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in arr.ravel()):
        raise ValueError(f"--param {name}: expected a JSON list like {json.dumps(default)}, got {text!r}")
    return arr.astype(float).tolist()


def parse_params(entry: SystemEntry, items) -> dict:
    """``["name=value", ...]`` over the system's defaults; values are JSON (numbers, lists,
    true/false) or plain strings."""
    params = dict(entry.params)
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"--param expects name=value, got {item!r}")
        if name not in entry.params:
            known = ", ".join(entry.params) or "none"
            raise ValueError(f"{entry.name} has no parameter {name!r}; its parameters: {known}")
        params[name] = _coerce(name, text.strip(), entry.params[name])
    return params


def supported_methods(system) -> list[str]:
    """The names of the methods that accept ``system`` (by their own check_system)."""
    ok = []
    for entry in METHODS.values():
        try:
            entry.build(system).check_system(system)
        except (TypeError, ValueError):
            continue
        ok.append(entry.name)
    return ok


def build(system_name: str, method_name: str, params=(), y0: Optional[list] = None):
    """``(entry, params, system, method, y0)`` for the command line: the system with its
    parameters, the method (refused, with the supported list, when it does not fit) and the
    initial state (the system's default unless ``y0`` is given)."""
    entry = find_system(system_name)
    mentry = find_method(method_name)
    params = parse_params(entry, params)
    system = entry.build(params)
    try:
        method = mentry.build(system)
        method.check_system(system)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{mentry.name} does not run {entry.name} ({str(e).splitlines()[0]}); methods for "
                         f"{entry.name}: {', '.join(supported_methods(system))}") from None
    state = np.asarray(entry.state(system, params) if y0 is None else y0, dtype=float)
    system.check_state(state)
    return entry, params, system, method, state


def listing(pairs: bool, figures: list) -> list[str]:
    """The lines of ``lpjax list``: the systems with their parameters (and, with ``pairs``, the
    methods that run each, from :data:`LISTED_METHODS`: no system is built), the methods, the
    compositions with their orders, and ``figures``."""
    from ._integrator import COMPOSITION_SCHEMES

    lines = ["systems (lpjax run SYSTEM [--param name=value ...]):"]
    for e in SYSTEMS.values():
        alias = f" (aliases: {', '.join(e.aliases)})" if e.aliases else ""
        lines += [f"  {e.name:24s} {e.summary}{alias}",
                  f"  {'':24s} parameters: " + ", ".join(f"{k}={format_value(v)}" for k, v in e.params.items())]
        if pairs:
            lines.append(f"  {'':24s} methods: {', '.join(LISTED_METHODS[e.name])}")
    lines.append("methods (--method):")
    for m in METHODS.values():
        alias = f" (aliases: {', '.join(m.aliases)})" if m.aliases else ""
        lines.append(f"  {m.name:24s} {m.summary}{alias}")
    lines += [f"  {'gl<2s>':24s} Gauss-Legendre with s stages (gl2, gl4, gl6, gl8, ...)",
              f"  {'INNER:SCHEME':24s} a composition of a symmetric method's steps (splitting:kahan-li6, mv:triple-jump, "
              "gl4:suzuki); schemes: " + ", ".join(f"{k} (order {v.order})" for k, v in COMPOSITION_SCHEMES.items())]
    lines += ["adaptive steps (lpjax run/ensemble --rtol R [--atol A] --t1 T): gl<2s> and collective (a PID controller, "
              "each member its own steps);",
              "  ensemble saves at --save-times t,... or --saves K; --error-estimate doubling (default: goes on from "
              "the two half steps) or defect"]
    return lines + ["figures (lpjax reproduce):"] + [f"  {f}" for f in figures] + ["  all"]
