"""Ensemble throughput of the explicit discrete maps: lpjax vs a hand-written numba loop.

    python benchmarks/explicit_maps.py [--quick] [--out benchmarks/results/] [--chunk 512]

Problems (float64, random initial states from ``numpy.random.default_rng(SEED)``):

* Lagrange tops: ``lpjax.systems.lagrange_top(3, frame="rest")`` (gravity p = e_3), state
  y = (m01, m02, m12, a) with m ~ N(0, 1)^3 and a uniform on the unit sphere; dt = 0.01;
* free rigid bodies: ``lpjax.systems.rigid_body((1, 2, 3))``, state M ~ N(0, 1)^3; dt = 0.02.

Methods, each run on an ensemble of N bodies for a fixed number of steps, only the final
states kept (no trajectories are stored):

* the explicit structure-preserving map of each system: ``lpjax.SurisLagrangeTop()`` (eq.
  (6.5), explicit) for the tops, ``lpjax.MoserVeselov()`` (default settings: implicit in
  Cayley coordinates, ``max_iters`` = 20 fixed iterations) for the rigid bodies. Each
  ``method.step`` is scanned over time and vmapped over the bodies in two layouts:
  *wide* = ``jit(vmap(scan))`` over all N bodies at once, and *chunked* = ``jit(lax.map(
  vmap(scan), y0.reshape(n_chunks, chunk, d)))`` (time-inside-chunk: each chunk of ``--chunk``
  bodies runs its whole time scan; N is padded up to a multiple of the chunk with copies of
  the first states, and the padding is counted as overhead, not as work). Both carry a
  per-body success flag built from the step's RESULTS code;
* **the reference peer**: a hand-written numba loop of the same map (``@numba.njit(
  fastmath=False)``, single thread, loop over bodies outside and steps inside, unrolled 3x3
  closed forms; Moser–Veselov with the same preconditioned fixed-point iteration in Cayley
  coordinates and the same 20 iterations as lpjax, then ``M_{k+1} = f^T M_k``, which equals
  lpjax's ``vee(f^T hat(M_k) f)`` for the rotation f). Its final states are checked against
  lpjax's (printed: max |y_numba - y_lpjax|);
* a diagnostic, not part of lpjax: the same maps written as closed-form elementwise ``jnp``
  code (no 3x3 ``dot``/``einsum``), in both layouts, to separate the cost of the layout from
  the cost of lpjax's matrix-based step;
* ``lpjax.GaussLegendre(2)`` (GL4, default settings) on the continuous system, wide layout;
* diffrax ``Tsit5`` on ``ODETerm(lambda t, y, args: system.vector_field(y))`` with
  ``ConstantStepSize`` and dt0 = dt (the same steps as GL4), ``jit(vmap(diffeqsolve))``.

Work per row: N = 1e5 bodies (``--quick``: 1e4). Step counts differ per method so that each
timed call stays at a few seconds on this machine (see the ``steps`` column); throughput is
counted per body-step, which is what the table compares. N-scaling: N = 1e2 ... 1e6 (quick:
1e2 ... 1e4) for the explicit maps (lpjax wide and chunked, numba, and the closed-form jnp
diagnostic); at N = 1e6 the step count is cut by 10x to keep the run short.

Timing: each configuration is jitted once (numba compiles on its first call); the first call
is timed separately and the reported time is the median wall time of the second and later
calls, each ended by ``jax.block_until_ready`` (at least one, more while they fit a small
budget). ``compile`` = first-call time minus that median. ``cpu/wall`` = process CPU time /
wall time of the timed calls (> 1 means XLA used more than one thread; numba is single
threaded). ``ratio`` = throughput / throughput(numba loop of the same system's map, same N,
measured in the same run): ratio > 1 means faster than numba, < 1 slower.

Sanity checks: relative drift of |a|^2 and of the Suris integral
``SurisLagrangeTop().integral(system, y, dt)`` (eq. (6.6)) for the tops, and of |M|^2 for
Moser–Veselov, over the whole run (max over the ensemble).

Output: a fixed-width table on stdout, ``explicit_maps.json`` and ``explicit_maps.png``
(throughput against N, log-log) in the output directory (written atomically).
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402

import lpjax  # noqa: E402
from benchmarks.rigid_body import atomic_write_bytes  # noqa: E402
from benchmarks.rigid_body import metadata as _rigid_body_metadata  # noqa: E402

SEED = 20240917
INERTIA = (1.0, 2.0, 3.0)
DEFAULT_CHUNK = 512

# per system: dt, steps of the explicit map, steps of GL4 / Tsit5 (same N), full and quick
CONFIG = {
    "full": {
        "N": 100_000,
        "scaling_N": [100, 1_000, 10_000, 100_000, 1_000_000],
        "top": {"dt": 0.01, "map_steps": 200, "cont_steps": 10},
        "rb": {"dt": 0.02, "map_steps": 20, "cont_steps": 20},
        "repeat_budget_s": 1.0,
    },
    "quick": {
        "N": 10_000,
        "scaling_N": [100, 1_000, 10_000],
        "top": {"dt": 0.01, "map_steps": 100, "cont_steps": 10},
        "rb": {"dt": 0.02, "map_steps": 20, "cont_steps": 10},
        "repeat_budget_s": 0.3,
    },
}
BIG_N = 1_000_000  # at and above this N the step count is divided by BIG_N_STEP_DIVISOR
BIG_N_STEP_DIVISOR = 10
MAX_REPEATS = 9


def loadavg():
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


# ----------------------------------------------------------------------------- timing


def measure(fn, budget_s: float, max_repeats: int = MAX_REPEATS):
    """Time ``fn()`` (which blocks until its result is ready).

    The first call (compile + run) is timed on its own; then at least one more call, and
    more (up to ``max_repeats``) while their total stays under ``budget_s``. Returns
    ``(result, dict)`` with the median wall time of the later calls and their CPU time.
    """
    gc.collect()
    t = time.perf_counter()
    fn()
    first = time.perf_counter() - t
    walls, cpus = [], []
    gc.collect()
    gc.disable()
    try:
        while True:
            t, c = time.perf_counter(), time.process_time()
            out = fn()
            walls.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
            if len(walls) >= max_repeats or sum(walls) + walls[-1] > budget_s:
                break
    finally:
        gc.enable()
    run = statistics.median(walls)
    return out, {
        "time_s": run,
        "time_min_s": min(walls),
        "first_call_s": first,
        "compile_s": max(first - run, 0.0),
        "n_timed_calls": len(walls),
        "cpu_over_wall": sum(cpus) / sum(walls) if sum(walls) > 0 else None,
    }


# ----------------------------------------------------------------------------- JAX layouts


def _body_scan(step, n_steps: int):
    """One body's whole time scan of ``step(y) -> (y, ok)``; only the final state is kept."""

    def run(y0):
        def body(carry, _):
            y, ok = carry
            y, ok_step = step(y)
            return (y, ok & ok_step), None

        (y, ok), _ = jax.lax.scan(body, (y0, jnp.array(True)), None, length=n_steps)
        return y, ok

    return run


def wide(step, n_steps: int):
    """``jit(vmap(scan))`` over all bodies at once."""
    return jax.jit(jax.vmap(_body_scan(step, n_steps)))


def chunked(step, n_steps: int, chunk: int):
    """``jit(lax.map(vmap(scan)))`` over chunks of ``chunk`` bodies (time inside chunk)."""
    per_chunk = jax.vmap(_body_scan(step, n_steps))

    @jax.jit
    def run(y0s):
        N, d = y0s.shape
        c = min(chunk, N)
        n_chunks = -(-N // c)
        pad = n_chunks * c - N
        if pad:  # copies of the first states; their results are dropped
            y0s = jnp.concatenate([y0s, y0s[:pad]], axis=0)
        y, ok = jax.lax.map(per_chunk, y0s.reshape(n_chunks, c, d))
        return y.reshape(n_chunks * c, d)[:N], ok.reshape(n_chunks * c)[:N]

    return run


def lpjax_step(system, method, dt):
    """``method.step`` as ``y -> (y, ok)``; ok is the step's RESULTS code == successful."""
    dt = jnp.asarray(dt)

    def step(y):
        y, result, _ = method.step(system, y, dt)
        return y, result == lpjax.RESULTS.successful

    return step


# ----------------------------------------------------------------------------- closed forms
# The same maps written elementwise in jnp (diagnostic: not lpjax code).


def suris_closed_form_step(p, dt):
    """(6.5) for n = 3: m += dt a ∧ p; a = cay(dt m / 2) a with cay = I + 2(X + X²)/(1 + |x|²)."""
    p0, p1, p2 = (float(v) for v in p)
    h = 0.5 * dt

    def step(y):
        m01, m02, m12, a0, a1, a2 = (y[i] for i in range(6))
        m01 = m01 + dt * (a0 * p1 - p0 * a1)
        m02 = m02 + dt * (a0 * p2 - p0 * a2)
        m12 = m12 + dt * (a1 * p2 - p1 * a2)
        x01, x02, x12 = h * m01, h * m02, h * m12
        s = 2.0 / (1.0 + x01 * x01 + x02 * x02 + x12 * x12)
        b0, b1, b2 = x01 * a1 + x02 * a2, -x01 * a0 + x12 * a2, -x02 * a0 - x12 * a1
        c0, c1, c2 = x01 * b1 + x02 * b2, -x01 * b0 + x12 * b2, -x02 * b0 - x12 * b1
        y1 = jnp.stack([m01, m02, m12, a0 + s * (b0 + c0), a1 + s * (b1 + c1), a2 + s * (b2 + c2)])
        return y1, jnp.all(jnp.isfinite(y1))

    return step


def mv_lambda(inertia):
    i0, i1, i2 = inertia
    s = 0.5 * (i0 + i1 + i2)
    return (s - i0, s - i1, s - i2)  # Λ_i = (I_j + I_k − I_i)/2, as in lpjax


def mv_closed_form_step(inertia, dt, iters):
    """Moser–Veselov in Cayley coordinates x (f = cay(hat x)), the fixed-point iteration
    x ← x − r(x)/d with r = vee(fΛ − Λfᵀ) − dt M and d_i = 2(Λ_j + Λ_k); then M ← fᵀ M."""
    l0, l1, l2 = mv_lambda(inertia)
    d0, d1, d2 = 2 * (l1 + l2), 2 * (l0 + l2), 2 * (l0 + l1)

    def step(y):
        y0, y1, y2 = y[0], y[1], y[2]
        x0, x1, x2 = dt * y0 / d0, dt * y1 / d1, dt * y2 / d2
        for _ in range(iters):
            c = 2.0 / (1.0 + x0 * x0 + x1 * x1 + x2 * x2)
            r0 = c * ((x0 + x1 * x2) * l1 - (x1 * x2 - x0) * l2) - dt * y0
            r1 = c * ((x1 + x0 * x2) * l2 - (x0 * x2 - x1) * l0) - dt * y1
            r2 = c * ((x2 + x0 * x1) * l0 - (x0 * x1 - x2) * l1) - dt * y2
            x0, x1, x2 = x0 - r0 / d0, x1 - r1 / d1, x2 - r2 / d2
        s = x0 * x0 + x1 * x1 + x2 * x2
        c = 2.0 / (1.0 + s)
        f00, f11, f22 = 1 + c * (x0 * x0 - s), 1 + c * (x1 * x1 - s), 1 + c * (x2 * x2 - s)
        f01, f10 = c * (x0 * x1 - x2), c * (x0 * x1 + x2)
        f02, f20 = c * (x0 * x2 + x1), c * (x0 * x2 - x1)
        f12, f21 = c * (x1 * x2 - x0), c * (x1 * x2 + x0)
        out = jnp.stack([
            f00 * y0 + f10 * y1 + f20 * y2,
            f01 * y0 + f11 * y1 + f21 * y2,
            f02 * y0 + f12 * y1 + f22 * y2,
        ])
        return out, jnp.all(jnp.isfinite(out))

    return step


# ----------------------------------------------------------------------------- numba peers


@numba.njit(cache=False, fastmath=False)
def numba_suris(y0s, p, dt, n_steps):
    """Suris (6.5), n = 3, rest frame: loop over bodies outside, steps inside."""
    N = y0s.shape[0]
    out = np.empty_like(y0s)
    p0, p1, p2 = p[0], p[1], p[2]
    h = 0.5 * dt
    for i in range(N):
        m01, m02, m12 = y0s[i, 0], y0s[i, 1], y0s[i, 2]
        a0, a1, a2 = y0s[i, 3], y0s[i, 4], y0s[i, 5]
        for _ in range(n_steps):
            m01 += dt * (a0 * p1 - p0 * a1)
            m02 += dt * (a0 * p2 - p0 * a2)
            m12 += dt * (a1 * p2 - p1 * a2)
            x01 = h * m01
            x02 = h * m02
            x12 = h * m12
            s = 2.0 / (1.0 + x01 * x01 + x02 * x02 + x12 * x12)
            b0 = x01 * a1 + x02 * a2  # X a
            b1 = -x01 * a0 + x12 * a2
            b2 = -x02 * a0 - x12 * a1
            c0 = x01 * b1 + x02 * b2  # X X a
            c1 = -x01 * b0 + x12 * b2
            c2 = -x02 * b0 - x12 * b1
            a0 = a0 + s * (b0 + c0)
            a1 = a1 + s * (b1 + c1)
            a2 = a2 + s * (b2 + c2)
        out[i, 0], out[i, 1], out[i, 2] = m01, m02, m12
        out[i, 3], out[i, 4], out[i, 5] = a0, a1, a2
    return out


@numba.njit(cache=False, fastmath=False)
def numba_moser_veselov(y0s, lam, dt, n_steps, iters):
    """Moser–Veselov, so(3): the fixed-point Cayley-coordinate solve of lpjax, then M ← fᵀ M."""
    N = y0s.shape[0]
    out = np.empty_like(y0s)
    l0, l1, l2 = lam[0], lam[1], lam[2]
    d0 = 2.0 * (l1 + l2)
    d1 = 2.0 * (l0 + l2)
    d2 = 2.0 * (l0 + l1)
    for i in range(N):
        y0, y1, y2 = y0s[i, 0], y0s[i, 1], y0s[i, 2]
        for _ in range(n_steps):
            x0 = dt * y0 / d0
            x1 = dt * y1 / d1
            x2 = dt * y2 / d2
            for _k in range(iters):
                c = 2.0 / (1.0 + x0 * x0 + x1 * x1 + x2 * x2)
                r0 = c * ((x0 + x1 * x2) * l1 - (x1 * x2 - x0) * l2) - dt * y0
                r1 = c * ((x1 + x0 * x2) * l2 - (x0 * x2 - x1) * l0) - dt * y1
                r2 = c * ((x2 + x0 * x1) * l0 - (x0 * x1 - x2) * l1) - dt * y2
                x0 -= r0 / d0
                x1 -= r1 / d1
                x2 -= r2 / d2
            s = x0 * x0 + x1 * x1 + x2 * x2
            c = 2.0 / (1.0 + s)
            f00 = 1.0 + c * (x0 * x0 - s)
            f11 = 1.0 + c * (x1 * x1 - s)
            f22 = 1.0 + c * (x2 * x2 - s)
            f01 = c * (x0 * x1 - x2)
            f10 = c * (x0 * x1 + x2)
            f02 = c * (x0 * x2 + x1)
            f20 = c * (x0 * x2 - x1)
            f12 = c * (x1 * x2 - x0)
            f21 = c * (x1 * x2 + x0)
            z0 = f00 * y0 + f10 * y1 + f20 * y2
            z1 = f01 * y0 + f11 * y1 + f21 * y2
            z2 = f02 * y0 + f12 * y1 + f22 * y2
            y0, y1, y2 = z0, z1, z2
        out[i, 0], out[i, 1], out[i, 2] = y0, y1, y2
    return out


# ----------------------------------------------------------------------------- diffrax


def diffrax_ensemble(system, dt, n_steps):
    term = diffrax.ODETerm(lambda t, y, args: system.vector_field(y))
    solver = diffrax.Tsit5()

    def solve(y0):
        sol = diffrax.diffeqsolve(
            term, solver, t0=0.0, t1=n_steps * dt, dt0=dt, y0=y0,
            stepsize_controller=diffrax.ConstantStepSize(),
            saveat=diffrax.SaveAt(t1=True), max_steps=n_steps + 2,
        )
        return sol.ys[-1], (sol.result == diffrax.RESULTS.successful) & (sol.stats["num_steps"] == n_steps)

    return jax.jit(jax.vmap(solve))


# ----------------------------------------------------------------------------- problems


def initial_states(kind: str, N: int) -> np.ndarray:
    rng = np.random.default_rng([SEED, 0 if kind == "top" else 1])
    if kind == "top":
        m = rng.standard_normal((N, 3))
        a = rng.standard_normal((N, 3))
        a /= np.linalg.norm(a, axis=1, keepdims=True)
        return np.ascontiguousarray(np.concatenate([m, a], axis=1))
    return np.ascontiguousarray(rng.standard_normal((N, 3)))


class Problem:
    def __init__(self, kind: str, cfg: dict, chunk: int):
        self.kind = kind
        self.dt = cfg[kind]["dt"]
        self.map_steps = cfg[kind]["map_steps"]
        self.cont_steps = cfg[kind]["cont_steps"]
        self.chunk = chunk
        if kind == "top":
            self.system = lpjax.systems.lagrange_top(3, frame="rest")
            self.method = lpjax.SurisLagrangeTop()
            self.p = np.asarray(self.system.hamiltonian.p, dtype=np.float64)
            self.title = "Lagrange tops, e(3)*, rest frame, p = e_3"
            self.map_name = "Suris (6.5)"
        else:
            self.system = lpjax.systems.rigid_body(jnp.asarray(INERTIA))
            self.method = lpjax.MoserVeselov()
            self.lam = np.asarray(mv_lambda(INERTIA), dtype=np.float64)
            self.title = f"free rigid bodies, so(3)*, inertia {INERTIA}"
            self.map_name = f"Moser-Veselov ({self.method.max_iters} its)"
        self._lp_step = lpjax_step(self.system, self.method, self.dt)
        self._cf_step = (suris_closed_form_step(self.p, self.dt) if kind == "top"
                         else mv_closed_form_step(INERTIA, self.dt, self.method.max_iters))
        self._fns = {}

    def steps_for(self, N: int) -> int:
        return self.map_steps // BIG_N_STEP_DIVISOR if N >= BIG_N else self.map_steps

    def jax_fn(self, variant: str, layout: str, n_steps: int):
        """Jitted ensemble function; one per (variant, layout, steps), retraced per shape by jit."""
        key = (variant, layout, n_steps)
        if key not in self._fns:
            step = self._lp_step if variant == "lpjax" else self._cf_step
            self._fns[key] = (wide(step, n_steps) if layout == "wide"
                              else chunked(step, n_steps, self.chunk))
        return self._fns[key]

    def numba_run(self, y0s: np.ndarray, n_steps: int) -> np.ndarray:
        if self.kind == "top":
            return numba_suris(y0s, self.p, self.dt, n_steps)
        return numba_moser_veselov(y0s, self.lam, self.dt, n_steps, self.method.max_iters)

    # sanity checks -------------------------------------------------------------------
    def invariant_drifts(self, y0s: np.ndarray, yT: np.ndarray) -> dict:
        if self.kind == "top":
            a0, aT = y0s[:, 3:], yT[:, 3:]
            ca0, caT = np.sum(a0 * a0, 1), np.sum(aT * aT, 1)
            integral = jax.jit(jax.vmap(lambda y: self.method.integral(self.system, y, self.dt)))
            H0 = np.asarray(integral(jnp.asarray(y0s)))
            HT = np.asarray(integral(jnp.asarray(yT)))
            # scale: |H| can pass through 0, so divide by a positive bound of its terms
            m0 = y0s[:, :3]
            scale = (0.5 * np.sum(m0 * m0, 1) + np.sqrt(ca0) * np.linalg.norm(self.p)
                     * (1 + 0.5 * self.dt * np.linalg.norm(m0, axis=1)))
            return {"max_rel_drift_|a|^2": float(np.max(np.abs(caT - ca0) / ca0)),
                    "max_rel_drift_suris_integral": float(np.max(np.abs(HT - H0) / scale))}
        c0, cT = np.sum(y0s * y0s, 1), np.sum(yT * yT, 1)
        return {"max_rel_drift_|M|^2": float(np.max(np.abs(cT - c0) / c0))}


# ----------------------------------------------------------------------------- output


def print_table(P: Problem, rows, agreement, drifts, N: int) -> None:
    hdr = (f"{'method':<31}{'layout':>9}{'N':>9}{'steps':>7}{'body-steps/s':>14}"
           f"{'ns/b-step':>11}{'ratio':>9}{'compile[s]':>11}{'cpu/wall':>9}  note")
    print(f"\n{P.title}: N = {N}, dt = {P.dt}, chunk = {P.chunk}, float64")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        comp = f"{r['compile_s']:11.2f}"
        cw = f"{r['cpu_over_wall']:9.2f}" if r["cpu_over_wall"] is not None else f"{'-':>9}"
        print(f"{r['method']:<31}{r['layout']:>9}{r['N']:9d}{r['steps']:7d}"
              f"{r['throughput']:14.3e}{r['ns_per_body_step']:11.1f}{r['ratio']:9.3g}{comp}{cw}"
              f"  {r['note']}")
    print("-" * len(hdr))
    print("ratio = throughput / throughput(numba loop of the same map, this N, this run): "
          ">1 faster than numba, <1 slower.")
    for name, v in agreement.items():
        print(f"agreement with numba, {name}: max |y - y_numba| = {v['max_abs_diff']:.2e} "
              f"(max |y| = {v['max_abs_y']:.2f}; {v['steps']} steps, {v['N']} bodies)")
    for name, d in drifts.items():
        print(f"invariants, {name}: " + ", ".join(f"{k} = {v:.2e}" for k, v in d.items()))


def print_scaling(P: Problem, scaling) -> None:
    print(f"\nN-scaling, {P.title}, {P.map_name}: ns per body-step (body-steps/s)")
    variants = list(dict.fromkeys(s["variant"] for s in scaling))
    hdr = f"{'N':>9}{'steps':>7}" + "".join(f"{v:>26}" for v in variants)
    print(hdr)
    print("-" * len(hdr))
    for N in sorted({s["N"] for s in scaling}):
        pts = {s["variant"]: s for s in scaling if s["N"] == N}
        line = f"{N:9d}{next(iter(pts.values()))['steps']:7d}"
        for v in variants:
            s = pts.get(v)
            line += (f"{s['ns_per_body_step']:12.1f} ({s['throughput']:9.2e})" if s else f"{'-':>26}")
        print(line)
    print("-" * len(hdr))


SCALING_STYLE = {
    "numba": dict(color="k", marker="s", ls="-"),
    "lpjax chunked": dict(color="C0", marker="o", ls="-"),
    "lpjax wide": dict(color="C3", marker="o", ls="-"),
    "jnp closed form chunked": dict(color="C0", marker="^", ls="--", alpha=0.7),
    "jnp closed form wide": dict(color="C3", marker="^", ls="--", alpha=0.7),
}


def make_plot(problems, path: Path, chunk: int, mode: str) -> None:
    fig, axes = plt.subplots(1, len(problems), figsize=(6.4 * len(problems), 5.0), squeeze=False)
    for ax, (P, rows, scaling) in zip(axes[0], problems):
        for v, style in SCALING_STYLE.items():
            pts = sorted((s for s in scaling if s["variant"] == v), key=lambda s: s["N"])
            if pts:
                ax.loglog([s["N"] for s in pts], [s["throughput"] for s in pts], label=v, ms=5, **style)
        for r, mk, col in ((r, "D", "C2") for r in rows if r["method"].startswith("lpjax GL4")):
            ax.loglog([r["N"]], [r["throughput"]], marker=mk, color=col, ls="none", ms=7, label="lpjax GL4 (wide)")
        for r in rows:
            if r["method"].startswith("diffrax"):
                ax.loglog([r["N"]], [r["throughput"]], marker="v", color="C4", ls="none", ms=7,
                          label="diffrax Tsit5 (wide)")
        big = [s for s in scaling if s["N"] >= BIG_N]
        if big:
            ax.axvspan(BIG_N / 1.5, BIG_N * 1.5, color="0.92", zorder=0)
            ax.text(BIG_N, ax.get_ylim()[0], f"{big[0]['steps']} steps\n(others {P.map_steps})",
                    fontsize=7, ha="center", va="bottom", color="0.35")
        ax.set_xlabel("ensemble size N (bodies)")
        ax.set_ylabel("throughput [body-steps / s]")
        ax.set_title(f"{P.title}\n{P.map_name}, dt = {P.dt}; chunk = {chunk}", fontsize=9)
        ax.grid(True, which="major", alpha=0.35)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle(f"Ensemble throughput (higher is better), float64 CPU wall times on this machine "
                 f"({mode} run)", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=130)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


# ----------------------------------------------------------------------------- main


def run_problem(P: Problem, cfg: dict, log) -> dict:
    N = cfg["N"]
    budget = cfg["repeat_budget_s"]
    n_map = P.map_steps
    y0_np = initial_states(P.kind, N)
    y0 = jnp.asarray(y0_np)
    rows, finals = [], {}

    def record(method, layout, steps, res, stats, note="", is_reference=False, scaling_variant=None):
        work = N * steps
        row = {
            "system": P.kind, "method": method, "layout": layout, "N": N, "steps": steps,
            "dt": P.dt, "throughput": work / stats["time_s"],
            "ns_per_body_step": 1e9 * stats["time_s"] / work, "is_reference": is_reference,
            "note": note, **stats,
        }
        if scaling_variant:
            row["scaling_variant"] = scaling_variant
        rows.append(row)
        log(f"{P.kind} {method:<31} {layout:>7} N={N} steps={steps}: {row['throughput']:.3e} "
            f"body-steps/s, compile {stats['compile_s']:.2f} s")
        return row

    # the reference peer: numba loop of the same map
    out, st = measure(lambda: P.numba_run(y0_np, n_map), budget)
    finals["numba"] = out
    record(f"numba {P.map_name}", "loop", n_map, out, st,
           note="reference; 1 thread; compile = numba JIT", is_reference=True, scaling_variant="numba")

    # lpjax explicit map and the closed-form diagnostic, both layouts
    for variant, label in (("lpjax", f"lpjax {P.map_name}"), ("cf", f"jnp closed form {P.map_name}")):
        for layout in ("wide", "chunked"):
            fn = P.jax_fn(variant, layout, n_map)
            (yT, ok), st = measure(lambda: jax.block_until_ready(fn(y0)), budget)
            n_bad = int(np.sum(~np.asarray(ok)))
            name = "lpjax" if variant == "lpjax" else "jnp closed form"
            note = "diagnostic, not lpjax" if variant == "cf" else ""
            if n_bad:
                note = (note + "; " if note else "") + f"{n_bad} bodies with a failed step"
            record(label, layout, n_map, yT, st, note=note, scaling_variant=f"{name} {layout}")
            finals[f"{name} {layout}"] = np.asarray(yT)

    # GL4 on the continuous system, wide
    n_c = P.cont_steps
    fn = wide(lpjax_step(P.system, lpjax.GaussLegendre(2), P.dt), n_c)
    (yT, ok), st = measure(lambda: jax.block_until_ready(fn(y0)), budget, max_repeats=3)
    n_bad = int(np.sum(~np.asarray(ok)))
    record("lpjax GL4 (GaussLegendre(2))", "wide", n_c, yT, st,
           note="default settings" + (f"; {n_bad} bodies with a failed step" if n_bad else ""))

    # diffrax Tsit5, constant steps dt
    fn = diffrax_ensemble(P.system, P.dt, n_c)
    (yT, ok), st = measure(lambda: jax.block_until_ready(fn(y0)), budget, max_repeats=3)
    n_bad = int(np.sum(~np.asarray(ok)))
    record("diffrax Tsit5", "wide", n_c, yT, st,
           note="ConstantStepSize(dt)" + (f"; {n_bad} bodies not successful" if n_bad else ""))

    ref = rows[0]
    for r in rows:
        r["ratio"] = r["throughput"] / ref["throughput"]

    # agreement with numba on the same initial states and steps
    agreement = {}
    for k, v in finals.items():
        if k == "numba":
            continue
        agreement[k] = {"max_abs_diff": float(np.max(np.abs(v - finals["numba"]))),
                        "max_abs_y": float(np.max(np.abs(finals["numba"]))), "steps": n_map, "N": N}
    drifts = {k: P.invariant_drifts(y0_np, v) for k, v in finals.items()
              if k in ("numba", "lpjax chunked", "lpjax wide")}

    extra = {}
    if P.kind == "rb":
        # iterations the Moser–Veselov solve actually needed (vs the fixed count it runs)
        n_sample = min(N, 1000)
        sol = jax.jit(jax.vmap(lambda y: lpjax.integrate(
            P.system, P.method, y, P.dt, n_map, save_every=n_map, throw=False).stats))(y0[:n_sample])
        extra["moser_veselov_iterations_needed_max"] = int(np.max(sol["max_iterations"]))
        extra["moser_veselov_max_final_residual"] = float(np.max(sol["max_residual"]))
        extra["moser_veselov_iterations_run"] = P.method.max_iters
        extra["moser_veselov_sample_bodies"] = n_sample

    print_table(P, rows, agreement, drifts, N)
    if extra:
        print(f"Moser-Veselov solve: at most {extra['moser_veselov_iterations_needed_max']} of the "
              f"{extra['moser_veselov_iterations_run']} fixed iterations were needed to reach tol "
              f"(first {extra['moser_veselov_sample_bodies']} bodies, lpjax.integrate stats); max final "
              f"residual {extra['moser_veselov_max_final_residual']:.1e}")
    return {"rows": rows, "agreement": agreement, "invariant_drift": drifts, "extra": extra}


def run_scaling(P: Problem, cfg: dict, main_rows, log) -> list:
    """Throughput against N for numba and the four JAX layouts of the explicit map."""
    scaling = []
    budget = cfg["repeat_budget_s"]
    for r in main_rows:  # the main-N rows are the N = cfg["N"] points
        if "scaling_variant" in r:
            scaling.append({k: r[k] for k in ("N", "steps", "throughput", "ns_per_body_step", "time_s",
                                              "compile_s", "cpu_over_wall", "n_timed_calls")}
                           | {"variant": r["scaling_variant"]})
    for N in cfg["scaling_N"]:
        if N == cfg["N"]:
            continue
        steps = P.steps_for(N)
        y0_np = initial_states(P.kind, N)
        y0 = jnp.asarray(y0_np)
        jobs = [("numba", lambda: P.numba_run(y0_np, steps))]
        for variant, name in (("lpjax", "lpjax"), ("cf", "jnp closed form")):
            for layout in ("chunked", "wide"):
                fn = P.jax_fn(variant, layout, steps)
                jobs.append((f"{name} {layout}", (lambda fn=fn: jax.block_until_ready(fn(y0)))))
        for variant, fn in jobs:
            _, st = measure(fn, budget)
            work = N * steps
            scaling.append({"variant": variant, "N": N, "steps": steps, "throughput": work / st["time_s"],
                            "ns_per_body_step": 1e9 * st["time_s"] / work, "time_s": st["time_s"],
                            "compile_s": st["compile_s"], "cpu_over_wall": st["cpu_over_wall"],
                            "n_timed_calls": st["n_timed_calls"]})
            log(f"{P.kind} scaling N={N:>8} steps={steps:>4} {variant:<24} "
                f"{scaling[-1]['throughput']:.3e} body-steps/s")
    scaling.sort(key=lambda s: (s["N"], list(SCALING_STYLE).index(s["variant"])))
    print_scaling(P, scaling)
    return scaling


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller ensembles (well under a minute)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"),
                    help="output directory (default: benchmarks/results/)")
    ap.add_argument("--chunk", type=int, default=DEFAULT_CHUNK,
                    help=f"bodies per chunk of the chunked layout (default {DEFAULT_CHUNK})")
    args = ap.parse_args()
    if args.chunk < 1:
        ap.error("--chunk must be >= 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mode = "quick" if args.quick else "full"
    cfg = CONFIG[mode]

    t_start = time.perf_counter()
    loads = {"start": loadavg()}

    def log(msg):
        print(f"  [{time.perf_counter() - t_start:6.1f}s] {msg}", file=sys.stderr, flush=True)

    results = {}
    problems = []
    for kind in ("top", "rb"):
        P = Problem(kind, cfg, args.chunk)
        res = run_problem(P, cfg, log)
        loads[f"after_{kind}_main"] = loadavg()
        res["scaling"] = run_scaling(P, cfg, res["rows"], log)
        loads[f"after_{kind}_scaling"] = loadavg()
        res["settings"] = {"title": P.title, "map": P.map_name, "dt": P.dt, "map_steps": P.map_steps,
                           "continuous_steps": P.cont_steps, "chunk": P.chunk,
                           "steps_at_N>=1e6": P.steps_for(BIG_N)}
        results[kind] = res
        problems.append((P, res["rows"], res["scaling"]))

    total = time.perf_counter() - t_start
    loads["end"] = loadavg()
    meta_rb = _rigid_body_metadata(args.quick)
    meta = {k: meta_rb[k] for k in (
        "date_utc", "versions", "platform", "machine", "processor", "cpu_count",
        "cpu_affinity_count", "jax_backend", "jax_devices", "git_commit")}
    meta["versions"].pop("scipy", None)
    meta.update({
        "benchmark": "explicit maps: ensemble throughput vs numba",
        "mode": mode,
        "seed": SEED,
        "chunk": args.chunk,
        "total_benchmark_wall_s": total,
        "loadavg_1_5_15min": dict(loads, note=(
            "os.getloadavg() at each phase; the machine has 2 cores and other processes may "
            "run at the same time, which adds noise to every wall time")),
        "timing_note": (
            "Times are wall-clock times of CPU runs on this machine (not portable). time_s is the "
            "median over the 2nd and later calls, each ended by jax.block_until_ready (time_min_s "
            "the fastest); compile_s = first-call time minus time_s (numba: its JIT on the first "
            "call, for the first N only). cpu_over_wall = process CPU time / wall time over the "
            "timed calls (>1: XLA used its intra-op thread pool; numba runs one thread)."),
        "ratio_definition": ("ratio = throughput / throughput(numba loop of the same map, same N, "
                             "same run); >1 faster than numba"),
        "columns": {
            "throughput": "N * steps / time_s [body-steps per second]",
            "ns_per_body_step": "1e9 * time_s / (N * steps)",
            "layout": ("wide = jit(vmap(scan over steps)) over all N; chunked = jit(lax.map over "
                       "chunks of `chunk` bodies of vmap(scan)), padded to a multiple of chunk; "
                       "loop = numba, bodies outside, steps inside"),
            "agreement": "max over bodies and components of |y_T - y_T(numba)|, same y0 and steps",
            "invariant_drift": ("max over bodies of |C(y_T) - C(y_0)| / |C(y_0)| for |a|^2, |M|^2; the "
                                "Suris integral H_eps is divided by 0.5|m0|^2 + |a0||p|(1 + dt|m0|/2) "
                                "(H_eps itself can be near 0)"),
        },
        "settings": {
            "initial_states": ("top: m ~ N(0,1)^3, a uniform on the unit sphere; rigid body: "
                               "M ~ N(0,1)^3; numpy.random.default_rng([seed, 0 or 1])"),
            "inertia": list(INERTIA),
            "lpjax step": ("method.step(system, y, dt) in lax.scan (final state only) carrying "
                           "ok &= (result == RESULTS.successful)"),
            "MoserVeselov": "default: max_iters=20 fixed-point iterations (preconditioned), tol 256 eps",
            "GaussLegendre(2)": "default settings (Newton, fixed iteration count), wide layout",
            "diffrax": ("diffeqsolve(ODETerm(lambda t, y, args: system.vector_field(y)), Tsit5(), "
                        "t0=0, t1=steps*dt, dt0=dt, ConstantStepSize(), SaveAt(t1=True)) under "
                        "jit(vmap)"),
            "numba": "@numba.njit(fastmath=False), single thread, unrolled 3x3 closed forms",
            "jnp closed form": ("diagnostic, not lpjax: the same map as elementwise jnp scalar code "
                                "(no dot/einsum), same layouts"),
            "big_N": f"N >= {BIG_N}: steps divided by {BIG_N_STEP_DIVISOR}",
            "per_system": {k: v["settings"] for k, v in results.items()},
        },
    })
    doc = {"metadata": meta, "results": results}
    json_path = out / "explicit_maps.json"
    atomic_write_bytes(json_path, (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode())
    png_path = out / "explicit_maps.png"
    make_plot(problems, png_path, args.chunk, mode)
    print(f"\nwrote {json_path} and {png_path}  (total {total:.1f} s; loadavg start "
          f"{loads['start']}, end {loads['end']})")


if __name__ == "__main__":
    main()
