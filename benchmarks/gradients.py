"""Gradients through ``lpjax.integrate``: time against the forward run, and memory against steps.

    python benchmarks/gradients.py [--quick] [--out benchmarks/results/]

Cases (float64, CPU): GL4 (``GaussLegendre(2)``) on the heavy top I = (1, 1, 0.5),
χ = (0.1, 0, 1), mgl = 1, dt = 0.01; the Suris map (``SurisLagrangeTop``) on the rest-frame
Lagrange top n = 3, dt = 0.01; Moser–Veselov on the rigid body I = (1, 2, 3), dt = 0.01; and on
the same heavy top, diffrax's Tsit5 and lpjax's GL4 as a diffrax solver
(``lpjax.diffrax.GaussLegendre(2)``), constant steps, ``RecursiveCheckpointAdjoint``; 10³, 10⁴
and 10⁵ steps (10³, 10⁴ with ``--quick``); and, at 10³ and 10⁴ steps only (their steps cost
20–140 µs), ``Collective()`` (GL4 on the canonized heavy top) and ``DiscreteEulerPoincare`` with
``lagrangians.midpoint`` of the heavy top; ``LiePoissonSplitting`` (the default Cayley flow, and
the exact flow) and its Kahan–Li 6 composition on the rigid body, the splitting of the heavy top,
and Moser–Veselov composed by the triple jump. The loss is the sum of the final state; the gradient
is ``eqx.filter_grad`` with respect to every array of the system (for DEP: of its Lagrangian,
which holds the heavy top's) and the initial state together.

* adjoint: ``integrate``'s ``"auto"`` default (in reverse mode: the written-out discrete
  adjoint, or the method's own adjoint of a step) against ``"direct"`` (JAX's reverse mode of
  the checkpointed loop);
* time: the jitted forward run, gradient and gradient in y0 are called once (compilation),
  then in turn, in 5–15 interleaved rounds (about 4 s), so that a slow spell of the machine
  hits all three; reported are the medians, as the ratio gradient / forward; also for the
  gradient with respect to the initial state alone (``y0 only``), where the discrete adjoint
  forms no parameter cotangent;
* memory: in a fresh process per point, the gradient is compiled first, the peak-RSS counter
  is then reset (``/proc/self/clear_refs``) and the compiled gradient run alone; reported is the
  peak RSS above the RSS just before the run, and XLA's own temporary-buffer size of the
  compiled gradient (``memory_analysis().temp_size_in_bytes``). The exponent is the slope of
  log memory against log steps between the last two points.

For one parameter, forward mode (``jax.jvp``) is timed too, and ``jax.grad(upright_top_cost)``,
which runs it inside.

``integrate`` checkpoints its loop (groups of about √n steps), so the memory should grow as
about √n. The peers, measured in the same run, are the other ``adjoint`` and the same method's
own step (``init``/``step``) in a plain ``lax.scan``, whose reverse mode stores every step.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import _harness as H
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import diffrax
import lpjax
import lpjax.diffrax
from lpjax import lagrangians
from lpjax.systems import heavy_top, lagrange_top, rigid_body


_TOP = (heavy_top(jnp.array([1.0, 1.0, 0.5]), jnp.array([0.1, 0.0, 1.0]), 1.0),
        jnp.array([0.3, 0.2, 2.0, 0.0, np.sin(0.4), np.cos(0.4)]))


_RIGID = lpjax.LiePoissonSplitting(("q0", "q1", "q2"))
_RIGID_BODY_METHODS = {
    "Splitting rigid body": _RIGID,
    "Splitting (exact flow) rigid body": lpjax.LiePoissonSplitting(("q0", "q1", "q2"), "exact"),
    "Composition(splitting, Kahan-Li 6) rigid body": lpjax.Composition(_RIGID, "kahan-li6"),
    "Composition(Moser-Veselov, triple jump) rigid body": lpjax.Composition(lpjax.MoserVeselov(), "triple-jump"),
}


def _case(name):
    """``(params, run, y0)``: the arrays differentiated and ``run(params) -> (system, method)``;
    ``params`` is the system, except for DEP, whose Lagrangian (the method) holds the arrays."""
    if name in ("GL4 heavy top", "diffrax Tsit5 heavy top", "diffrax + lpjax GL4 heavy top"):
        return _TOP[0], lambda system: (system, lpjax.GaussLegendre(2)), _TOP[1]
    if name == "Collective (GL4) heavy top":
        return _TOP[0], lambda system: (system, lpjax.Collective()), _TOP[1]
    if name == "DEP (midpoint) heavy top":
        return (lpjax.DiscreteEulerPoincare(lagrangians.midpoint(_TOP[0])), lambda method: (_TOP[0], method), _TOP[1])
    if name == "Moser-Veselov rigid body":
        return rigid_body(jnp.array([1.0, 2.0, 3.0])), lambda system: (system, lpjax.MoserVeselov()), jnp.array([1.0, 0.5, 0.8])
    if name in _RIGID_BODY_METHODS:
        return rigid_body(jnp.array([1.0, 2.0, 3.0])), lambda system: (system, _RIGID_BODY_METHODS[name]), jnp.array([1.0, 0.5, 0.8])
    if name == "Splitting heavy top":
        return _TOP[0], lambda system: (system, lpjax.LiePoissonSplitting.for_system(system)), _TOP[1]
    return (lagrange_top(3, frame="rest"), lambda system: (system, lpjax.SurisLagrangeTop()),
            jnp.array([0.3, -0.2, 0.5, 0.0, np.sin(0.4), np.cos(0.4)]))


def _diffrax_final(system, y0, n, solver):
    sol = diffrax.diffeqsolve(lpjax.diffrax.LiePoissonTerm(system), solver, 0.0, 0.01 * n, 0.01, y0,
                              saveat=diffrax.SaveAt(t1=True), stepsize_controller=diffrax.ConstantStepSize(),
                              adjoint=diffrax.RecursiveCheckpointAdjoint(), max_steps=n)
    return sol.ys[-1]


def _functions(name, n, variant="auto"):
    """The forward run, the gradient in the system's arrays and y0 together, and in y0 alone."""
    params, run, y0 = _case(name)

    def loss(params, y0):
        system, method = run(params)
        if name.startswith("diffrax"):
            solver = diffrax.Tsit5() if "Tsit5" in name else lpjax.diffrax.GaussLegendre(2)
            return jnp.sum(_diffrax_final(system, y0, n, solver))
        if variant == "scan":  # the method's own step in a plain lax.scan: AD stores every step
            def step(state, _):
                return method.step(system, state, 0.01)[0], None

            return jnp.sum(method.observe(system, jax.lax.scan(step, method.init(system, y0, 0.01), None, length=n)[0]))
        return jnp.sum(lpjax.integrate(system, method, y0, 0.01, n, save_every=n, adjoint=variant).ys[-1])

    both = eqx.filter_grad(lambda args: loss(*args))
    return (params, y0, eqx.filter_jit(loss), eqx.filter_jit(lambda params, y0: both((params, y0))),
            eqx.filter_jit(jax.grad(loss, argnums=1)))


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _child(name: str, n: int, variant: str) -> None:
    """Compile the gradient, reset the peak-RSS counter, run the compiled gradient alone."""
    system, y0, _, grad, _ = _functions(name, n, variant)
    compiled = grad.lower(system, y0).compile()
    temp = compiled.compiled.memory_analysis().temp_size_in_bytes if hasattr(compiled, "compiled") else None
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = _rss_kib("VmRSS")
    jax.block_until_ready(compiled(system, y0))
    peak = _rss_kib("VmHWM")
    print(json.dumps({"peak_rss_above_start_kib": peak - before, "xla_temp_bytes": temp}))


def _memory(name: str, n: int, variant: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", name, str(n), variant], capture_output=True, text=True,
                         timeout=1800, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _few_parameters(n: int) -> list[dict]:
    """Derivative along one parameter by forward mode, against the forward run: the two cases
    (scaling the inertia, or the gravity vector, by 1 + ε) and ``jax.grad(upright_top_cost)``."""
    from lpjax.control import upright_top_cost

    out = []
    for name in ("GL4 heavy top", "Suris Lagrange top"):
        system, run, y0 = _case(name)
        method = run(system)[1]

        def loss(eps, system=system, method=method, y0=y0):
            scaled = eqx.tree_at(lambda s: s.hamiltonian, system, jax.tree.map(lambda a: a * (1 + eps) if eqx.is_inexact_array(a) else a,
                                                                                 system.hamiltonian))
            return jnp.sum(lpjax.integrate(scaled, method, y0, 0.01, n, save_every=n, adjoint="direct").ys[-1])

        fwd = jax.jit(loss)
        der = jax.jit(lambda e, loss=loss: jax.jvp(loss, (e,), (jnp.ones_like(e),))[1])
        out.append(_pair(f"{name}, {n} steps, d/d(parameter scale)", fwd, der, jnp.asarray(0.0)))
    rho = jnp.asarray(0.5 * 0.7**2 * 0.215**2 / 0.2)
    out.append(_pair("upright_top_cost (4 x 2000 GL4 steps), jax.grad", jax.jit(upright_top_cost),
                     jax.jit(jax.grad(upright_top_cost)), rho))
    return out


def _pair(case, fwd, der, x) -> dict:
    _, tf = H.time_calls(lambda: jax.block_until_ready(fwd(x)))
    _, td = H.time_calls(lambda: jax.block_until_ready(der(x)))
    H.log(f"{case}: derivative/forward {td['time_s'] / tf['time_s']:.2f}")
    return dict(case=case, forward_s=tf["time_s"], derivative_s=td["time_s"], ratio=td["time_s"] / tf["time_s"])


def _interleaved(calls, budget_s: float = 4.0, rounds: tuple[int, int] = (5, 15)) -> list[dict]:
    """Time ``calls`` (forward, gradients) in interleaved rounds, so that a slow spell of the
    machine hits them alike: each is first called once (compilation: ``first_call_s``), then
    once per round, for at least ``rounds[0]`` and at most ``rounds[1]`` rounds or ``budget_s``;
    ``time_s`` is the median of the rounds."""
    import time

    first = []
    for call in calls:
        t = time.perf_counter()
        call()
        first.append(time.perf_counter() - t)
    walls = [[] for _ in calls]
    start = time.perf_counter()
    while len(walls[0]) < rounds[0] or (len(walls[0]) < rounds[1] and time.perf_counter() - start < budget_s):
        for call, w in zip(calls, walls):
            t = time.perf_counter()
            call()
            w.append(time.perf_counter() - t)
    return [{"time_s": float(np.median(w)), "time_min_s": min(w), "first_call_s": f, "n_timed_calls": len(w)}
            for f, w in zip(first, walls)]


def _slope(rows, key):
    a, b = rows[-2], rows[-1]
    if not (a[key] and b[key]):
        return None
    return math.log(b[key] / a[key]) / math.log(b["steps"] / a["steps"])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return _child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    args = H.arg_parser(__doc__, "10³ and 10⁴ steps only").parse_args()
    H.start()
    steps = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    rows = []
    few = _few_parameters(10_000)  # first: after the 10⁵-step rows the same process times it up to 3× slower
    cases = [(name, variant) for name in ("GL4 heavy top", "Suris Lagrange top", "Moser-Veselov rigid body")
             for variant in ("auto", "direct", "scan")]
    cases += [(name, variant) for name in ("Collective (GL4) heavy top", "DEP (midpoint) heavy top")
              for variant in ("auto", "direct")]
    cases += [("Splitting rigid body", variant) for variant in ("auto", "direct", "scan")]
    cases += [(name, "auto") for name in ("Splitting (exact flow) rigid body", "Splitting heavy top")]
    cases += [(name, variant) for name in ("Composition(splitting, Kahan-Li 6) rigid body",
                                           "Composition(Moser-Veselov, triple jump) rigid body")
              for variant in ("auto", "direct")]
    cases += [("diffrax Tsit5 heavy top", "diffrax"), ("diffrax + lpjax GL4 heavy top", "diffrax")]
    for name, variant in cases:
        auto = " (discrete)"
        label = f"{name}, " + {"auto": 'adjoint="auto"' + auto, "direct": 'adjoint="direct"', "scan": "plain lax.scan",
                               "diffrax": "RecursiveCheckpointAdjoint"}[variant]
        for n in steps[:2] if name.startswith(("Collective", "DEP")) else steps:  # (their steps cost 20-140 µs)
            system, y0, fwd, grad, grad_y0 = _functions(name, n, variant)
            tf, tg, ty = _interleaved([lambda f=f: jax.block_until_ready(f(system, y0)) for f in (fwd, grad, grad_y0)])
            mem = _memory(name, n, variant)
            rows.append(dict(case=label, steps=n, forward_s=tf["time_s"], gradient_s=tg["time_s"],
                             gradient_over_forward=tg["time_s"] / tf["time_s"],
                             gradient_y0_s=ty["time_s"], gradient_y0_over_forward=ty["time_s"] / tf["time_s"],
                             compile_forward_s=tf["first_call_s"] - tf["time_s"],
                             compile_gradient_s=tg["first_call_s"] - tg["time_s"],
                             peak_rss_kib=mem["peak_rss_above_start_kib"], xla_temp_bytes=mem["xla_temp_bytes"]))
            H.log(f"{label} n={n}: grad/fwd {rows[-1]['gradient_over_forward']:.1f}, peak RSS +{mem['peak_rss_above_start_kib']} KiB, "
                  f"XLA temp {mem['xla_temp_bytes']} B")
    labels = list(dict.fromkeys(r["case"] for r in rows))
    exponents = {name: {"peak_rss": _slope([r for r in rows if r["case"] == name], "peak_rss_kib"),
                        "xla_temp": _slope([r for r in rows if r["case"] == name], "xla_temp_bytes")}
                 for name in labels}

    print(f"\nGradients through integrate, {H.machine_line()}")
    H.print_table([("case", -46, "case"), ("steps", 8, "steps"), ("fwd[ms]", 10, lambda r: f"{r['forward_s'] * 1e3:.2f}"),
                   ("grad[ms]", 10, lambda r: f"{r['gradient_s'] * 1e3:.2f}"), ("grad/fwd", 9, "gradient_over_forward:.1f"),
                   ("y0 only", 8, "gradient_y0_over_forward:.1f"),
                   ("compile fwd/grad[s]", 20, lambda r: f"{r['compile_forward_s']:.2f}/{r['compile_gradient_s']:.2f}"),
                   ("peak RSS[KiB]", 14, "peak_rss_kib"), ("XLA temp[B]", 13, "xla_temp_bytes")], rows, group="case")
    for name, e in exponents.items():
        print(f"{name}: memory ~ steps^p between the last two points: peak RSS p = "
              f"{e['peak_rss'] if e['peak_rss'] is None else round(e['peak_rss'], 2)}, XLA temp p = "
              f"{e['xla_temp'] if e['xla_temp'] is None else round(e['xla_temp'], 2)}")

    print("\nOne parameter, forward mode (jax.jvp; what upright_top_cost's jax.grad runs inside):")
    H.print_table([("case", -44, "case"), ("fwd[ms]", 10, lambda r: f"{r['forward_s'] * 1e3:.2f}"),
                   ("deriv[ms]", 10, lambda r: f"{r['derivative_s'] * 1e3:.2f}"), ("deriv/fwd", 10, "ratio:.2f")], few)

    fig, axes = H.plt.subplots(1, 2, figsize=(11, 4))
    for name, marker in zip(labels, "osdv^<"):
        rs = [r for r in rows if r["case"] == name]
        n = [r["steps"] for r in rs]
        axes[0].loglog(n, [r["gradient_over_forward"] for r in rs], marker=marker, label=name)
        axes[1].loglog(n, [max(r["xla_temp_bytes"] or 1, 1) for r in rs], marker=marker, label=f"{name}: XLA temp")
        axes[1].loglog(n, [max(r["peak_rss_kib"], 1) * 1024 for r in rs], marker=marker, ls="--", label=f"{name}: peak RSS")
    axes[0].set(xlabel="steps", ylabel="gradient time / forward time", title="time")
    axes[1].set(xlabel="steps", ylabel="bytes", title="gradient memory (fresh process, compiled)")
    for ax in axes:
        ax.legend(fontsize=7)
    args.out.mkdir(parents=True, exist_ok=True)
    H.write_png(fig, args.out / "gradients.png", 110)
    H.write_json(args.out / "gradients.json", {
        "metadata": H.metadata("gradients", "quick" if args.quick else "full", [], {}, ""),
        "rows": rows, "memory_exponents": exponents, "one_parameter_forward_mode": few})


if __name__ == "__main__":
    main()
