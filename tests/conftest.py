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
