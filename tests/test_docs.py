"""The documentation's Python runs: every ```python block of README.md and of the docs pages,
in order, one shared namespace per file (as a reader runs them), in a temporary directory.

Blocks are found by mktestdocs. Each page owns its text: none includes README sections, so a
page's first block imports what the page uses. Every block runs; none is skipped.
"""

import pathlib
import re

import matplotlib
import pytest
from mktestdocs import grab_code_blocks

ROOT = pathlib.Path(__file__).resolve().parents[1]
_README_INCLUDE = re.compile(r'--8<--\s*"README\.md')


def _pages() -> list[str]:
    pages = ["README.md"]
    for path in sorted((ROOT / "docs").rglob("*.md")):
        if grab_code_blocks(path.read_text(), lang="python"):
            pages.append(str(path.relative_to(ROOT)))
    return pages


def test_every_page_with_python_is_collected():
    """The pages this test runs (a guard against a parser that finds nothing)."""
    assert set(_pages()) >= {
        "README.md", "docs/quickstart.md", "docs/concepts.md", "docs/ensembles.md", "docs/diffrax.md",
        "docs/fitting.md", "docs/seeds/seed001.md",
    }
    assert len(grab_code_blocks((ROOT / "README.md").read_text(), lang="python")) >= 5


def test_no_docs_page_includes_the_readme():
    """The docs pages own their content: a README section pulled into a page would be text that
    the page's own blocks do not set up, and that changes when the landing page does."""
    including = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").rglob("*.md"))
                 if _README_INCLUDE.search(p.read_text())]
    assert including == []


@pytest.mark.parametrize("page", _pages())
def test_the_python_blocks_of_a_page_run(page, tmp_path, monkeypatch):
    blocks = grab_code_blocks((ROOT / page).read_text(), lang="python")
    monkeypatch.chdir(tmp_path)
    matplotlib.use("Agg")
    namespace = {"__name__": "__docs__"}
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"{page} [python block {i}]", "exec"), namespace)
        except Exception as e:  # name the block, so that the failure points at the docs
            raise AssertionError(f"{page}, python block {i} failed:\n{block}") from e
    assert blocks
