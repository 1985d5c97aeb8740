"""A run's commit: "-dirty" wherever what it ran is not the commit's code."""

from __future__ import annotations

import subprocess

from suite.run import env


def _git(root, *args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True, capture_output=True
    )


def _repo(tmp_path):
    for path in ("suite/__init__.py", "variants/catalog/__init__.py", "README.md"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    (tmp_path / ".gitignore").write_text("__pycache__/\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "start")
    return tmp_path


def test_a_clean_checkout_is_its_commit(tmp_path):
    root = _repo(tmp_path)
    (root / "variants/catalog/__pycache__").mkdir()
    (root / "variants/catalog/__pycache__/x.pyc").write_text("")  # ignored: not code git would keep
    (root / "notes.txt").write_text("")  # outside the packages a run imports
    commit = env._git_commit(root)
    assert commit and not commit.endswith("-dirty")


def test_an_untracked_module_in_the_imported_packages_makes_the_commit_dirty(tmp_path):
    root = _repo(tmp_path)
    (root / "variants/catalog/planted.py").write_text("import os\n")
    assert env._git_commit(root).endswith("-dirty")


def test_an_edited_tracked_file_makes_the_commit_dirty(tmp_path):
    root = _repo(tmp_path)
    (root / "README.md").write_text("changed\n")
    assert env._git_commit(root).endswith("-dirty")


def test_the_checkout_is_where_the_packages_are():
    assert (env.ROOT / "suite" / "run" / "env.py").is_file() and (env.ROOT / "variants").is_dir()
