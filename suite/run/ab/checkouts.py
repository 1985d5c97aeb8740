"""The two sides of `suite ab`: a git commit checked out into a worktree, or a directory as it is.

A side's worker runs with its checkout as working directory, so `python -m suite.run.ab.server` imports
that checkout's `suite` and `variants` (a directory without them, e.g. a folder of plugins, falls
back to the installed package). Worktrees are made under a temporary folder and removed after.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from suite.errors import UsageError

REF_RULE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/@^~{}-]{0,199}$")


@dataclass(frozen=True)
class Side:
    label: str  # "a" (base) or "b" (new)
    given: str  # what the user wrote
    root: Path  # the worker's working directory
    commit: str | None  # the commit checked out there, where there is one


def _git(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def _commit_of(directory: Path) -> str | None:
    res = _git("rev-parse", "HEAD", cwd=directory)
    return res.stdout.strip() if res.returncode == 0 else None


def resolve(field: str, given: str, repo: Path) -> tuple[Path | None, str | None]:
    """(directory, None) for a directory; (None, commit) for a commit-ish of `repo`; else exit 2."""
    path = Path(given)
    if path.is_dir():
        return path.resolve(), None
    if not REF_RULE.match(given) or ".." in given:
        raise UsageError(f"ab: field '{field}' = {given!r} (allowed: a directory, or a git commit-ish of this "
                         "repository: letters, digits and ._/@^~{{}}- , not starting with '-', no '..')")
    res = _git("rev-parse", "--verify", "--quiet", f"{given}^{{commit}}", cwd=repo)
    if res.returncode != 0:
        raise UsageError(f"ab: field '{field}' = {given!r} (allowed: a directory, or a commit-ish that "
                         f"`git rev-parse` resolves in {repo}: it does not)")
    return None, res.stdout.strip()


@contextmanager
def checked_out(base: str, new: str, repo: Path):
    """Yield (side a, side b); worktrees made for commits are removed afterwards, whatever happens."""
    targets = [("a", "base", base), ("b", "new", new)]
    resolved = [(label, given, *resolve(field, given, repo)) for label, field, given in targets]
    made: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="suite-ab-") as tmp:
        try:
            sides = []
            for label, given, directory, commit in resolved:
                if directory is None:
                    directory = Path(tmp) / label
                    res = _git("worktree", "add", "--detach", str(directory), commit, cwd=repo)
                    if res.returncode != 0:
                        raise UsageError(f"ab: cannot check out {given!r} ({commit[:12]}): {res.stderr.strip()}")
                    made.append(directory)
                sides.append(Side(label, given, directory, commit or _commit_of(directory)))
            yield sides[0], sides[1]
        finally:
            for directory in made:
                _git("worktree", "remove", "--force", str(directory), cwd=repo)
            if made:
                _git("worktree", "prune", cwd=repo)


@contextmanager
def worktree(commit: str, repo: Path):
    """One commit (a full hash `resolve` gave) checked out into a temporary worktree, removed afterwards
    whatever happens (`history backfill` measures each commit of a range in one)."""
    with tempfile.TemporaryDirectory(prefix="suite-commit-") as tmp:
        directory = Path(tmp) / commit[:12]
        res = _git("worktree", "add", "--detach", str(directory), commit, cwd=repo)
        if res.returncode != 0:
            raise UsageError(f"cannot check out {commit[:12]}: {res.stderr.strip()}")
        try:
            yield directory
        finally:
            _git("worktree", "remove", "--force", str(directory), cwd=repo)
            _git("worktree", "prune", cwd=repo)
