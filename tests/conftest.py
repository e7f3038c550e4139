"""Suite-wide settings.

Compiler settings. XLA compiles every distinct program a test builds, and those compiles were
two thirds of the suite's time. Unless ``LPJAX_TEST_XLA=default`` is set, the suite asks XLA:CPU
for its fast-compile settings (``XLA_FAST_COMPILE``: LLVM at -O0, the legacy elemental emitters
instead of the MLIR fusion emitters). The programs are the same HLO with the same IEEE
semantics; what changes is that LLVM does not contract a*b + c into a fused multiply-add, so
results differ from a default build at roundoff (measured: <= 6e-15 after 1000 steps of
GL4, Moser-Veselov, RK4 and a gradient). The suite's time halves (1243 s -> 644 s on 2 cores).
A test that pins a roundoff floor set with XLA's default settings carries the marker
``xla_default``: under the fast settings it runs in a child pytest with XLA's defaults.
``LPJAX_TEST_XLA=default make test`` runs everything with the defaults.
"""

import os
import re
import subprocess
import sys
from typing import Optional

XLA_FAST_COMPILE = "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=0"
FAST = os.environ.get("LPJAX_TEST_XLA", "fast") != "default"
# the XLA_FLAGS the suite was started with (kept for the xla_default children: pytest-xdist's
# workers inherit the controller's flags, which already have the fast settings)
_USER_XLA_FLAGS = os.environ.setdefault("LPJAX_TEST_USER_XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
if FAST and XLA_FAST_COMPILE not in os.environ.get("XLA_FLAGS", ""):  # before JAX starts its backend
    os.environ["XLA_FLAGS"] = f"{_USER_XLA_FLAGS} {XLA_FAST_COMPILE}".strip()  # the tests' subprocesses inherit it

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Drop JAX's compiled programs after each test module. Every XLA:CPU executable keeps its own
    memory mappings; a worker that keeps a whole suite's programs passes the kernel's limit
    (vm.max_map_count, 65530) and XLA aborts in the middle of a compile."""
    yield
    jax.clear_caches()


@pytest.fixture
def key():
    return jax.random.PRNGKey(0)


# hypothesis profiles (tests/test_fuzz.py): "ci", the default, fixed seed; "long" for a deeper search
try:
    from hypothesis import settings as _hyp_settings

    _hyp_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
    _hyp_settings.register_profile("long", deadline=None, print_blob=True)  # test_fuzz.py: 10x the examples
    import os as _os

    _hyp_settings.load_profile(_os.environ.get("HYPOTHESIS_PROFILE", "ci"))
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    pass


def pytest_configure(config):
    config.addinivalue_line("markers", "xla_default: pins a roundoff floor measured with XLA's default compiler "
                                       "settings; runs in a child pytest with them (see conftest.py)")


def _child_run(nodeid: str, rootpath) -> Optional[str]:
    """One test in a child pytest with XLA's default settings: None if it passed, else its report."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.update(XLA_FLAGS=_USER_XLA_FLAGS, LPJAX_TEST_XLA="default")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", nodeid], cwd=rootpath,
                         env=env, capture_output=True, text=True, timeout=600)
    if run.returncode == 0 and re.search(r"^1 passed", run.stdout, re.M):
        return None
    return f"rc {run.returncode}\n{run.stdout[-4000:]}{run.stderr[-2000:]}"


def pytest_pyfunc_call(pyfuncitem):
    """An ``xla_default`` test under the fast settings runs in a child pytest with XLA's default
    settings; this item passes or fails as it did there."""
    if not (FAST and pyfuncitem.get_closest_marker("xla_default")):
        return None
    failure = _child_run(pyfuncitem.nodeid, pyfuncitem.config.rootpath)
    if failure is not None:
        pytest.fail(f"under XLA's default compiler settings (child pytest): {failure}", pytrace=False)
    return True
