"""GPU ensembles: lpjax.ensemble's fused kernel against the scan path, vmap(integrate), a
hand-written CUDA kernel of the same map, and diffrax.

    python benchmarks/gpu.py [--quick] [--out benchmarks/results/]     # on a GPU
    python benchmarks/gpu.py --smoke                                   # CPU: checks the script

Rows, in body-steps per second (the second call timed after ``block_until_ready``; compile
time, the first call less the second, separately), with ``effective GB/s`` =
2 · N · d · bytes per float · steps / time: the memory traffic of a loop that reads and writes
every state at every step, which is what the scan path does and the fused kernel avoids.

* the Suris rest-frame map (Lagrange top, n = 3) and Moser–Veselov (rigid body, its 20 fixed
  iterations) at N = 10⁵, 10⁶, 10⁷, float64 and float32:
  ``lpjax.ensemble`` (``kernel="fused"``: one Pallas kernel, the time loop inside),
  ``lpjax.ensemble(kernel="scan")``, ``jax.vmap(lpjax.integrate)``, and **the limit**: a CUDA
  kernel of the same map written by hand (CuPy ``RawKernel``: one thread per member, the
  state in registers, the time loop inside); ``vs CUDA`` is the ratio to it. The fused
  kernel's final states are compared with the scan path's (``max |Δ|``). ``device_put +
  device_get, same bytes`` is ensemble's host traffic alone (the states in, the final states
  and result codes out); ``host_traffic_vs_put_get`` is its time over ensemble's time less the
  kernel's (``ensemble_function`` on the device): the bandwidth ensemble's copies reach;
* the same two maps at the largest N and 10³ and 10⁴ steps: ``lpjax.ensemble`` (fused) against
  the jitted ``ensemble_function`` on the device (``ratio_to_ensemble_function``: what
  ``ensemble``'s host traffic costs), the CUDA kernel and the hand-written Pallas kernel of
  ``benchmarks/kernel_ops.py`` (what Pallas and Triton make of the map's own arithmetic), and
  over every GPU of the machine when it has several;
* GL4 (``GaussLegendre(2)``) on the rigid body and the heavy top at N = 10⁵, 10⁶ (float64):
  ``lpjax.ensemble`` (fused and scan) against diffrax ``Tsit5`` under ``vmap`` with the same
  steps, with each one's largest relative Casimir drift.

Results go to ``benchmarks/results/gpu.json`` (with the device name, the JAX version and the
date) and ``gpu.png`` (throughput against N for each path). ``--smoke`` runs tiny sizes on CPU
(the fused kernel in Pallas' interpret mode, no CUDA rows) and writes nothing.
"""

from __future__ import annotations

import _harness as H
import jax
import jax.numpy as jnp
import numpy as np

import lpjax
from lpjax.systems import heavy_top, lagrange_top, rigid_body

SEED = 2026
INERTIA = (1.0, 2.0, 3.0)
DT = 0.01

_SURIS_CUDA = r"""
extern "C" __global__ void suris(T* Y, const long N, const int n_steps, const T p0, const T p1, const T p2, const T dt) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    T m01 = Y[i], m02 = Y[N + i], m12 = Y[2 * N + i], a0 = Y[3 * N + i], a1 = Y[4 * N + i], a2 = Y[5 * N + i];
    const T h = (T)0.5 * dt;
    for (int k = 0; k < n_steps; ++k) {
        m01 += dt * (a0 * p1 - p0 * a1); m02 += dt * (a0 * p2 - p0 * a2); m12 += dt * (a1 * p2 - p1 * a2);
        T x01 = h * m01, x02 = h * m02, x12 = h * m12;
        T s = (T)2 / ((T)1 + x01 * x01 + x02 * x02 + x12 * x12);
        T b0 = x01 * a1 + x02 * a2, b1 = -x01 * a0 + x12 * a2, b2 = -x02 * a0 - x12 * a1;
        T c0 = x01 * b1 + x02 * b2, c1 = -x01 * b0 + x12 * b2, c2 = -x02 * b0 - x12 * b1;
        a0 += s * (b0 + c0); a1 += s * (b1 + c1); a2 += s * (b2 + c2);
    }
    Y[i] = m01; Y[N + i] = m02; Y[2 * N + i] = m12; Y[3 * N + i] = a0; Y[4 * N + i] = a1; Y[5 * N + i] = a2;
}
"""

_MV_CUDA = r"""
extern "C" __global__ void mv(T* Y, const long N, const int n_steps, const int iters, const T l0, const T l1, const T l2,
                              const T dt) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    T y0 = Y[i], y1 = Y[N + i], y2 = Y[2 * N + i];
    const T d0 = (T)2 * (l1 + l2), d1 = (T)2 * (l0 + l2), d2 = (T)2 * (l0 + l1);
    for (int k = 0; k < n_steps; ++k) {
        T x0 = dt * y0 / d0, x1 = dt * y1 / d1, x2 = dt * y2 / d2;
        for (int j = 0; j < iters; ++j) {
            T c = (T)2 / ((T)1 + x0 * x0 + x1 * x1 + x2 * x2);
            T r0 = c * ((x0 + x1 * x2) * l1 - (x1 * x2 - x0) * l2) - dt * y0;
            T r1 = c * ((x1 + x0 * x2) * l2 - (x0 * x2 - x1) * l0) - dt * y1;
            T r2 = c * ((x2 + x0 * x1) * l0 - (x0 * x1 - x2) * l1) - dt * y2;
            x0 -= r0 / d0; x1 -= r1 / d1; x2 -= r2 / d2;
        }
        T s = x0 * x0 + x1 * x1 + x2 * x2, c = (T)2 / ((T)1 + s);
        T f00 = (T)1 + c * (x0 * x0 - s), f11 = (T)1 + c * (x1 * x1 - s), f22 = (T)1 + c * (x2 * x2 - s);
        T f01 = c * (x0 * x1 - x2), f10 = c * (x0 * x1 + x2), f02 = c * (x0 * x2 + x1), f20 = c * (x0 * x2 - x1);
        T f12 = c * (x1 * x2 - x0), f21 = c * (x1 * x2 + x0);
        T z0 = f00 * y0 + f10 * y1 + f20 * y2, z1 = f01 * y0 + f11 * y1 + f21 * y2, z2 = f02 * y0 + f12 * y1 + f22 * y2;
        y0 = z0; y1 = z1; y2 = z2;
    }
    Y[i] = y0; Y[N + i] = y1; Y[2 * N + i] = y2;
}
"""


def _states(kind: str, N: int) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    if kind == "rb":
        return rng.normal(size=(N, 3))
    m, a = 0.3 * rng.normal(size=(N, 3)), rng.normal(size=(N, 3))
    return np.concatenate([m, a / np.linalg.norm(a, axis=1, keepdims=True)], axis=1)


def _cuda(kind: str, dtype, n: int):
    """The hand-written CUDA kernel of the map, as ``call(Y)`` on a (d, N) CuPy array."""
    import cupy as cp

    T = "double" if dtype == np.float64 else "float"
    src = ("typedef %s T;\n" % T) + (_SURIS_CUDA if kind == "top" else _MV_CUDA)
    kern = cp.RawKernel(src, "suris" if kind == "top" else "mv")
    f = dtype.type
    s = 0.5 * sum(INERTIA)
    lam = [s - i for i in INERTIA]

    def call(Y):
        N = Y.shape[1]
        args = (Y, np.int64(N), np.int32(n), f(0.0), f(0.0), f(1.0), f(DT)) if kind == "top" else \
            (Y, np.int64(N), np.int32(n), np.int32(20), *(f(x) for x in lam), f(DT))
        kern(((N + 255) // 256,), (256,), args)
        cp.cuda.Stream.null.synchronize()
        return Y

    return call


def _on_device(add, rows, case, N, n, d, dtype, system, method, yj, ref=None) -> None:
    """Rows for the pure chunk function (``lpjax.ensemble_function``, jitted) on states already on
    the device: the kernel itself, without ``ensemble``'s host-side copies into NumPy."""
    for kernel in ("fused", "scan"):
        f = jax.jit(lpjax.ensemble_function(system, method, DT, n, kernel=kernel, dtype=dtype))
        out = add(case, N, n, d, dtype, f"ensemble_function ({kernel}), on device",
                  lambda: jax.block_until_ready(f(yj)))
        if ref is not None:
            rows[-1]["max_abs_diff_vs_scan"] = float(np.nanmax(np.abs(np.asarray(out.final_state) - ref)))


def _put_get(add, case, N, n, d, dtype, y0s) -> None:
    """The host traffic of ``lpjax.ensemble`` with the default observable, alone: ``y0s`` put on
    the device, then arrays of the bytes it brings back (the final states and the result codes:
    the state observable's ends are those two, not copied twice) fetched, fresh each call."""
    same_bytes = jax.jit(lambda y: (y * 1, jnp.zeros(y.shape[0], jnp.int32)))
    add(case, N, n, d, dtype, "device_put + device_get, same bytes",
        lambda: jax.device_get(same_bytes(jax.device_put(y0s))))


def _longer_runs(add, rows, case, system, method, kind: str, N: int, args, on_gpu: bool) -> None:
    """At the largest N, 10³ and 10⁴ steps (``--quick``: 10³; ``--smoke``: 8): ``lpjax.ensemble``
    (fused) against the same kernel as a jitted ``ensemble_function`` on states already on the
    device (``ensemble``'s host traffic apart), the CUDA kernel, and, on a machine with several
    GPUs, ``ensemble`` over all of them (the fused kernel on each one's share)."""
    for dtype in (np.dtype(np.float64), np.dtype(np.float32)):
        for n in ([8] if args.smoke else [1000] if args.quick or args.long_steps == 1000 else [1000, 10_000]):
            y0s = _states(kind, N).astype(dtype)
            d = y0s.shape[1]
            add(case, N, n, d, dtype, "lpjax.ensemble (fused)",
                lambda: lpjax.ensemble(system, method, y0s, DT, n, kernel="fused", dtype=dtype))
            f = jax.jit(lpjax.ensemble_function(system, method, DT, n, kernel="fused", dtype=dtype))
            yj = jnp.asarray(y0s)
            add(case, N, n, d, dtype, "ensemble_function (fused), on device", lambda: jax.block_until_ready(f(yj)))
            if len(jax.devices()) > 1:
                add(case, N, n, d, dtype, f"lpjax.ensemble (fused), {len(jax.devices())} devices",
                    lambda: lpjax.ensemble(system, method, y0s, DT, n, kernel="fused", dtype=dtype,
                                           devices=jax.devices()))
            if on_gpu:
                import cupy as cp

                call = _cuda(kind, dtype, n)
                Y0 = cp.asarray(np.ascontiguousarray(y0s.T))
                add(case, N, n, d, dtype, "CUDA kernel (the limit)", lambda: call(Y0.copy()))
                hand, padded = _hand_pallas(kind, dtype, n), jnp.asarray(np.resize(y0s, (-(-N // 256) * 256, d)))
                add(case, N, n, d, dtype, "hand-written Pallas kernel (kernel_ops.py)",
                    lambda: jax.block_until_ready(hand(padded)))


def _hand_pallas(kind: str, dtype, n: int):
    """The hand-written Pallas kernel of ``benchmarks/kernel_ops.py`` for the map (its parameters
    passed at run time), jitted: what Pallas and Triton make of the map's own arithmetic."""
    import kernel_ops as K

    lam = [0.5 * sum(INERTIA) - i for i in INERTIA]
    step, params = ((K._suris_step, [0.0, 0.0, 1.0, DT]) if kind == "top"
                    else (lambda p, y: K._mv_step(p, y, 20), lam + [DT]))
    d = 6 if kind == "top" else 3
    f = jax.jit(K.hand_kernel(step, d, len(params), n, dtype, debug=False))
    p = jnp.asarray(params, dtype)
    return lambda y: f(y, p)


def _casimir_drift(system, y0s, y1s) -> float:
    c0, c1 = jax.vmap(system.casimirs)(jnp.asarray(y0s)), jax.vmap(system.casimirs)(jnp.asarray(y1s))
    return float(jnp.max(jnp.abs(c1 - c0) / jnp.maximum(jnp.abs(c0), 1e-300)))


def plot(rows, device: str):
    """Throughput against N: one panel per case, one line per row and dtype."""
    cases = list(dict.fromkeys(r["case"] for r in rows))
    fig, axes = H.plt.subplots(2, 2, figsize=(13, 9))
    for ax, case in zip(axes.flat, cases):
        lines = list(dict.fromkeys((r["row"], r["dtype"]) for r in rows if r["case"] == case))
        for k, (row, dtype) in enumerate(lines):
            rs = [r for r in rows if (r["case"], r["row"], r["dtype"]) == (case, row, dtype)]
            ax.loglog([r["N"] for r in rs], [r["throughput"] for r in rs], marker="osd^v<>ph*"[k % 10],
                      ls="-" if dtype == "float64" else "--", label=f"{row}, {dtype}")
        ax.set(xlabel="members N", ylabel="body-steps / s", title=f"{case} ({device})")
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig


def main() -> None:
    ap = H.arg_parser(__doc__, "N = 10⁵ only")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on CPU, nothing written (checks the script)")
    ap.add_argument("--long-steps", type=int, choices=(1000, 10_000), default=10_000,
                    help="the longest of the longer runs (default 10^4; 10^3 fits a shorter lease)")
    args = ap.parse_args()
    on_gpu = jax.default_backend() == "gpu"
    if not on_gpu and not args.smoke:
        raise SystemExit("benchmarks/gpu.py needs a GPU (JAX's default backend is %r); --smoke checks it on CPU"
                         % jax.default_backend())
    H.start()
    if not args.smoke:
        args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    top, rb = lagrange_top(3, frame="rest"), rigid_body(jnp.array(INERTIA))
    ht = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
    Ns = [256] if args.smoke else ([100_000] if args.quick else [100_000, 1_000_000, 10_000_000])

    def add(case, N, n, d, dtype, label, call, **extra):
        out, st = H.time_calls(call, budget_s=2.0, max_repeats=5)
        t = st["time_s"]
        rows.append(dict(case=case, N=N, steps=n, dtype=np.dtype(dtype).name, row=label, time_s=t,
                         throughput=N * n / t, gb_s=2 * N * d * np.dtype(dtype).itemsize * n / t / 1e9,
                         compile_s=st["first_call_s"] - t, **extra))
        H.log(f"{case} {np.dtype(dtype).name} N={N} {label}: {rows[-1]['throughput']:.3e} body-steps/s")
        if not args.smoke:  # the rows so far, in case the run is cut short
            H.write_json(args.out / "gpu.partial.json", {"rows": rows})
        return out

    for case, system, method, kind in [("Suris, Lagrange top", top, lpjax.SurisLagrangeTop(), "top"),
                                       ("Moser-Veselov, rigid body", rb, lpjax.MoserVeselov(), "rb")]:
        for dtype in (np.dtype(np.float64), np.dtype(np.float32)):
            for N in Ns:
                n = 4 if args.smoke else 100
                y0s = _states(kind, N).astype(dtype)
                d = y0s.shape[1]
                kw = dict(dtype=dtype)  # the default chunks (2^20 members): ensemble's pipeline over them
                fused = add(case, N, n, d, dtype, "lpjax.ensemble (fused)",
                            lambda: lpjax.ensemble(system, method, y0s, DT, n, kernel="fused", **kw))
                scan = add(case, N, n, d, dtype, "lpjax.ensemble (scan)",
                           lambda: lpjax.ensemble(system, method, y0s, DT, n, kernel="scan", **kw))
                rows[-2]["max_abs_diff_vs_scan"] = float(np.nanmax(np.abs(fused.final_state - scan.final_state)))
                yj = jnp.asarray(y0s)
                _on_device(add, rows, case, N, n, d, dtype, system, method, yj, scan.final_state)
                _put_get(add, case, N, n, d, dtype, y0s)
                f = jax.jit(jax.vmap(lambda y: lpjax.integrate(system, method, y, DT, n, save_every=n, throw=False,
                                                               dtype=dtype).ys[-1]))
                add(case, N, n, d, dtype, "jax.vmap(lpjax.integrate)", lambda: jax.block_until_ready(f(yj)))
                if on_gpu:
                    import cupy as cp

                    call = _cuda(kind, dtype, n)
                    Y0 = cp.asarray(np.ascontiguousarray(y0s.T))
                    Y = add(case, N, n, d, dtype, "CUDA kernel (the limit)", lambda: call(Y0.copy()))
                    rows[-1]["max_abs_diff_vs_scan"] = float(np.nanmax(np.abs(cp.asnumpy(Y).T - scan.final_state)))
        _longer_runs(add, rows, case, system, method, kind, Ns[-1], args, on_gpu)

    import diffrax

    for case, system, kind in [("GL4, rigid body", rb, "rb"), ("GL4, heavy top", ht, "ht")]:
        for N in ([256] if args.smoke else Ns[:2]):
            n = 4 if args.smoke else 100
            y0s = _states("rb", N) if kind == "rb" else _states("top", N) * np.array([3, 3, 3, 1, 1, 1.0])
            _on_device(add, rows, case, N, n, y0s.shape[1], np.float64, system, lpjax.GaussLegendre(2), jnp.asarray(y0s))
            for kernel in ("fused", "scan"):
                sol = add(case, N, n, y0s.shape[1], np.float64, f"lpjax.ensemble ({kernel})",
                          lambda: lpjax.ensemble(system, lpjax.GaussLegendre(2), y0s, DT, n, kernel=kernel,
                                                 chunk_size=N))
                rows[-1]["casimir_drift"] = _casimir_drift(system, y0s, sol.final_state)
                counted = lpjax.ensemble(system, lpjax.GaussLegendre(2), y0s, DT, n, kernel=kernel, chunk_size=N,
                                         stats=True)  # the iterations, outside the timed calls
                rows[-1]["mean_iterations"] = float(np.mean(counted.stats["mean_iterations"]))
            term = diffrax.ODETerm(lambda t, y, a: system.vector_field(y))
            g = jax.jit(jax.vmap(lambda y: diffrax.diffeqsolve(
                term, diffrax.Tsit5(), 0.0, n * DT, DT, y, saveat=diffrax.SaveAt(t1=True),
                stepsize_controller=diffrax.ConstantStepSize(), max_steps=n + 2).ys[-1]))
            yj = jnp.asarray(y0s)
            y1 = add(case, N, n, y0s.shape[1], np.float64, "diffrax Tsit5, vmap, same steps",
                     lambda: jax.block_until_ready(g(yj)))
            rows[-1]["casimir_drift"] = _casimir_drift(system, y0s, y1)

    for r in rows:  # the peer: the CUDA kernel for the maps, diffrax for GL4
        peer_row = "CUDA kernel (the limit)" if "GL4" not in r["case"] else "diffrax Tsit5, vmap, same steps"
        key = ("case", "N", "steps", "dtype")
        peer = next((p for p in rows if p["row"] == peer_row and all(p[k] == r[k] for k in key)), None)
        r["ratio_to_peer"] = r["throughput"] / peer["throughput"] if peer else None
        fn = next((p for p in rows if p["row"] == "ensemble_function (fused), on device" and all(p[k] == r[k] for k in key)),
                  None)
        if r["row"] == "lpjax.ensemble (fused)" and fn is not None:
            r["ratio_to_ensemble_function"] = r["throughput"] / fn["throughput"]
            put_get = next((p for p in rows if p["row"] == "device_put + device_get, same bytes"
                            and all(p[k] == r[k] for k in key)), None)
            if put_get is not None:  # the host traffic's bandwidth against a plain put and get of the same bytes
                r["host_traffic_vs_put_get"] = put_get["time_s"] / max(r["time_s"] - fn["time_s"], 1e-9)

    device = str(jax.devices()[0].device_kind) if on_gpu else "cpu (smoke)"
    print(f"\nGPU ensembles on {device}, JAX {jax.__version__}")
    H.print_table([("case", -26, "case"), ("dtype", -8, "dtype"), ("N", 9, "N"), ("steps", 6, "steps"),
                   ("row", -40, "row"),
                   ("body-steps/s", 13, lambda r: f"{r['throughput']:.3e}"),
                   ("GB/s", 8, lambda r: f"{r['gb_s']:.1f}"),
                   ("/peer", 8, lambda r: "" if r["ratio_to_peer"] is None else f"{r['ratio_to_peer']:.3f}"),
                   ("", 2, lambda r: ""),
                   ("compile[s]", 10, lambda r: f"{r['compile_s']:.2f}"),
                   ("max|Δ| scan", 12, lambda r: f"{r['max_abs_diff_vs_scan']:.1e}" if "max_abs_diff_vs_scan" in r else ""),
                   ("C drift", 9, lambda r: f"{r['casimir_drift']:.1e}" if "casimir_drift" in r else "")],
                  rows, group="case")
    print("peer: the CUDA kernel of the same map (Suris, Moser-Veselov); diffrax Tsit5 (GL4)")
    if args.smoke:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    H.write_png(plot(rows, device), args.out / "gpu.png", 110)
    meta = H.metadata("gpu", "quick" if args.quick else "full", [], {}, "")
    meta["device"] = device
    H.write_json(args.out / "gpu.json", {"metadata": meta, "rows": rows})
    (args.out / "gpu.partial.json").unlink(missing_ok=True)


if __name__ == "__main__":
    main()
