"""Ensemble throughput of the explicit discrete maps: lpjax vs a hand-written numba loop.

    python benchmarks/explicit_maps.py [--quick] [--out benchmarks/results/] [--chunk 512]

Problems (float64; random initial states from ``numpy.random.default_rng([SEED, k])``):

* Lagrange tops: ``lpjax.systems.lagrange_top(3, frame="rest")`` (gravity p = e_3), state
  y = (m01, m02, m12, a) with m ~ N(0, 1)^3 and a uniform on the unit sphere; dt = 0.01;
* free rigid bodies: ``lpjax.systems.rigid_body((1, 2, 3))``, state M ~ N(0, 1)^3; dt = 0.02.

Methods. Every row runs an ensemble of N bodies for a fixed number of steps and keeps only
the final states (no trajectory is stored, also not for N = 1e6):

* the structure-preserving discrete map of each system: ``lpjax.SurisLagrangeTop()`` (eq.
  (6.5), explicit) for the tops; ``lpjax.MoserVeselov()`` for the rigid bodies (default
  settings: implicit, solved in Cayley coordinates by ``max_iters`` = 20 fixed,
  preconditioned fixed-point iterations). ``method.step`` is scanned over time (carrying a
  per-body flag ``ok &= result == RESULTS.successful``) and vmapped over bodies in two
  layouts: *wide* = ``vmap(scan)`` over all N bodies at once; *chunked* = ``lax.map(
  vmap(scan), y0.reshape(n_chunks, chunk, d))`` (time inside chunk: each chunk of
  ``--chunk`` bodies runs its whole time scan; N is padded up to a multiple of the chunk
  with copies of the first states, whose results are dropped: padding is overhead, not
  counted as work);
* **the reference peer**: a hand-written numba loop of the same map (``@numba.njit(
  fastmath=False)``, one thread, loop over bodies outside and steps inside, unrolled 3x3
  closed forms; Moser–Veselov with lpjax's fixed-point iteration in Cayley coordinates and
  the same 20 iterations, then ``M_{k+1} = f^T M_k``, which equals lpjax's
  ``vee(f^T hat(M_k) f)`` for the rotation f). Its final states are compared with every
  JAX variant's (printed as max |y - y_numba|);
* diagnostic, not lpjax code: the same two maps written by hand as closed-form elementwise
  ``jnp`` scalar code, in both layouts: the bound for what JAX can do with this map (lpjax's
  steps are written entry by entry through ``lpjax._small`` for the same reason);
* ``lpjax.GaussLegendre(2)`` (GL4, default settings) on the continuous system, wide layout;
* diffrax ``Tsit5`` on ``ODETerm(lambda t, y, args: system.vector_field(y))`` with
  ``ConstantStepSize()`` and dt0 = dt (the same steps as GL4), ``vmap(diffeqsolve)``.

Work. N = 1e5 bodies for every row (``--quick``: 1e4). The step counts differ between the
map rows and the GL4/Tsit5 rows so that one timed call stays at a few seconds on this
machine (``steps`` column); all rows are compared per body-step. N-scaling: N = 1e2, 1e3,
1e4, 1e5, 1e6 (quick: only the main N) for numba and the four JAX layouts of the map; at
N = 1e6 the step count is cut (tops 200 -> 20, rigid bodies 100 -> 10) to keep the run short.

Timing. Every JAX function is compiled ahead of time, ``jax.jit(fn).lower(y0).compile()``,
two compilations at a time (``_harness.compile_all``), before anything is
timed; ``compile`` is that trace + lower + XLA compile time (what the first call of a jitted
function costs on top of a later one). numba is compiled by a first call on two bodies, and
that call's time is its ``compile``. Then each compiled function is called: the first call
is a warm-up, and the reported time is the median wall time of the later calls, each ended
by ``jax.block_until_ready`` (at least one; more while they fit in a small budget). A
warm-up call longer than ``long_call_s`` (8 s; quick 0.5 s) is the single sample instead
(it includes no compilation). ``cpu/wall`` = process CPU time / wall time of the timed
calls: > 1 when XLA runs its intra-op thread pool (numba is single threaded), < 1 when other
processes take the CPU. ``ratio`` = throughput / throughput(numba loop of the same system's
map at the same N, same run): ratio > 1 means faster than numba, < 1 slower. ``cpu ratio``
is the same with process CPU time (all threads) per body-step in place of wall time, so a
layout that runs on both cores is not credited for it.

Sanity checks: relative drift of |a|^2 and of the Suris integral
``SurisLagrangeTop().integral(system, y, dt)`` (eq. (6.6)) for the tops, and of |M|^2 for
Moser–Veselov, over the whole run (max over the ensemble); the iterations the Moser–Veselov
solve actually needed (``lpjax.integrate`` stats on the first 1000 bodies).

Output: fixed-width tables on stdout, ``explicit_maps.json`` and ``explicit_maps.png``
(throughput against N, log-log) in the output directory (written atomically).
"""

from __future__ import annotations

import resource

from _harness import (  # first: float64 and the Agg backend
    arg_parser, compile_all, elapsed, loadavg, log, machine_line, metadata, plt, print_table,
    start, time_calls, write_json, write_png,
)

import diffrax
import jax
import jax.numpy as jnp
import matplotlib
import numba
import numpy as np

import lpjax

SEED = 20240917
INERTIA = (1.0, 2.0, 3.0)
DEFAULT_CHUNK = 512
MAX_REPEATS = 9

CONFIG = {  # per system: dt; steps of the map (N < 1e6 and N >= 1e6) and of GL4 / Tsit5
    "full": {
        "N": 100_000,
        "scaling_N": [100, 1_000, 10_000, 100_000, 1_000_000],
        "top": {"dt": 0.01, "map_steps": 200, "big_N_steps": 20, "cont_steps": 4},
        "rb": {"dt": 0.02, "map_steps": 100, "big_N_steps": 10, "cont_steps": 10},
        "repeat_budget_s": 1.0,
        "long_call_s": 8.0,
    },
    "quick": {
        "N": 10_000,
        "scaling_N": [10_000],  # the main rows only: each extra N costs compilations
        "top": {"dt": 0.01, "map_steps": 100, "big_N_steps": 10, "cont_steps": 4},
        "rb": {"dt": 0.02, "map_steps": 10, "big_N_steps": 2, "cont_steps": 10},
        "repeat_budget_s": 0.3,
        "long_call_s": 0.5,
    },
}
BIG_N = 1_000_000  # from this N on, the map runs big_N_steps steps


def time_call(call, budget_s: float, long_call_s: float):
    """:func:`_harness.time_calls` with up to ``MAX_REPEATS`` calls, without the list of times."""
    out, st = time_calls(call, budget_s, MAX_REPEATS, long_call_s)
    del st["timed_calls_s"]
    return out, st


# ----------------------------------------------------------------------------- JAX layouts


def _body_scan(step, n_steps: int):
    """One body's whole time scan of ``step(state) -> (state, ok)``; only the final state is kept.

    ``step.init(y0)`` / ``step.observe(state)`` map to and from a method's own state (identity
    when absent, as for the closed forms)."""
    init = getattr(step, "init", lambda y: y)
    observe = getattr(step, "observe", lambda state: state)

    def run(y0):
        def body(carry, _):
            state, ok = carry
            state, ok_step = step(state)
            return (state, ok & ok_step), None

        (state, ok), _ = jax.lax.scan(body, (init(y0), jnp.array(True)), None, length=n_steps)
        return observe(state), ok

    return run


def wide(step, n_steps: int):
    """``vmap(scan)`` over all bodies at once."""
    return jax.vmap(_body_scan(step, n_steps))


def chunked(step, n_steps: int, chunk: int):
    """``lax.map(vmap(scan))`` over chunks of ``chunk`` bodies (time inside chunk)."""
    per_chunk = jax.vmap(_body_scan(step, n_steps))

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
    """``method.step`` as ``state -> (state, ok)`` (ok: the step's RESULTS code is successful),
    with ``init``/``observe`` attached for :func:`_body_scan`."""
    dt = jnp.asarray(dt)

    def step(state):
        state, result, _ = method.step(system, state, dt)
        return state, result == lpjax.RESULTS.successful

    step.init = lambda y: method.init(system, y, dt)
    step.observe = lambda state: method.observe(system, state)
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
    """``vmap`` over bodies of diffrax Tsit5 with ``n_steps`` constant steps of ``dt``."""
    term = diffrax.ODETerm(lambda t, y, args: system.vector_field(y))
    solver = diffrax.Tsit5()

    def solve(y0):
        sol = diffrax.diffeqsolve(
            term, solver, t0=0.0, t1=n_steps * dt, dt0=dt, y0=y0,
            stepsize_controller=diffrax.ConstantStepSize(),
            saveat=diffrax.SaveAt(t1=True), max_steps=n_steps + 2,
        )
        ok = (sol.result == diffrax.RESULTS.successful) & (sol.stats["num_steps"] == n_steps)
        return sol.ys[-1], ok

    return jax.vmap(solve)


# ----------------------------------------------------------------------------- problems


def initial_states(kind: str, N: int) -> np.ndarray:
    rng = np.random.default_rng([SEED, 0 if kind == "top" else 1])
    if kind == "top":
        m = rng.standard_normal((N, 3))
        a = rng.standard_normal((N, 3))
        a /= np.linalg.norm(a, axis=1, keepdims=True)
        return np.ascontiguousarray(np.concatenate([m, a], axis=1))
    return np.ascontiguousarray(rng.standard_normal((N, 3)))


MAP_VARIANTS = (  # (scaling / agreement key, table label prefix, step kind, layout)
    ("lpjax wide", "lpjax", "lpjax", "wide"),
    ("lpjax chunked", "lpjax", "lpjax", "chunked"),
    ("jnp closed form wide", "jnp closed form", "cf", "wide"),
    ("jnp closed form chunked", "jnp closed form", "cf", "chunked"),
)
GL4_LABEL = "lpjax GL4 (GaussLegendre(2))"
TSIT5_LABEL = "diffrax Tsit5"


class Problem:
    """One ensemble problem: the system, its discrete map and the ensemble functions."""

    def __init__(self, kind: str, cfg: dict, chunk: int):
        self.kind = kind
        c = cfg[kind]
        self.dt = c["dt"]
        self.map_steps, self.big_N_steps, self.cont_steps = c["map_steps"], c["big_N_steps"], c["cont_steps"]
        self.chunk = chunk
        if kind == "top":
            self.system = lpjax.systems.lagrange_top(3, frame="rest")
            self.method = lpjax.SurisLagrangeTop()
            self.p = np.asarray(self.system.hamiltonian.p, dtype=np.float64)
            self.title = "Lagrange tops, e(3)*, rest frame, p = e_3"
            self.map_name = "Suris (6.5)"
            self.cf_step = suris_closed_form_step(self.p, self.dt)
        else:
            self.system = lpjax.systems.rigid_body(jnp.asarray(INERTIA))
            self.method = lpjax.MoserVeselov()
            self.lam = np.asarray(mv_lambda(INERTIA), dtype=np.float64)
            self.title = f"free rigid bodies, so(3)*, inertia {INERTIA}"
            self.map_name = f"Moser-Veselov ({self.method.max_iters} its)"
            self.cf_step = mv_closed_form_step(INERTIA, self.dt, self.method.max_iters)
        self.lp_step = lpjax_step(self.system, self.method, self.dt)

    def steps_for(self, N: int) -> int:
        return self.big_N_steps if N >= BIG_N else self.map_steps

    def map_fn(self, step_kind: str, layout: str, n_steps: int):
        step = self.lp_step if step_kind == "lpjax" else self.cf_step
        return wide(step, n_steps) if layout == "wide" else chunked(step, n_steps, self.chunk)

    def numba_run(self, y0s: np.ndarray, n_steps: int) -> np.ndarray:
        if self.kind == "top":
            return numba_suris(y0s, self.p, self.dt, n_steps)
        return numba_moser_veselov(y0s, self.lam, self.dt, n_steps, self.method.max_iters)

    def invariant_drifts(self, y0s: np.ndarray, yT: np.ndarray) -> dict:
        """Max over the ensemble of the relative drift of the map's invariants."""
        if self.kind == "top":
            ca0, caT = np.sum(y0s[:, 3:] ** 2, 1), np.sum(yT[:, 3:] ** 2, 1)
            integral = jax.jit(jax.vmap(lambda y: self.method.integral(self.system, y, self.dt)))
            H0, HT = np.asarray(integral(jnp.asarray(y0s))), np.asarray(integral(jnp.asarray(yT)))
            # H_eps can pass through 0: divide by a positive bound of its terms
            m0 = np.linalg.norm(y0s[:, :3], axis=1)
            scale = 0.5 * m0**2 + np.sqrt(ca0) * np.linalg.norm(self.p) * (1 + 0.5 * self.dt * m0)
            return {"|a|^2": float(np.max(np.abs(caT - ca0) / ca0)),
                    "H_eps (6.6)": float(np.max(np.abs(HT - H0) / scale))}
        c0, cT = np.sum(y0s**2, 1), np.sum(yT**2, 1)
        return {"|M|^2": float(np.max(np.abs(cT - c0) / c0))}


# ----------------------------------------------------------------------------- output


COLUMNS = [
    ("method", -40, "method"), ("layout", 8, "layout"), ("N", 8, "N"), ("steps", 6, "steps"),
    ("body-steps/s", 13, "throughput:.3e"), ("ns/b-step", 11, "ns_per_body_step:.1f"), ("ratio", 8, "ratio:.3g"),
    ("compile[s]", 11, "compile_s:.2f"), ("cpu/wall", 9, "cpu_over_wall:.2f"),
    ("cpu ns/b-s", 11, "cpu_ns_per_body_step:.1f"), ("cpu ratio", 10, "cpu_ratio:.3g"), ("note", -4, "note"),
]


def print_results(P: Problem, rows, agreement, drifts, extra, N: int, compile_wall: float, n_jobs: int) -> None:
    print(f"\n{P.title}: N = {N}, dt = {P.dt}, chunk = {P.chunk}, {machine_line()}")
    print_table(COLUMNS, rows)
    print(f"ratio = throughput / throughput(numba loop, same map, same N, this run) = "
          f"{rows[0]['throughput']:.3e} body-steps/s: >1 faster than numba, <1 slower. "
          f"cpu ns/b-s = process CPU time per body-step (all threads); cpu ratio = numba's / this "
          f"row's (>1: less CPU than numba).")
    print(f"time = median wall time of the 2nd+ call (after block_until_ready); compile = trace + "
          f"lower + XLA compile, ahead of time, 2 at a time (all {n_jobs} JAX functions of this "
          f"system: {compile_wall:.1f} s wall); numba: its first call, on 2 bodies.")
    for k, v in agreement.items():
        print(f"agreement with numba ({v['N']} bodies, {v['steps']} steps), {k:<24}: "
              f"max |y - y_numba| = {v['max_abs_diff']:.2e}  (max |y| = {v['max_abs_y']:.2f})")
    for k, d in drifts.items():
        print(f"invariant drift over the run, max over bodies, {k:<14}: "
              + ", ".join(f"rel d{n} = {v:.2e}" for n, v in d.items()))
    if extra:
        print(f"Moser-Veselov solve: at most {extra['iterations_needed_max']} of the "
              f"{extra['iterations_run']} fixed iterations were needed to reach tol (first "
              f"{extra['sample_bodies']} bodies, lpjax.integrate stats); max final residual "
              f"{extra['max_final_residual']:.1e}")


def print_scaling(P: Problem, scaling) -> None:
    print(f"\nN-scaling, {P.title}, {P.map_name}, dt = {P.dt}, chunk = {P.chunk}: "
          f"ns per body-step [ratio to numba]")
    by_N = [{s["variant"]: s for s in scaling if s["N"] == N} for N in sorted({s["N"] for s in scaling})]

    def cell(v):
        def text(pts):
            s = pts.get(v)
            return f"{s['ns_per_body_step']:.1f} [{s['throughput'] / pts['numba']['throughput']:7.3g}]" if s else "-"
        return (v, 25, text)

    print_table([("N", 9, lambda pts: str(pts["numba"]["N"])), ("steps", 7, lambda pts: str(pts["numba"]["steps"]))]
                + [cell(v) for v in SCALING_STYLE if any(s["variant"] == v for s in scaling)], by_N)
    big = [s for s in scaling if s["N"] >= BIG_N]
    if big:
        print(f"N >= {BIG_N}: {big[0]['steps']} steps instead of {P.map_steps} (to keep the run short).")


SCALING_STYLE = {
    "numba": dict(color="k", marker="s", ls="-"),
    "lpjax chunked": dict(color="C0", marker="o", ls="-"),
    "lpjax wide": dict(color="C3", marker="o", ls="-"),
    "jnp closed form chunked": dict(color="C0", marker="^", ls="--", alpha=0.7),
    "jnp closed form wide": dict(color="C3", marker="^", ls="--", alpha=0.7),
}


def make_plot(problems, path, chunk: int, mode: str) -> None:
    fig, axes = plt.subplots(1, len(problems), figsize=(6.6 * len(problems), 6.0), squeeze=False)
    for ax, (P, rows, scaling) in zip(axes[0], problems):
        for v, style in SCALING_STYLE.items():
            pts = sorted((s for s in scaling if s["variant"] == v), key=lambda s: s["N"])
            if pts:
                label = f"{v} (diagnostic)" if v.startswith("jnp") else v
                ax.loglog([s["N"] for s in pts], [s["throughput"] for s in pts], label=label, ms=5, **style)
        for r in rows:
            if r["method"] in (GL4_LABEL, TSIT5_LABEL):
                gl = r["method"] == GL4_LABEL
                name = "lpjax GL4" if gl else "diffrax Tsit5"
                ax.loglog([r["N"]], [r["throughput"]], marker="D" if gl else "v", ls="none", ms=7,
                          color="C2" if gl else "C4", label=f"{name} (wide, {r['steps']} steps)")
        if any(s["N"] >= BIG_N for s in scaling):
            ax.axvspan(BIG_N / 1.6, BIG_N * 1.6, color="0.93", zorder=0)
            ax.annotate(f"{P.big_N_steps} steps\n(else {P.map_steps})", (BIG_N, 0.02),
                        xycoords=("data", "axes fraction"), fontsize=7, ha="center", va="bottom",
                        color="0.35")
        ax.set_xlabel("ensemble size N (bodies)")
        ax.set_ylabel("throughput [body-steps / s]  (higher is better)")
        ax.set_title(f"{P.title}\nmap: {P.map_name}, dt = {P.dt}, chunk = {chunk}", fontsize=9)
        ax.grid(True, which="major", alpha=0.35)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, frameon=False)
    fig.suptitle(f"Ensemble throughput, float64, CPU wall times on this machine ({mode} run; "
                 f"numba = single-thread loop, bodies outside, steps inside)", fontsize=10)
    fig.tight_layout()
    write_png(fig, path, dpi=130)


# ----------------------------------------------------------------------------- main


def run_problem(P: Problem, cfg: dict) -> dict:
    N, n_map, n_c = cfg["N"], P.map_steps, P.cont_steps
    budget, long_s = cfg["repeat_budget_s"], cfg["long_call_s"]
    y0_np = initial_states(P.kind, N)
    y0 = jnp.asarray(y0_np)

    # numba: compiled by a first call on two bodies
    t = elapsed()
    P.numba_run(y0_np[:2], 1)
    numba_compile = elapsed() - t

    # every JAX function of this system, compiled ahead of time before anything is timed
    jobs = []
    for key, label, step_kind, layout in MAP_VARIANTS:
        jobs.append(dict(role="main", key=key, method=f"{label} {P.map_name}", layout=layout, N=N,
                         steps=n_map, fn=P.map_fn(step_kind, layout, n_map), args=(y0,),
                         note="diagnostic, not lpjax" if step_kind == "cf" else ""))
    jobs.append(dict(role="main", key="gl4", method=GL4_LABEL, layout="wide", N=N, steps=n_c,
                     fn=wide(lpjax_step(P.system, lpjax.GaussLegendre(2), P.dt), n_c), args=(y0,),
                     note="default settings"))
    jobs.append(dict(role="main", key="tsit5", method=TSIT5_LABEL, layout="wide", N=N, steps=n_c,
                     fn=diffrax_ensemble(P.system, P.dt, n_c), args=(y0,), note="ConstantStepSize, dt0 = dt"))
    scaling_inputs = {}
    for Ns in cfg["scaling_N"]:
        if Ns == N:
            continue
        scaling_inputs[Ns] = initial_states(P.kind, Ns)
        ys = jnp.asarray(scaling_inputs[Ns])
        for key, label, step_kind, layout in MAP_VARIANTS:
            jobs.append(dict(role="scaling", key=key, N=Ns, steps=P.steps_for(Ns), args=(ys,),
                             fn=P.map_fn(step_kind, layout, P.steps_for(Ns))))
    if P.kind == "rb":  # untimed: how many of the fixed iterations the solve needed
        n_sample = min(N, 1000)
        jobs.append(dict(role="check", key="mv_iterations", N=n_sample, steps=n_map, args=(y0[:n_sample],),
                         fn=jax.vmap(lambda y: lpjax.integrate(P.system, P.method, y, P.dt, n_map,
                                                               save_every=n_map, throw=False).stats)))
    log(f"{P.kind}: compiling {len(jobs)} JAX functions ahead of time, 2 at a time")
    t = elapsed()
    compile_all(jobs)
    compile_wall = elapsed() - t
    log(f"{P.kind}: compiled in {compile_wall:.1f} s")

    rows, finals, scaling = [], {}, []

    def add_row(method, layout, steps, st, compile_s, note, key):
        work = N * steps
        rows.append(dict(system=P.kind, method=method, layout=layout, N=N, steps=steps, dt=P.dt,
                         throughput=work / st["time_s"], ns_per_body_step=1e9 * st["time_s"] / work,
                         cpu_ns_per_body_step=1e9 * st["time_s"] * st["cpu_over_wall"] / work,
                         compile_s=compile_s, note=note, key=key, **st))
        log(f"{P.kind} {method:<40} {layout:>7} N={N} steps={steps}: "
            f"{rows[-1]['throughput']:.3e} body-steps/s ({st['n_timed_calls']} timed calls)")

    def failed_note(ok, note):
        n_bad = int(np.sum(~np.asarray(ok)))
        return note if not n_bad else (note + "; " if note else "") + f"{n_bad} bodies with a failed step"

    out, st = time_call(lambda: P.numba_run(y0_np, n_map), budget, long_s)
    finals["numba"] = out
    add_row(f"numba {P.map_name}", "loop", n_map, st, numba_compile, "reference; 1 thread", "numba")
    for job in (j for j in jobs if j["role"] == "main"):
        call = lambda c=job["compiled"], a=job["args"]: jax.block_until_ready(c(*a))  # noqa: E731
        (yT, ok), st = time_call(call, budget, long_s)
        add_row(job["method"], job["layout"], job["steps"], st, job["compile_s"], failed_note(ok, job["note"]),
                job["key"])
        if job["key"] in SCALING_STYLE:  # the map's JAX variants: same steps as numba
            finals[job["key"]] = np.asarray(yT)
    ref, ref_cpu = rows[0]["throughput"], rows[0]["cpu_ns_per_body_step"]
    for r in rows:
        r["ratio"] = r["throughput"] / ref
        r["cpu_ratio"] = ref_cpu / r["cpu_ns_per_body_step"]
        if r["single_long_call"]:
            r["note"] = (r["note"] + "; " if r["note"] else "") + "1 long call timed"

    agreement = {k: {"max_abs_diff": float(np.max(np.abs(v - finals["numba"]))),
                     "max_abs_y": float(np.max(np.abs(finals["numba"]))), "N": N, "steps": n_map}
                 for k, v in finals.items() if k != "numba"}
    drifts = {k: P.invariant_drifts(y0_np, finals[k]) for k in ("numba", "lpjax wide", "lpjax chunked")}
    extra = {}
    for job in (j for j in jobs if j["role"] == "check"):
        stats = job["compiled"](*job["args"])
        extra = {"iterations_needed_max": int(np.max(stats["max_iterations"])),
                 "iterations_run": P.method.max_iters, "sample_bodies": job["N"],
                 "max_final_residual": float(np.max(stats["max_residual"])),
                 "num_failed_steps": int(np.sum(stats["num_failed_steps"]))}
    print_results(P, rows, agreement, drifts, extra, N, compile_wall, len(jobs))

    # N-scaling: the main-N rows are the N = cfg["N"] points
    def add_point(key, Ns, steps, st, compile_s):
        work = Ns * steps
        scaling.append(dict(variant=key, N=Ns, steps=steps, throughput=work / st["time_s"],
                            ns_per_body_step=1e9 * st["time_s"] / work,
                            cpu_ns_per_body_step=1e9 * st["time_s"] * st["cpu_over_wall"] / work,
                            compile_s=compile_s, **st))

    for r in rows:
        if r["key"] in SCALING_STYLE:
            scaling.append(dict(variant=r["key"], **{k: r[k] for k in (
                "N", "steps", "throughput", "ns_per_body_step", "cpu_ns_per_body_step", "compile_s",
                "time_s", "time_min_s",
                "first_call_s", "n_timed_calls", "single_long_call", "cpu_over_wall")}))
    for Ns, ys_np in scaling_inputs.items():
        steps = P.steps_for(Ns)
        _, st = time_call(lambda: P.numba_run(ys_np, steps), budget, long_s)
        add_point("numba", Ns, steps, st, 0.0)
        for job in (j for j in jobs if j["role"] == "scaling" and j["N"] == Ns):
            call = lambda c=job["compiled"], a=job["args"]: jax.block_until_ready(c(*a))  # noqa: E731
            _, st = time_call(call, budget, long_s)
            add_point(job["key"], Ns, steps, st, job["compile_s"])
        log(f"{P.kind} scaling N={Ns}: " + ", ".join(
            f"{s['variant']} {s['throughput']:.2e}" for s in scaling if s["N"] == Ns))
    scaling.sort(key=lambda s: (s["N"], list(SCALING_STYLE).index(s["variant"])))
    print_scaling(P, scaling)
    return {"rows": rows, "agreement_with_numba": agreement, "invariant_drift": drifts,
            "moser_veselov_solve": extra or None, "scaling": scaling, "compile_wall_s": compile_wall,
            "settings": {"title": P.title, "map": P.map_name, "dt": P.dt, "map_steps": P.map_steps,
                         "map_steps_at_N>=1e6": P.big_N_steps, "gl4_tsit5_steps": P.cont_steps,
                         "chunk": P.chunk}}


def main() -> None:
    ap = arg_parser(__doc__, "smaller ensembles (well under a minute)")
    ap.add_argument("--chunk", type=int, default=DEFAULT_CHUNK,
                    help=f"bodies per chunk of the chunked layout (default {DEFAULT_CHUNK})")
    args = ap.parse_args()
    if args.chunk < 1:
        ap.error("--chunk must be >= 1")
    mode = "quick" if args.quick else "full"
    cfg = CONFIG[mode]
    start()
    loads = {"start": loadavg()}

    results, problems = {}, []
    for kind in ("top", "rb"):
        P = Problem(kind, cfg, args.chunk)
        results[kind] = res = run_problem(P, cfg)
        loads[f"after_{kind}"] = loadavg()
        problems.append((P, res["rows"], res["scaling"]))

    meta = metadata("explicit maps: ensemble throughput against a numba loop", mode,
                    (diffrax, np, numba, matplotlib), loads,
                    "os.getloadavg() at the start, after each system and at the end; the machine has "
                    "2 cores and other processes may run at the same time, which slows and adds noise "
                    "to every wall time (see cpu_over_wall < 1)")
    meta.update({
        "seed": SEED,
        "chunk": args.chunk,
        "N": cfg["N"],
        "scaling_N": cfg["scaling_N"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "timing_note": (
            "Wall-clock times of CPU runs on this machine (not portable). Every JAX function is "
            "compiled ahead of time (jax.jit(fn).lower(y0).compile(), 2 compilations at a time) "
            "before anything is timed; compile_s is that trace + lower + XLA compile time "
            "(numba: its first call on 2 bodies). time_s = median wall time of the calls after "
            f"a warm-up call, each ended by jax.block_until_ready; a warm-up call longer than "
            f"{cfg['long_call_s']} s is the single sample (single_long_call) and includes no "
            "compilation. cpu_over_wall = process CPU time / wall time of the timed calls."),
        "ratio_definition": ("ratio = throughput / throughput(numba loop of the same system's map, "
                             "same N, same run); ratio > 1 means faster than numba"),
        "columns": {
            "throughput": "N * steps / time_s [body-steps per second]",
            "ns_per_body_step": "1e9 * time_s / (N * steps)",
            "cpu_ns_per_body_step": "ns_per_body_step * cpu_over_wall: process CPU time (all threads) per body-step",
            "cpu_ratio": "cpu_ns_per_body_step(numba) / cpu_ns_per_body_step: >1 uses less CPU than numba",
            "layout": ("wide = jit(vmap(scan over steps)) over all N; chunked = jit(lax.map over "
                       "chunks of `chunk` bodies of vmap(scan)), padded to a multiple of chunk; "
                       "loop = numba, bodies outside, steps inside"),
            "agreement_with_numba": "max over bodies and components of |y_T - y_T(numba)|, same y0 and steps",
            "invariant_drift": ("max over bodies of |C(y_T) - C(y_0)| / C(y_0) for |a|^2 and |M|^2; the "
                                "Suris integral H_eps is divided by 0.5|m0|^2 + |a0||p|(1 + dt|m0|/2), "
                                "a positive bound of its terms (H_eps itself can be near 0)"),
            "moser_veselov_solve": ("lpjax.integrate(..., throw=False).stats over the first bodies: "
                                    "max iterations needed to reach tol of the max_iters run"),
        },
        "settings": {
            "initial_states": ("top: m ~ N(0,1)^3, a uniform on the unit sphere; rigid body: "
                               "M ~ N(0,1)^3; numpy.random.default_rng([seed, 0 (top) or 1 (rb)])"),
            "inertia": list(INERTIA),
            "lpjax map": ("method.step(system, y, dt) in lax.scan (final state only) carrying "
                          "ok &= (result == RESULTS.successful)"),
            "MoserVeselov": "default: max_iters=20 preconditioned fixed-point iterations, tol 256 eps",
            "GaussLegendre(2)": "default settings (Newton, fixed iteration count), wide layout",
            "diffrax": ("diffeqsolve(ODETerm(lambda t, y, args: system.vector_field(y)), Tsit5(), "
                        "t0=0, t1=steps*dt, dt0=dt, ConstantStepSize(), SaveAt(t1=True), "
                        "max_steps=steps+2) under jit(vmap); ok requires num_steps == steps"),
            "numba": "@numba.njit(fastmath=False), one thread, bodies outside, steps inside, unrolled 3x3",
            "jnp closed form": ("diagnostic, not lpjax: the same map as elementwise jnp scalar "
                                "code (no dot/einsum), same two layouts"),
            "per_system": {k: v["settings"] for k, v in results.items()},
        },
    })
    doc = {"metadata": meta, "results": results}
    json_path, png_path = args.out / "explicit_maps.json", args.out / "explicit_maps.png"
    write_json(json_path, doc)
    make_plot(problems, png_path, args.chunk, mode)
    loads = meta["loadavg_1_5_15min"]
    print(f"\nwrote {json_path} and {png_path}  (total {meta['total_benchmark_wall_s']:.1f} s; peak RSS "
          f"{meta['peak_rss_mib']:.0f} MiB; loadavg 1/5/15 min start "
          f"{[round(x, 2) for x in loads['start']]}, end {[round(x, 2) for x in loads['end']]})")


if __name__ == "__main__":
    main()
