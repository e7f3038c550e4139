"""Constant steps: ``lpjax.diffrax.GaussLegendre(s)`` under diffrax against ``lpjax.integrate``.

    python benchmarks/diffrax_constant.py [--quick] [--out benchmarks/results/]

For the rigid body (I = 1, 2, 3; dt = 0.1) and the heavy top (I = 1, 1.3, 0.7, mgl = 2;
dt = 0.05), s = 1, 2, 3, n = 4000 steps (float64, CPU): ``diffeqsolve(ODETerm(f),
GaussLegendre(s), ..., stepsize_controller=ConstantStepSize(), saveat=SaveAt(t1=True))``
against ``lpjax.integrate(system, lpjax.GaussLegendre(s), y0, dt, n, save_every=n)``: the same
steps, one saved state, so that saving does not weigh; and ``integrate`` with
``solver="auto"``, the stage solve that the diffrax solver uses by default (the fixed point,
then simplified Newton where it does not contract). Beside the default solver, for context:
``solver="fixed_point"`` (``integrate``'s default), ``error_estimate=False`` and
``local_extrapolation=True`` (the state goes on from the two half steps, the former default:
three stage solves a step). Each variant is compiled ahead of
time (compile time apart), then all are called in interleaved rounds (25; 5 with
``--quick``), each call after ``block_until_ready``. Reported: the median time per step; the
median over rounds of its ratio to ``integrate``'s time in the same round (robust to the load
of a shared machine drifting between rounds), the ratio of the medians and of the best
times, and the median ratio to ``integrate`` with the same stage solve; the largest difference from ``integrate``'s states over the first 100 steps, and that
of the final state (on the chaotic heavy top, roundoff differences of the two programs grow
over the run). ``--quick``: the heavy top with s = 2 only.
"""

from __future__ import annotations

import statistics
import time

import _harness as H
import diffrax
import jax
import jax.numpy as jnp
import numpy as np

import lpjax
import lpjax.diffrax as ldx
from lpjax.systems import heavy_top, rigid_body

N = 4000
CASES = {"rigid body": (lambda: rigid_body(jnp.array([1.0, 2.0, 3.0])), np.array([1.0, 0.5, 0.8]), 0.1),
         "heavy top": (lambda: heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0),
                       np.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386]), 0.05)}
VARIANTS = {"default": {}, 'solver="fixed_point"': {"solver": "fixed_point"},
            "error_estimate=False": {"error_estimate": False}, "local_extrapolation=True": {"local_extrapolation": True}}


def _jobs(case: str, stages: int) -> list[dict]:
    make, y0, dt = CASES[case]
    system = make()
    term = diffrax.ODETerm(lambda t, y, args: system.vector_field(y))
    jobs = [dict(case=case, stages=stages, variant=label, args=(jnp.asarray(y0),),
                 fn=lambda y, method=method: lpjax.integrate(system, method, y, dt, N, save_every=N).ys[-1])
            for label, method in (("lpjax.integrate", lpjax.GaussLegendre(stages)),
                                  ('lpjax.integrate solver="auto"', lpjax.GaussLegendre(stages, solver="auto")))]
    for name, options in VARIANTS.items():
        solver = ldx.GaussLegendre(stages, **options)
        jobs.append(dict(case=case, stages=stages, variant=name, args=(jnp.asarray(y0),),
                         fn=lambda y, solver=solver: diffrax.diffeqsolve(
                             term, solver, 0.0, N * dt, dt, y, saveat=diffrax.SaveAt(t1=True),
                             stepsize_controller=diffrax.ConstantStepSize(), max_steps=N).ys[-1]))
    return jobs


def _agreement(case: str, stages: int, options: dict, steps: int = 100) -> float:
    """The largest difference from ``integrate`` over the first ``steps`` steps (the heavy top
    is chaotic: roundoff differences of the two programs grow, to 4e-5 after 4000 steps)."""
    make, y0, dt = CASES[case]
    system = make()
    term = diffrax.ODETerm(lambda t, y, args: system.vector_field(y))
    ref = lpjax.integrate(system, lpjax.GaussLegendre(stages), jnp.asarray(y0), dt, steps).ys[1:]
    sol = diffrax.diffeqsolve(term, ldx.GaussLegendre(stages, **options), 0.0, steps * dt, dt, jnp.asarray(y0),
                              saveat=diffrax.SaveAt(steps=True), max_steps=steps)
    return float(jnp.max(jnp.abs(sol.ys - ref)))


def _interleaved(jobs: list[dict], rounds: int) -> None:
    """Time every job's compiled call once per round, the jobs in turn; sets ``times``."""
    for job in jobs:
        job["first"] = jax.block_until_ready(job["compiled"](*job["args"]))  # warm
        job["times"] = []
    for _ in range(rounds):
        for job in jobs:
            t = time.perf_counter()
            jax.block_until_ready(job["compiled"](*job["args"]))
            job["times"].append(time.perf_counter() - t)


def main() -> None:
    args = H.arg_parser(__doc__, "the heavy top with s = 2 only").parse_args()
    H.start()
    loads = {"start": H.loadavg()}
    plan = [("heavy top", 2)] if args.quick else [(c, s) for c in CASES for s in (1, 2, 3)]
    rows = []
    for case, stages in plan:
        jobs = _jobs(case, stages)
        H.compile_all(jobs)
        _interleaved(jobs, 5 if args.quick else 25)
        ref, auto = jobs[0], jobs[1]
        t_ref = statistics.median(ref["times"])
        for job in jobs:
            t = statistics.median(job["times"])
            same = ref if job is ref or "fixed_point" in job["variant"] else auto  # the same stage solve
            rows.append(dict(case=case, stages=stages, group=f"{case} {stages}", variant=job["variant"], us_per_step=t / N * 1e6,
                             ratio=statistics.median(a / b for a, b in zip(job["times"], ref["times"])),
                             ratio_of_medians=t / t_ref, ratio_min=min(job["times"]) / min(ref["times"]),
                             ratio_same_solve=statistics.median(a / b for a, b in zip(job["times"], same["times"])),
                             max_state_difference=float(np.max(np.abs(np.asarray(job["first"]) - np.asarray(ref["first"])))),
                             first_100_steps_difference=(0.0 if job in (ref, auto) else
                                                         _agreement(case, stages, VARIANTS[job["variant"]])),
                             compile_s=job["compile_s"], times_s=job["times"]))
            H.log(f"{case} GL{2 * stages} {job['variant']}: {rows[-1]['us_per_step']:.3f} us/step, "
                  f"ratio {rows[-1]['ratio']:.3f}")
    print(f"\nConstant steps, {N} steps, SaveAt(t1=True) / save_every={N}, {H.machine_line()}; "
          "median of interleaved rounds")
    H.print_table([("case", -11, "case"), ("GL", 4, lambda r: str(2 * r["stages"])), ("variant", -26, "variant"),
                   ("us/step", 9, "us_per_step:.3f"), ("/ integrate", 12, "ratio:.3f"),
                   ("medians", 8, "ratio_of_medians:.3f"), ("/ same solve", 13, "ratio_same_solve:.3f"),
                   ("best / best", 12, "ratio_min:.3f"), ("|Δy| 100 steps", 15, "first_100_steps_difference:.1e"),
                   ("|Δy(t1)|", 9, "max_state_difference:.1e"),
                   ("compile[s]", 11, "compile_s:.2f")], rows, group="group")
    args.out.mkdir(parents=True, exist_ok=True)
    H.write_json(args.out / ("diffrax_constant_quick.json" if args.quick else "diffrax_constant.json"), {
        "metadata": H.metadata("diffrax_constant", "quick" if args.quick else "full", [diffrax], loads,
                               "a shared machine: interleaved rounds, medians"),
        "n_steps": N, "rows": rows})


if __name__ == "__main__":
    main()
