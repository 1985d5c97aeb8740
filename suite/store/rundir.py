"""The run folder: the one place that knows its file names, the baseline layout, and valid names.

    results/NAME/plan.json      the cases and settings (written before any case runs)
                 env.json       the environment and its fingerprint
                 probe.json     the device's measured matmul peak
                 bandwidth.json the device's measured memory bandwidth (STREAM copy and triad)
                 journal.jsonl  one Row per finished (case, process), fsynced
                 worker.log     what the workers printed
                 ab.jsonl       `suite ab`: one line per timed block (side, pair, position, row)
                 ab.parquet, ab.csv, compare.md, compare.json   its table and its decision
                 results.parquet, results.csv   the long-form table
    results/baselines/FINGERPRINT/GRID/        a saved run (table, env, plan, probe, baseline.json)

A name that becomes a path (run id, grid name, fingerprint) is checked first: letters, digits,
'.', '_' and '-', not starting with '.' or '-', so nothing can be written outside the results folder.
Every file is written whole or not at all (suite.store.atomic); a file that cannot be read is a
UsageError naming it (exit 2), and a symbolic link inside a run folder is refused, never followed.
The table is rebuilt from the journal whenever it is older than the journal, holds fewer of its bytes
(recorded in the table: `table.built_from`), or is unreadable.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from suite.errors import UsageError, check_name
from suite.store import atomic, lock, shapes, table
from suite.store.journal import Journal

BASELINES = "baselines"


class RunDir:
    PLAN, ENV, PROBE, JOURNAL, LOG = "plan.json", "env.json", "probe.json", "journal.jsonl", "worker.log"
    PARQUET, CSV, BASELINE = "results.parquet", "results.csv", "baseline.json"
    AB_JOURNAL, AB_PARQUET, AB_CSV = "ab.jsonl", "ab.parquet", "ab.csv"
    LADDERS = "ladders.json"  # adaptive lengths: where each series stopped, and why (suite.run.climb)
    BANDWIDTH = "bandwidth.json"  # per device: the bandwidth probe (suite.machine.stream); absent in older runs
    SAVED = (PARQUET, CSV, ENV, PLAN, PROBE, BANDWIDTH, LADDERS)  # what a baseline keeps and a report copies
    SHAPES = {
        ENV: shapes.ENV,
        PROBE: shapes.PROBE,
        BANDWIDTH: shapes.BANDWIDTH,
        LADDERS: shapes.LADDERS,
        BASELINE: shapes.BASELINE,
        PLAN: shapes.PLAN,
    }  # what each JSON file holds (plan.json's cases and
    # settings: suite.run.runner.load)

    def __init__(self, path: Path):
        self.path = Path(path)

    @property
    def name(self) -> str:
        return self.path.name

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # ------------------------------------------------------------------ finding runs
    @classmethod
    def new(cls, results_dir: Path, run_id: str) -> "RunDir":
        run = cls(Path(results_dir) / check_name("--run-id", run_id))
        if run.path.exists():
            raise UsageError(f"--run-id {run_id!r}: {run.path} exists (use --resume {run_id} to finish it)")
        return run

    @classmethod
    def started(cls, results_dir: Path, run_id: str) -> "RunDir":
        """A run to resume: it must have its plan."""
        run = cls(Path(results_dir) / check_name("--resume", run_id))
        if not (run.path / cls.PLAN).is_file():
            raise UsageError(f"--resume {run_id}: no {run.path / cls.PLAN} (was the run started here?)")
        return run

    @classmethod
    def resolve(cls, ref: str, results_dir: Path, like: "RunDir | None" = None) -> "RunDir":
        """A finished run from a name under results_dir, a folder, or `baseline` (the saved baseline
        of `like`'s fingerprint and grid). UsageError names what exists. A command reads it with `reading`,
        which holds its lock too."""
        run = cls.locate(ref, results_dir, like)
        run.finish(ref, results_dir)
        return run

    @classmethod
    def locate(cls, ref: str, results_dir: Path, like: "RunDir | None" = None) -> "RunDir":
        """The folder `ref` names (as `resolve`), nothing in it read but a baseline's name."""
        results_dir = Path(results_dir)
        if ref == "baseline":
            if like is None:
                raise UsageError("`baseline` can only stand for BASE, beside a NEW run")
            run = cls(baseline_path(results_dir, like.env().get("fingerprint_id"), like.plan().get("grid")))
            _restore(run.path)
            if not run.has_results():
                raise UsageError(
                    f"no baseline for fingerprint {like.env().get('fingerprint_id')} and grid "
                    f"{like.plan().get('grid')} in {run.path.parent} (save one: python -m suite baseline save RUN)"
                )
            return run
        if Path(ref).is_dir():
            run = cls(Path(ref).resolve())  # NB: resolved, so `x/..` is named for the folder it is
            check_name("run folder", run.name)
            return run
        return cls(results_dir / check_name("run", ref))

    def finish(self, ref: str, results_dir: Path) -> None:
        """The run's table, rebuilt from its journal where it is stale; UsageError naming the runs in
        results_dir where it has none."""
        if (self.path / self.PLAN).is_file() and ((self.path / self.JOURNAL).is_file() or not self.has_results()):
            why = self.stale_table()
            if why:
                self.table_from_journal(why)  # stopped before its table, or measured more since: nothing is lost
            else:
                self.warn_unreadable()
        if not self.has_results():
            known = sorted(p.parent.name for p in Path(results_dir).glob(f"*/{self.PARQUET}"))
            raise UsageError(
                f"run {ref!r}: no {self.path / self.PARQUET} (runs in {results_dir}/: {', '.join(known) or 'none'})"
            )

    # ------------------------------------------------------------------ files
    def file(self, name: str) -> Path:
        """The path of one of the run's files; UsageError where it is a symbolic link."""
        path = self.path / name
        if path.is_symlink():
            raise atomic.link_refused(path)
        return path

    def read_json(self, name: str) -> dict:
        """A JSON object file of the run ({} where it is absent); UsageError naming the file and what is
        wrong where it cannot be read."""
        path = self.file(name)
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_bytes().decode())
        except (UnicodeDecodeError, ValueError, RecursionError) as err:  # NB: [[[… nested past the stack
            raise damaged(path, err) from None
        wrong = shapes.mismatch(data, self.SHAPES.get(name, dict))
        if wrong:
            raise damaged(path, wrong)
        return data

    def write_json(self, name: str, payload: dict) -> Path:
        return atomic.write_text(self.path / name, json.dumps(payload, indent=1))

    def plan(self) -> dict:
        return self.read_json(self.PLAN)

    def env(self) -> dict:
        return self.read_json(self.ENV)

    def probe(self) -> dict:
        return self.read_json(self.PROBE)

    def bandwidth(self) -> dict:
        return self.read_json(self.BANDWIDTH)

    @property
    def journal(self) -> Journal:
        return Journal(self.file(self.JOURNAL))

    @property
    def log_path(self) -> Path:
        return self.file(self.LOG)

    def has_results(self) -> bool:
        return self.file(self.PARQUET).is_file()

    def cases(self) -> list:
        """The planned cases (plan.json); UsageError naming the case and field where one is damaged."""
        from suite.plan.case import Case

        plan = self.plan()
        keys = plan.get("cases")
        if not isinstance(keys, list):
            raise damaged(self.path / self.PLAN, "no list of `cases`")
        out = []
        for i, key in enumerate(keys):
            try:
                out.append(Case.from_key(key))
            except (TypeError, ValueError) as err:
                raise damaged(self.path / self.PLAN, f"cases[{i}]: {err}") from None
        return out

    def stale_table(self) -> str | None:
        """Why the table does not hold the journal (None where it does): missing (a run killed before
        writing it), older than the journal or built from fewer of its bytes (measured more since; the
        times alone miss it where they are equal, as on a file system that keeps whole seconds), or
        unreadable (cut)."""
        parquet, journal = self.file(self.PARQUET), self.file(self.JOURNAL)
        if not parquet.is_file():
            return "stopped before writing its table"
        built = table.built_from(parquet)  # NB: None for a table written before it was recorded: the times alone
        if journal.is_file() and (
            journal.stat().st_mtime_ns > parquet.stat().st_mtime_ns
            or (built is not None and journal.stat().st_size > built)
        ):
            return "measured more after its table was written"
        if not table.readable(parquet):
            return "has a table that cannot be read"
        return None

    def warn_unreadable(self, problems: list[str] | None = None) -> int:
        """Name every journal line that cannot be read, on stderr, with their count; returns the count."""
        problems = self.journal.read().problems if problems is None else problems
        for problem in problems:
            print(f"warning: {problem}", file=sys.stderr)
        if problems:
            print(
                f"warning: {len(problems)} line(s) of {self.path / self.JOURNAL} could not be read; the table "
                "holds the rest",
                file=sys.stderr,
            )
        return len(problems)

    def table_from_journal(self, why: str = "stopped before writing its table") -> list[Path]:
        """The table of every planned case from the journal alone, for a run whose table is missing,
        unreadable or older than its journal (cases without a row are `not_run`). Says so on stderr,
        with every journal line it could not read."""
        cases = self.cases()
        read = self.journal.read()
        self.warn_unreadable(read.problems)
        measured = len({r.case_id for r in read.rows} & {c.case_id for c in cases})
        held = self._measured_in_table()
        if held > measured:  # a journal cut or replaced after its table was written: the table is kept
            print(
                f"warning: run {self.name} {why}, but its journal holds {measured} measured cases and its table "
                f"{held}: the table is kept as it is",
                file=sys.stderr,
            )
            return []
        print(
            f"note: run {self.name} {why}; its table is written from its journal "
            f"({measured} of {len(cases)} cases measured)",
            file=sys.stderr,
        )
        try:
            return self.write_table(table.table(cases, read.rows), read.size)
        except OSError as err:
            raise UsageError(
                f"run {self.name}: its table cannot be written in {self.path} ({err.strerror or err}; "
                "allowed: a run folder this user can write: copy it somewhere writable)"
            ) from None

    def _measured_in_table(self) -> int:
        """Cases the table on disk holds as measured (any status but `not_run`); 0 where it cannot be read."""
        parquet = self.file(self.PARQUET)
        if not parquet.is_file() or not table.readable(parquet):
            return 0
        try:
            return int((self.read_table()["status"] != "not_run").sum())
        except UsageError:
            return 0

    def read_table(self) -> pd.DataFrame:
        path = self.file(self.PARQUET)
        try:
            return table.read(path)
        except Exception as err:  # NB: pyarrow raises its own kinds (ArrowInvalid, OSError) for a cut file
            raise damaged(path, f"{type(err).__name__}: {err}") from None

    def write_table(self, frame: pd.DataFrame, journal_bytes: int | None = None) -> list[Path]:
        """The table, recording the journal's size it holds (`journal_bytes`, or the journal's now)."""
        if journal_bytes is None:
            journal = self.file(self.JOURNAL)
            journal_bytes = journal.stat().st_size if journal.is_file() else 0
        return table.write(frame, self.path / self.PARQUET, self.path / self.CSV, journal_bytes)

    def ab_lines(self) -> tuple[list[dict], list[str]]:
        """`suite ab`'s journal: its blocks as objects, and a problem per unreadable line."""
        lines, problems = Journal(self.file(self.AB_JOURNAL)).lines()
        return [data for _, data in lines], problems

    def write_ab_table(self, frame: pd.DataFrame) -> None:
        with atomic.replacing(self.path / self.AB_PARQUET) as tmp:
            frame.to_parquet(tmp, index=False)
        with atomic.replacing(self.path / self.AB_CSV) as tmp:
            frame.drop(columns=["samples"], errors="ignore").to_csv(tmp, index=False)

    def copy_to(self, target: Path, names=SAVED) -> None:
        """Copy these files (those the run has) into `target`, each written whole; links refused."""
        for name in names:
            if self.file(name).is_file():
                atomic.write_bytes(Path(target) / name, (self.path / name).read_bytes())


def damaged(path: Path, what: object) -> UsageError:
    """The error for a file the suite cannot read: which file, what is wrong, what to do."""
    return UsageError(
        f"{path} cannot be read: {what} (a damaged or foreign file: restore it, or remove the "
        "run and measure again; a run's journal.jsonl rebuilds its table)"
    )


@contextmanager
def reading(ref: str, results_dir: Path, command: str, like: RunDir | None = None):
    """The finished run `ref` names (RunDir.resolve), its lock held shared for the block (lock.reading):
    a run being measured is refused, naming its process, before anything in it is read or rebuilt, and
    no `run --resume` starts on it while `command` reads it."""
    run = RunDir.locate(ref, results_dir, like)
    with lock.reading(run.path, command):
        run.finish(ref, results_dir)
        yield run


# ---------------------------------------------------------------------- baselines
def baseline_path(results_dir: Path, fingerprint_id: object, grid: object) -> Path:
    return (
        Path(results_dir)
        / BASELINES
        / check_name("env.json fingerprint_id", fingerprint_id)
        / check_name("plan.json grid", grid)
    )


def save_baseline(run: RunDir, results_dir: Path, force: bool = False) -> Path:
    """Copy the run to the baseline of its fingerprint and grid. Refuses a baseline as its source, a
    run with nothing measured, and an existing baseline unless `force`. The new baseline is written
    whole beside the old one, then put in its place (`_swap`): a save stopped at any step leaves the
    old baseline or the new one, and what it left beside them is undone by the next save (`_recover`)."""
    if run.file(RunDir.BASELINE).exists() or (Path(results_dir) / BASELINES).resolve() in run.path.resolve().parents:
        raise UsageError(f"baseline save {run.path}: that is a saved baseline, not a run")
    env, plan = run.env(), run.plan()
    target = baseline_path(results_dir, env.get("fingerprint_id"), plan.get("grid"))
    measured = run.read_table()["status"].isin(["ok"]).sum()
    if not measured:
        raise UsageError(f"baseline save {run.name}: no case of it measured ok: nothing to compare against")
    target.parent.mkdir(parents=True, exist_ok=True)
    _recover(target)
    if target.exists() and not force:
        raise UsageError(
            f"baseline save {run.name}: {target} exists (from run "
            f"{RunDir(target).read_json(RunDir.BASELINE).get('run')}); --force replaces it"
        )
    fresh = Path(tempfile.mkdtemp(prefix=f".{target.name}.new.", dir=target.parent))
    try:
        run.copy_to(fresh)
        atomic.write_text(
            fresh / RunDir.BASELINE,
            json.dumps(
                {
                    "run": run.name,
                    "git_commit": env.get("git_commit"),
                    "fingerprint_id": env.get("fingerprint_id"),
                    "grid": plan.get("grid"),
                    "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                },
                indent=1,
            ),
        )
        _swap(fresh, target)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)  # the new one where it was not swapped in, else the old one
    return target


def _swap(fresh: Path, target: Path) -> None:
    """`fresh` becomes `target`. Where the system can, the two are exchanged in one step (the old one is
    then at `fresh`); elsewhere the old one is renamed aside first, put back if `fresh` does not take
    its place, and removed only after."""
    if target.exists() and atomic.exchange(fresh, target):
        atomic.sync_dir(target.parent)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
    try:
        if target.exists():
            os.replace(target, old / target.name)
        os.replace(fresh, target)
        atomic.sync_dir(target.parent)
    finally:
        _restore(target)  # NB: only where the new one is not in place
        shutil.rmtree(old, ignore_errors=True)


def _restore(target: Path) -> None:
    """A baseline that a stopped save renamed aside (`.NAME.old.*/NAME`) and never replaced goes back."""
    if target.exists():
        return
    aside = [
        old / target.name
        for old in target.parent.glob(f".{target.name}.old.*")
        if (old / target.name / RunDir.BASELINE).is_file()
    ]
    if aside:
        os.rename(max(aside, key=lambda path: path.stat().st_mtime_ns), target)
        atomic.sync_dir(target.parent)


def _recover(target: Path) -> None:
    """Undo what a stopped save left: the baseline it renamed aside goes back, then every folder it
    worked in beside the baseline (`.NAME.new.*`, `.NAME.old.*`) goes."""
    _restore(target)
    if target.exists():
        for left in [*target.parent.glob(f".{target.name}.new.*"), *target.parent.glob(f".{target.name}.old.*")]:
            shutil.rmtree(left, ignore_errors=True)


def baselines(results_dir: Path) -> list[tuple[Path, dict]]:
    """Every saved baseline (FINGERPRINT/GRID, its baseline.json). One that a stopped save renamed aside
    is put back first; the hidden folders a save works in are never listed."""
    root = Path(results_dir) / BASELINES
    for aside in root.glob("*/.*.old.*/*"):
        _restore(aside.parent.parent / aside.name)
    return [
        (path.parent.relative_to(root), RunDir(path.parent).read_json(RunDir.BASELINE))
        for path in sorted(root.glob(f"*/*/{RunDir.BASELINE}"))
        if not any(part.startswith(".") for part in path.parent.relative_to(root).parts)
    ]
