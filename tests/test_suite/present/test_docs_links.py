"""`suite docs` writes inside the repository only: a link planted in the docs is refused, never followed."""

from __future__ import annotations

import shutil

import pytest
from helpers import ROOT

from suite.cli import COMMANDS
from suite.errors import UsageError
from suite.parser import build_parser
from suite.present import site


@pytest.fixture
def root(tmp_path):
    """The docs without their run cards (none is needed to write the other pages), beside a folder outside."""
    shutil.copytree(ROOT / "docs", tmp_path / "repo" / "docs", ignore=shutil.ignore_patterns("runs", "img"))
    for name in ("README.md", "mkdocs.yml"):
        shutil.copy(ROOT / name, tmp_path / "repo" / name)
    (tmp_path / "outside").mkdir()
    return tmp_path / "repo"


def _refused(root, path):
    outside = sorted(p.name for p in (root.parent / "outside").iterdir())
    with pytest.raises(UsageError, match=str(path)):
        site.write(root, build_parser(COMMANDS))
    assert sorted(p.name for p in (root.parent / "outside").iterdir()) == outside
    assert (root.parent / "outside" / "victim.md").read_text() == "keep\n"


def test_a_page_that_is_a_link_outside_is_refused_naming_it(root):
    (root.parent / "outside" / "victim.md").write_text("keep\n")
    (root / "docs/cli.md").unlink()
    (root / "docs/cli.md").symlink_to(root.parent / "outside" / "victim.md")
    _refused(root, root / "docs/cli.md")


def test_a_folder_that_is_a_link_outside_is_refused_naming_a_page_in_it(root):
    (root.parent / "outside" / "victim.md").write_text("keep\n")
    shutil.rmtree(root / "docs/variants")
    (root / "docs/variants").symlink_to(root.parent / "outside", target_is_directory=True)
    _refused(root, root / "docs/variants")


def test_the_docs_without_links_are_written(root):
    assert site.write(root, build_parser(COMMANDS)) is not None
    assert site.stale(root, build_parser(COMMANDS)) == [root / site.FIGURE]  # no card to draw it from here
