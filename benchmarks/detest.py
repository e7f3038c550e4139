"""DETEST (Hull, Enright, Fellen & Sedgwick 1972) classes A–E with an adaptive step: lpjax's
Gauss–Legendre as a diffrax solver against diffrax's Kvaerno5 and Dopri8.

    python benchmarks/detest.py [--quick] [--out benchmarks/results/]

Each of the 25 problems runs from t = 0 to 20 with ``PIDController(rtol = atol = 1e-8)`` and
``dt0=None`` (float64, CPU). Solvers: ``lpjax.diffrax.GaussLegendre(2)`` (GL4) and ``(3)``
(GL6) at their defaults (``solver="auto"``; the step-doubling estimate of the full step's
error; the solution goes on from the full step),
diffrax ``Kvaerno5`` (implicit, order 5) and ``Dopri8`` (explicit, order 8); GL6 once more at
rtol = atol = 1e-11, to set its error and time beside Kvaerno5's at 1e-8; and two options:
GL4 with ``local_extrapolation=True`` (going on from the two half steps) and GL6 with
``solver="fixed_point"`` (``lpjax.integrate``'s stage solve, without the simplified Newton
fallback: it meets steps where the fixed point does not contract as rejected steps).
Reference: scipy ``solve_ivp(DOP853, rtol = atol = 1e-13)``.

Reported per run: the largest absolute error of the state at t = 20; the DETEST bound check
used by diffrax's own ``test_detest.py``, ``|y − y_ref| ≤ 4e-5 + 4e-5 |y_ref|`` in every
component (``bound`` is the largest ratio of the two sides: ≤ 1 passes); accepted and rejected
steps, and of the rejected steps those whose stage solve failed (counted on the host for the
lpjax solvers; diffrax counts them as rejections too); and the wall time of the second call
after ``block_until_ready``, compile apart. ``--quick`` runs one problem per class.
"""

from __future__ import annotations

import functools
import math
from typing import ClassVar

import _harness as H
import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy
from scipy.integrate import solve_ivp

import lpjax.diffrax as ldx
from lpjax import RESULTS

T1 = 20.0
TOL = 1e-8
TIGHT = 1e-11  # a second GL6 run: its error and time beside Kvaerno5's at TOL
DETEST_BOUND = 4e-5


# ----------------------------------------------------------------------------- the problems
# Each is (vector field f(t, y) on a flat state, y0), in any array namespace ``xp``.


def _tridiagonal(n, diag, sub, sup):
    A = np.zeros((n, n))
    A[np.arange(n - 1), np.arange(n - 1)] = diag
    A[np.arange(1, n), np.arange(n - 1)] = sub
    A[np.arange(n - 1), np.arange(1, n)] = sup
    return A


def _linear(A):
    return lambda xp: ((lambda t, y: xp.asarray(A) @ y), np.eye(len(A))[0])


# C5: five outer planets around the sun (Jupiter … Pluto), Hull et al. 1972, in AU and days
_K2 = 2.95912208286
_M0 = 1.00000597682
_M = np.array([0.000954786104043, 0.000285583733151, 0.0000437273164546, 0.0000517759138449, 0.00000277777777778])
_Q0 = np.array([[3.42947415189, 6.64145542550, 11.2630437207, -30.1552268759, -21.1238353380],
                [3.35386959711, 5.97156957878, 14.6952576794, 1.65699966404, 28.4465098142],
                [1.35494901715, 2.18231499728, 6.27960525067, 1.43785752721, 15.3882659679]])
_V0 = np.array([[-0.557160570446, -0.415570776342, -0.325325669158, -0.024047625417, -0.176860753121],
                [0.505696783289, 0.365682722812, 0.189706021964, -0.287659532608, -0.216393453025],
                [0.230578543901, 0.169143213293, 0.087726532278, -0.117219543175, -0.014864789309]])


def _planets(xp):
    off = 1.0 - np.eye(5)

    def f(t, y):
        q, v = y[:15].reshape(3, 5), y[15:]
        r3 = xp.sum(q * q, axis=0) ** 1.5  # (5,)
        d = q[:, None, :] - q[:, :, None]  # d[:, j, k] = q_k − q_j
        d3 = xp.sum(d * d, axis=0) + np.eye(5)  # 1 on the diagonal, where d = 0
        pull = xp.sum(_M[None, None, :] * off[None] * (d / d3[None] ** 1.5 - (q / r3[None])[:, None, :]), axis=2)
        acc = _K2 * (-(_M0 + _M)[None, :] * q / r3[None, :] + pull)
        return xp.concatenate([v, acc.reshape(-1)])

    return f, np.concatenate([_Q0.reshape(-1), _V0.reshape(-1)])


def _orbit(e):
    def make(xp):
        def f(t, y):
            r3 = (y[0] ** 2 + y[1] ** 2) ** 1.5
            return xp.stack([y[2], y[3], -y[0] / r3, -y[1] / r3])
        return f, np.array([1 - e, 0.0, 0.0, math.sqrt((1 + e) / (1 - e))])
    return make


def _scalar(g, y0):
    return lambda xp: ((lambda t, y: g(xp, t, y)), np.atleast_1d(np.asarray(y0, float)))


def _system(g, y0):
    return lambda xp: ((lambda t, y: xp.stack(g(xp, t, *y))), np.asarray(y0, float))


PROBLEMS = {
    "A1": _scalar(lambda xp, t, y: -y, 1.0),
    "A2": _scalar(lambda xp, t, y: -0.5 * y**3, 1.0),
    "A3": _scalar(lambda xp, t, y: y * xp.cos(t), 1.0),
    "A4": _scalar(lambda xp, t, y: 0.25 * y * (1 - y / 20), 1.0),
    "A5": _scalar(lambda xp, t, y: (y - t) / (y + t), 4.0),
    "B1": _system(lambda xp, t, a, b: (2 * (a - a * b), -(b - a * b)), (1.0, 3.0)),
    "B2": _system(lambda xp, t, a, b, c: (-a + b, a - 2 * b + c, b - c), (2.0, 0.0, 1.0)),
    "B3": _system(lambda xp, t, a, b, c: (-a, a - b**2, b**2), (1.0, 0.0, 0.0)),
    "B4": _system(lambda xp, t, a, b, c: (-b - a * c / xp.sqrt(a**2 + b**2), a - b * c / xp.sqrt(a**2 + b**2),
                                          a / xp.sqrt(a**2 + b**2)), (3.0, 0.0, 0.0)),
    "B5": _system(lambda xp, t, a, b, c: (b * c, -a * c, -0.51 * a * b), (0.0, 1.0, 1.0)),
    "C1": _linear(_tridiagonal(10, -1.0, 1.0, 0.0)),
    "C2": _linear(_tridiagonal(10, -np.arange(1.0, 10.0), np.arange(1.0, 10.0), 0.0)),
    "C3": _linear(_tridiagonal(10, -2.0, 1.0, 1.0)),
    "C4": _linear(_tridiagonal(51, -2.0, 1.0, 1.0)),
    "C5": _planets,
    **{f"D{i + 1}": _orbit(e) for i, e in enumerate((0.1, 0.3, 0.5, 0.7, 0.9))},
    "E1": _system(lambda xp, t, a, b: (b, -(b / (t + 1) + a * (1 - 0.25 / (t + 1) ** 2))),
                  (0.6713967071418030, 0.09540051444747446)),  # Bessel J_{1/2}(t + 1) √(t + 1)
    "E2": _system(lambda xp, t, a, b: (b, (1 - a**2) * b - a), (2.0, 0.0)),  # van der Pol
    "E3": _system(lambda xp, t, a, b: (b, a**3 / 6 - a + 2 * xp.sin(2.78535 * t)), (0.0, 0.0)),  # Duffing
    "E4": _system(lambda xp, t, a, b: (b, 0.032 - 0.4 * b**2), (30.0, 0.0)),
    "E5": _system(lambda xp, t, a, b: (b, xp.sqrt(1 + b**2) / (25 - t)), (0.0, 0.0)),
}

# label -> (solver, tolerance)
SOLVERS = {"lpjax GL4": (lambda: ldx.GaussLegendre(2), TOL), "lpjax GL6": (lambda: ldx.GaussLegendre(3), TOL),
           "diffrax Kvaerno5": (diffrax.Kvaerno5, TOL), "diffrax Dopri8": (diffrax.Dopri8, TOL),
           "lpjax GL6 tol=1e-11": (lambda: ldx.GaussLegendre(3), TIGHT),
           "lpjax GL4 extrapolated": (lambda: ldx.GaussLegendre(2, local_extrapolation=True), TOL),
           "lpjax GL6 fixed point": (lambda: ldx.GaussLegendre(3, solver="fixed_point"), TOL)}


# ----------------------------------------------------------------------------- one run


class _FailedSolves:
    """Counts the steps whose stage solve failed, on the host: diffrax's statistics count them
    among the rejected steps."""

    def __init__(self):
        self.count = 0

    def __call__(self, failed):
        self.count += int(failed)


class _Counted(diffrax.AbstractAdaptiveSolver):
    """An lpjax Gauss–Legendre solver whose every attempted step reports a failed stage solve
    to ``counter`` (a debug callback; used for one extra, untimed run)."""

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar = ldx.GaussLegendre.interpolation_cls
    solver: ldx.GaussLegendre
    counter: _FailedSolves = eqx.field(static=True)

    def order(self, terms):
        return self.solver.order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        out = self.solver.step(terms, t0, t1, y0, args, solver_state, made_jump)
        jax.debug.callback(self.counter, out[-1] != diffrax.RESULTS.successful)
        return out

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


@functools.lru_cache(maxsize=None)
def _reference(name: str) -> np.ndarray:
    """y(20) by scipy DOP853 at rtol = atol = 1e-13, once per problem."""
    f_np, y0 = PROBLEMS[name](np)
    return solve_ivp(f_np, (0.0, T1), y0, method="DOP853", rtol=1e-13, atol=1e-13).y[:, -1]


def _run(name: str, label: str) -> dict:
    ref = _reference(name)
    f_jax, y0 = PROBLEMS[name](jnp)
    term = diffrax.ODETerm(lambda t, y, args: f_jax(t, y))
    make, tol = SOLVERS[label]
    solver = make()
    counter = _FailedSolves() if isinstance(solver, ldx.GaussLegendre) else None

    def solve(s, y):
        sol = diffrax.diffeqsolve(term, s, 0.0, T1, None, y, stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
                                  max_steps=16**4, throw=False)
        return sol.ys[-1], sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"], sol.result

    y0j = jnp.asarray(y0)
    compiled = eqx.filter_jit(solve).lower(solver, y0j).compile()
    (y1, acc, rej, result), stats = H.time_calls(lambda: jax.block_until_ready(compiled(solver, y0j)))
    failed = None
    if counter is not None:  # once more with the host counter: the timed runs carry no callback
        jax.block_until_ready(solve(_Counted(solver, counter), y0j))
        failed = counter.count
    err = np.abs(np.asarray(y1) - ref)
    return dict(problem=name, solver=label, tol=tol, ok=bool(result == diffrax.RESULTS.successful),
                error=float(err.max()), bound=float(np.max(err / (DETEST_BOUND * (1 + np.abs(ref))))),
                accepted=int(acc), rejected=int(rej), failed_solves=failed, time_s=stats["time_s"],
                first_call_s=stats["first_call_s"])


# ----------------------------------------------------------------------------- summary


def _summary(rows) -> list[dict]:
    """Per problem: GL4's bound check (default and extrapolated); GL6's error and time over
    Kvaerno5's at the same tolerance, and at the tighter one; rejected over accepted steps of
    GL4, of GL6 and of GL6 with solver="fixed_point"."""
    by = {(r["problem"], r["solver"]): r for r in rows}
    out = []
    for p in dict.fromkeys(r["problem"] for r in rows):
        gl4, gl6, tight, kv = (by[p, s] for s in ("lpjax GL4", "lpjax GL6", "lpjax GL6 tol=1e-11", "diffrax Kvaerno5"))
        kv_err = max(kv["error"], 1e-300)
        ratio = {s: by[p, s]["rejected"] / by[p, s]["accepted"] for s in ("lpjax GL4", "lpjax GL6", "lpjax GL6 fixed point")}
        out.append(dict(problem=p, gl4_bound=gl4["bound"], gl4_extrapolated_bound=by[p, "lpjax GL4 extrapolated"]["bound"],
                        gl6_over_kvaerno5=gl6["error"] / kv_err,
                        gl6_time_over_kvaerno5=gl6["time_s"] / kv["time_s"],
                        gl6_tight_over_kvaerno5=tight["error"] / kv_err,
                        gl6_tight_time_over_kvaerno5=tight["time_s"] / kv["time_s"],
                        gl4_rejected_over_accepted=ratio["lpjax GL4"], gl6_rejected_over_accepted=ratio["lpjax GL6"],
                        gl6_fixed_point_rejected_over_accepted=ratio["lpjax GL6 fixed point"]))
    return out


def main() -> None:
    args = H.arg_parser(__doc__, "one problem per class (A1, B1, C3, D5, E2)").parse_args()
    H.start()
    names = ["A1", "B1", "C3", "D5", "E2"] if args.quick else list(PROBLEMS)
    rows = []
    for name in names:
        for label in SOLVERS:
            rows.append(_run(name, label))
            r = rows[-1]
            H.log(f"{name} {label}: error {r['error']:.1e} (bound {r['bound']:.2f}), {r['accepted']}/{r['rejected']}"
                  f" steps, {r['time_s'] * 1e3:.2f} ms")
    summary = _summary(rows)
    print(f"\nDETEST A–E, PID rtol = atol = {TOL:g}, t = {T1:g}, {H.machine_line()}; errors against DOP853 at 1e-13")
    H.print_table([("problem", -7, "problem"), ("solver", -17, "solver"), ("max |error|", 12, "error:.2e"),
                   ("bound", 7, "bound:.3f"), ("accepted", 9, "accepted"), ("rejected", 9, "rejected"),
                   ("failed solves", 14, "failed_solves"), ("time[ms]", 10, lambda r: f"{r['time_s'] * 1e3:.2f}"),
                   ("ok", 4, lambda r: "" if r["ok"] else "FAIL")], rows, group="problem")
    print("\nbound: max |error| / (4e-5 (1 + |y_ref|)) over the components; <= 1 is within DETEST's bound")
    print(f"GL6 / Kvaerno5: error and time of GL6 at {TOL:g} and at {TIGHT:g} over Kvaerno5's at {TOL:g}")
    H.print_table([("problem", -7, "problem"), ("GL4 bound", 10, "gl4_bound:.3f"),
                   ("GL4 extrap. bound", 18, "gl4_extrapolated_bound:.3f"),
                   ("GL6 error", 10, "gl6_over_kvaerno5:.3g"), ("GL6 time", 9, "gl6_time_over_kvaerno5:.3g"),
                   ("GL6 1e-11 error", 16, "gl6_tight_over_kvaerno5:.3g"),
                   ("GL6 1e-11 time", 15, "gl6_tight_time_over_kvaerno5:.3g"),
                   ("GL4 rej/acc", 12, "gl4_rejected_over_accepted:.2f"),
                   ("GL6 rej/acc", 12, "gl6_rejected_over_accepted:.2f"),
                   ("GL6 f.p. rej/acc", 17, "gl6_fixed_point_rejected_over_accepted:.2f")], summary)
    args.out.mkdir(parents=True, exist_ok=True)
    H.write_json(args.out / ("detest_quick.json" if args.quick else "detest.json"), {
        "metadata": H.metadata("detest", "quick" if args.quick else "full", [diffrax, scipy], {}, ""),
        "tolerance": TOL, "tight_tolerance": TIGHT, "t1": T1, "detest_bound": DETEST_BOUND, "rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
