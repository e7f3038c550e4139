"""Ensemble throughput of ``lpjax.ensemble`` against a parallel structure-of-arrays numba loop.

    python benchmarks/ensemble.py [--quick] [--out benchmarks/results/] [--memory]
    python benchmarks/ensemble.py --processes [--out benchmarks/results/]

Rows (float64, CPU, random initial states from ``numpy.random.default_rng(SEED)``), in
body-steps per second: the median of the second and later calls, up to 15 of them within
:data:`BUDGET_S` seconds (compile time separately):

* ``lpjax.ensemble(kernel="scan")`` (chunks of 16384 members in blocks of 2048, members on the
  last axis, time inside block, chunks dispatched from a thread pool), keeping the final state;
* **the peer**: a structure-of-arrays numba loop of the same map (``parallel=True``: ``prange``
  over chunks of 2048 members, the time loop outside the member loop, the state of a chunk in
  six contiguous arrays), for the Suris rest-frame map (n = 3) and Moser–Veselov (its 20 fixed
  iterations, as lpjax's default);
* ``lpjax.ensemble(kernel="entries")``: the member program entry by entry over each block (every
  value a vector over the members, the layout of the numba loop);
* ``lpjax.ensemble(kernel="native")``: the member program compiled by LLVM (llvmlite) into
  one function, member loops vectorized across members (``lpjax._ensemble._kernels._native``), with
  its compile time (first call minus second); and, in two fresh processes sharing an empty cache
  directory, the first call of GL4 on the heavy top (the first process compiles, the second
  loads the object code from disk);
* ``jax.vmap(lpjax.integrate)`` (the user's path before ``ensemble``), keeping the final state;
* for the GL4 rigid body: diffrax ``Tsit5`` under ``vmap`` with the same constant steps.

N = 10⁴, 10⁵ and 10⁶ (``--quick``: 10⁴); steps are cut at N = 10⁶ to keep the run short.
``ratio`` = throughput / numba's for the same map and N. GL4's iterations per step are the
members' mean iterations to meet the tolerance (``stats["mean_iterations"]``).

``--memory`` adds the acceptance run of issue 13 in a fresh process: 10⁶ members × 10⁴ steps
of the rigid body under Moser–Veselov, the energy saved every 100 steps, peak resident memory.

``--processes`` runs only the split over processes (issue 29) and writes
``ensemble_processes.json``: N = 2·10⁵ Suris members (200 steps) as one ``jax.distributed`` run
of two local processes, each pinned to one physical core (gloo collectives), against one
process pinned to one; into a zarr store (every process writes its chunks, barriers, process 0 finishes
it) and without one (each process keeps its own members). A run's time is process 0's time of
the whole ``ensemble`` call (from a barrier before it), the median of :data:`PROCESS_CALLS`
calls after the first; :data:`PROCESS_RUNS` one-process and two-process runs alternate, and
each row is the median of their times.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys

import _harness as H
import diffrax
import jax
import jax.numpy as jnp
import numba
import numpy as np

import lpjax
from lpjax.systems import lagrange_top, rigid_body

SEED = 2026
BUDGET_S = 2.0  # per row: the median of up to 15 calls (this machine's speed moves by a fifth within seconds)
BLOCK = 2048
INERTIA = (1.0, 2.0, 3.0)


@numba.njit(parallel=True, fastmath=False, cache=False)
def numba_suris(Y, p, dt, n_steps, chunk):
    """Suris (6.5), rest frame, n = 3, on ``Y`` (6, N) in place."""
    N = Y.shape[1]
    p0, p1, p2 = p[0], p[1], p[2]
    h = 0.5 * dt
    for c in numba.prange((N + chunk - 1) // chunk):
        lo, hi = c * chunk, min(N, (c + 1) * chunk)
        m01, m02, m12 = Y[0, lo:hi].copy(), Y[1, lo:hi].copy(), Y[2, lo:hi].copy()
        a0, a1, a2 = Y[3, lo:hi].copy(), Y[4, lo:hi].copy(), Y[5, lo:hi].copy()
        for _ in range(n_steps):
            for i in range(hi - lo):
                q01 = m01[i] + dt * (a0[i] * p1 - p0 * a1[i])
                q02 = m02[i] + dt * (a0[i] * p2 - p0 * a2[i])
                q12 = m12[i] + dt * (a1[i] * p2 - p1 * a2[i])
                x01, x02, x12 = h * q01, h * q02, h * q12
                s = 2.0 / (1.0 + x01 * x01 + x02 * x02 + x12 * x12)
                b0 = x01 * a1[i] + x02 * a2[i]
                b1 = -x01 * a0[i] + x12 * a2[i]
                b2 = -x02 * a0[i] - x12 * a1[i]
                c0 = x01 * b1 + x02 * b2
                c1 = -x01 * b0 + x12 * b2
                c2 = -x02 * b0 - x12 * b1
                m01[i], m02[i], m12[i] = q01, q02, q12
                a0[i] += s * (b0 + c0)
                a1[i] += s * (b1 + c1)
                a2[i] += s * (b2 + c2)
        Y[0, lo:hi], Y[1, lo:hi], Y[2, lo:hi] = m01, m02, m12
        Y[3, lo:hi], Y[4, lo:hi], Y[5, lo:hi] = a0, a1, a2


@numba.njit(parallel=True, fastmath=False, cache=False)
def numba_moser_veselov(Y, lam, dt, n_steps, iters, chunk):
    """Moser–Veselov on so(3), ``Y`` (3, N) in place: lpjax's fixed-point solve in Cayley
    coordinates (``iters`` iterations), then ``M ← fᵀ M``; each iteration is a loop over the
    chunk's members (so that it vectorizes)."""
    N = Y.shape[1]
    l0, l1, l2 = lam[0], lam[1], lam[2]
    d0, d1, d2 = 2.0 * (l1 + l2), 2.0 * (l0 + l2), 2.0 * (l0 + l1)
    for c in numba.prange((N + chunk - 1) // chunk):
        lo, hi = c * chunk, min(N, (c + 1) * chunk)
        y0, y1, y2 = Y[0, lo:hi].copy(), Y[1, lo:hi].copy(), Y[2, lo:hi].copy()
        x0, x1, x2 = np.empty_like(y0), np.empty_like(y0), np.empty_like(y0)
        for _ in range(n_steps):
            for i in range(hi - lo):
                x0[i], x1[i], x2[i] = dt * y0[i] / d0, dt * y1[i] / d1, dt * y2[i] / d2
            for _k in range(iters):
                for i in range(hi - lo):
                    a0, a1, a2 = x0[i], x1[i], x2[i]
                    cc = 2.0 / (1.0 + a0 * a0 + a1 * a1 + a2 * a2)
                    r0 = cc * ((a0 + a1 * a2) * l1 - (a1 * a2 - a0) * l2) - dt * y0[i]
                    r1 = cc * ((a1 + a0 * a2) * l2 - (a0 * a2 - a1) * l0) - dt * y1[i]
                    r2 = cc * ((a2 + a0 * a1) * l0 - (a0 * a1 - a2) * l1) - dt * y2[i]
                    x0[i], x1[i], x2[i] = a0 - r0 / d0, a1 - r1 / d1, a2 - r2 / d2
            for i in range(hi - lo):
                a0, a1, a2 = x0[i], x1[i], x2[i]
                s = a0 * a0 + a1 * a1 + a2 * a2
                cc = 2.0 / (1.0 + s)
                f00, f11, f22 = 1.0 + cc * (a0 * a0 - s), 1.0 + cc * (a1 * a1 - s), 1.0 + cc * (a2 * a2 - s)
                f01, f10 = cc * (a0 * a1 - a2), cc * (a0 * a1 + a2)
                f02, f20 = cc * (a0 * a2 + a1), cc * (a0 * a2 - a1)
                f12, f21 = cc * (a1 * a2 - a0), cc * (a1 * a2 + a0)
                z0 = f00 * y0[i] + f10 * y1[i] + f20 * y2[i]
                z1 = f01 * y0[i] + f11 * y1[i] + f21 * y2[i]
                z2 = f02 * y0[i] + f12 * y1[i] + f22 * y2[i]
                y0[i], y1[i], y2[i] = z0, z1, z2
        Y[0, lo:hi], Y[1, lo:hi], Y[2, lo:hi] = y0, y1, y2


def _states(kind: str, N: int) -> np.ndarray:
    rng = np.random.default_rng([SEED, N])
    if kind == "top":
        a = rng.normal(size=(N, 3))
        return np.concatenate([rng.normal(size=(N, 3)), a / np.linalg.norm(a, axis=1, keepdims=True)], axis=1)
    return rng.normal(size=(N, 3))


def _cases():
    rb = rigid_body(jnp.array(INERTIA))
    s = 0.5 * sum(INERTIA)
    lam = np.array([s - i for i in INERTIA])
    return [
        ("Suris, Lagrange top", lagrange_top(3, frame="rest"), lpjax.SurisLagrangeTop(), "top", 0.01, 200,
         lambda Y, n: numba_suris(Y, np.array([0.0, 0.0, 1.0]), 0.01, n, BLOCK)),
        ("Moser-Veselov, rigid body", rb, lpjax.MoserVeselov(), "rb", 0.01, 40,
         lambda Y, n: numba_moser_veselov(Y, lam, 0.01, n, 20, BLOCK)),
        ("GL4, rigid body", rb, lpjax.GaussLegendre(2), "rb", 0.01, 20, None),
    ]


def _vmap_integrate(system, method, dt, n):
    return jax.jit(jax.vmap(lambda y: lpjax.integrate(system, method, y, dt, n, save_every=n, throw=False).ys[-1]))


def _diffrax(system, dt, n):
    term = diffrax.ODETerm(lambda t, y, args: system.vector_field(y))

    def solve(y0):
        return diffrax.diffeqsolve(term, diffrax.Tsit5(), 0.0, n * dt, dt, y0, saveat=diffrax.SaveAt(t1=True),
                                   stepsize_controller=diffrax.ConstantStepSize(), max_steps=n + 2).ys[-1]

    return jax.jit(jax.vmap(solve))


def _memory_child() -> None:
    system, method = rigid_body(jnp.array(INERTIA)), lpjax.MoserVeselov()
    N, n = 1_000_000, 10_000
    y0s = _states("rb", N)
    sol = lpjax.ensemble(system, method, y0s, 0.01, n, save_every=100, observe="energy")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"members": N, "steps": n, "saves": int(sol.ts.size), "peak_rss_kib": peak,
                      "observables_bytes": int(sol.observables["energy"].nbytes), "failed": int(sol.failed.size)}))


_PROBE = """
import json, sys, time
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
import lpjax
from lpjax.systems import heavy_top
system = heavy_top(np.array([1.0, 1.3, 0.7]), np.array([0.0, 0.0, 1.0]), 2.0)
y0s = np.tile([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386], (64, 1))
t = time.perf_counter()
lpjax.ensemble(system, lpjax.GaussLegendre(2), y0s, 0.01, 10, kernel="native")
first = time.perf_counter() - t
t = time.perf_counter()
lpjax.ensemble(system, lpjax.GaussLegendre(2), y0s, 0.01, 10, kernel="native")
print(json.dumps({"first_call_s": first, "second_call_s": time.perf_counter() - t}))
"""


def _native_compile_times() -> dict:
    """GL4 on the heavy top, kernel="native", in two fresh processes sharing an empty cache
    directory: the first call of each (the first process compiles, the second loads the object
    code from disk), with the steady call beside it."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "LPJAX_CACHE_DIR": cache}
        out = [json.loads(subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                                         check=True, timeout=1800).stdout.strip().splitlines()[-1]) for _ in range(2)]
    return {"case": "GL4, heavy top, kernel='native', 64 members x 10 steps", "cold_cache": out[0], "warm_cache": out[1]}


PROCESS_CALLS = 7
PROCESS_RUNS = 3  # one-process and two-process runs alternated: this machine's speed drifts
_PROCESS_CHILD = """
import json, os, statistics, sys, time
import jax
jax.config.update("jax_enable_x64", True)
from lpjax._ensemble._processes import Group, initialize
if int(os.environ["LPJAX_PROCESSES"]) > 1:
    initialize()
sys.path.insert(0, sys.argv[1])
import ensemble as B
import lpjax
from lpjax.systems import lagrange_top
system, method, y0s = lagrange_top(3, frame="rest"), lpjax.SurisLagrangeTop(), B._states("top", 200_000)
group, out = Group(jax.process_count(), jax.process_index()), {}
for row in ("store", "no store"):
    times = []
    for k in range(B.PROCESS_CALLS + 1):
        path = os.path.join(sys.argv[2], f"{row[:2]}{k}") if row == "store" else None
        group.barrier("start")
        t = time.perf_counter()
        sol = lpjax.ensemble(system, method, y0s, 0.01, 200, out=path)
        times.append(time.perf_counter() - t)
        out[row] = {"members_here": sol.n_members, "chunk_size": sol.chunk_size, "failed": int(sol.failed.size)}
        group.barrier("read")  # the stores stay until the run ends (see _processes_run)
    out[row].update(first_call_s=times[0], time_s=statistics.median(times[1:]), times_s=times[1:])
"""


def _processes_run(count: int, core_ids: list) -> dict:
    """``_PROCESS_CHILD`` as ``count`` local processes over ``core_ids`` (one each). Every call
    writes a new store, all removed at the end: with each removed by process 0 after its call,
    process 1 wrote its half of the next store 3 to 4 times slower than process 0 wrote its own
    on this machine, and one process wrote a whole store fast (measured; the freed memory of a
    removed store seems to serve only the remover's core well)."""
    import os
    import tempfile

    from lpjax._ensemble._processes import launch_local

    mine = os.sched_getaffinity(0)
    with tempfile.TemporaryDirectory() as where:
        os.sched_setaffinity(0, core_ids)  # launch_local splits this process's cores among its children
        try:
            code = launch_local(count, ["-c", _PROCESS_CHILD + f"if group.index == 0: open({where + '/out.json'!r}, 'w')"
                                        ".write(json.dumps(out))", str(H.REPO / "benchmarks"), where])
        finally:
            os.sched_setaffinity(0, mine)
        if code:
            raise RuntimeError(f"the {count}-process run ended with status {code}")
        with open(os.path.join(where, "out.json")) as f:
            return json.load(f)


def _physical_cores() -> list:
    """One logical CPU of each physical core this process may use (two hyperthreads of one core
    would share its units)."""
    import os

    seen, out = set(), []
    for cpu in sorted(os.sched_getaffinity(0)):
        try:
            with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                siblings = f.read().strip()
        except OSError:
            siblings = str(cpu)
        if siblings not in seen:
            seen.add(siblings)
            out.append(cpu)
    return out


def _processes_main(out_dir) -> None:
    import os

    cores = _physical_cores()
    if len(cores) < 2:
        raise SystemExit("--processes needs two physical cores")
    runs = [(_processes_run(1, cores[:1]), _processes_run(2, cores[:2])) for _ in range(PROCESS_RUNS)]  # alternated
    rows = []
    for row in runs[0][0]:
        one, two = ([r[row]["time_s"] for r in side] for side in zip(*runs))
        rows.append({"row": row, "one_process_s": statistics.median(one), "two_processes_s": statistics.median(two),
                     "ratio": statistics.median(two) / statistics.median(one), "runs": [(a[row], b[row]) for a, b in runs]})
    print(f"\nN = 2e5 Suris members x 200 steps, one core per process, {H.machine_line()}")
    for r in rows:
        per_run = ", ".join(f"{b['time_s'] / a['time_s']:.2f}" for a, b in r["runs"])
        print(f"  {r['row']:>8}: one process {r['one_process_s']:.3f} s, two processes {r['two_processes_s']:.3f} s, "
              f"ratio {r['ratio']:.2f} (each run: {per_run})")
    H.write_json(out_dir / "ensemble_processes.json", {"metadata": H.metadata("ensemble --processes", "full", [], {}, ""),
                                                       "members": 200_000, "steps": 200, "rows": rows})


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--memory-child":
        return _memory_child()
    ap = H.arg_parser(__doc__, "N = 10⁴ only")
    ap.add_argument("--memory", action="store_true", help="also the 10⁶ × 10⁴ Moser–Veselov memory run (long)")
    ap.add_argument("--processes", action="store_true", help="only the run split over two processes")
    args = ap.parse_args()
    H.start()
    if args.processes:
        return _processes_main(args.out)
    Ns = [10_000] if args.quick else [10_000, 100_000, 1_000_000]
    rows = []
    for name, system, method, kind, dt, steps, numba_fn in _cases():
        for N in Ns:
            n = steps if N < 1_000_000 else max(steps // 10, 2)
            y0s = _states(kind, N)
            work = N * n

            def add(label, call, extra=None):
                _, st = H.time_calls(call, budget_s=BUDGET_S, max_repeats=15)
                rows.append(dict(case=name, N=N, steps=n, row=label, time_s=st["time_s"], throughput=work / st["time_s"],
                                 compile_s=st["first_call_s"] - st["time_s"], **(extra or {})))
                H.log(f"{name} N={N} {label}: {rows[-1]['throughput']:.3e} body-steps/s")

            sol = lpjax.ensemble(system, method, y0s[:4], dt, n, kernel="scan")  # compiles the block program
            add("lpjax.ensemble(kernel='scan')", lambda: lpjax.ensemble(system, method, y0s, dt, n, kernel="scan"))
            sol = lpjax.ensemble(system, method, y0s, dt, n, kernel="scan", stats=True)
            rows[-1]["mean_iterations"] = float(np.mean(sol.stats["mean_iterations"]))
            lpjax.ensemble(system, method, y0s[:4], dt, n, kernel="entries")
            add("lpjax.ensemble(kernel='entries')", lambda: lpjax.ensemble(system, method, y0s, dt, n, kernel="entries"))
            add("lpjax.ensemble(kernel='native')", lambda: lpjax.ensemble(system, method, y0s, dt, n, kernel="native"))
            nat = lpjax.ensemble(system, method, y0s, dt, n, kernel="native", stats=True)
            rows[-1]["mean_iterations"] = float(np.mean(nat.stats["mean_iterations"]))
            rows[-1]["max_abs_diff_vs_scan"] = float(np.nanmax(np.abs(nat.final_state - sol.final_state)))
            if numba_fn is not None:
                add("numba SoA, prange over chunks", lambda: numba_fn(np.ascontiguousarray(y0s.T), n))
                Y = np.ascontiguousarray(y0s.T)
                numba_fn(Y, n)
                rows[-1]["max_abs_diff_vs_lpjax"] = float(np.max(np.abs(Y.T - np.asarray(sol.final_state))))
            yj = jnp.asarray(y0s)
            f = _vmap_integrate(system, method, dt, n)
            add("jax.vmap(lpjax.integrate)", lambda: jax.block_until_ready(f(yj)))
            if numba_fn is None:
                g = _diffrax(system, dt, n)
                add("diffrax Tsit5, vmap, same steps", lambda: jax.block_until_ready(g(yj)))
    for r in rows:
        peer = next((p for p in rows if p["case"] == r["case"] and p["N"] == r["N"] and p["row"].startswith(
            "numba" if "GL4" not in r["case"] else "diffrax")), None)
        r["ratio_to_peer"] = r["throughput"] / peer["throughput"] if peer else None
        scan = next(p for p in rows if p["case"] == r["case"] and p["N"] == r["N"] and p["row"] == "lpjax.ensemble(kernel='scan')")
        r["ratio_to_scan"] = r["throughput"] / scan["throughput"]
    compile_probe = _native_compile_times()
    memory = None
    if args.memory:
        out = subprocess.run([sys.executable, __file__, "--memory-child"], capture_output=True, text=True, check=True,
                             timeout=7200)
        memory = json.loads(out.stdout.strip().splitlines()[-1])

    print(f"\nEnsembles, {H.machine_line()}")
    H.print_table([("case", -26, "case"), ("N", 8, "N"), ("steps", 6, "steps"), ("row", -34, "row"),
                   ("body-steps/s", 13, lambda r: f"{r['throughput']:.3e}"),
                   ("/peer", 7, lambda r: "" if r["ratio_to_peer"] is None else f"{r['ratio_to_peer']:.2f}"),
                   ("compile[s]", 10, lambda r: f"{r['compile_s']:.2f}"),
                   ("iters/step", 10, lambda r: f"{r['mean_iterations']:.2f}" if "mean_iterations" in r else "")],
                  rows, group="case")
    print("peer: the numba SoA loop (Suris, Moser-Veselov); diffrax Tsit5 (GL4)")
    print(f"native compile, {compile_probe['case']}: first process {compile_probe['cold_cache']['first_call_s']:.2f} s, "
          f"second process (disk cache) {compile_probe['warm_cache']['first_call_s']:.2f} s "
          f"(steady call {compile_probe['warm_cache']['second_call_s']:.3f} s)")
    if memory:
        print(f"memory: {memory}")

    fig, ax = H.plt.subplots(figsize=(8, 4.5))
    for (case, row), marker in zip(sorted({(r["case"], r["row"]) for r in rows}), "osd^v<>ph*"):
        rs = [r for r in rows if r["case"] == case and r["row"] == row]
        ax.loglog([r["N"] for r in rs], [r["throughput"] for r in rs], marker=marker, label=f"{case}: {row}")
    ax.set(xlabel="members N", ylabel="body-steps / s", title="ensemble throughput (CPU, float64)")
    ax.legend(fontsize=6)
    args.out.mkdir(parents=True, exist_ok=True)
    H.write_png(fig, args.out / "ensemble.png", 110)
    H.write_json(args.out / "ensemble.json", {"metadata": H.metadata("ensemble", "quick" if args.quick else "full", [], {}, ""),
                                              "rows": rows, "memory": memory,
                                              "native_compile": compile_probe})


if __name__ == "__main__":
    main()
