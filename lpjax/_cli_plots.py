"""The figures of ``lpjax run --plot``, ``lpjax show --plot`` and ``lpjax tune --plot``
(matplotlib is imported only here, only when a figure is asked for)."""

from __future__ import annotations

import numpy as np

from ._io import atomic_write as _atomic_write


def state_labels(system, d: int) -> list[str]:
    """Names of the ``d`` state coordinates: ``M`` (the algebra part) and ``Γ`` (each advected
    vector of ``𝔨 ⋉ (Rⁿ)^k``, numbered ``Γ(j)`` when k > 1) for Lie–Poisson systems; ``k``,
    ``γ`` and ``ξ`` for the nonholonomic ones; ``q``, ``p`` for canonical ones; ``y`` otherwise."""
    from ._system import CanonicalSystem, NonholonomicSystem

    def block(sym, n, count=1):
        return [f"{sym}{f'({j + 1})' if count > 1 else ''}{i + 1}" for j in range(count) for i in range(n)]

    algebra = getattr(system, "algebra", None)
    if isinstance(system, NonholonomicSystem):
        labels = block("k", algebra.dim) + block("γ", system.n, system.r) + block("ξ", algebra.dim, system.m)
    elif isinstance(system, CanonicalSystem):
        labels = block("q", d // 2) + block("p", d // 2)
    elif algebra is not None and algebra.rotation_structure is not None:
        base, k = algebra.rotation_structure
        labels = block("M", base.dim) + (block("Γ", (d - base.dim) // k, k) if k else [])
    else:
        labels = block("M" if algebra is not None else "y", d)
    return labels if len(labels) == d else block("y", d)


def _run_plot(name: str, system, sol, e, c, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    axes[0].plot(sol.ts, sol.ys, label=state_labels(system, sol.ys.shape[1]))
    axes[0].legend(fontsize="small", ncol=2 if sol.ys.shape[1] > 6 else 1)
    axes[0].set_title(f"{name}: state")
    axes[1].semilogy(sol.ts[1:], np.maximum(e[1:], 1e-17), label="energy")
    if c.size:
        axes[1].semilogy(sol.ts[1:], np.maximum(c.max(axis=1)[1:], 1e-17), label="Casimirs")
    axes[1].set_title("relative invariant error")
    axes[1].legend()
    for ax in axes:
        ax.set_xlabel("t")
    fig.tight_layout()
    _atomic_write(path, lambda p: fig.savefig(p, dpi=100, format="png"))
    plt.close(fig)


def _show_plot(sol, errors: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, err in errors.items():
        axes[0].hist(np.log10(np.maximum(err, 1e-18)), bins=50, alpha=0.6, label=name)
        q = sol.quantile([0.05, 0.5, 0.95], name)
        q = q.reshape(3, q.shape[1], -1)[..., 0]
        axes[1].plot(sol.ts, q[1], label=f"{name} (first component): median")
        axes[1].fill_between(sol.ts, q[0], q[2], alpha=0.3, label=f"{name}: 5-95%")
    axes[0].set(xlabel="log10 relative change, start to end", ylabel="members", title="final invariant errors")
    axes[1].set(xlabel="t", title="observable quantiles over the members")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    _atomic_write(path, lambda p: fig.savefig(p, dpi=100, format="png"))
    plt.close(fig)


def _tune_plot(res, paper: float, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ._integrate import integrate
    from ._integrator import GaussLegendre
    from .control import upright_top_cost, upright_top_initial_states
    from .systems import movable_base_top

    fracs = np.linspace(0.04, 0.98, 48)
    J = [float(upright_top_cost(f * res.rho_c)) for f in fracs]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    axes[0].semilogy(fracs, J, "-", label="J(rho)")
    axes[0].plot([res.rho / res.rho_c], [res.cost], "o", label=f"optimum rho* = {res.rho / res.rho_c:.3f} rho_c")
    axes[0].plot([paper / res.rho_c], [float(upright_top_cost(paper))], "s", label="paper: 0.9 rho_c")
    axes[0].set(xlabel="rho / rho_c", ylabel="J", title="cost over the stable range 0 < rho < rho_c")
    for rho, label in ((res.rho, "rho*"), (paper, "0.9 rho_c")):
        system = movable_base_top(rho=rho)
        sol = integrate(system, GaussLegendre(2), upright_top_initial_states(system)[0], 0.01, 2000)
        axes[1].plot(np.asarray(sol.ts), np.asarray(sol.ys[:, 8]), label=label)
    axes[1].set(xlabel="t [s]", ylabel="Gamma_3", title="initial state 0 (seed 002, sec. 5.3)")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    _atomic_write(path, lambda p: fig.savefig(p, dpi=100, format="png"))
    plt.close(fig)
