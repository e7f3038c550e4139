"""What ``lpjax run`` does besides parsing: the run (in pieces under a progress bar), its
metadata and the .npz file."""

from __future__ import annotations

import datetime
import os
import sys
import time

import numpy as np

from ._cli_args import _save_times
from ._io import atomic_write as _atomic_write


def _run_with_progress(system, method, y0, dt, n_steps, save_every, progress: bool):
    """``integrate`` in one call, or in pieces continued from one another (the same states bit
    for bit) under a tqdm bar."""
    from ._integrate import integrate

    t = time.perf_counter()
    if not progress:
        sol = integrate(system, method, y0, dt, n_steps, save_every=save_every, throw=False)
        return sol, time.perf_counter() - t
    import jax.numpy as jnp
    from tqdm import tqdm

    from ._integrator import RESULTS

    n_save = n_steps // save_every
    per = max(1, -(-n_save // 20)) * save_every  # about 20 pieces, each a whole number of saves
    pieces, done, sol = [], 0, y0
    with tqdm(total=n_steps, unit="step", file=sys.stderr, leave=False) as bar:
        while done < n_steps:
            n = min(per, n_steps - done)
            sol = integrate(system, method, sol, dt, n, save_every=save_every, throw=False)
            pieces.append(sol)
            done += n
            bar.update(n)
    ys = jnp.concatenate([pieces[0].ys] + [p.ys[1:] for p in pieces[1:]])
    ts = jnp.concatenate([pieces[0].ts] + [p.ts[1:] for p in pieces[1:]])
    failed = [p.result for p in pieces if p.result != RESULTS.successful]
    stats = dict(pieces[-1].stats, num_steps=n_steps)
    result = failed[0] if failed else pieces[-1].result
    return type(sol)(ts=ts, ys=ys, result=result, stats=stats, gs=None, state=sol.state), time.perf_counter() - t


def _run_adaptive(system, method, y0, dt0, t1: float, saves: int, rtol: float, atol: float):
    """One member of an adaptive ensemble (its own PID-controlled steps, stepping onto ``saves``
    equally spaced save times to ``t1``), as a :class:`lpjax.Solution` (``stats``: the accepted
    and rejected steps)."""
    import jax.numpy as jnp

    from ._controller import PIDController
    from ._ensemble import ensemble
    from ._integrate import Solution
    from ._integrator import RESULTS

    t = time.perf_counter()
    ts = _save_times(t1, saves)
    out = ensemble(system, method, np.asarray(y0)[None], dt0, t1=float(t1), ts=ts,
                   controller=PIDController(rtol=rtol, atol=atol), progress=False)
    wall = time.perf_counter() - t
    stats = {k: jnp.asarray(v[0]) for k, v in out.stats.items()}
    result = getattr(RESULTS, out.result_names[int(out.result[0])])
    sol = Solution(ts=jnp.asarray(out.ts), ys=jnp.asarray(out.observables["state"][0]), result=result, stats=stats,
                   gs=None, state=None)
    return sol, wall


def _result_text(result) -> str:
    from ._integrator import RESULTS

    return "successful" if result == RESULTS.successful else f"failed: {RESULTS[result]}"


def _steps_text(sol, n_steps, dt, tol) -> str:
    if tol is None:
        return f"{n_steps} steps of {dt}"
    return (f"{n_steps} accepted steps ({int(sol.stats['num_rejected_steps'])} rejected) at rtol {tol[0]:g}, "
            f"atol {tol[1]:g}")


def _run_metadata(system, params, method_name, method, dt, n_steps, save_every, y0, sol, wall, tol=None) -> dict:
    """The run's record (with ``tol``, an adaptive run's: dt is its first step, n_steps those accepted)."""
    import equinox as eqx
    import jax

    from ._version import __version__

    return {
        "lpjax_version": __version__, "jax_version": jax.__version__,
        "system": system, "parameters": params, "method": method_name,
        "method_repr": eqx.tree_pformat(method, width=10**6),
        "dt": dt, "t0": 0.0, "n_steps": n_steps, "save_every": save_every, "y0": np.asarray(y0).tolist(),
        "result": _result_text(sol.result), "stats": {k: v.item() for k, v in ((k, np.asarray(v)) for k, v in sol.stats.items())}, "wall_time_s": wall,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **({} if tol is None else {"rtol": tol[0], "atol": tol[1]}),
    }


def _write_npz(path: str, **arrays) -> None:
    """Exactly ``path`` (np.savez would append .npz to a file name), fsynced, atomically; no pickle."""
    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())

    _atomic_write(path, write)

