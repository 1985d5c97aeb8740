"""`history backfill A..B --grid G`: each commit of the range measured by its own code, and added.

Each commit is checked out into a temporary worktree (suite.run.ab.checkouts, as `suite ab` does) and runs
`python -m suite run` there, with the worktree as working directory and first on PYTHONPATH, so the
suite and the variants measured are that commit's. Runs are named `backfill-COMMIT-GRID` under
--results-dir; a commit whose run is there and finished is not measured again (a stopped backfill
goes on where it stopped). A commit whose run fails or stops is reported and skipped; the others are
added. `--paths variants suite` takes only the commits that changed those paths (a commit that changed
neither the suite nor the variants cannot change a time). The grid, where it is a file, is read by each checkout: give one those commits understand.

The commits are measured in a shuffled order by default (`--order shuffled`, seeded by `--seed`), so
a host that grows busier or quieter over the hours of a backfill drifts across the commits at random,
not along their order, where it would look like a change at some commit (docs/history.md: the
backfill of 19 commits found two such). The order and its seed are printed and appended to
`backfill-orders.jsonl` in --results-dir; each run's time in the history says when it was measured.
The history orders its points by commit whatever order they were measured in.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from suite.errors import UsageError, check_name
from suite.history import runs, store
from suite.run.ab import checkouts as sides
from suite.store import atomic
from suite.store.rundir import RunDir


def commits(spec: str, repo: Path, paths: list[str] = ()) -> list[str]:
    """The commits of `A..B`, oldest first (`git rev-list --reverse A..B [-- PATHS]`: with paths, those
    that changed them); UsageError naming the field."""
    parts = spec.split("..")
    if len(parts) != 2 or not all(parts):
        raise UsageError(f"history backfill: range {spec!r} (allowed: A..B, two commit-ishes of {repo})")
    ends = []
    for field, given in zip(("A", "B"), parts):
        found = (
            subprocess.run(
                ["git", "rev-parse", "--verify", "--quiet", f"{given}^{{commit}}"],
                cwd=repo,
                capture_output=True,
                text=True,
            )
            if sides.REF_RULE.match(given)
            else None
        )
        if found is None or found.returncode != 0:
            raise UsageError(
                f"history backfill: {field} = {given!r} in range {spec!r} (allowed: a commit-ish that "
                f"`git rev-parse` resolves in {repo}: letters, digits and ._/@^~{{}}- , not starting "
                "with '-')"
            )
        ends.append(found.stdout.strip())
    for path in paths:
        if path.startswith("-") or ".." in Path(path).parts or Path(path).is_absolute():
            raise UsageError(f"history backfill: --paths {path!r} (allowed: paths inside the repository)")
    out = subprocess.run(
        ["git", "rev-list", "--reverse", f"{ends[0]}..{ends[1]}", "--", *paths],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    found = out.stdout.split()
    if out.returncode != 0 or not found:
        raise UsageError(f"history backfill: range {spec!r} holds no commit in {repo} (A must be an ancestor of B)")
    return found


def _grid_argument(grid: str) -> str:
    """A grid file as an absolute path (each checkout runs in its own folder); a preset's name as it is."""
    return str(Path(grid).resolve()) if Path(grid).is_file() else grid


def _finished(folder: Path) -> bool:
    """Whether the folder holds a run whose every case has ended (runs.unfinished: as `history add` takes it)."""
    if not (folder / RunDir.PARQUET).is_file():
        return False
    try:
        return not runs.unfinished(RunDir(folder).read_table())
    except UsageError:
        return False


def measure(commit: str, args, results_dir: Path, name: str) -> Path:
    """Run the grid with `commit`'s own code; the run's folder (UsageError when it did not finish)."""
    folder = results_dir / name
    if _finished(folder):
        found = RunDir(folder).env().get("git_commit")
        if found != commit:
            raise UsageError(
                f"{folder} holds a finished run of commit {str(found)[:12]}, not of {commit[:12]} (allowed: "
                "the folder of this commit's run; move it aside to measure the commit again)"
            )
        return folder
    resume = (
        ["--resume", name]
        if (folder / RunDir.PLAN).is_file()
        else ["--grid", _grid_argument(args.grid), "--run-id", name]
    )
    extra = [
        *(["--device", ",".join(args.device)] if args.device and not resume[0] == "--resume" else []),
        *(["--variant", ",".join(args.variant)] if args.variant and not resume[0] == "--resume" else []),
    ]
    with sides.worktree(commit, Path(args.repo)) as root:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        }
        done = subprocess.run(
            [sys.executable, "-m", "suite", "run", *resume, *extra, "--results-dir", str(results_dir), "--no-report"],
            cwd=root,
            env=env,
        )
    if done.returncode != 0:
        raise UsageError(f"its run exited {done.returncode} (see {folder}/worker.log)")
    return folder


ORDERS = "backfill-orders.jsonl"  # under --results-dir: one line per backfill, the order it measured in


def ordered(chosen: list[str], order: str, seed: int) -> list[str]:
    """The commits in the order they are measured: as listed (sequential) or a seeded shuffle."""
    if order == "sequential":
        return list(chosen)
    if order != "shuffled":
        raise UsageError(f"history backfill: --order {order!r} (allowed: shuffled, sequential)")
    out = list(chosen)
    random.Random(seed).shuffle(out)
    return out


def _record(results_dir: Path, args, measured: list[str]) -> None:
    """Append the order measured in, with its seed, to ORDERS (the runs' own times say the same)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    line = {
        "range": args.range,
        "paths": args.paths or [],
        "grid": args.grid,
        "order": args.order,
        "seed": args.seed if args.order == "shuffled" else None,
        "commits": measured,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with open(results_dir / ORDERS, "a") as out:
        out.write(json.dumps(line) + "\n")


def checked(args) -> tuple[Path, Path]:
    """(repo, results_dir) once the arguments are known to be usable, before any commit is measured:
    the repository a folder, the grid a preset or a file, the database one (or a path where one can be
    made), and the results folder writable. UsageError naming the field."""
    from suite.plan.grid import PRESETS

    repo = Path(args.repo).resolve()
    if not repo.is_dir():
        raise UsageError(f"--repo {args.repo!r}: no such folder (allowed: a git repository's folder)")
    if args.grid not in PRESETS and not Path(args.grid).is_file():
        raise UsageError(
            f"--grid {args.grid!r}: no such preset or file (allowed: {', '.join(PRESETS)}, or a grid file)"
        )
    db = Path(args.db)
    if db.exists():
        with store.connected(db, read_only=True):
            pass
    else:
        atomic.check_target("--db", db, parents=True)
    results_dir = Path(args.results_dir).resolve()
    atomic.check_target("--results-dir", results_dir / ORDERS, parents=True)
    return repo, results_dir


def backfill(args) -> list[tuple[str, str]]:
    """Measure and add every commit of the range; (commit, why) of each one that could not be added."""
    repo, results_dir = checked(args)
    grid_name = check_name("--grid", Path(args.grid).stem)
    chosen = ordered(commits(args.range, repo, args.paths or []), args.order, args.seed)
    how = f"shuffled (seed {args.seed})" if args.order == "shuffled" else "sequential"
    print(
        f"history backfill: {len(chosen)} commits of {args.range}, grid {args.grid}, into {args.db}; measured in "
        f"{how} order: {' '.join(c[:12] for c in chosen)} (recorded in {results_dir / ORDERS})",
        file=sys.stderr,
    )
    _record(results_dir, args, chosen)
    failed = []
    for i, commit in enumerate(chosen, 1):
        name = f"backfill-{commit[:12]}-{grid_name}"
        print(f"[{i}/{len(chosen)}] {commit[:12]}: {name}", file=sys.stderr)
        try:
            folder = measure(commit, args, results_dir, name)
            added = store.add(Path(args.db), runs.load(str(folder), results_dir, repo))
            print(
                f"[{i}/{len(chosen)}] {commit[:12]}: {'added' if added else 'already in the history'}", file=sys.stderr
            )
        except UsageError as err:
            failed.append((commit, str(err)))
    return failed
