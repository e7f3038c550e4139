"""Every method runs with float32 states, with JAX's x64 on (this process) and off (a
subprocess), and returns float32; a float32 state nobody asked for warns when x64 is on."""

import json
import subprocess
import sys
import textwrap
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.systems import clebsch_case, heavy_top, lagrange_top, rigid_body

RB = rigid_body(jnp.array([1.0, 2.0, 3.0]))
M0 = np.array([1.0, 0.5, 0.8])
HT = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
HT0 = np.array([0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254037844386])
TOP0 = np.array([0.3, -0.2, 0.5, 0.0, 0.6, 0.8])
CASES = [
    ("SurisLagrangeTop rest", lagrange_top(3, frame="rest"), lpjax.SurisLagrangeTop(), TOP0),
    ("SurisLagrangeTop moving", lagrange_top(3, frame="moving"), lpjax.SurisLagrangeTop(), TOP0),
    ("MoserVeselov", RB, lpjax.MoserVeselov(), M0),
    ("GaussLegendre", HT, lpjax.GaussLegendre(2), HT0),
    ("RK4", HT, lpjax.RK4(), HT0),
    ("Collective", RB, lpjax.Collective(lpjax.GaussLegendre(2)), M0),
    ("DiscreteEulerPoincare", RB, lpjax.DiscreteEulerPoincare(lpjax.lagrangians.moser_veselov(RB)), M0),
    ("SurisClebsch", clebsch_case(jnp.array([1.0, 2.0, 3.0])), lpjax.SurisClebsch(), TOP0),
]


@pytest.mark.parametrize("name, system, method, y0", CASES, ids=[c[0] for c in CASES])
def test_float32_with_x64_on(name, system, method, y0):
    """dtype=float32 runs in float32 without a word and stays within float32 roundoff of the
    float64 run; a float32 y0 without dtype runs in float32 and warns."""
    ref = lpjax.integrate(system, method, y0, 0.01, 50, save_every=50)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sol = lpjax.integrate(system, method, y0, 0.01, 50, save_every=50, dtype=jnp.float32)
    assert sol.ys.dtype == jnp.float32 and sol.ts.dtype == jnp.float32
    np.testing.assert_allclose(sol.ys[-1], ref.ys[-1], rtol=0, atol=2e-5 * float(np.max(np.abs(ref.ys[-1]))))
    with pytest.warns(UserWarning, match="initial state is float32 while JAX's x64 is on"):
        lpjax.integrate(system, method, np.asarray(y0, np.float32), 0.01, 5)


_X64_OFF = textwrap.dedent("""
    import json, numpy as np, jax, jax.numpy as jnp
    import lpjax
    from lpjax.systems import clebsch_case, heavy_top, lagrange_top, rigid_body
    assert not jax.config.jax_enable_x64
    RB = rigid_body(jnp.array([1.0, 2.0, 3.0]))
    HT = heavy_top(jnp.array([1.0, 1.3, 0.7]), jnp.array([0.0, 0.0, 1.0]), 2.0)
    cases = {
        "Suris": (lagrange_top(3, frame="rest"), lpjax.SurisLagrangeTop(), [0.3, -0.2, 0.5, 0.0, 0.6, 0.8]),
        "MoserVeselov": (RB, lpjax.MoserVeselov(), [1.0, 0.5, 0.8]),
        "GaussLegendre": (HT, lpjax.GaussLegendre(2), [0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254]),
        "RK4": (HT, lpjax.RK4(), [0.4, -0.8, 1.5, 0.3, 0.4, 0.8660254]),
        "Collective": (RB, lpjax.Collective(lpjax.GaussLegendre(2)), [1.0, 0.5, 0.8]),
        "DiscreteEulerPoincare": (RB, lpjax.DiscreteEulerPoincare(lpjax.lagrangians.moser_veselov(RB)), [1.0, 0.5, 0.8]),
        "SurisClebsch": (clebsch_case(jnp.array([1.0, 2.0, 3.0])), lpjax.SurisClebsch(), [0.3, -0.2, 0.5, 0.0, 0.6, 0.8]),
    }
    out = {}
    for name, (system, method, y0) in cases.items():
        sol = lpjax.integrate(system, method, np.array(y0, np.float32), 0.01, 20)
        ens = lpjax.ensemble(system, method, np.array([y0, y0], np.float32), 0.01, 20)
        out[name] = [str(sol.ys.dtype), bool(jnp.all(jnp.isfinite(sol.ys))), str(ens.final_state.dtype),
                     float(np.max(np.abs(ens.final_state[0] - np.asarray(sol.ys[-1]))))]
    try:
        lpjax.integrate(RB, lpjax.RK4(), np.ones(3), 0.01, 2, dtype=np.float64)
    except ValueError as e:
        out["float64"] = str(e)
    silent = {}  # NumPy float64 (or Python floats) with no dtype: refused, not run in float32
    for who, run in {
        "integrate": lambda y: lpjax.integrate(RB, lpjax.GaussLegendre(2), y[0], 0.1, 5),
        "integrate list": lambda y: lpjax.integrate(RB, lpjax.GaussLegendre(2), y[0].tolist(), 0.1, 5),
        "ensemble": lambda y: lpjax.ensemble(RB, lpjax.GaussLegendre(2), y, 0.1, 5),
        "ensemble_function": lambda y: lpjax.ensemble_function(RB, lpjax.GaussLegendre(2), 0.1, 5)(y),
    }.items():
        try:
            run(np.array([[1.0, 0.5, 0.8], [0.2, 0.1, 0.9]]))
            silent[who] = "ran"
        except ValueError as e:
            silent[who] = str(e)
    print(json.dumps(silent))
    try:  # 32-bit counters: refused before any work
        lpjax.integrate(RB, lpjax.RK4(), np.ones(3, np.float32), 0.01, 2**31, save_every=2**31)
    except ValueError as e:
        out["steps"] = str(e)
    print(json.dumps(out))
""")


def test_float32_with_x64_off():
    """In a process with x64 off (JAX's default) every method runs float32 input and returns
    float32, and asking for float64 (dtype=float64, or NumPy float64 input to integrate,
    ensemble or ensemble_function) is an error rather than a silent float32 run."""
    run = subprocess.run([sys.executable, "-c", _X64_OFF], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    silent, out = (json.loads(line) for line in run.stdout.strip().splitlines()[-2:])
    for who, message in silent.items():  # float64 input is an error that says how to turn x64 on
        assert "float64" in message and "jax_enable_x64" in message and "dtype=jnp.float32" in message, who
    assert len(silent) == 4
    assert "dtype float64 needs x64" in out.pop("float64")
    assert "n_steps = 2147483648 exceeds 2**31 - 1" in out.pop("steps")
    assert len(out) == 7
    for name, (dtype, finite, ens_dtype, diff) in out.items():
        assert (dtype, finite, ens_dtype) == ("float32", True, "float32"), name
        assert diff < 1e-5, name  # the ensemble's member is integrate's run, in float32 too
