"""Design (lpjax.control): discounted costs through integrate, the upright-top problem, tuning."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lpjax
from lpjax.control import (
    discounted_cost,
    tune_upright_top,
    upright_top_cost,
    upright_top_initial_states,
)
from lpjax.systems import movable_base_top, rigid_body

RHO_C = 0.7**2 * 0.215**2 / 0.2


def test_initial_states_do_not_depend_on_the_gain():
    a = upright_top_initial_states(movable_base_top(rho=0.2 * RHO_C))
    b = upright_top_initial_states(movable_base_top(rho=0.8 * RHO_C))
    assert float(jnp.max(jnp.abs(a - b))) == 0.0
    np.testing.assert_allclose(jnp.linalg.norm(a[:, 6:], axis=1), 1.0, rtol=1e-15)
    np.testing.assert_allclose(a[0, 6:], [np.cos(np.pi / 3) * np.sin(np.pi / 20), np.sin(np.pi / 3) * np.sin(np.pi / 20),
                                          np.cos(np.pi / 20)], rtol=1e-15)


def _energy_cost(system, y):
    return system.energy(y)


def test_discounted_cost_of_a_constant_is_the_discount_integral():
    """For a conserved running cost c, the cost is c (1 − e^(−T/τ)) up to the trapezoid error."""
    system = rigid_body(jnp.array([1.0, 2.0, 3.0]))
    mu0s = jnp.array([[1.0, 0.5, 0.8], [0.2, -0.3, 1.0]])
    T, tau, dt = 5.0, 2.0, 0.01
    J = discounted_cost(system, lpjax.GaussLegendre(2), mu0s, _energy_cost, T=T, tau=tau, dt=dt)
    E = np.mean([float(system.energy(y)) for y in mu0s])
    exact = E * (1 - np.exp(-T / tau))
    # trapezoid rule on e^(−t/τ)/τ: relative error about dt²/(12 τ²) = 2e-6
    assert abs(float(J) / exact - 1) <= 3e-6


@pytest.mark.parametrize("kw, match", [(dict(T=1.005), "whole number"), (dict(tau=-1.0), "tau"),
                                       (dict(dt=0.0), "dt")])
def test_discounted_cost_rejects_bad_input(kw, match):
    args = dict(T=1.0, tau=1.0, dt=0.01) | kw
    with pytest.raises(ValueError, match=match):
        discounted_cost(rigid_body(jnp.ones(3) + jnp.arange(3.0)), lpjax.RK4(), jnp.ones((1, 3)), _energy_cost, **args)


@pytest.mark.parametrize("frac", [0.3, 0.5, 0.7])
def test_gradient_of_upright_top_cost_matches_central_differences(frac):
    rho = frac * RHO_C
    g = float(jax.grad(upright_top_cost)(jnp.asarray(rho)))
    h = 1e-5 * rho
    fd = (float(upright_top_cost(rho + h)) - float(upright_top_cost(rho - h))) / (2 * h)
    assert abs(g - fd) <= 1e-6 * abs(fd)


def test_upright_top_cost_is_converged_in_dt():
    a, b = float(upright_top_cost(0.5 * RHO_C, dt=0.01)), float(upright_top_cost(0.5 * RHO_C, dt=0.005))
    assert abs(a - b) <= 2e-5 * abs(b)


_TRACES = [0]


def _counting_cost(system, y):
    _TRACES[0] += 1  # Python runs this only while tracing
    return system.energy(y)


def test_discounted_cost_compiles_once_per_configuration():
    method, mu0s = lpjax.GaussLegendre(2), jnp.array([[1.0, 0.5, 0.8]])
    a = discounted_cost(rigid_body(jnp.array([1.0, 2.0, 3.0])), method, mu0s, _counting_cost, T=1.0, tau=1.0, dt=0.1)
    traced = _TRACES[0]
    assert traced > 0
    b = discounted_cost(rigid_body(jnp.array([1.5, 2.0, 2.5])), method, 2 * mu0s, _counting_cost, T=1.0, tau=0.5, dt=0.1)
    assert _TRACES[0] == traced and float(a) != float(b)  # new parameters, states and tau: no retrace
    discounted_cost(rigid_body(jnp.array([1.0, 2.0, 3.0])), method, mu0s, _counting_cost, T=2.0, tau=1.0, dt=0.1)
    assert _TRACES[0] > traced  # a new number of steps is a new configuration


@pytest.mark.slow
def test_tuning_reaches_the_same_gain_from_both_ends():
    lo = tune_upright_top(0.1 * RHO_C)
    hi = tune_upright_top(0.9 * RHO_C)
    assert lo.rho == pytest.approx(hi.rho, rel=1e-4)
    for r in (lo, hi):
        assert 0 < r.rho < r.rho_c
        assert abs(r.rho * r.gradient) <= 1e-6 * r.cost
        assert r.cost <= min(J for _, J in r.history) + 1e-12
    assert lo.cost < float(upright_top_cost(0.9 * RHO_C))


def test_tune_rejects_an_unstable_start():
    with pytest.raises(ValueError, match="stable range"):
        tune_upright_top(1.2 * RHO_C)


@pytest.mark.slow
def test_cli_tune_movable_top_json_and_plot(tmp_path, capsys):
    """The CLI's JSON, plot and per-iteration bar, over three updates (the tuning itself is
    tested above)."""
    import json

    from lpjax.cli import main

    png = tmp_path / "tune.png"
    assert main(["tune", "movable-top", "--json", "--plot", str(png), "--progress", "--max-steps", "3"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out.strip().splitlines()[-1])
    assert out["iterations"] == 3 and "3/3" in captured.err and "rho=" in captured.err  # a tqdm bar, per iteration
    assert set(out) == {"rho", "rho_c", "cost", "cost_paper", "iterations"}
    assert out["rho_c"] == pytest.approx(RHO_C, rel=1e-15)
    assert 0 < out["rho"] < out["rho_c"] and out["cost"] < out["cost_paper"]
    assert out["cost_paper"] == pytest.approx(float(upright_top_cost(0.9 * RHO_C)), rel=1e-12)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, match", [(["--rho0", "0.5"], "stable range"),
                                         (["--plot", "/nonexistent-folder/x.png"], "not writable")])
def test_cli_tune_bad_arguments(argv, match):
    from lpjax.cli import main

    with pytest.raises(SystemExit, match=match):
        main(["tune", "movable-top", *argv])
