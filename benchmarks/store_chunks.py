"""What a store's default chunks cost: 4096 heavy tops, GL6, 4000 steps of 0.025, into a zarr
store with the default chunks (at least 8 per process and worker: what an interrupted run keeps)
against one chunk per worker (the default before, which a killed run lost whole).

Rounds interleaved, each run into a fresh store, compilation apart (one warm-up run of each);
``ratio_median`` is the median over rounds of default / one chunk.

Run: ``python benchmarks/store_chunks.py`` (writes ``benchmarks/results/store_chunks.json``).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

import _harness as H  # noqa: I001  (float64 on, first)
import jax.numpy as jnp

import lpjax
from lpjax.systems import heavy_top

N, STEPS, DT = 4096, 4000, 0.025


def main() -> None:
    args = H.arg_parser(__doc__, "one round").parse_args()
    H.start()
    loads = {"start": H.loadavg()}
    top = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
    y0s = lpjax.spread_states(top, jnp.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386]), N, 0.1, seed=0).states
    method = lpjax.GaussLegendre(3)
    tmp = Path(tempfile.mkdtemp())
    variants = {"default": None, "one chunk": N}

    def run(name: str, k: int):
        out = tmp / f"{k}-{name}.zarr"
        t = time.perf_counter()
        lpjax.ensemble(top, method, y0s, DT, STEPS, out=str(out), chunk_size=variants[name], progress=False)
        wall = time.perf_counter() - t
        shutil.rmtree(out)
        return wall

    for name in variants:  # warm-up: compilation
        run(name, -1)
    times = {name: [] for name in variants}
    ratios = []
    for k in range(1 if args.quick else 3):
        for name in variants:
            times[name].append(run(name, k))
        ratios.append(times["default"][-1] / times["one chunk"][-1])
        H.log(f"round {k}: default {times['default'][-1]:.2f} s, one chunk {times['one chunk'][-1]:.2f} s")
    from lpjax._ensemble._plan import make_plan
    plan = make_plan(N, 6, STEPS, STEPS, "float64", False, "auto", store=True)
    shutil.rmtree(tmp)
    meta = H.metadata("store_chunks", "quick" if args.quick else "full", [], loads, "")
    doc = {"metadata": meta, "members": N, "steps": STEPS, "dt": DT, "method": "GaussLegendre(3)",
           "kernel": plan.kernel, "default_chunks": plan.n_chunks, "default_chunk": plan.chunk,
           "times_s": times, "ratio_median": statistics.median(ratios)}
    H.write_json(args.out / "store_chunks.json", doc)
    H.log(f"{plan.n_chunks} chunks of {plan.chunk} ({plan.kernel}): median ratio {statistics.median(ratios):.4f}; "
          f"wrote {args.out / 'store_chunks.json'}")


if __name__ == "__main__":
    main()
