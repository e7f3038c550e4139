"""The suite's own process settings (tests/conftest.py) are in force in its workers."""

import importlib.metadata
import os
import pathlib

import jax
import jax.numpy as jnp
import pytest


@pytest.mark.skipif(not importlib.metadata.version("jaxlib").startswith("0.10."), reason="jaxlib 0.10.x only")
@pytest.mark.skipif(not pathlib.Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_one_intra_op_thread_under_jaxlib_0_10():
    """jaxlib 0.10.x's batched LAPACK kernels deadlock when they fill XLA:CPU's intra-op pool
    (conftest); with ``PJRT_NPROC=1`` set before JAX started, the pool has one thread and they
    run inline. A batched LU that the kernel would split (4000 matrices of 12×12) starts the pool."""
    a = jnp.eye(12)[None] * 5.0 + jax.random.normal(jax.random.key(0), (4000, 12, 12))
    jax.jit(jnp.linalg.solve)(a, jnp.ones((4000, 12, 1))).block_until_ready()
    names = [(pathlib.Path("/proc/self/task") / t / "comm").read_text().strip() for t in os.listdir("/proc/self/task")]
    assert os.environ.get("PJRT_NPROC") == "1"
    assert names.count("tf_XLAEigen") == 1, names


def test_every_test_marked_slow_exists():
    """conftest.SLOW names tests by node id; a renamed test would silently move back into the fast
    suite (a renamed parametrized case is caught at collection)."""
    import ast

    from .conftest import SLOW

    root = pathlib.Path(__file__).parent.parent
    for nodeid in SLOW:
        path, name = nodeid.split("[")[0].split("::")
        tree = ast.parse((root / path).read_text())
        assert name in {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}, nodeid
