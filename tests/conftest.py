import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")


# The slowest tests (seconds on 2 cores, mostly compilation), started first so that the run does
# not end with one worker finishing a long test alone (pytest-xdist's worksteal splits the
# collected order). Order only: every test still runs.
SLOW_FIRST = (
    "tests/test_docs.py::test_the_python_blocks_of_a_page_run[README.md]",  # 37
    "tests/test_control.py::test_tuning_reaches_the_same_gain_from_both_ends",  # 24
    "tests/test_reproduce.py::test_seed001_target",  # 19
    "tests/test_hamiltonize.py::test_symplectic_path_follows_the_nonholonomic_flow",  # 16
    "tests/test_integrate.py::test_implicit_gradient_equals_unrolled_gradient",  # 15
    "tests/test_nonholonomic_integrators.py::test_orders",  # 14
    "tests/test_float32.py::test_float32_with_x64_off",  # 14
    "tests/test_nonholonomic_integrators.py::test_gradient_through_gl4_with_respect_to_the_inertia",  # 14
    "tests/test_fuzz.py::test_poisson_methods_keep_the_casimirs",  # 13
    "tests/test_cli.py::test_every_supported_pair_runs",  # 13 (veselova_n)
    "tests/test_ensemble.py::test_entrywise_and_fused_kernels_equal_the_scan",  # 12 (DEP Suris-Clebsch)
)


def pytest_collection_modifyitems(config, items):
    def rank(item):
        return next((i for i, p in enumerate(SLOW_FIRST) if item.nodeid.startswith(p)), len(SLOW_FIRST))

    items.sort(key=rank)  # stable: the rest keep their order


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
