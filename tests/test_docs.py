"""The documentation's Python runs: every ```python block of README.md and of the docs pages,
in order, one shared namespace per file (as a reader runs them), in a temporary directory.

Blocks are found by mktestdocs. A docs page that includes README sections (``--8<--``) runs them
before its own blocks; a page made only of README sections is covered by README.md. SKIP says
which blocks do not run here, and why.
"""

import pathlib
import re

import matplotlib
import pytest
from mktestdocs import grab_code_blocks

ROOT = pathlib.Path(__file__).resolve().parents[1]
_INCLUDE = re.compile(r'^--8<-- "README\.md:(\w+)"$', re.M)

# a substring of the block -> why it does not run in `make test`
SKIP = {
    "best = tune_upright_top()": "an L-BFGS gain tuning, about 25 s; tests/test_control.py runs it from both ends",
}


def _section(name: str) -> str:
    text = (ROOT / "README.md").read_text()
    start, end = f"<!-- --8<-- [start:{name}] -->", f"<!-- --8<-- [end:{name}] -->"
    if start not in text or end not in text:
        raise AssertionError(f"README.md has no section {name!r}")
    return text[text.index(start) + len(start):text.index(end)]


def _pages() -> list[str]:
    pages = ["README.md"]
    for path in sorted((ROOT / "docs").rglob("*.md")):
        if grab_code_blocks(path.read_text(), lang="python"):  # its own blocks, not only included ones
            pages.append(str(path.relative_to(ROOT)))
    return pages


def test_every_page_with_python_is_collected():
    """The pages this test runs (a guard against a parser that finds nothing)."""
    assert set(_pages()) >= {"README.md", "docs/quickstart.md"}
    assert len(grab_code_blocks((ROOT / "README.md").read_text(), lang="python")) >= 8


@pytest.mark.parametrize("page", _pages())
def test_the_python_blocks_of_a_page_run(page, tmp_path, monkeypatch):
    text = _INCLUDE.sub(lambda m: _section(m.group(1)), (ROOT / page).read_text())
    blocks = grab_code_blocks(text, lang="python")
    monkeypatch.chdir(tmp_path)
    matplotlib.use("Agg")
    namespace = {"__name__": "__docs__"}
    ran = 0
    for i, block in enumerate(blocks):
        if any(key in block for key in SKIP):
            continue
        try:
            exec(compile(block, f"{page} [python block {i}]", "exec"), namespace)
        except Exception as e:  # name the block, so that the failure points at the docs
            raise AssertionError(f"{page}, python block {i} failed:\n{block}") from e
        ran += 1
    assert ran >= 1
