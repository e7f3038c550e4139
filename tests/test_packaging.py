"""Packaging hygiene: a licence, type information, one version."""

import importlib.metadata
import pathlib
import tomllib

import lpjax

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_licence_typing_version_and_changelog():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"file": "LICENSE"}
    assert "Apache License" in (ROOT / "LICENSE").read_text().splitlines()[0] + (ROOT / "LICENSE").read_text()[:200]
    assert (pathlib.Path(lpjax.__file__).parent / "py.typed").exists()
    assert lpjax.__version__ == importlib.metadata.version("lpjax") == project["version"]
    assert f"## {project['version']}" in (ROOT / "CHANGELOG.md").read_text()
