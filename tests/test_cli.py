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
