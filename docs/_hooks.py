"""mkdocs hook: serve the benchmark plots from benchmarks/results/ (not copied into docs/)."""

import pathlib

from mkdocs.structure.files import File

ROOT = pathlib.Path(__file__).resolve().parent.parent


def on_files(files, config):
    for png in sorted((ROOT / "benchmarks" / "results").glob("*.png")):
        files.append(File(f"benchmarks/results/{png.name}", str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files
