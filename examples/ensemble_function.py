"""lpjax.ensemble_function: an ensemble as one pure function, inside your own jit, and the GPU
kernel lowered for CUDA on a machine without a GPU.

1. 4096 rigid bodies under GL4: the worst relative energy drift over the members, as one
   jitted function of the initial states (compiled once, called on two ensembles).
2. The same ensemble with ``platform="cuda"``: the fused Triton kernel, lowered with
   ``jax.export`` for CUDA, without running it. Prints the kernel's size and whether its step
   loop touches global memory.

    python examples/ensemble_function.py [--n 4096] [--steps 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import lpjax  # noqa: E402
from lpjax._ensemble._kernels._fused import printing_triton_ir  # noqa: E402
from lpjax.systems import rigid_body  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=1000)
    args = ap.parse_args()

    system = rigid_body(jnp.array([1.0, 2.0, 3.0]))
    method = lpjax.GaussLegendre(2)
    f = lpjax.ensemble_function(system, method, 0.01, args.steps, save_every=args.steps // 10, observe="energy")

    @jax.jit
    def worst_drift(y0s):
        e = f(y0s).observables["energy"]  # (N, 11): the energy at each save
        return jnp.max(jnp.abs(e[:, -1] - e[:, 0]) / e[:, 0])

    rng = np.random.default_rng(0)
    for k in range(2):
        y0s = jnp.asarray(rng.normal(size=(args.n, 3)))
        print(f"ensemble {k}: {args.n} bodies x {args.steps} GL4 steps, worst relative energy drift "
              f"{float(worst_drift(y0s)):.3e} (mean |y0|² {float(jnp.mean(jnp.sum(y0s**2, axis=1))):.4f})")

    gpu = lpjax.ensemble_function(system, method, 0.01, args.steps, save_every=args.steps // 10, observe="energy",
                                  platform="cuda")
    printed = io.StringIO()
    with printing_triton_ir(), contextlib.redirect_stdout(printed):
        exported = jax.export.export(
            jax.jit(gpu), platforms=("cuda",),
            disabled_checks=[jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")],
        )(jax.ShapeDtypeStruct((args.n, 3), jnp.float64))
    ir = printed.getvalue().split("The Triton module for pallas_call", 1)[-1]
    ops = re.findall(r"^\s*(?:%\S+ = )?(tt\.\w+|arith\.\w+|scf\.\w+)", ir, flags=re.M)
    print(f"kernel={gpu.kernel!r} for platform {gpu.platform!r}: {exported.mlir_module().count('xla.gpu.triton')} "
          f"Triton kernel, {len(ops)} operations, {ops.count('tt.load')} global loads and {ops.count('tt.store')} "
          f"stores in all (tests/test_gpu_lowering.py checks that none is in the step loop)")


if __name__ == "__main__":
    main()
