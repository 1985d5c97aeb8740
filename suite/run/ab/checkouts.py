"""The two sides of `suite ab`: a git commit checked out into a worktree, or a folder as it is.

A side is a commit-ish that git resolves in the repository, unless the user names a folder for it on the
command line (`--base-dir`, `--new-dir`): a value read from data (a history's commit) or a name that
happens to be a folder never picks the code that runs. A side's worker runs with its checkout as working
directory, so `python -m suite.run.ab.server` imports that checkout's `suite` and `variants` (a folder
without them, e.g. a folder of plugins, falls back to the installed package).

Worktrees are made under a temporary folder and removed after. Each is locked with its owner process
(id, start time, host), so one whose owner was killed (SIGKILL runs no `finally`) is removed, with its
temporary folder, by the next command that makes a worktree in the repository.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

from suite.errors import UsageError

REF_RULE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/@^~{}-]{0,199}$")
PREFIXES = ("suite-ab-", "suite-commit-")  # of the temporary folders worktrees are made in
OWNER = re.compile(r"^suite pid (\d+) started (\d+(?:\.\d+)?) on (\S+)$")  # a worktree's lock reason


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


def resolve(field: str, given: str, repo: Path, hint: str = "") -> str:
    """The full hash of commit-ish `given` of `repo`; else exit 2 (`hint`: added to what is allowed). Never a
    folder, whatever folders exist."""
    if not REF_RULE.match(given) or ".." in given:
        raise UsageError(
            f"ab: field '{field}' = {given!r} (allowed: a git commit-ish of this repository: letters, "
            f"digits and ._/@^~{{}}- , not starting with '-', no '..'{hint})"
        )
    res = _git("rev-parse", "--verify", "--quiet", f"{given}^{{commit}}", cwd=repo)
    if res.returncode != 0:
        raise UsageError(
            f"ab: field '{field}' = {given!r} (allowed: a commit-ish that `git rev-parse` resolves in "
            f"{repo}: it does not{hint})"
        )
    return res.stdout.strip()


def folder(option: str, given: str) -> Path:
    """A folder the user named as a side (`option`: --base-dir, --new-dir), as an absolute path; else exit 2."""
    path = Path(given)
    if not path.is_dir():
        raise UsageError(
            f"ab: {option} {given!r}: no such folder (allowed: a folder whose code runs as the side, "
            "e.g. . for the working tree)"
        )
    return path.resolve()


def chosen(
    base: str | None, new: str | None, base_dir: str | None, new_dir: str | None, repo: Path
) -> tuple[str | Path, str | Path]:
    """`suite ab`'s two sides: a folder (a Path) where its option names one, else the next commit-ish of
    BASE NEW in order (a str, checked to resolve in `repo`); exit 2 unless that makes exactly two sides."""
    commits = [given for given in (base, new) if given is not None]
    dirs = (("base", base_dir), ("new", new_dir))
    if len(commits) != sum(given is None for _, given in dirs):
        raise UsageError(
            f"ab: BASE NEW = {commits!r} with --base-dir {base_dir!r}, --new-dir {new_dir!r} (allowed: "
            "two sides in all: BASE NEW, --base-dir PATH NEW, BASE --new-dir PATH, or "
            "--base-dir PATH --new-dir PATH)"
        )
    rest, out = iter(commits), []
    for field, given in dirs:
        if given is None:
            out.append(next(rest))
            resolve(field, out[-1], repo, hint=f"; a folder only with --{field}-dir PATH")
        else:
            out.append(folder(f"--{field}-dir", given))
    return out[0], out[1]


def _target(field: str, given: str | Path, repo: Path) -> tuple[Path | None, str | None]:
    """(folder, None) for a Path (a folder the user named); (None, full hash) for a str (a commit-ish)."""
    return (given, None) if isinstance(given, Path) else (None, resolve(field, given, repo))


def _owner() -> str:
    me = psutil.Process()
    return f"suite pid {me.pid} started {me.create_time():.2f} on {socket.gethostname()}"


def _dead(reason: str) -> bool:
    """Whether a lock `reason` names a process of this host that is gone (a process that reused its id
    started later)."""
    found = OWNER.match(reason)
    if not found or found[3] != socket.gethostname():
        return False
    try:
        proc = psutil.Process(int(found[1]))
        return proc.status() == psutil.STATUS_ZOMBIE or abs(proc.create_time() - float(found[2])) > 1
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:
        return False


def _stale(repo: Path) -> list[Path]:
    """The worktrees of `repo` this module made in a temporary folder whose owner process is gone."""
    tmp = Path(os.path.realpath(tempfile.gettempdir()))
    out, path = [], None
    for line in _git("worktree", "list", "--porcelain", cwd=repo).stdout.splitlines():
        if line.startswith("worktree "):
            path = Path(os.path.realpath(line[len("worktree ") :]))
        elif (
            line.startswith("locked ")
            and path is not None
            and path.parent.parent == tmp
            and path.parent.name.startswith(PREFIXES)
            and _dead(line[len("locked ") :])
        ):
            out.append(path)
    return out


def prune(repo: Path) -> None:
    """Remove the worktrees (and their temporary folders) an earlier command made and, killed, could not
    remove; then drop the registrations whose folders are gone."""
    for path in _stale(repo):
        _remove(path, repo)
        shutil.rmtree(path.parent, ignore_errors=True)
    _git("worktree", "prune", cwd=repo)


def _add(directory: Path, commit: str, repo: Path) -> subprocess.CompletedProcess:
    """`commit` checked out at `directory`, locked with this process as its owner (`prune` keeps it while
    the process lives; `git worktree prune` never drops it)."""
    return _git("worktree", "add", "--detach", "--lock", "--reason", _owner(), str(directory), commit, cwd=repo)


def _remove(directory: Path, repo: Path) -> None:
    _git("worktree", "remove", "--force", "--force", str(directory), cwd=repo)  # twice: it is locked


@contextmanager
def checked_out(base: str | Path, new: str | Path, repo: Path):
    """Yield (side a, side b): a Path is a folder the user named, used as it is; a str is a commit-ish of
    `repo`, checked out into a worktree that is removed afterwards, whatever happens."""
    targets = [("a", "base", base), ("b", "new", new)]
    resolved = [(label, str(given), *_target(field, given, repo)) for label, field, given in targets]
    made: list[Path] = []
    if any(commit for *_, commit in resolved):
        prune(repo)
    with tempfile.TemporaryDirectory(prefix=PREFIXES[0]) as tmp:
        try:
            sides = []
            for label, given, directory, commit in resolved:
                if directory is None:
                    directory = Path(tmp) / label
                    res = _add(directory, commit, repo)
                    if res.returncode != 0:
                        raise UsageError(f"ab: cannot check out {given!r} ({commit[:12]}): {res.stderr.strip()}")
                    made.append(directory)
                sides.append(Side(label, given, directory, commit or _commit_of(directory)))
            yield sides[0], sides[1]
        finally:
            for directory in made:
                _remove(directory, repo)
            if made:
                _git("worktree", "prune", cwd=repo)


@contextmanager
def worktree(commit: str, repo: Path):
    """One commit (a full hash `resolve` gave) checked out into a temporary worktree, removed afterwards
    whatever happens (`history backfill` measures each commit of a range in one)."""
    prune(repo)
    with tempfile.TemporaryDirectory(prefix=PREFIXES[1]) as tmp:
        directory = Path(tmp) / commit[:12]
        res = _add(directory, commit, repo)
        if res.returncode != 0:
            raise UsageError(f"cannot check out {commit[:12]}: {res.stderr.strip()}")
        try:
            yield directory
        finally:
            _remove(directory, repo)
            _git("worktree", "prune", cwd=repo)
