"""Fixed-step ensembles give the same bits as when their digests were recorded: a change of the
ensemble layer's design (kernels, member programs, schedules) must not change a result.

The digests (sha256 of every returned array, in a fixed order) are in
``tests/data/ensemble_digests.json``, keyed by what decides the bits: the host CPU as LLVM
names it (the native kernel and XLA:CPU compile for it), jax and jaxlib, llvmlite, and the
suite's XLA settings. On a host or stack with no recorded digests the test skips and says so;
``LPJAX_RECORD_DIGESTS=1 pytest tests/test_digests.py`` records them for it. Record only when a
change is meant to alter results, and say so in its commit.
"""

import hashlib
import json
import os
import pathlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.systems import clebsch_case, heavy_top, lagrange_top, rigid_body

from .conftest import FAST

llvmlite = pytest.importorskip("llvmlite")

PATH = pathlib.Path(__file__).parent / "data" / "ensemble_digests.json"
RNG = np.random.default_rng(2024)
RB = rigid_body(jnp.array([1.0, 2.0, 3.0]))
_m, _a = RNG.normal(size=(24, 3)) * 0.3, RNG.normal(size=(24, 3))
TOP0 = np.concatenate([_m, _a / np.linalg.norm(_a, axis=1, keepdims=True)], axis=1)
M0 = RNG.normal(size=(24, 3))
CLEBSCH = clebsch_case(jnp.array([1.0, 2.0, 3.5]))
C0 = 0.5 * RNG.normal(size=(24, 6))
HT = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)

METHODS = {
    "suris-rest": (lagrange_top(3, frame="rest"), lambda: lpjax.SurisLagrangeTop(), TOP0),
    "moser-veselov": (RB, lambda: lpjax.MoserVeselov(), M0),
    "gl4": (RB, lambda: lpjax.GaussLegendre(2), M0),
    "collective-gl4": (RB, lambda: lpjax.Collective(lpjax.GaussLegendre(2)), M0),
    "splitting-clebsch": (CLEBSCH, lambda: lpjax.LiePoissonSplitting.for_system(CLEBSCH, "exact"), C0),
    "rk4-heavy-top": (HT, lambda: lpjax.RK4(), TOP0),
}
KERNELS = ("scan", "entries", "native")
CASES = [(m, k) for m in METHODS for k in KERNELS]


def _tag() -> str:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    cpu = f"{llvm.get_default_triple()}|{llvm.get_host_cpu_name()}|{llvm.get_host_cpu_features().flatten()}"
    import jaxlib

    return (f"{hashlib.sha256(cpu.encode()).hexdigest()[:16]} jax {jax.__version__} jaxlib {jaxlib.__version__} "
            f"llvmlite {llvmlite.__version__} xla {'fast' if FAST else 'default'}")


def _digest(sol) -> str:
    arrays = [sol.final_state, sol.result, *(sol.stats[k] for k in sorted(sol.stats)),
              *(sol.observables[k] for k in sorted(sol.observables))]
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a))
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _run(method: str, kernel: str):
    system, make, y0s = METHODS[method]
    y0s = np.array(y0s)
    y0s[5] = np.nan  # a member that fails from the start, among the others
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to the scan
        return lpjax.ensemble(system, make(), y0s, 0.03, 24, save_every=6, observe="casimirs", stats=True,
                              kernel=kernel)


def _stored() -> dict:
    return json.loads(PATH.read_text()) if PATH.exists() else {}


@pytest.mark.parametrize("method, kernel", CASES, ids=[f"{m}-{k}" for m, k in CASES])
def test_fixed_step_ensembles_keep_their_bits(method, kernel):
    digest = _digest(_run(method, kernel))
    tag, stored = _tag(), _stored()
    if os.environ.get("LPJAX_RECORD_DIGESTS") == "1":
        fresh = {**stored, tag: {**stored.get(tag, {}), f"{method}/{kernel}": digest}}
        tmp = PATH.with_suffix(".tmp")
        tmp.write_text(json.dumps(fresh, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, PATH)
        return
    if tag not in stored:
        pytest.skip(f"no digests recorded for {tag} (recorded: {sorted(stored)})")
    assert digest == stored[tag][f"{method}/{kernel}"]


def test_the_digests_tell_results_apart():
    """The digest sees one bit: the same run with one initial entry moved by one ulp differs."""
    system, make, y0s = METHODS["moser-veselov"]
    a = lpjax.ensemble(system, make(), y0s, 0.03, 24, save_every=6, kernel="scan")
    y1 = np.array(y0s)
    y1[0, 0] = np.nextafter(y1[0, 0], np.inf)
    b = lpjax.ensemble(system, make(), y1, 0.03, 24, save_every=6, kernel="scan")
    assert _digest(a) != _digest(b) and _digest(a) == _digest(
        lpjax.ensemble(system, make(), y0s, 0.03, 24, save_every=6, kernel="scan"))
