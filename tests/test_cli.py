"""The lpjax command."""

import json

import numpy as np
import pytest

from lpjax.cli import main


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("rigid_body", "heavy_top", "rigid_body_4d", "heavy_top_4d", "gl<2s>"):
        assert name in out


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
            "--save-every", "10", "--seed", "3", "--observe", "casimirs", "--out", str(store)]
    assert main(argv) == 0
    assert "300 members x 40 steps" in capsys.readouterr().out
    assert main(["show", str(store), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "300 members, 40 steps of dt 0.02" in text and '"seed": 3' in text and "failed members: 0" in text
    assert float(text.split("casimirs: ")[1].split("max ")[1].split()[0]) < 1e-13
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit, match="resume"):
        main(argv)
    assert main(argv + ["--resume"]) == 0
    with pytest.raises(SystemExit, match="settings differ|other settings|fingerprint"):  # another kernel, another run
        main(argv + ["--resume", "--kernel", "entries"])
    with pytest.raises(SystemExit, match="not an lpjax ensemble store|No such|not found|zarr"):
        main(["show", str(tmp_path / "missing.zarr")])
    with pytest.raises(SystemExit, match="unknown method 'suris2'"):
        main(["ensemble", "rigid_body", "--n", "3", "--steps", "2", "--method", "suris2", "--out", str(store)])
