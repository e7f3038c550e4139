"""Stochastic heavy tops: lpjax's stochastic midpoint and noise splitting (native kernel) against
diffrax's Heun and ReversibleHeun under ``jax.vmap``, at the same number of steps, on the same
Brownian paths.

    python benchmarks/stochastic.py [--quick] [--out benchmarks/results/]

* **The SDE.** The heavy top (I = (1, 2, 3), χ = e₃, mgl = 1) with noise 0.3·eᵢ in the body's
  angular momentum, i = 1, 2, 3 (``lpjax.systems.stochastic_heavy_top``), Stratonovich. 10⁵
  members (``--quick``: 10⁴) from one state, dt = 0.01, 10³ steps.
* **The paths.** Member j's increments are lpjax's counter-based ones of ``fold_in(key, j)``; diffrax
  reads the same increments through an ``AbstractPath`` (step n's on [n dt, (n + 1) dt]), so both
  run the same paths and pay for the same random numbers.
* **diffrax.** ``diffeqsolve(MultiTerm(ODETerm(drift), ControlTerm(noise fields, path)), Heun()
  or ReversibleHeun(), dt0=dt, SaveAt(t1=True))`` under ``jax.vmap`` over the members, jitted.
* **lpjax.** ``StochasticMidpoint()`` (its fixed-point iteration to roundoff, a ``while`` loop),
  the same with 10 updates a step (``max_iters=10, early_exit=False``: no loop; a step whose
  updates do not meet the tolerance goes on with Newton's), and ``NoiseSplitting(GaussLegendre(2))``.
* **Reported.** Times (the median of the calls after a compiling one) and the Casimirs' drift:
  the largest over the members of |C(y(T)) − C(y₀)| / |C(y₀)| for |Γ|² and M·Γ (and the median
  for |Γ|²), over the members whose final state is finite, and the number of the others.

Writes ``benchmarks/results/stochastic.json``.
"""

from __future__ import annotations

import _harness as H  # noqa: I001  (float64 on, first)
import diffrax
import jax
import jax.numpy as jnp
import numpy as np

import lpjax
from lpjax._noise import increments, key_words, member_key
from lpjax.systems import stochastic_heavy_top

TOP = stochastic_heavy_top(jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 0.0, 1.0]), 1.0, 0.3 * np.eye(3))
Y0 = np.array([0.3, -1.0, 0.7, 0.1, 0.2, 0.9])
DT, STEPS = 0.01, 1000
KEY = jax.random.key(2026)
METHODS = {"midpoint": lpjax.StochasticMidpoint(),
           "midpoint, 10 updates": lpjax.StochasticMidpoint(max_iters=10, early_exit=False),
           "splitting (GL4 drift)": lpjax.NoiseSplitting(lpjax.GaussLegendre(2))}


class _Increments(diffrax.AbstractPath):
    """lpjax's counter-based increments as a diffrax control: step n's on [n dt, (n + 1) dt]."""

    words: jax.Array
    t0 = 0.0
    t1 = DT * STEPS

    def evaluate(self, t0, t1=None, left=True):
        n = jnp.round(t0 / DT).astype(jnp.int32)
        return increments(self.words, n, DT, 3, jnp.float64)


def drift(y: np.ndarray) -> dict:
    """The largest relative drift of |Γ|² and M·Γ at the end over the members whose state is
    finite (with finite Casimirs), and the number of the others (a path that blew up)."""
    g0, mg0 = Y0[3:] @ Y0[3:], Y0[:3] @ Y0[3:]
    with np.errstate(over="ignore", invalid="ignore"):
        g, mg = np.sum(y[:, 3:] ** 2, 1), np.sum(y[:, :3] * y[:, 3:], 1)
    ok = np.isfinite(g) & np.isfinite(mg)
    g, mg = g[ok], mg[ok]
    return {"gamma2": float(np.max(np.abs(g - g0)) / abs(g0)), "m_dot_gamma": float(np.max(np.abs(mg - mg0)) / abs(mg0)),
            "median_gamma2": float(np.median(np.abs(g - g0)) / abs(g0)), "nonfinite_members": int(np.sum(~ok))}


def timed(call) -> tuple:
    out, stats = H.time_calls(call, budget_s=4.0, max_repeats=3)
    return np.asarray(out), stats["time_s"]


def main() -> None:
    args = H.arg_parser(__doc__, "10^4 members").parse_args()
    H.start()
    loads = {"start": H.loadavg()}
    n = 10_000 if args.quick else 100_000
    y0s = np.tile(Y0, (n, 1))
    rows = []
    for name, method in METHODS.items():
        y, t = timed(lambda: lpjax.ensemble(TOP, method, y0s, DT, STEPS, key=KEY, kernel="native",
                                            progress=False).final_state)
        rows.append(dict(solver=f"lpjax {name}", members=n, steps=STEPS, time_s=t, drift=drift(y)))
        H.log(f"lpjax {name}: {t:.2f} s, drift {rows[-1]['drift']}")
    words = jax.vmap(lambda j: member_key(key_words(KEY), j))(jnp.arange(n))
    terms = lambda w: diffrax.MultiTerm(  # noqa: E731
        diffrax.ODETerm(lambda t, y, args: TOP.vector_field(y)),
        diffrax.ControlTerm(lambda t, y, args: TOP.noise_fields(y).T, _Increments(w)))
    for name, solver in (("Heun", diffrax.Heun()), ("ReversibleHeun", diffrax.ReversibleHeun())):
        @jax.jit
        def run(words, solver=solver):
            def one(w):
                sol = diffrax.diffeqsolve(terms(w), solver, 0.0, DT * STEPS, DT, jnp.asarray(Y0),
                                          saveat=diffrax.SaveAt(t1=True), max_steps=STEPS + 1)
                return sol.ys[-1]
            return jax.vmap(one)(words)

        y, t = timed(lambda run=run: jax.block_until_ready(run(words)))
        rows.append(dict(solver=f"diffrax {name}", members=n, steps=STEPS, time_s=t, drift=drift(y)))
        H.log(f"diffrax {name}: {t:.2f} s, drift {rows[-1]['drift']}")
    peer = next(r for r in rows if r["solver"] == "diffrax ReversibleHeun")
    for r in rows:
        r["ratio_to_reversible_heun"] = r["time_s"] / peer["time_s"]
    loads["end"] = H.loadavg()
    doc = {"metadata": H.metadata("stochastic", "quick" if args.quick else "full", [diffrax], loads, ""), "rows": rows}
    H.write_json(args.out / ("stochastic_quick.json" if args.quick else "stochastic.json"), doc)


if __name__ == "__main__":
    main()
