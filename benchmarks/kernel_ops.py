"""Operations per step of the fused GPU kernel, read from its Triton IR, against a hand-written
Pallas kernel of the same map.

    python benchmarks/kernel_ops.py [--out benchmarks/results/]      # any machine, GPU or not

Once the time loop is fused, arithmetic is the cost of a GPU ensemble, so this counts it. Each
kernel is lowered for CUDA with ``jax.export`` (the whole Pallas-to-Triton lowering, no GPU
needed) and its Triton IR is read.

**What is counted.** Every operation in a loop's body, including ``tt.splat`` (a scalar
broadcast to the block). Not counted: ``arith.constant``, the loop's own ``scf.for`` or
``scf.while``, its ``scf.yield``, and the operations of the loops nested inside it. Those nested
loops are counted apart.

**The rows.**
- The **step loop** is the loop that runs one step per trip: depth 2 in lpjax's kernel (inside
  the loop over saves), depth 1 in the hand kernels.
- For Moser–Veselov and GL4, **per iteration** is the solver loop inside the step loop.
- **Per step** is the step loop's own operations plus the solver loop's times its trip count,
  or the step loop alone for the explicit maps.

**The hand kernels** are those of ``benchmarks/gpu.py`` (its CUDA kernels) written in Pallas, in
the same layout as lpjax's kernel: members last, 256 per program, the parameters passed at run
time as an input array. They cover the Suris rest-frame map (Lagrange top, n = 3), Moser–Veselov
on so(3) (20 fixed iterations, the preconditioned update) and RK4 on the rigid body. GL4 on the
rigid body uses fixed-point iterations (lpjax's count) from the predictor ``Z_i = c_i dt f(y)``.
The GL4 hand kernel adds without compensation, where lpjax's Kahan sum and extrapolated
predictor are extra work by design. Each hand kernel is checked against lpjax's map (interpret
mode, a few members) before it is counted.

Writes ``benchmarks/results/kernel_ops.json``.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings

import _harness as H
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

import lpjax
from lpjax._ensemble._kernels._fused import printing_triton_ir
from lpjax.systems import lagrange_top, rigid_body

BLOCK, N, N_STEPS, SAVE_EVERY = 256, 512, 100, 25
INERTIA = (1.0, 2.0, 3.0)
DT = 0.01
_MARKER = "The Triton module for pallas_call"


# ------------------------------------------------------------------------------ reading Triton IR


def _op(line: str) -> str | None:
    s = line.strip()
    m = re.match(r"(?:%[\w#:]+(?:, %[\w#:]+)* = )?([a-z_]+\.[\w.]+)", s)
    return m.group(1) if m else None


def loops(ir: str) -> list[dict]:
    """Every ``scf.for``/``scf.while`` of the IR, in order: its depth, its parent's index, the
    operations in its own body (not in nested loops), by name, and its trip count where its
    bounds are constants (else None)."""
    out, stack = [], []  # stack: (kind, loop index or None)
    for line in ir.splitlines():
        s = line.strip()
        if s.startswith("}"):
            kind = stack.pop()
            if s.endswith("{"):  # "} do {", "} else {": the same op's next region
                stack.append(kind)
            continue
        op = _op(s)
        inner = next((k for kind, k in reversed(stack) if kind == "loop"), None)
        if op and inner is not None and op not in ("arith.constant", "scf.yield", "scf.for", "scf.while",
                                                    "scf.condition"):
            out[inner]["ops"][op] = out[inner]["ops"].get(op, 0) + 1
        if s.endswith("{"):
            if op in ("scf.for", "scf.while"):
                bounds = re.search(r"= %c(\d+)_i\d+(?:_\d+)? to %c(\d+)_i\d+(?:_\d+)? step", s)
                out.append({"depth": sum(kind == "loop" for kind, _ in stack) + 1, "parent": inner, "ops": {},
                            "trips": int(bounds[2]) - int(bounds[1]) if bounds else None})
                stack.append(("loop", len(out) - 1))
            else:
                stack.append(("other", None))
    assert not stack, "unbalanced regions in the Triton IR"
    return out


def step_counts(ir: str, step_depth: int, iterations: int) -> dict:
    """``{"step_loop", "per_iteration", "per_step"}`` operation counts (see the module docstring)
    for the step loop at ``step_depth`` (the first one: every save runs the same program) and
    the solver loops inside it, if any: each counted for its trip count, read from the IR
    (``iterations`` for a loop without constant bounds). ``per_iteration`` is the first one's:
    lpjax runs a fixed-count solve as a loop of its plain updates and a loop of the last two,
    which also measure their size."""
    ls = loops(ir)
    k = next(i for i, loop in enumerate(ls) if loop["depth"] == step_depth)
    step = sum(ls[k]["ops"].values())
    inner = [loop for loop in ls if loop["parent"] == k]
    trips = [iterations if loop["trips"] is None else loop["trips"] for loop in inner]
    per_iteration = sum(inner[0]["ops"].values()) if inner else 0
    return {"step_loop": step, "per_iteration": per_iteration, "solver_loops": len(inner),
            "solver_loop_trips": trips, "solver_loop_ops": [sum(loop["ops"].values()) for loop in inner],
            "per_step": step + sum(t * sum(loop["ops"].values()) for t, loop in zip(trips, inner)),
            "step_loop_ops": ls[k]["ops"], "iteration_ops": inner[0]["ops"] if inner else {}}


def _export(f, *args) -> str:
    """The Triton IR that Pallas prints while ``f`` is lowered for CUDA."""
    out = io.StringIO()
    with printing_triton_ir(), contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("error")  # lpjax's fallback to the scan warns: here it fails
        jax.export.export(jax.jit(f), platforms=("cuda",),
                          disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(*args)
    text = out.getvalue()
    assert _MARKER in text, "no Triton kernel was lowered"
    return text[text.index(_MARKER):]


# ------------------------------------------------------------------------------ the hand kernels


def _suris_step(p, s):
    """Suris' rest-frame map (6.5), n = 3, coordinates (m01, m02, m12, a): the CUDA kernel of gpu.py."""
    p0, p1, p2, dt = p
    m01, m02, m12, a0, a1, a2 = s
    h = 0.5 * dt
    m01 = m01 + dt * (a0 * p1 - p0 * a1)
    m02 = m02 + dt * (a0 * p2 - p0 * a2)
    m12 = m12 + dt * (a1 * p2 - p1 * a2)
    x01, x02, x12 = h * m01, h * m02, h * m12
    c = 2.0 / (1.0 + x01 * x01 + x02 * x02 + x12 * x12)
    b0, b1, b2 = x01 * a1 + x02 * a2, -x01 * a0 + x12 * a2, -x02 * a0 - x12 * a1
    e0, e1, e2 = x01 * b1 + x02 * b2, -x01 * b0 + x12 * b2, -x02 * b0 - x12 * b1
    return m01, m02, m12, a0 + c * (b0 + e0), a1 + c * (b1 + e1), a2 + c * (b2 + e2)


def _mv_step(p, y, iters: int):
    """Moser–Veselov on so(3) (cross-product coordinates), ``iters`` preconditioned updates of
    the Cayley coordinates, then ``M₊ = fᵀ M f``: the CUDA kernel of gpu.py."""
    l0, l1, l2, dt = p
    y0, y1, y2 = y
    d0, d1, d2 = 2.0 * (l1 + l2), 2.0 * (l0 + l2), 2.0 * (l0 + l1)

    def update(_, x):
        x0, x1, x2 = x
        c = 2.0 / (1.0 + x0 * x0 + x1 * x1 + x2 * x2)
        r0 = c * ((x0 + x1 * x2) * l1 - (x1 * x2 - x0) * l2) - dt * y0
        r1 = c * ((x1 + x0 * x2) * l2 - (x0 * x2 - x1) * l0) - dt * y1
        r2 = c * ((x2 + x0 * x1) * l0 - (x0 * x1 - x2) * l1) - dt * y2
        return x0 - r0 / d0, x1 - r1 / d1, x2 - r2 / d2

    x0, x1, x2 = lax.fori_loop(0, iters, update, (dt * y0 / d0, dt * y1 / d1, dt * y2 / d2))
    s = x0 * x0 + x1 * x1 + x2 * x2
    c = 2.0 / (1.0 + s)
    f00, f11, f22 = 1.0 + c * (x0 * x0 - s), 1.0 + c * (x1 * x1 - s), 1.0 + c * (x2 * x2 - s)
    f01, f10, f02, f20 = c * (x0 * x1 - x2), c * (x0 * x1 + x2), c * (x0 * x2 + x1), c * (x0 * x2 - x1)
    f12, f21 = c * (x1 * x2 - x0), c * (x1 * x2 + x0)
    return (f00 * y0 + f10 * y1 + f20 * y2, f01 * y0 + f11 * y1 + f21 * y2, f02 * y0 + f12 * y1 + f22 * y2)


def _euler(p, M):
    """``Ṁ = M × Ω``, ``Ω = M/I`` (``p`` holds 1/I)."""
    w = [M[i] * p[i] for i in range(3)]
    return (M[1] * w[2] - M[2] * w[1], M[2] * w[0] - M[0] * w[2], M[0] * w[1] - M[1] * w[0])


def _rk4_step(p, M):
    dt = p[3]
    k1 = _euler(p, M)
    k2 = _euler(p, [m + 0.5 * dt * k for m, k in zip(M, k1)])
    k3 = _euler(p, [m + 0.5 * dt * k for m, k in zip(M, k2)])
    k4 = _euler(p, [m + dt * k for m, k in zip(M, k3)])
    return tuple(m + dt / 6.0 * (a + 2.0 * b + 2.0 * c + d) for m, a, b, c, d in zip(M, k1, k2, k3, k4))


_R3 = float(np.sqrt(3.0))
_GL4_A = ((0.25, 0.25 - _R3 / 6), (0.25 + _R3 / 6, 0.25))
_GL4_C = (0.5 - _R3 / 6, 0.5 + _R3 / 6)


def _gl4_step(p, M, iters: int):
    """GL4 by ``iters`` fixed-point updates of the stage increments ``Z_i = dt Σ_j a_ij f(y + Z_j)``
    from ``Z_i = c_i dt f(y)``; then ``y + dt Σ_i b_i f(y + Z_i)`` (b = ½, ½)."""
    dt = p[3]
    f0 = _euler(p, M)
    Z = tuple(tuple(c * dt * f for f in f0) for c in _GL4_C)

    def update(_, Z):
        F = [_euler(p, [m + z for m, z in zip(M, Zi)]) for Zi in Z]
        return tuple(tuple(dt * (a[0] * F[0][k] + a[1] * F[1][k]) for k in range(3)) for a in _GL4_A)

    Z = lax.fori_loop(0, iters, update, Z)
    F = [_euler(p, [m + z for m, z in zip(M, Zi)]) for Zi in Z]
    return tuple(m + dt * 0.5 * (F[0][k] + F[1][k]) for k, m in enumerate(M))


def hand_kernel(step, d: int, n_params: int, n_steps: int, dtype, interpret: bool = False, debug: bool = True):
    """``f(y0s (N, d), params (n_params,)) -> final states (N, d)``: one Pallas kernel, 256 members
    per program (N a multiple of 256), the state in registers for all ``n_steps`` steps of
    ``step(params, state)``; ``debug``: print the Triton IR (which :func:`step_counts` reads)."""

    def kernel(y_ref, p_ref, o_ref):
        p = tuple(p_ref[k] for k in range(n_params))
        s = lax.fori_loop(0, n_steps, lambda _, s: tuple(step(p, s)), tuple(y_ref[k, :] for k in range(d)))
        for k in range(d):
            o_ref[k, :] = s[k]

    def f(y0s, params):
        B = y0s.shape[0]
        out = pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((d, B), dtype), grid=(B // BLOCK,),
            in_specs=[pl.BlockSpec((d, BLOCK), lambda i: (0, i)), pl.BlockSpec((n_params,), lambda i: (0,))],
            out_specs=pl.BlockSpec((d, BLOCK), lambda i: (0, i)), interpret=interpret,
            compiler_params=None if interpret else plt.CompilerParams(num_warps=BLOCK // 32, num_stages=1),
            debug=debug and not interpret)(y0s.T, params)
        return out.T

    return f


# ------------------------------------------------------------------------------ the cases


def _cases():
    top, rb = lagrange_top(3, frame="rest"), rigid_body(jnp.array(INERTIA))
    s = 0.5 * sum(INERTIA)
    lam = [s - i for i in INERTIA]
    inv_i = [1.0 / i for i in INERTIA]
    gl_iters = lpjax.GaussLegendre(2, early_exit=False).max_iters
    rng = np.random.default_rng(0)
    m, a = 0.3 * rng.normal(size=(N, 3)), rng.normal(size=(N, 3))
    top0 = np.concatenate([m, a / np.linalg.norm(a, axis=1, keepdims=True)], axis=1)
    rb0 = rng.normal(size=(N, 3))
    return [
        # name, system, method, y0s, hand step, params, iterations per step
        ("Suris, Lagrange top (rest, n=3)", top, lpjax.SurisLagrangeTop(), top0, _suris_step, [0.0, 0.0, 1.0, DT], 0),
        ("Moser-Veselov, rigid body (so(3))", rb, lpjax.MoserVeselov(), rb0,
         lambda p, y: _mv_step(p, y, 20), lam + [DT], 20),
        ("RK4, rigid body", rb, lpjax.RK4(), rb0, _rk4_step, inv_i + [DT], 0),
        (f"GL4 ({gl_iters} fixed iterations), rigid body", rb, lpjax.GaussLegendre(2, early_exit=False), rb0,
         lambda p, y: _gl4_step(p, y, gl_iters), inv_i + [DT], gl_iters),
    ]


def main() -> None:
    ap = H.arg_parser(__doc__, "float64 only")
    args = ap.parse_args()
    H.start()
    rows = []
    for name, system, method, y0s, step, params, iters in _cases():
        d = y0s.shape[1]
        # the hand kernel is the same map: a few members, interpret mode, against lpjax's scan
        few = y0s[:BLOCK]
        ref = lpjax.ensemble(system, method, few, DT, 50, kernel="scan").final_state
        got = np.asarray(jax.jit(hand_kernel(step, d, len(params), 50, np.float64, interpret=True))(
            jnp.asarray(few), jnp.asarray(params)))
        agree = float(np.max(np.abs(got - ref)))
        H.log(f"{name}: hand kernel vs lpjax after 50 steps, max |Δ| = {agree:.1e}")
        for dtype in (np.float64,) if args.quick else (np.float64, np.float32):
            y = jnp.asarray(y0s, dtype)
            f = lpjax.ensemble_function(system, method, DT, N_STEPS, save_every=SAVE_EVERY, platform="cuda", dtype=dtype)
            ours = step_counts(_export(f, y), 2, iters)
            hand = step_counts(_export(hand_kernel(step, d, len(params), N_STEPS, dtype), y,
                                       jnp.asarray(params, dtype)), 1, iters)
            rows.append(dict(case=name, dtype=np.dtype(dtype).name, iterations=iters, lpjax=ours, hand=hand,
                             ratio_per_step=ours["per_step"] / hand["per_step"],
                             ratio_per_iteration=(ours["per_iteration"] / hand["per_iteration"]
                                                  if hand["per_iteration"] else None),
                             hand_vs_lpjax_max_abs_diff=agree))
            H.log(f"{name} {np.dtype(dtype).name}: {ours['per_step']} against {hand['per_step']} per step")
    H.print_table([("case", -40, "case"), ("dtype", -8, "dtype"),
                   ("lpjax/step", 10, lambda r: r["lpjax"]["per_step"]),
                   ("hand/step", 10, lambda r: r["hand"]["per_step"]),
                   ("ratio", 7, lambda r: f"{r['ratio_per_step']:.2f}"),
                   ("", 2, lambda r: ""),
                   ("lpjax/iter", 10, lambda r: r["lpjax"]["per_iteration"] or ""),
                   ("hand/iter", 10, lambda r: r["hand"]["per_iteration"] or ""),
                   ("lpjax rest", 11, lambda r: r["lpjax"]["step_loop"] if r["iterations"] else ""),
                   ("hand rest", 10, lambda r: r["hand"]["step_loop"] if r["iterations"] else "")], rows)
    print("operations in the Triton IR (constants, loop ops and yields not counted); rest = the step's own "
          "operations outside its solver loop")
    args.out.mkdir(parents=True, exist_ok=True)
    meta = H.metadata("kernel_ops", "quick" if args.quick else "full", [], {}, "counts, not times: the load does "
                      "not matter")
    H.write_json(args.out / "kernel_ops.json", {"metadata": meta, "rows": rows})


if __name__ == "__main__":
    main()
