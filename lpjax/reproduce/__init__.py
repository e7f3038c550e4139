"""Reproduction of the seed papers' results: seed 002's numerical figures 1, 2, 3, 5 and 6
(secs 5.2 and 5.3), and for seed 001 (no numerical figures of its own) one figure of what its
statements predict (:mod:`.seed001`: constraint and integrals under GL4 and RK4, the rubber
sphere as Veselova with inertia I + D, the invariant densities of every system family). Each
seed's figures share one JSON, ``<out>/seed001.json`` or ``<out>/seed002.json``.

Seed 002 is Jayawardana, Morrison, Ohsawa, *Clebsch canonization of Lie–Poisson systems*.
Each figure is one PNG ``<out>/seed002-figN.png``; all share one JSON ``<out>/seed002.json``
with, per figure, the plotted maxima, the parameters, span, step size, solver statistics,
wall time and the lpjax version. Reproducing one figure updates only its entry in an existing
JSON. Files are written atomically; nothing is pickled.

* Fig. 1 (:mod:`.seed002_fig1`): Kida vortex (23) by the collective GL4 method on (25); μ(t) and
  the orbit in so(2,1)* with the level sets of h (22) and f₁ (19); t ∈ [0, 100], Δt = 0.1.
* Fig. 2 (:mod:`.seed002_fig2`): relative errors of h and f₁, collective GL4 vs RK4 on (23);
  t ∈ [0, 1000], Δt = 0.1.
* Fig. 3 (:mod:`.seed002_fig3`): errors of J₀ = p·q (16) and J₁, J₂ (20) along GL4 on the
  canonized system (25).
* Fig. 5 (:mod:`.seed002_fig5`): heavy top on a movable base (30): relative errors of h_c (28)
  and f₁, f₂, f₃ (31), collective GL4 vs RK4; t ∈ [0, 30], Δt = 0.01.
* Fig. 6 (:mod:`.seed002_fig6`): errors of J₀ … J₈ of (32) along GL4 on the canonized top.

Shared machinery (parameters, initial data, runs, JSON, :func:`reproduce`) is in
:mod:`._common`; the derivation of the initial data and the seed errata it rests on are in
``docs/errata.md`` ("Reproduction: ..."). matplotlib is imported only when a figure is drawn.

The library does not change global JAX configuration; callers (the CLI, tests) enable
float64, which :func:`reproduce` requires.
"""

from ._common import (
    FIGURES as FIGURES,
    JSON_NAME as JSON_NAME,
    json_name as json_name,
    movable_base_initial_state as movable_base_initial_state,
)
from ._run import reproduce as reproduce
from .seed002_fig3 import kida_sigmas as kida_sigmas
from .seed002_fig6 import movable_base_sigmas as movable_base_sigmas

__all__ = [
    "FIGURES",
    "JSON_NAME",
    "json_name",
    "movable_base_initial_state",
    "kida_sigmas",
    "movable_base_sigmas",
    "reproduce",
]
