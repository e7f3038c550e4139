"""Fit inertias and the initial state from noisy samples at irregular times.

    python examples/fit_initial_state.py [--sigma 1e-3] [--samples 60]

A free rigid body (I = (1, 2, 3), M(0) = (1, 0.5, 0.8)) is sampled at random times in [0, 10]
(from t = 0), with Gaussian noise on every sample, M(0) included. Three fits:

1. I₂, I₃ (I₁ = 1 fixed) and M(0) together (``fit_y0=True``), with the times off the grid of
   steps dt = 0.05 (each reached by one partial GL4 step from the grid point before it);
2. I₂, I₃ alone, taking the noisy first sample as M(0): its noise biases the inertias;
3. all three inertias and M(0): not identifiable (M × (I⁻¹ + λ)M = M × I⁻¹M), so the fit warns,
   naming the null direction, and its summary says which combinations the data fix.
"""

from __future__ import annotations

import argparse
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import lpjax  # noqa: E402
from lpjax.fit import FitWarning, least_squares  # noqa: E402
from lpjax.systems import rigid_body  # noqa: E402

I_TRUE, M0_TRUE = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.5, 0.8])
FINE = 1e-3  # the samples' clock: the truth is integrated with this step (GL4, error ~1e-13)


def samples(n: int, sigma: float, seed: int = 0):
    """``n`` sample times (the first at 0) on a 1 ms clock, and noisy M at them."""
    rng = np.random.default_rng(seed)
    ticks = np.sort(rng.choice(np.arange(1, 10_001), n - 1, replace=False))
    truth = lpjax.integrate(rigid_body(jnp.asarray(I_TRUE)), lpjax.GaussLegendre(2), jnp.asarray(M0_TRUE), FINE,
                            10_000).ys
    ticks = np.concatenate([[0], ticks])
    return ticks * FINE, np.asarray(truth)[ticks] + sigma * rng.standard_normal((n, 3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sigma", type=float, default=1e-3)
    parser.add_argument("--samples", type=int, default=60)
    args = parser.parse_args()
    t, m = samples(args.samples, args.sigma)
    build = lambda th: rigid_body(jnp.concatenate([jnp.ones(1), th]))  # noqa: E731

    fit = least_squares(build, jnp.array([1.7, 3.4]), jnp.asarray(m[0]), t, m, dt=0.05, fit_y0=True)
    print("1. I2, I3 and M(0) from samples at irregular times\n" + fit.summary(["I2", "I3"]))
    err = np.concatenate([(np.asarray(fit.theta) - I_TRUE[1:]) / np.asarray(fit.stderr),
                          (np.asarray(fit.y0) - M0_TRUE) / np.asarray(fit.y0_stderr)])
    print("   errors in standard errors (I2, I3, M1(0), M2(0), M3(0)):", np.array2string(err, precision=2))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FitWarning)
        given = least_squares(build, jnp.array([1.7, 3.4]), jnp.asarray(m[0]), t[1:], m[1:], dt=0.05)
    off = (np.asarray(given.theta) - I_TRUE[1:]) / np.asarray(given.stderr)
    print(f"\n2. the noisy first sample taken as M(0): I2, I3 = {np.array2string(np.asarray(given.theta), precision=5)}, "
          f"{np.array2string(off, precision=2)} standard errors off")

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always", FitWarning)
        fit3 = least_squares(lambda th: rigid_body(th), jnp.array([1.1, 2.1, 2.9]), jnp.asarray(m[0]), t, m,
                             dt=0.05, fit_y0=True)
    print("\n3. all three inertias and M(0)")
    for w in record:
        print("   FitWarning:", w.message)
    print(fit3.summary(["I1", "I2", "I3"]))


if __name__ == "__main__":
    main()
