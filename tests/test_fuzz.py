"""Property-based tests (hypothesis): random Lie algebras, states and step sizes; bad inputs to
integrate and to the command line. Profiles (tests/conftest.py): ``ci`` (the default: fixed
seed, the example counts below, 1200 in all) and ``long`` (``HYPOTHESIS_PROFILE=long``: ten
times as many, random seeds)."""

import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import lpjax
from lpjax.algebras import LieAlgebra, se3, semidirect, so, so3, so21
from lpjax.cli import main
from lpjax.systems import clebsch_case, kida_vortex, lagrange_top, rigid_body

SCALE = 10 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 1


def examples(n: int):
    return settings(max_examples=n * SCALE, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _transform(c: np.ndarray, T: np.ndarray) -> np.ndarray:
    """Structure constants in the basis E'_a = T_a^i E_i."""
    return np.einsum("ai,bj,ijk,kc->abc", T, T, c, np.linalg.inv(T))


def _basis_change(rng_seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(rng_seed)
    T = rng.normal(size=(n, n)) + 2.0 * np.eye(n)
    return T / np.abs(np.linalg.det(T)) ** (1.0 / n)


BASE = {"so3": so3(), "so21": so21(), "se3": se3(), "so4": so(4), "e3": semidirect(so3())}


@examples(300)
@given(name=st.sampled_from(sorted(BASE)), seed=st.integers(0, 2**31 - 1),
       mu=st.lists(st.floats(-3, 3), min_size=10, max_size=10))
def test_random_algebras_are_lie_algebras_with_casimirs(name, seed, mu):
    """A change of basis of so(3), so(2,1), se(3), so(4), e(3) passes LieAlgebra's
    antisymmetry and Jacobi checks, keeps its number of quadratic Casimirs, and each Casimir
    Poisson-commutes with every coordinate: c_ij^k μ_k (S μ)_j = 0."""
    c = BASE[name].structure_constants
    n = c.shape[0]
    g = LieAlgebra(_transform(c, _basis_change(seed, n)), atol=1e-8)
    S = g.quadratic_casimirs()
    assert len(S) == len(BASE[name].quadratic_casimirs())
    m = np.asarray(mu[:n])
    for Sr in S:
        bracket = np.einsum("ijk,k,j->i", g.structure_constants, m, Sr @ m)
        assert np.max(np.abs(bracket)) <= 1e-8 * (1 + np.max(np.abs(c))) * (1 + np.sum(m * m))


class Quadratic(eqx.Module):
    """h(μ) = ½ μᵀ (AᵀA + 0.1) μ with A a traced parameter: new values compile nothing."""

    A: jax.Array

    def __call__(self, mu):
        S = self.A.T @ self.A + 0.1 * jnp.eye(mu.shape[0], dtype=mu.dtype)
        return 0.5 * mu @ S @ mu


_T = _basis_change(7, 3)
ALGEBRAS = {"so3": so3(), "so21": so21(), "se3": se3(), "so3 in another basis": LieAlgebra(_transform(so3().structure_constants, _T))}
POISSON = {"GL2": lpjax.GaussLegendre(1), "GL4": lpjax.GaussLegendre(2)}


@examples(300)
@given(alg=st.sampled_from(sorted(ALGEBRAS)), meth=st.sampled_from(sorted(POISSON)), sign=st.sampled_from([1, -1]),
       A=st.lists(st.floats(-1, 1), min_size=36, max_size=36), mu=st.lists(st.floats(-2, 2), min_size=6, max_size=6),
       dt=st.floats(1e-3, 0.1))
def test_poisson_methods_keep_the_casimirs(alg, meth, sign, A, mu, dt):
    """Gauss–Legendre on a random quadratic Hamiltonian over a random algebra keeps every
    quadratic Casimir to 1e-11 (relative) over 20 steps, or reports a failed step."""
    g = ALGEBRAS[alg]
    n = g.dim
    system = lpjax.LiePoissonSystem(g, Quadratic(jnp.asarray(A[: n * n]).reshape(n, n)), sign)
    y0 = jnp.asarray(mu[:n])
    assume(float(jnp.max(jnp.abs(y0))) > 1e-3)
    sol = lpjax.integrate(system, POISSON[meth], y0, dt, 20, save_every=20, throw=False)
    if sol.result != lpjax.RESULTS.successful:
        return
    c0, c1 = system.casimirs(sol.ys[0]), system.casimirs(sol.ys[-1])
    assert float(jnp.max(jnp.abs(c1 - c0))) <= 1e-11 * (1.0 + float(jnp.max(jnp.abs(y0))) ** 2)


def _family_case(kind: str, params, state):
    """A system of a structural family with random parameters, and a state for it."""
    p = 0.5 + jnp.abs(jnp.asarray(params[:3]))
    y = jnp.asarray(state)
    if kind == "rigid body":
        return rigid_body(p), y[:3]
    if kind == "lagrange top":
        return lagrange_top(3, alpha=float(0.2 + 0.6 * abs(params[3]) % 0.6), frame="rest"), y
    return clebsch_case(p), y


FAMILY_METHODS = {
    "MV": ("rigid body", lpjax.MoserVeselov()),
    "DEP": ("rigid body", None),
    "Collective": ("rigid body", lpjax.Collective(lpjax.GaussLegendre(2))),
    "Suris": ("lagrange top", lpjax.SurisLagrangeTop()),
    "SurisClebsch": ("clebsch case", lpjax.SurisClebsch()),
}


@examples(100)
@given(meth=st.sampled_from(sorted(FAMILY_METHODS)), params=st.lists(st.floats(-2, 2), min_size=4, max_size=4),
       state=st.lists(st.floats(-2, 2), min_size=6, max_size=6), dt=st.floats(1e-3, 0.1))
def test_the_structured_poisson_maps_keep_their_casimirs(meth, params, state, dt):
    """Moser–Veselov, DEP, Collective, Suris and Suris–Clebsch with random parameters, states and
    steps keep the Casimirs of their systems to 1e-10 over 20 steps, or report a failure."""
    kind, method = FAMILY_METHODS[meth]
    system, y0 = _family_case(kind, params, state)
    assume(float(jnp.max(jnp.abs(y0))) > 1e-2)
    if method is None:
        method = lpjax.DiscreteEulerPoincare(lpjax.lagrangians.moser_veselov(system))
    sol = lpjax.integrate(system, method, y0, dt, 20, save_every=20, throw=False)
    if sol.result != lpjax.RESULTS.successful:
        return
    c0, c1 = system.casimirs(sol.ys[0]), system.casimirs(sol.ys[-1])
    assert float(jnp.max(jnp.abs(c1 - c0))) <= 1e-10 * (1.0 + float(jnp.max(jnp.abs(y0)))) ** 2, meth


RB = rigid_body(jnp.array([1.0, 2.0, 3.0]))
KIDA = kida_vortex(0.5, -1.0)
_special = st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e300, 0.0])
_entry = st.one_of(st.floats(-5, 5), _special)


@examples(300)
@given(y0=st.lists(_entry, min_size=3, max_size=3), dt=st.one_of(st.floats(-1, 1), _special),
       meth=st.sampled_from(["RK4", "GL4", "MV", "Kida RK4", "Kida GL4"]))
def test_no_nan_escapes_with_a_successful_result(y0, dt, meth):
    """Any y0 (NaN, inf, 1e300 entries; for Kida's vortex also beyond its pole μ₃ = π/8) and dt
    (negative, zero, non-finite): integrate raises, or reports a failure, or every saved state
    is finite."""
    system = KIDA if meth.startswith("Kida") else RB
    method = {"RK4": lpjax.RK4(), "GL4": lpjax.GaussLegendre(2), "MV": lpjax.MoserVeselov()}[meth.split()[-1]]
    try:
        sol = lpjax.integrate(system, method, jnp.asarray(y0), dt, 8, throw=False)
    except (ValueError, TypeError):
        return
    if sol.result == lpjax.RESULTS.successful:
        assert bool(jnp.all(jnp.isfinite(sol.ys)))


_BAD_VALUES = {
    "--dt": ["-1", "0", "nan", "inf", "abc", "", "1e-400"],
    "--t1": ["-5", "0", "nan", "x", "1e300"],
    "--saves": ["0", "-3", "1.5", "many"],
    "--out": ["run.txt", "/nonexistent-folder/run.npz", "run", "."],
    "--plot": ["plot.jpg", "/nonexistent-folder/p.png"],
    "--y0": ["1,2,a", "[]", "nan,1,2", "1,2", "1,2,3,4", "[1, [2]]", "true,1,2"],
    "--param": ["foo=1", "=1", "inertia", "inertia=[1,2", "inertia=[1,-2,3]", "inertia=[1,2]", "inertia=\"a\""],
    "--method": ["gl3", "suris", "mv2", "", "GL0", "dep2"],
}


@examples(200)
@given(system=st.sampled_from(["rigid_body", "rb", "euler_top"]),
       bad=st.sampled_from(sorted(_BAD_VALUES)).flatmap(lambda k: st.tuples(st.just(k), st.sampled_from(_BAD_VALUES[k]))),
       junk=st.lists(st.sampled_from(["--bogus", "-x", "extra", "--dt"]), max_size=1))
def test_bad_command_lines_exit_with_one_line(system, bad, junk, capsys):
    """A bad value of one option (or an unknown option) ends the run before any integration
    with a non-zero exit, one line ``lpjax: ...``, and no traceback."""
    flag, value = bad
    argv = ["run", system, "--t1", "0.1", flag, value, *junk]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    message = str(exc.value.code)
    assert exc.value.code not in (0, None)
    assert message.startswith("lpjax: ") and "\n" not in message and "Traceback" not in message, message


def test_the_cli_prints_no_traceback_and_exits_nonzero_as_a_process(tmp_path):
    """The same through the installed entry point, and --debug does show the traceback."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "lpjax.cli", "run", "rigid_body", "--saves", "0"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode != 0 and run.stderr.strip() == "lpjax: --saves must be >= 1, got 0"
    run = subprocess.run([sys.executable, "-m", "lpjax.cli", "--debug", "run", "rigid_body", "--saves", "0"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode != 0 and "Traceback" in run.stderr
