"""Fit model parameters to noisy trajectories with ``lpjax.fit.least_squares``.

    python examples/fit_inertia.py [--sigma 1e-3] [--out examples/output/fit_inertia.png]

Two synthetic cases, each simulated with known parameters plus Gaussian noise and fitted back:

1. a free rigid body observed through M(t), fitting (I₂, I₃) with I₁ = 1 fixed. All three
   inertias cannot be fitted: M' = M × I⁻¹M is unchanged when I⁻¹ gains a multiple of the
   identity, so the fit of (I₁, I₂, I₃) warns that it is not identifiable, naming its null
   direction, and its summary gives the combinations of (I₁, I₂, I₃) that the data fix;
2. a heavy top fitting its inertia and its centre of mass χ (mgl = 1).
"""

from __future__ import annotations

import argparse
import os

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import lpjax  # noqa: E402
from lpjax.fit import least_squares  # noqa: E402
from lpjax.systems import heavy_top, rigid_body  # noqa: E402

DT, N = 0.05, 200
T_OBS = np.arange(1, 41) * 5 * DT


def simulate(system, y0, sigma, seed):
    ys = np.asarray(lpjax.integrate(system, lpjax.GaussLegendre(2), y0, DT, N).ys)
    return ys, ys[5::5] + sigma * np.random.default_rng(seed).standard_normal(ys[5::5].shape)


def report(name, labels, truth, fit):
    print(f"\n{name}: cost {fit.cost:.3e}, sigma {fit.sigma:.2e}, |J^T r| rel {fit.gradient:.1e}, "
          f"singular values {np.array2string(np.asarray(fit.singular_values), precision=3)}")
    if not fit.identifiable:  # least_squares has warned (FitWarning); the summary says what the data fix
        print(fit.summary(labels))
        return
    for lab, t, est, se in zip(labels, truth, np.asarray(fit.theta), np.asarray(fit.stderr)):
        print(f"  {lab:>4} = {est:.5f} ± {se:.5f}   (true {t:.5f}, {abs(est - t) / se:.2f} standard errors)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sigma", type=float, default=1e-3)
    parser.add_argument("--out", default="examples/output/fit_inertia.png")
    args = parser.parse_args()

    I_true, M0 = np.array([1.0, 2.0, 3.0]), jnp.array([1.0, 0.5, 0.8])
    rb_clean, rb_obs = simulate(rigid_body(jnp.asarray(I_true)), M0, args.sigma, 0)
    build_rb = lambda th: rigid_body(jnp.concatenate([jnp.ones(1), th]))  # noqa: E731
    fit_rb = least_squares(build_rb, jnp.array([1.7, 3.4]), M0, T_OBS, rb_obs, dt=DT)
    report("rigid body, I1 = 1 fixed", ["I2", "I3"], I_true[1:], fit_rb)
    fit_all = least_squares(lambda th: rigid_body(th), jnp.array([1.1, 2.1, 2.9]), M0, T_OBS, rb_obs, dt=DT)
    report("rigid body, all three inertias", ["I1", "I2", "I3"], I_true, fit_all)

    ht_true = np.array([1.0, 1.3, 0.6, 0.1, -0.2, 0.9])
    build_ht = lambda th: heavy_top(th[:3], th[3:], 1.0)  # noqa: E731
    y0 = jnp.array([0.3, 0.2, 1.5, 0.0, np.sin(0.4), np.cos(0.4)])
    ht_clean, ht_obs = simulate(build_ht(jnp.asarray(ht_true)), y0, args.sigma, 1)
    start = jnp.asarray(ht_true * np.array([1.1, 0.9, 1.1, 0.8, 1.2, 1.05]))
    fit_ht = least_squares(build_ht, start, y0, T_OBS, ht_obs, dt=DT)
    report("heavy top, inertia and chi", ["I1", "I2", "I3", "chi1", "chi2", "chi3"], ht_true, fit_ht)

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    t = np.arange(N + 1) * DT
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, (title, obs, system, y_start, n) in zip(axes, [
        ("rigid body M(t)", rb_obs, build_rb(fit_rb.theta), M0, 3),
        ("heavy top M(t), Γ(t)", ht_obs, build_ht(fit_ht.theta), y0, 6),
    ]):
        fitted = np.asarray(lpjax.integrate(system, lpjax.GaussLegendre(2), y_start, DT, N).ys)
        for i in range(n):
            ax.plot(T_OBS, obs[:, i], ".", ms=3, color=f"C{i}")
            ax.plot(t, fitted[:, i], "-", lw=1, color=f"C{i}")
        ax.set(title=f"{title}: data (dots) and fit", xlabel="t")
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    fig.savefig(args.out, dpi=120)
    print(f"\nplot: {args.out}")


if __name__ == "__main__":
    main()
