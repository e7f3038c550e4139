"""The lpjax command."""

import json

import numpy as np
import pytest

import jax
import jax.numpy as jnp

import lpjax
from lpjax._catalog import LISTED_METHODS, METHODS, SYSTEMS, supported_methods
from lpjax.cli import _x64, main


def test_list(capsys, monkeypatch):
    """``lpjax list`` builds no system (its method table is LISTED_METHODS, checked below against
    every method's own check_system): it prints in about a second. Parameters at 6 digits."""
    import lpjax._catalog

    monkeypatch.setattr(lpjax._catalog, "_zoo", lambda: pytest.fail("lpjax list built a system"))
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "parameters: rho=0.101926\n" in out and "methods: rk4, gl2, gl4, mv, dep, collective" in out
    for name in ("rigid_body", "heavy_top", "rigid_body_4d", "heavy_top_4d", "gl<2s>"):
        assert name in out
    for entry in SYSTEMS.values():
        assert entry.name in out and all(a in out for a in entry.aliases)
    for entry in METHODS.values():
        assert entry.name in out and all(a in out for a in entry.aliases)


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_every_supported_pair_runs(name, capsys):
    """``lpjax run SYSTEM --method M`` for every method that accepts the system (by the
    method's own check), two steps each; the unsupported ones are refused with the list."""
    _x64()
    entry = SYSTEMS[name]
    supported = supported_methods(entry.build(entry.params))
    assert "rk4" in supported and "gl4" in supported
    assert tuple(supported) == LISTED_METHODS[name]  # what lpjax list prints
    for method in supported:
        assert main(["run", name, "--method", method, "--dt", "0.01", "--t1", "0.02", "--saves", "1"]) == 0, method
        assert "result                      successful" in capsys.readouterr().out, method
    for method in sorted(set(METHODS) - set(supported)):
        with pytest.raises(SystemExit, match=f"{method} does not run {name}.*methods for {name}: "
                                             f"{', '.join(supported)}"):
            main(["run", name, "--method", method])


def test_out_is_exactly_the_npz_asked_for_with_metadata(tmp_path, capsys):
    """--out run.txt used to write an empty run.txt and the data to a stray .tmp-*.npz: now a
    non-.npz name is refused before any work, and run.npz holds the data and the metadata."""
    with pytest.raises(SystemExit, match="expected a .npz file name"):
        main(["run", "rigid_body", "--out", str(tmp_path / "run.txt")])
    with pytest.raises(SystemExit, match="does not exist or is not writable"):
        main(["run", "rigid_body", "--out", str(tmp_path / "missing" / "run.npz")])
    assert not list(tmp_path.iterdir())
    out = tmp_path / "run.npz"
    assert main(["run", "rb", "-m", "mv", "--dt", "0.1", "--t1", "1", "--saves", "5", "-p", "inertia=[2, 3, 4]",
                 "--y0", "1, 0.5, 0.25", "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.npz"]
    data = np.load(out, allow_pickle=False)
    meta = json.loads(str(data["metadata"]))
    assert data["ys"].shape == (6, 3) and data["ys"][0].tolist() == [1.0, 0.5, 0.25]
    assert meta["system"] == "rigid_body" and meta["parameters"] == {"inertia": [2.0, 3.0, 4.0]}
    assert meta["method"] == "mv" and meta["method_repr"].startswith("MoserVeselov(")
    assert meta["dt"] == 0.1 and meta["n_steps"] == 10 and meta["save_every"] == 2 and meta["result"] == "successful"
    assert meta["stats"]["num_steps"] == 10 and isinstance(meta["stats"]["max_iterations"], int)
    assert isinstance(meta["stats"]["max_residual"], float)
    assert meta["lpjax_version"] == lpjax.__version__ and meta["jax_version"] == jax.__version__
    assert meta["created_utc"].endswith("+00:00")


def test_a_failed_run_exits_nonzero(capsys):
    """Kida's vortex started below the pole μ₃ = π/8 and moving up: the run fails (a result code),
    and the command says so with a non-zero exit instead of printing NaN errors as a success."""
    with pytest.raises(SystemExit, match="the run failed: The state became non-finite"):
        main(["run", "kida", "-m", "rk4", "--y0", "2,0,0.38", "--dt", "0.05", "--t1", "2"])


def test_progress_pieces_are_the_single_run():
    """The progress bar runs integrate in pieces continued from one another: bit for bit the
    single run's states."""
    from lpjax.cli import _run_with_progress

    _x64()
    system = SYSTEMS["heavy_top"].build(SYSTEMS["heavy_top"].params)
    y0 = SYSTEMS["heavy_top"].state(system, {})
    one, _ = _run_with_progress(system, lpjax.GaussLegendre(2), y0, 0.05, 400, 8, False)
    bar, _ = _run_with_progress(system, lpjax.GaussLegendre(2), y0, 0.05, 400, 8, True)
    assert bool(jnp.all(one.ys == bar.ys)) and one.ys.shape == (51, 6)


def test_completion_script(capsys):
    assert main(["completion", "bash"]) == 0
    assert "_LPJAX_COMPLETE" in capsys.readouterr().out


def test_run_writes_npz_and_plot(tmp_path, capsys):
    out, png = tmp_path / "run.npz", tmp_path / "run.png"
    assert main(["run", "heavy_top", "--method", "gl4", "--dt", "0.05", "--t1", "5",
                 "--saves", "10", "--out", str(out), "--plot", str(png)]) == 0
    data = np.load(out, allow_pickle=False)
    assert data["ys"].shape == (11, 6) and data["ts"][-1] == pytest.approx(5.0)
    meta = json.loads(str(data["metadata"]))
    assert meta["n_steps"] == 100 and meta["method"] == "gl4"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = capsys.readouterr().out
    casimir = float(text.split("max relative Casimir error")[1].split()[0])
    assert casimir < 1e-13


@pytest.mark.parametrize(
    "argv, match",
    [
        (["run", "pendulum"], "unknown system 'pendulum'"),
        (["run", "rigid_body", "--method", "gl3"], "unknown method 'gl3'"),
        (["run", "rigid_body", "--dt", "-1"], "must be finite and > 0"),
        (["run", "rigid_body", "--t1", "1e12", "--dt", "1e-3"], "must be between 1 and 2147483647"),
    ],
)
def test_bad_arguments_exit_with_message(argv, match):
    with pytest.raises(SystemExit, match=match):
        main(argv)


def test_ensemble_and_show(tmp_path, capsys):
    """``lpjax ensemble`` writes a store around the default state; ``lpjax show`` summarizes it
    (Moser–Veselov keeps the Casimir to roundoff) and plots; a second run into the same store
    without --resume is refused, with --resume it has nothing left to do."""
    store, png = tmp_path / "run.zarr", tmp_path / "show.png"
    argv = ["ensemble", "rigid_body", "--n", "300", "--method", "mv", "--dt", "0.02", "--steps", "40",
            "--save-every", "10", "--seed", "3", "--observe", "casimirs", "--out", str(store), "--no-progress"]
    assert main(argv) == 0
    assert "300 members of rigid_body with mv, 40 steps of 0.02 to t = 0.8" in capsys.readouterr().out
    assert main(["show", str(store), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "300 members, 40 steps of dt 0.02" in text and '"seed": 3' in text and "failed members: 0" in text
    assert "system: LiePoissonSystem(algebra=so(3)" in text and "method: MoserVeselov(" in text and "y0s: (300, 3)" in text
    assert float(text.split("casimirs: ")[1].split("max ")[1].split()[0]) < 1e-13
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit, match="already holds a store; pass --resume to finish it"):
        main(argv)
    assert main(argv + ["--resume"]) == 0
    with pytest.raises(SystemExit, match="settings differ|other settings|fingerprint"):  # another kernel, another run
        main(argv + ["--resume", "--kernel", "entries"])
    with pytest.raises(SystemExit, match="missing.zarr is missing; expected an lpjax ensemble store"):
        main(["show", str(tmp_path / "missing.zarr")])
    with pytest.raises(SystemExit, match="show.png is a file; expected an lpjax ensemble store"):
        main(["show", str(png)])
    with pytest.raises(SystemExit, match="unknown method 'suris2'"):
        main(["ensemble", "rigid_body", "--n", "3", "--steps", "2", "--method", "suris2", "--out", str(store)])


def test_plot_lines_carry_the_coordinate_names():
    from lpjax._cli_plots import state_labels

    _x64()
    want = {"heavy_top": ["M1", "M2", "M3", "Γ1", "Γ2", "Γ3"], "veselova_n": [f"k{i}" for i in range(1, 7)] +
            ["γ1", "γ2", "γ3", "γ4"], "kida_vortex": ["M1", "M2", "M3"]}
    for name, labels in want.items():
        entry = SYSTEMS[name]
        system = entry.build(entry.params)
        assert state_labels(system, entry.state(system, entry.params).size) == labels
    assert state_labels(lpjax.CanonicalSystem(lambda y: y @ y, n=2), 4) == ["q1", "q2", "p1", "p2"]


def test_the_kernel_option_lists_every_kernel_and_says_what_auto_picks(tmp_path, capsys):
    """``--kernel`` offers every kernel of ``lpjax.ensemble`` (``native`` included), its help says
    what ``auto`` picks on each platform, and ``--kernel native`` runs where llvmlite is installed."""
    from lpjax._ensemble._kernel import KERNELS, native_available

    assert main(["ensemble", "--help"]) in (0, None)
    text = " ".join(capsys.readouterr().out.split())
    assert f"[{'|'.join(KERNELS)}]" in text
    assert "auto: native on a CPU" in text and "fused on a GPU" in text
    if native_available():
        argv = ["ensemble", "rigid_body", "--n", "20", "--method", "mv", "--dt", "0.02", "--steps", "10",
                "--out", str(tmp_path / "native.zarr"), "--no-progress", "--kernel", "native"]
        assert main(argv) == 0
        assert main(["show", str(tmp_path / "native.zarr")]) == 0
        assert "failed members: 0" in capsys.readouterr().out


def test_spread_keeps_every_member_on_the_coadjoint_orbit(tmp_path, capsys):
    """``lpjax ensemble heavy_top --spread 0.1`` keeps Γ on its sphere: every member's |Γ|² and
    M·Γ equal the centre's to 1e-12, while the states and the energies spread; with
    --vary-casimirs the Casimirs differ, and the command names them."""
    store = tmp_path / "ht.zarr"
    argv = ["ensemble", "heavy_top", "--n", "64", "--steps", "2", "--spread", "0.1", "--no-progress", "--out"]
    assert main(argv + [str(store)]) == 0
    assert "spread on the coadjoint orbit" in capsys.readouterr().out
    y0s = np.asarray(lpjax.open_ensemble(str(store)).y0s[:])
    entry = SYSTEMS["heavy_top"]
    top = entry.build(entry.params)
    centre = np.asarray(entry.state(top, entry.params))
    M, G = y0s[:, :3], y0s[:, 3:]
    np.testing.assert_allclose(np.sum(G * G, axis=1), centre[3:] @ centre[3:], rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.sum(M * G, axis=1), centre[:3] @ centre[3:], rtol=0, atol=1e-12)
    assert 0.05 < float(np.std(y0s - centre)) < 0.2  # spread ~ 0.1 (ξ ~ N(0, 0.1²) acts on |y0| ~ 1)
    assert float(np.std(jax.vmap(top.energy)(jnp.asarray(y0s)))) > 0.05
    varied = tmp_path / "varied.zarr"
    assert main(argv + [str(varied), "--vary-casimirs"]) == 0
    assert "the Casimirs differ between members (|Γ|², M·Γ)" in capsys.readouterr().out
    G = np.asarray(lpjax.open_ensemble(str(varied)).y0s[:])[:, 3:]
    assert float(np.std(np.sum(G * G, axis=1))) > 0.05


@pytest.mark.parametrize("name", ["rigid_body_n", "kida_vortex", "movable_base_top", "veselova_n", "spherical_support"])
def test_spread_states_keep_the_casimirs(name):
    """Lie–Poisson systems are spread on the coadjoint orbit (so(4), so(2,1), a semidirect
    product), nonholonomic ones onto their Casimirs' level set: the Casimirs hold to 1e-12."""
    _x64()
    entry = SYSTEMS[name]
    system = entry.build(entry.params)
    centre = np.asarray(entry.state(system, entry.params))
    out = lpjax.spread_states(system, centre, 32, 0.1, seed=2)
    assert out.manner == ("Casimir level set" if name in ("veselova_n", "spherical_support") else "coadjoint orbit")
    C = np.asarray(jax.vmap(system.casimirs)(jnp.asarray(out.states)))
    np.testing.assert_allclose(C, np.broadcast_to(np.asarray(system.casimirs(jnp.asarray(centre))), C.shape),
                               rtol=0, atol=1e-12)
    assert float(np.min(np.linalg.norm(out.states - centre, axis=1))) > 1e-3
    with pytest.raises(ValueError, match="n must be a positive integer"):
        lpjax.spread_states(system, centre, 0, 0.1)
    with pytest.raises(ValueError, match="state must have shape"):
        lpjax.spread_states(system, centre[:-1], 4, 0.1)


def test_a_run_ends_at_t1_or_is_refused(tmp_path, capsys):
    """`lpjax run heavy_top --dt 0.07 --t1 1` ran 14 steps to t = 0.98 and exited 0; --saves that
    did not divide the steps cut the run short too (10000 steps, --saves 300: to t = 99.99)."""
    with pytest.raises(SystemExit, match=r"--t1 1 is not a whole number of steps of --dt 0.07 \(14.2857 steps\): take "
                                         r"--t1 0.98 \(14 steps\) or --t1 1.05 \(15 steps\)"):
        main(["run", "heavy_top", "--dt", "0.07", "--t1", "1"])
    for t1, dt, saves, n_saves in (("1.05", "0.07", "7", 16), ("100", "0.01", "300", 401), ("0.3", "0.1", "1000", 4)):
        out = tmp_path / "run.npz"
        assert main(["run", "rigid_body", "--dt", dt, "--t1", t1, "--saves", saves, "--out", str(out)]) == 0
        data = np.load(out, allow_pickle=False)
        assert data["ts"][-1] == pytest.approx(float(t1), rel=1e-12) and len(data["ts"]) == n_saves


def test_an_unwritable_store_is_refused_before_any_work(tmp_path):
    """It was refused after 14.4 s of work (when its first chunk was written)."""
    import time

    (tmp_path / "a_file").write_text("")
    for out, match in ((tmp_path / "missing" / "x.zarr", "the folder .* does not exist or is not writable"),
                       (tmp_path / "a_file", "is a file; a store is a directory")):
        t = time.perf_counter()
        with pytest.raises(SystemExit, match=match):
            main(["ensemble", "heavy_top", "--n", "100000", "--steps", "100000", "--out", str(out)])
        assert time.perf_counter() - t <= 5.0
        with pytest.raises(ValueError, match=match):
            lpjax.ensemble(lpjax.systems.rigid_body(jnp.array([1.0, 2.0, 3.0])), lpjax.GaussLegendre(2),
                           np.ones((10, 3)), 0.1, 10, out=str(out))


def test_the_splitting_and_compositions_run_from_the_command_line(tmp_path, capsys):
    """`lpjax run rigid_body -m splitting` was "unknown method"; compositions are INNER:SCHEME.
    Kahan-Li 6 of the splitting on the heavy top to t = 10 keeps the Casimirs to roundoff and is
    more accurate than the splitting itself at the same dt (against GL6 at dt/8)."""
    ref, ys = tmp_path / "ref.npz", {}
    assert main(["run", "heavy_top", "-m", "gl6", "--dt", "0.00625", "--t1", "10", "--saves", "1", "--out", str(ref)]) == 0
    for method in ("splitting", "splitting:kahan-li6", "lie-poisson-splitting:suzuki"):
        out = tmp_path / f"{method.replace(':', '_')}.npz"
        assert main(["run", "heavy_top", "-m", method, "--dt", "0.05", "--t1", "10", "--saves", "1", "--out",
                     str(out)]) == 0
        text = capsys.readouterr().out
        assert float(text.split("max relative Casimir error")[1].split()[0]) < 1e-13, method
        ys[method] = np.load(out)["ys"][-1]
    want = np.load(ref)["ys"][-1]
    errs = {m: float(np.max(np.abs(y - want))) for m, y in ys.items()}
    assert errs["splitting:kahan-li6"] < 1e-2 * errs["splitting"], errs
    with pytest.raises(SystemExit, match="unknown composition scheme 'nope' in 'gl4:nope'; choose one of triple-jump"):
        main(["run", "heavy_top", "-m", "gl4:nope"])
    with pytest.raises(SystemExit, match=r"rk4:blanes-moan-srkn11 does not run heavy_top \(Composition: "
                                         r"'blanes-moan-srkn11' is a Runge–Kutta–Nyström scheme"):
        main(["run", "heavy_top", "-m", "rk4:blanes-moan-srkn11"])


def test_adaptive_steps_from_the_command_line_reach_t1_at_the_tolerance(tmp_path, capsys):
    """`lpjax run --rtol/--atol`: GL4 with its own PID-controlled steps onto --saves equally
    spaced times; against the closed-form Euler top (scipy's ellipj) at t = 10."""
    from .reference import euler_top_exact

    out = tmp_path / "a.npz"
    assert main(["run", "rigid_body", "-p", "inertia=[1, 2, 3]", "--y0", "0.4, -0.8, 1.5", "--rtol", "1e-10", "--t1",
                 "10", "--saves", "5", "--out", str(out)]) == 0
    assert "accepted steps" in capsys.readouterr().out
    data = np.load(out, allow_pickle=False)
    meta = json.loads(str(data["metadata"]))
    assert data["ts"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0] and meta["rtol"] == meta["atol"] == 1e-10
    y0, inertia = np.array([0.4, -0.8, 1.5]), np.array([1.0, 2.0, 3.0])
    api = lpjax.ensemble(lpjax.systems.rigid_body(jnp.asarray(inertia)), lpjax.GaussLegendre(2), y0[None], 0.05,
                         t1=10.0, ts=[2.0, 4.0, 6.0, 8.0, 10.0], controller=lpjax.PIDController(1e-10, 1e-10))
    np.testing.assert_array_equal(data["ys"], np.asarray(api.observables["state"][0]))  # the Python API's run
    # each accepted step's estimated local error is within atol + rtol |y|: their sum bounds the global error
    # (measured 6.3e-10 after 127 steps, going on from the half steps; 1.0e-8 after 139 from the full step)
    bound = meta["stats"]["num_accepted_steps"] * 1e-10 * (1 + np.max(np.abs(data["ys"])))
    assert np.max(np.abs(data["ys"][-1] - np.asarray(euler_top_exact(inertia, y0, 10.0)))) <= bound
    with pytest.raises(SystemExit, match="adaptive steps need a local error estimate"):
        main(["run", "rigid_body", "-m", "mv", "--rtol", "1e-8", "--t1", "1"])


def test_adaptive_ensembles_from_the_command_line(tmp_path, capsys):
    """`lpjax ensemble --rtol --t1 --saves` (or --save-times): each member's own steps, the store
    equal to the Python API's adaptive ensemble of its states; fixed steps may end at --t1; the
    flags of one kind of run are refused in the other, before any work."""
    store = tmp_path / "a.zarr"
    argv = ["ensemble", "heavy_top", "--n", "16", "--rtol", "1e-8", "--t1", "2", "--saves", "4", "--observe", "state",
            "--out", str(store), "--no-progress"]
    assert main(argv) == 0
    assert "adaptive steps at rtol 1e-08, atol 1e-08 to t = 2 (accepted steps per member" in capsys.readouterr().out
    sol = lpjax.open_ensemble(str(store))
    assert sol.ts.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0] and sol.settings["local_extrapolation"] is True
    entry = SYSTEMS["heavy_top"]
    api = lpjax.ensemble(entry.build(entry.params), lpjax.GaussLegendre(2), np.asarray(sol.y0s[:]), None,
                         controller=lpjax.PIDController(1e-8, 1e-8), ts=[0.5, 1.0, 1.5, 2.0], kernel=sol.settings["kernel"])
    np.testing.assert_array_equal(np.asarray(sol.final_state[:]), np.asarray(api.final_state))
    np.testing.assert_array_equal(np.asarray(sol.stats["num_accepted_steps"][:]), api.stats["num_accepted_steps"])
    assert main(["show", str(store)]) == 0
    assert "adaptive steps at rtol 1e-08" in capsys.readouterr().out
    assert main(["ensemble", "heavy_top", "--n", "4", "--rtol", "1e-6", "--save-times", "0.5, 1.5", "--error-estimate",
                 "defect", "--out", str(tmp_path / "b.zarr"), "--no-progress"]) == 0
    assert lpjax.open_ensemble(str(tmp_path / "b.zarr")).ts.tolist() == [0.0, 0.5, 1.5]
    assert main(["ensemble", "heavy_top", "--n", "4", "--t1", "1", "--dt", "0.05", "--saves", "4", "--out",
                 str(tmp_path / "c.zarr"), "--no-progress"]) == 0
    assert lpjax.open_ensemble(str(tmp_path / "c.zarr")).ts.tolist() == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    refused = {("--rtol", "1e-8", "--steps", "10", "--t1", "1"): "--steps: fixed steps only",
               ("--rtol", "1e-8"): "needs its end time: --t1",
               ("--steps", "10", "--save-times", "0.5"): "--save-times: adaptive runs only",
               ("--t1", "1", "--dt", "0.07"): r"take --t1 0.98 \(14 steps\) or --t1 1.05 \(15 steps\)",
               ("--steps", "10", "--t1", "1"): "--steps N or as --t1 T",
               ("--steps", "10", "--saves", "2", "--save-every", "5"): "--save-every or --saves, not both",
               ("--rtol", "1e-8", "--t1", "1", "--save-times", "0.5,1", "--saves", "2"): "--save-times or --saves"}
    for extra, match in refused.items():
        with pytest.raises(SystemExit, match=match):
            main(["ensemble", "heavy_top", "--n", "4", *extra, "--out", str(tmp_path / "never.zarr")])
    assert not (tmp_path / "never.zarr").exists()


def test_section_from_the_command_line(tmp_path, capsys):
    """``lpjax section`` writes the crossings of y[3] = 0 (Γ₁, upwards) of heavy tops around the
    default state into a store, and a picture; the store's record is that of the Python API for
    the same states; bad arguments are refused before any work."""
    from lpjax._catalog import build

    store, png = tmp_path / "s.zarr", tmp_path / "s.png"
    argv = ["section", "heavy_top", "--n", "12", "--t1", "20", "--dt", "0.02", "--method", "gl4", "--no-progress"]
    assert main([*argv, "--surface", "3", "--crossings", "8", "--out", str(store), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "12 members of heavy_top with gl4, 1000 steps of 0.02 to t = 20:" in out and "failed: 0" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sol = lpjax.open_ensemble(str(store))
    assert sol.settings["events"][0]["direction"] == 1 and sol.settings["events"][0]["max_crossings"] == 8
    _, _, system, method, _ = build("heavy_top", "gl4")
    event = lpjax.Event(lambda t, y: y[3], direction=1, terminal=False, max_crossings=8)
    ref = lpjax.ensemble(system, method, np.asarray(sol.y0s), 0.02, 1000, events=event)
    assert np.all(np.asarray(sol.events.count) >= 1)
    np.testing.assert_array_equal(np.asarray(sol.events.count), ref.events.count)
    assert main(["show", str(store)]) == 0
    assert (f"events: 1, {int(ref.events.count.sum())} crossings recorded ({ref.events.count.mean():.1f} a member, at "
            "most 8); 0 members stopped at a terminal event") in capsys.readouterr().out
    np.testing.assert_allclose(np.asarray(sol.events.ts), ref.events.ts, rtol=0, atol=1e-12)
    other = str(tmp_path / "other.zarr")
    for bad, match in ((["--surface", "6", "--crossings", "8"], "--surface must be the index of a coordinate of "
                                                                 "heavy_top's state, 0 ... 5, got 6"),
                       (["--surface", "3", "--crossings", "0"], "--crossings must be >= 1, got 0"),
                       (["--surface", "3", "--axes", "0", "9"], "--axes must be two coordinates of the state")):
        with pytest.raises(SystemExit, match=match):
            main([*argv, *bad, "--out", other])


def test_chaos_map_from_the_command_line(tmp_path, capsys):
    """``lpjax chaos`` writes MEGNO over a 6 × 4 grid of heavy tops on the default state's level
    set (the energy and both Casimirs those of the centre at every start: within 1e-13 of
    (1 + |value|), the projection's criterion), and a
    picture; the store's ⟨Y⟩ is that of the Python API for the same states; bad arguments are
    refused before any work."""
    from lpjax._catalog import build

    store, png = tmp_path / "c.zarr", tmp_path / "c.png"
    argv = ["chaos", "heavy_top", "--grid", "6", "4", "--t1", "5", "--dt", "0.02", "--no-progress"]
    assert main([*argv, "--plane", "0", "1", "--extent", "1.0", "0.5", "--out", str(store), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "6 x 4 states of heavy_top (24 on the level set) with gl4, 250 steps of 0.02 to t = 5:" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sol = lpjax.open_ensemble(str(store))
    _, _, system, method, centre = build("heavy_top", "gl4")
    y0s = np.asarray(sol.y0s)
    level = lambda y: np.concatenate([np.asarray(system.casimirs(y)), [float(system.energy(y))]])  # noqa: E731
    assert max(np.max(np.abs(level(y) - level(centre)) / (1 + np.abs(level(centre)))) for y in y0s) <= 1e-13
    assert np.ptp(y0s[:, 0]) > 0.5 and np.ptp(y0s[:, 1]) > 0.3  # (a grid, not one point)
    ref = lpjax.ensemble(system, method, y0s, 0.02, 250, observe=lpjax.MEGNO())
    np.testing.assert_allclose(np.asarray(sol.observables["megno"]), ref.observables["megno"], rtol=0, atol=1e-12)
    other = str(tmp_path / "other.zarr")
    for bad, match in ((["--plane", "0", "0"], "--plane must be two different coordinates of heavy_top's state"),
                       (["--plane", "0", "6"], r"0 \.\.\. 5, got 0 6"),
                       (["--plane", "0", "1", "--extent", "-1", "1"], "--extent must be two finite numbers >= 0")):
        with pytest.raises(SystemExit, match=match):
            main([*argv, *bad, "--out", other])
