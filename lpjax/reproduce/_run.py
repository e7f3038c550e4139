"""The driver of :mod:`lpjax.reproduce`: runs the figures' integrations once, draws, writes one
JSON per seed."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import time
from typing import Callable, Iterable, Optional

from .._io import atomic_write, atomic_write_json, require_matplotlib
from . import seed001, seed002_fig1, seed002_fig2, seed002_fig3, seed002_fig5, seed002_fig6
from ._common import _SPECS, FIGURES, SEEDS, _n_steps, _Runs, json_name


# name -> ``_figN(runs, spec, t1) -> (figure, record)``
_FIGURE_FUNCS: dict[str, Callable] = {
    "seed001-fig1": seed001._fig1,
    "seed002-fig1": seed002_fig1._fig1, "seed002-fig2": seed002_fig2._fig2, "seed002-fig3": seed002_fig3._fig3,
    "seed002-fig5": seed002_fig5._fig5, "seed002-fig6": seed002_fig6._fig6,
}


def _load_json(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} exists but is not valid JSON ({e}); move it away to regenerate it") from None
    if not isinstance(data, dict) or not isinstance(data.get("figures", {}), dict):
        raise ValueError(f"{path} does not look like an lpjax reproduce results file (no 'figures' object)")
    return data


def reproduce(
    figures: Iterable[str],
    out_dir: str,
    *,
    spans: Optional[dict[str, float]] = None,
    log: Optional[Callable[[str], None]] = None,
) -> dict:
    """Reproduce the named figures into ``out_dir`` and return the updated JSON content of the
    last figure's seed.

    Args:
        figures: names from :data:`FIGURES`.
        out_dir: directory for ``<name>.png`` and the seeds' ``<seed>.json`` (created if needed).
        spans: optional ``{name: t1}`` overriding the paper's end time (for quick tests);
            the step size stays the paper's. The JSON records the span actually used.
        log: called with one progress line per figure.

    Needs float64 (``jax.config.update("jax_enable_x64", True)``), which it does not set itself.
    """
    import jax

    import lpjax

    require_matplotlib("lpjax.reproduce")
    figures = list(dict.fromkeys(figures))
    if not figures:
        raise ValueError(f"no figure named; choose from {', '.join(FIGURES)}")
    unknown = [f for f in figures if f not in _SPECS]
    if unknown:
        raise ValueError(f"unknown figure(s) {', '.join(map(repr, unknown))}; choose from {', '.join(FIGURES)}")
    if not jax.config.jax_enable_x64:
        raise RuntimeError('lpjax.reproduce needs float64: call jax.config.update("jax_enable_x64", True) first')
    spans = dict(spans or {})
    specs = {}
    for name in figures:
        spec = _SPECS[name]
        if name in spans:
            spec = dataclasses.replace(spec, t1=float(spans.pop(name)))
        _n_steps(spec)
        specs[name] = spec
    if spans:
        raise ValueError(f"spans given for figures not requested: {sorted(spans)}")

    os.makedirs(out_dir, exist_ok=True)
    for name in figures:
        _load_json(os.path.join(out_dir, json_name(name)))  # fail early on a damaged results file
    runs = _Runs(specs)
    for name in figures:
        spec = specs[name]
        json_path = os.path.join(out_dir, json_name(name))
        seed, paper = SEEDS[name.split("-")[0]]
        t = time.perf_counter()
        fig, record = _FIGURE_FUNCS[name](runs, spec, spec.t1)
        png = os.path.join(out_dir, f"{name}.png")
        atomic_write(png, lambda p: fig.savefig(p, dpi=110, format="png"))
        wall = time.perf_counter() - t
        record = {
            "figure": name,
            **record,
            "png": os.path.basename(png),
            "wall_time_s": wall,
            "wall_time_note": "includes the integrations this figure was the first to need "
                              "(runs are shared between figures of one invocation)",
            "lpjax_version": lpjax.__version__,
            "jax_version": jax.__version__,
            "dtype": "float64",
            "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        data = _load_json(json_path)  # read-modify-write: keep the other figures' entries
        entries = dict(data.get("figures", {}))
        entries[name] = record
        order = {f: i for i, f in enumerate(FIGURES)}
        entries = dict(sorted(entries.items(), key=lambda kv: order.get(kv[0], len(order))))
        data = {"seed": seed, "paper": paper, **{k: v for k, v in data.items() if k not in ("seed", "paper", "figures")},
                "figures": entries}
        atomic_write_json(json_path, data)
        if log is not None:
            mx = record["maxima"]
            summary = ", ".join(f"{k} {v:.2e}" for k, v in mx.items() if isinstance(v, float) and "over" not in k)
            log(f"{name}: {wall:.1f} s -> {png}\n    {summary}")
    return _load_json(json_path)
