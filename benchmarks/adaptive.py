"""Adaptive ensembles: a heterogeneous ensemble of heavy tops, each member with its own steps.

    python benchmarks/adaptive.py [--quick] [--out benchmarks/results/]

N = 10⁴ Lagrange tops (I = 1, 1, 0.7; χ = (0, 0, 1); mgl = 2; the symmetric heavy top, which is
integrable, so that an error at t = 100 measures the method and not a Lyapunov exponent),
|M| log-uniform over two decades [0.1, 10], M and Γ in random directions, |Γ| = 1, to t = 100
(float64, CPU). Every contender runs at the same worst-member error, 1e-8 (the largest over the
members of max|y − y_ref| / max|y_ref| at t = 100, y_ref from scipy's DOP853 at
rtol = atol = 1e-13), found on a reference set (the 24 members of largest |M| and 24 at random:
the error grows with |M|) by a search over each contender's one knob (tolerance or step):

* ``lpjax.ensemble(..., controller=PIDController(rtol=atol=tol), t1=100)``, GL4 and GL6,
  native kernel, with either error estimate (``"doubling"``, ``"defect"``), step doubling going
  on from the half steps (the default, local extrapolation) or from the full step
  (``local_extrapolation=False``, "full step"); the members sorted by predicted cost, and also
  unsorted, for the lanes' use;
* the fixed-step ``lpjax.ensemble`` (GL4 and GL6, native): one dt for every member, the one
  the worst member needs;
* ``jax.vmap`` of ``diffrax.diffeqsolve`` with ``PIDController(rtol=atol=tol)``: ``Tsit5`` and
  ``lpjax.diffrax.GaussLegendre(2)`` (a while loop over the batch, which runs until its slowest
  member is done).

Each is timed on all N members: compiled first (the native kernel on a few members, the vmaps
ahead of time), then the second call, after ``block_until_ready``; the largest error on the
reference set is measured on that run. The fixed-step ensemble also runs in the native kernel's
chunks of 32 members (the adaptive programs' chunks; 256 is its default). Reported: wall time,
ratio to the adaptive GL4 ensemble, attempts per member, and for the adaptive runs the lanes'
use: the members' attempts over the attempts of 32-member blocks that run as long as their
slowest member (unsorted against
sorted). ``--quick``: N = 1000 (the same reference set).
"""

from __future__ import annotations

import time

import _harness as H
import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

import lpjax
import lpjax.diffrax as ldx
from lpjax._ensemble._kernels._native import _run as _native
from lpjax.kernels import Native
from lpjax.systems import heavy_top

T1, TARGET, BLOCK = 100.0, 1e-8, _native.ADAPTIVE_CHUNK
TOP = heavy_top(np.array([1.0, 1.0, 0.7]), np.array([0.0, 0.0, 1.0]), 2.0)


def members(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    size = np.exp(rng.uniform(np.log(0.1), np.log(10.0), n))
    M, G = rng.normal(size=(n, 3)), rng.normal(size=(n, 3))
    M *= (size / np.linalg.norm(M, axis=1))[:, None]
    G /= np.linalg.norm(G, axis=1)[:, None]
    return np.concatenate([M, G], axis=1)


def reference_set(y0s: np.ndarray, seed: int = 1) -> np.ndarray:
    fast = np.argsort(-np.linalg.norm(y0s[:, :3], axis=1))[:24]
    rest = np.setdiff1d(np.arange(len(y0s)), fast)
    return np.concatenate([fast, np.random.default_rng(seed).choice(rest, 24, replace=False)])


def _field(t, y):
    """The Lagrange top's field in plain Python (checked against ``TOP.vector_field`` in main):
    Ṁ = M × ω + mgl Γ × χ, Γ̇ = Γ × ω, ω = I⁻¹M, χ = e₃."""
    m1, m2, m3, g1, g2, g3 = y
    w1, w2, w3 = m1, m2, m3 / 0.7
    return [m2 * w3 - m3 * w2 + 2.0 * g2, m3 * w1 - m1 * w3 - 2.0 * g1, m1 * w2 - m2 * w1,
            g2 * w3 - g3 * w2, g3 * w1 - g1 * w3, g1 * w2 - g2 * w1]


def dop853(y0: np.ndarray) -> np.ndarray:
    sol = solve_ivp(_field, (0.0, T1), y0, method="DOP853", rtol=1e-13, atol=1e-13)
    return sol.y[:, -1]


def worst_error(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.max(np.abs(y - ref), axis=1) / np.max(np.abs(ref), axis=1)))


# ----------------------------------------------------------------------------- the contenders


def adaptive(stages: int, tol: float, estimate: str = "doubling", sort: bool = True, extrapolate=None):
    def run(y0s):
        sol = lpjax.ensemble(TOP, lpjax.GaussLegendre(stages), y0s, None, kernel=Native(sort_by_cost=sort), t1=T1,
                             controller=lpjax.PIDController(rtol=tol, atol=tol), max_steps=10**6,
                             error_estimate=estimate, local_extrapolation=extrapolate)
        steps = np.asarray(sol.stats["num_accepted_steps"]) + np.asarray(sol.stats["num_rejected_steps"])
        return np.asarray(sol.final_state), steps, np.asarray(sol.result)

    return run


def fixed(stages: int, n_steps: int, chunk: int = _native.CHUNK):
    def run(y0s):
        sol = lpjax.ensemble(TOP, lpjax.GaussLegendre(stages), y0s, T1 / n_steps, n_steps, kernel=Native(chunk=chunk))
        return np.asarray(sol.final_state), np.full(len(y0s), n_steps), np.asarray(sol.result)

    return run


def vmapped(solver, tol: float):
    term = diffrax.ODETerm(lambda t, y, args: TOP.vector_field(y))

    def one(y0):
        sol = diffrax.diffeqsolve(term, solver, 0.0, T1, None, y0, saveat=diffrax.SaveAt(t1=True),
                                  stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol), max_steps=10**6,
                                  throw=False)
        return sol.ys[-1], sol.stats["num_steps"], sol.result._value

    f = jax.jit(jax.vmap(one))
    compiled = {}

    def run(y0s):
        key = y0s.shape
        if key not in compiled:
            compiled[key] = f.lower(jnp.asarray(y0s)).compile()
        out = jax.block_until_ready(compiled[key](jnp.asarray(y0s)))
        return tuple(np.asarray(a) for a in out)

    return run


# ----------------------------------------------------------------------------- calibration


def calibrate(make, knobs, y0s, ref) -> tuple:
    """The first of ``knobs`` (loosest first) whose run of the reference set has its worst error
    at most TARGET: ``(knob, error)``."""
    for knob in knobs:
        y, _, result = make(knob)(y0s)
        err = worst_error(y, ref)
        H.log(f"    {knob!r}: worst error {err:.2e}")
        if err <= TARGET and np.all(result == 0):
            return knob, err
    raise RuntimeError(f"no knob of {knobs} reaches {TARGET}")


def predicted_order(y0s: np.ndarray, tol: float, order: int) -> np.ndarray:
    """The members by predicted cost, the dearest first, as the adaptive ensemble sorts them."""
    ctrl = lpjax.PIDController(rtol=tol, atol=tol)
    h = jax.jit(jax.vmap(lambda y: ctrl.initial_step(TOP.vector_field, y, order)))(jnp.asarray(y0s))
    return np.argsort(np.asarray(h), kind="stable")


def lanes_used(steps: np.ndarray, order: np.ndarray) -> float:
    """The members' attempts over those of blocks of BLOCK members in ``order``, each block
    running as long as its slowest member (the native kernel's chunks of adaptive members)."""
    s = steps[order]
    pad = -len(s) % BLOCK
    blocks = np.concatenate([s, np.zeros(pad, s.dtype)]).reshape(-1, BLOCK)
    return float(s.sum() / (blocks.max(axis=1).sum() * BLOCK))


def main() -> None:
    args = H.arg_parser(__doc__, "N = 1000").parse_args()
    H.start()
    loads = {"start": H.loadavg()}
    N = 1000 if args.quick else 10_000
    y0s = members(N)
    R = reference_set(y0s)
    probe = y0s[:4]
    assert np.allclose([_field(0, y) for y in probe], np.asarray(jax.vmap(TOP.vector_field)(probe)), rtol=1e-14,
                       atol=1e-14)
    H.log(f"DOP853 references of {len(R)} members")
    ref = np.stack([dop853(y0s[i]) for i in R])
    tols = [10.0 ** (-e / 2) for e in range(16, 29)]  # 1e-8, 3e-9, ... 1e-14
    loose = [10.0 ** (-e / 2) for e in range(6, 29)]  # 1e-3 ... 1e-14: the defect's tolerances are larger
    contenders = {
        "adaptive GL4": (lambda tol: adaptive(2, tol), tols),
        "adaptive GL6": (lambda tol: adaptive(3, tol), tols),
        "adaptive GL4, full step": (lambda tol: adaptive(2, tol, extrapolate=False), tols),
        "adaptive GL6, full step": (lambda tol: adaptive(3, tol, extrapolate=False), tols),
        "adaptive GL4, defect": (lambda tol: adaptive(2, tol, "defect"), loose),
        "adaptive GL6, defect": (lambda tol: adaptive(3, tol, "defect"), loose),
        "fixed-step GL4": (lambda n: fixed(2, n), [int(T1 * 2 ** (k / 2)) for k in range(12, 30)]),
        "fixed-step GL6": (lambda n: fixed(3, n), [int(T1 * 2 ** (k / 2)) for k in range(8, 26)]),
        "diffrax Tsit5, vmap": (lambda tol: vmapped(diffrax.Tsit5(), tol), tols),
        "lpjax.diffrax.GaussLegendre(2), vmap": (lambda tol: vmapped(ldx.GaussLegendre(2), tol), tols),
    }
    rows = []
    for name, (make, knobs) in contenders.items():
        H.log(f"{name}: calibrating on the reference set")
        knob, _ = calibrate(make, knobs, y0s[R], ref)
        variants = [(name, make(knob))]
        if name.startswith("adaptive"):
            stages, estimate = int(name[11]) // 2, "defect" if "defect" in name else "doubling"
            extrapolate = False if "full step" in name else None
            variants.append((f"{name}, unsorted", adaptive(stages, knob, estimate, sort=False, extrapolate=extrapolate)))
        if name.startswith("fixed"):  # the native kernel's chunks as the adaptive ones (faster here)
            variants.append((f"{name}, chunks of {_native.ADAPTIVE_CHUNK}",
                             fixed(int(name[13]) // 2, knob, _native.ADAPTIVE_CHUNK)))
        for label, run in variants:
            run(y0s[:8])  # compiles (the native kernel's object code is cached by program)
            H.log(f"{label}: timing N = {N}")
            t = time.perf_counter()
            y, steps, result = run(y0s)
            wall = time.perf_counter() - t
            row = dict(contender=label, knob=knob, time_s=wall, worst_error=worst_error(y[R], ref),
                       failed=int(np.sum(result != 0)), mean_attempts=float(np.mean(steps)),
                       max_attempts=int(np.max(steps)))
            if label.startswith("adaptive"):
                k = 2 * stages + 1 if estimate == "doubling" else stages + 1
                row.update(lanes_used_sorted=lanes_used(steps, predicted_order(y0s, knob, k)),
                           lanes_used_unsorted=lanes_used(steps, np.arange(N)),
                           lanes_used_by_actual_cost=lanes_used(steps, np.argsort(-steps, kind="stable")))
            rows.append(row)
            H.log(f"  {wall:.2f} s, worst error {row['worst_error']:.2e}, attempts {row['mean_attempts']:.0f} mean, "
                  f"{row['max_attempts']} max")
    base = rows[0]["time_s"]
    for row in rows:
        row["ratio_to_adaptive_gl4"] = row["time_s"] / base
    loads["end"] = H.loadavg()
    print(f"\n{N} Lagrange tops, |M| in [0.1, 10], t = {T1}, worst-member error <= {TARGET} ({H.machine_line()})")
    H.print_table([("contender", -40, "contender"), ("knob", 10, lambda r: f"{r['knob']:.3g}"),
                   ("time s", 9, "time_s:.2f"), ("x GL4", 7, "ratio_to_adaptive_gl4:.3f"),
                   ("worst err", 10, "worst_error:.2e"), ("mean att", 9, "mean_attempts:.0f"),
                   ("max att", 8, "max_attempts"),
                   ("lanes", 6, lambda r: f"{r['lanes_used_unsorted' if 'unsorted' in r['contender'] else 'lanes_used_sorted']:.2f}"
                    if "lanes_used_sorted" in r else "-")], rows)
    out = {"meta": H.metadata("adaptive", "quick" if args.quick else "full", [diffrax], loads,
                              "one timed run each, after a compiling call"),
           "N": N, "t1": T1, "target_error": TARGET, "reference_members": R.tolist(), "rows": rows}
    H.write_json(args.out / ("adaptive_quick.json" if args.quick else "adaptive.json"), out)


if __name__ == "__main__":
    main()
