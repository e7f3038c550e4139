"""``lpjax reproduce``: seed 002's figures, the JSON numbers they plot, and bad input."""

import json

import numpy as np
import pytest

from lpjax import clebsch
from lpjax.reproduce import (
    FIGURES,
    JSON_NAME,
    json_name,
    kida_sigmas,
    movable_base_sigmas,
)
from lpjax.cli import main
from lpjax.systems import kida_initial_state, kida_vortex, movable_base_top

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    """fig5 then fig3 into one directory: the second call must keep the first one's entry."""
    d = tmp_path_factory.mktemp("seed002")
    assert main(["reproduce", "seed002-fig5", "--out", str(d)]) == 0
    assert main(["reproduce", "seed002-fig3", "--out", str(d)]) == 0
    return d


@pytest.fixture(scope="module")
def results(out_dir):
    return json.loads((out_dir / JSON_NAME).read_text())["figures"]


def test_json_keeps_both_entries_and_pngs(out_dir, results):
    assert set(results) == {"seed002-fig5", "seed002-fig3"}
    for name in results:
        assert (out_dir / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
        assert results[name]["png"] == f"{name}.png"
        assert results[name]["lpjax_version"] and results[name]["wall_time_s"] > 0
    assert not [p for p in out_dir.iterdir() if p.name.startswith(".tmp-")]  # no temporary files left


def test_fig5_movable_base(results):
    r = results["seed002-fig5"]
    assert r["dt"] == 0.01 and r["n_steps"] == 3000 and r["t_span"] == pytest.approx([0.0, 30.0])
    assert r["parameters"]["rho"] == pytest.approx(0.9 * 0.7**2 * 0.215**2 / 0.2)
    mx = r["maxima"]
    for f in ("f1", "f2", "f3"):
        col, rk4 = mx[f"collective_rel_err_{f}"], mx[f"rk4_rel_err_{f}"]
        # Casimirs: roundoff for the collective method (3000 steps), truncation error for RK4
        assert col <= 1e-11, (f, col)
        assert rk4 >= 100 * col, (f, rk4, col)
    # energy: bounded for the symplectic collective method, drifting for RK4 (paper, Fig. 5(a))
    assert mx["collective_rel_err_h_c"] < mx["rk4_rel_err_h_c"]
    assert mx["final"]["rk4_rel_err_h_c"] > 10 * mx["final"]["collective_rel_err_h_c"]
    assert r["solver_stats"]["collective"]["num_failed_steps"] == 0


def test_fig3_kida_invariants(results):
    r = results["seed002-fig3"]
    assert r["dt"] == 0.1 and r["n_steps"] == 10000 and r["t_span"] == pytest.approx([0.0, 1000.0])
    mx = r["maxima"]
    assert mx["abs_err_J0"] <= 1e-12
    assert mx["rel_err_J1"] <= 1e-11 and mx["rel_err_J2"] <= 1e-11
    # J are not trivially zero at t = 0, so the errors are meaningful
    assert min(abs(v) for v in r["J_at_t0"].values()) > 1e-2
    assert r["symmetry_algebra"]["sigmas_span_h"] and r["symmetry_algebra"]["dim_h"] == 3
    # the lift is a true lift of mu0 (errata: q must annihilate mu)
    q0, p0, mu0 = (np.asarray(r[k]) for k in ("q0", "p0", "mu0"))
    s = kida_vortex(0.5, -1.0)
    M = clebsch.momentum_map(s.algebra, s.sign)
    np.testing.assert_allclose(np.asarray(M(np.concatenate([q0, p0]))), mu0, rtol=0, atol=1e-12)
    assert abs(mu0 @ q0) < 1e-12


def test_kida_initial_state():
    mu = kida_initial_state(0.5, -1.0)
    s = kida_vortex(0.5, -1.0)
    assert mu[0] == 1.0 and mu[1] > 0 and mu[2] < np.pi / 8
    assert abs(float(s.casimirs(mu)[0]) + 0.25) <= 1e-12
    assert abs(float(s.energy(mu)) - 1.0) <= 1e-12


def _random_z(n, seed=0):
    return np.random.default_rng(seed).standard_normal(2 * n)


def test_kida_sigmas_are_eq_16_20():
    s = kida_vortex(0.5, -1.0)
    J = clebsch.invariants(s.algebra, kida_sigmas())  # raises if a σ is not in 𝔥
    z = _random_z(3)
    q, p = z[:3], z[3:]
    expected = [p @ q, q[0] ** 2 + q[1] ** 2 - q[2] ** 2, p[0] ** 2 + p[1] ** 2 - p[2] ** 2]
    np.testing.assert_allclose(np.asarray(J(z)), expected, rtol=1e-13)


def test_movable_base_sigmas_are_eq_32_and_span_h():
    top = movable_base_top()
    S = movable_base_sigmas()
    J = clebsch.invariants(top.algebra, S)  # raises if a σ is not in 𝔥
    z = _random_z(9, seed=1)
    q, p = z[:9], z[9:]
    q1, q2, q3, p2, p3 = q[0:3], q[3:6], q[6:9], p[3:6], p[6:9]
    expected = [p @ q, q1 @ p2, q1 @ p3, q1 @ q1, q1 @ q2, q1 @ q3, p2 @ p2, p2 @ p3, p3 @ p3]
    np.testing.assert_allclose(np.asarray(J(z)), expected, rtol=1e-13)
    basis = clebsch.symmetry_algebra(top.algebra)
    assert basis.shape[0] == 9
    both = np.concatenate([S.reshape(9, -1), basis.reshape(9, -1)])
    assert np.linalg.matrix_rank(S.reshape(9, -1)) == np.linalg.matrix_rank(both) == 9
    # the paper's literal σ11 block for J4, [[0, I, 0], [0, 0, 0], [0, 0, 0]], is not symmetric
    lit = np.zeros((18, 18))
    lit[0:3, 3:6] = np.eye(3)
    assert not clebsch.in_symmetry_algebra(top.algebra, lit)


@pytest.mark.parametrize(
    "argv, match",
    [
        (["reproduce", "seed002-fig4"], "unknown figure 'seed002-fig4'"),
        (["reproduce", "fig2"], "choose one of seed001-fig1, seed002-fig1"),
    ],
)
def test_unknown_figure_exits_with_message(argv, match, tmp_path):
    with pytest.raises(SystemExit, match=match):
        main(argv + ["--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())


def test_damaged_json_is_not_overwritten(tmp_path):
    bad = tmp_path / JSON_NAME
    bad.write_text("{not json")
    with pytest.raises(SystemExit, match="not valid JSON"):
        main(["reproduce", "seed002-fig6", "--out", str(tmp_path)])
    assert bad.read_text() == "{not json"


def test_figures_list():
    assert FIGURES == ("seed001-fig1", "seed002-fig1", "seed002-fig2", "seed002-fig3", "seed002-fig5",
                       "seed002-fig6")
    assert json_name("seed001-fig1") == "seed001.json" and json_name("seed002-fig5") == JSON_NAME


def test_help_and_readme_name_the_figures_that_run(capsys):
    """``lpjax reproduce --help`` and the README's command line print exactly the accepted names."""
    import pathlib

    assert main(["reproduce", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("lpjax reproduce "))
    assert line.split()[2].split("|") == [*FIGURES, "all"]
    assert ", ".join(FIGURES) + " or all" in help_text


def test_seed001_target(tmp_path, monkeypatch):
    """The seed 001 figure on t ∈ [0, 20] into its own seed001.json (the density panel on two of
    its seven systems, to keep the compile time down: every density is tested in
    test_nonholonomic.py)."""
    from lpjax.reproduce import reproduce, seed001

    full = seed001._density_systems()
    monkeypatch.setattr(seed001, "_density_systems", lambda: {k: full[k] for k in ("Veselova n=3", "general L+R")})
    data = reproduce(["seed001-fig1"], str(tmp_path), spans={"seed001-fig1": 20.0})
    assert data["seed"].startswith("001_") and not (tmp_path / JSON_NAME).exists()
    r = data["figures"]["seed001-fig1"]
    assert (tmp_path / "seed001-fig1.png").read_bytes()[:8] == PNG_MAGIC
    assert r["n_steps"] == 200 and r["t_span"] == pytest.approx([0.0, 20.0])
    mx = r["maxima"]
    assert mx["GL4_constraint"] <= 1e-14 and mx["GL4_gamma_norm_err"] <= 1e-14  # bilinear: kept by GL
    assert mx["RK4_constraint"] >= 1e-9 and mx["RK4_rel_err_energy"] >= 10 * mx["GL4_rel_err_energy"]
    assert mx["rubber_vs_veselova_I_plus_D"] <= 1e-10
    assert set(r["invariant_measure"]) == {"Veselova n=3", "general L+R"}
    for v in r["invariant_measure"].values():
        assert v["div_rho_f"] <= 1e-11 and v["control_div_f"] >= 1e-2


@pytest.mark.slow
def test_other_figures_on_short_spans(tmp_path):
    """figs 1, 2 (one shared Kida run, sliced for fig 1) and 6 through ``reproduce(spans=...)``."""
    from lpjax.reproduce import reproduce

    spans = {"seed002-fig1": 5.0, "seed002-fig2": 20.0, "seed002-fig6": 2.0}
    data = reproduce(list(spans), str(tmp_path), spans=spans)["figures"]
    assert set(data) == set(spans)
    for name, t1 in spans.items():
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
        assert data[name]["t_span"] == pytest.approx([0.0, t1])
    assert data["seed002-fig1"]["n_steps"] == 50 and data["seed002-fig2"]["n_steps"] == 200
    m1, m2, m6 = (data[f"seed002-fig{k}"]["maxima"] for k in (1, 2, 6))
    assert m1["collective_rel_err_f1"] <= m2["collective_rel_err_f1"] <= 1e-12
    assert m2["rk4_rel_err_f1"] >= 100 * m2["collective_rel_err_f1"]
    assert m6["abs_err_J0"] <= 1e-12
    assert max(v for k, v in m6.items() if k.startswith("rel_err_")) <= 1e-12
    assert data["seed002-fig6"]["symmetry_algebra"]["each_sigma_in_h"] == [True] * 9
    with pytest.raises(ValueError, match="spans given for figures not requested"):
        reproduce(["seed002-fig1"], str(tmp_path), spans={"seed002-fig2": 1.0})
    with pytest.raises(ValueError, match="not a positive multiple"):
        reproduce(["seed002-fig1"], str(tmp_path), spans={"seed002-fig1": 0.05})

