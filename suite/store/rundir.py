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
'.', '_' and '-', not starting with '.', so nothing can be written outside the results folder.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pandas as pd

from suite.errors import UsageError, check_name
from suite.store import table
from suite.store.journal import Journal

BASELINES = "baselines"


class RunDir:
    PLAN, ENV, PROBE, JOURNAL, LOG = "plan.json", "env.json", "probe.json", "journal.jsonl", "worker.log"
    PARQUET, CSV, BASELINE = "results.parquet", "results.csv", "baseline.json"
    AB_JOURNAL, AB_PARQUET, AB_CSV = "ab.jsonl", "ab.parquet", "ab.csv"
    LADDERS = "ladders.json"  # adaptive lengths: where each series stopped, and why (suite.run.climb)
    BANDWIDTH = "bandwidth.json"  # per device: the bandwidth probe (suite.run.stream); absent in older runs
    SAVED = (PARQUET, CSV, ENV, PLAN, PROBE, BANDWIDTH, LADDERS)  # what a baseline keeps and a report copies

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
        of `like`'s fingerprint and grid). UsageError names what exists."""
        results_dir = Path(results_dir)
        if ref == "baseline":
            if like is None:
                raise UsageError("`baseline` can only stand for BASE, beside a NEW run")
            run = cls(baseline_path(results_dir, like.env().get("fingerprint_id"), like.plan().get("grid")))
            if not run.has_results():
                raise UsageError(f"no baseline for fingerprint {like.env().get('fingerprint_id')} and grid "
                                 f"{like.plan().get('grid')} in {run.path.parent} (save one: python -m suite baseline save RUN)")
            return run
        run = cls(Path(ref)) if Path(ref).is_dir() else cls(results_dir / check_name("run", ref))
        if not run.has_results() and (run.path / cls.PLAN).is_file() and (run.path / cls.JOURNAL).is_file():
            run.table_from_journal()  # a run stopped (killed) before it wrote its table: nothing is lost
        if not run.has_results():
            known = sorted(p.parent.name for p in results_dir.glob(f"*/{cls.PARQUET}"))
            raise UsageError(f"run {ref!r}: no {run.path / cls.PARQUET} (runs in {results_dir}/: "
                             f"{', '.join(known) or 'none'})")
        return run

    # ------------------------------------------------------------------ files
    def read_json(self, name: str) -> dict:
        path = self.path / name
        return json.loads(path.read_text()) if path.is_file() else {}

    def write_json(self, name: str, payload: dict) -> Path:
        path = self.path / name
        path.write_text(json.dumps(payload, indent=1))
        return path

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
        return Journal(self.path / self.JOURNAL)

    @property
    def log_path(self) -> Path:
        return self.path / self.LOG

    def has_results(self) -> bool:
        return (self.path / self.PARQUET).is_file()

    def table_from_journal(self) -> list[Path]:
        """The table of every planned case from the journal alone, for a run stopped before it wrote one
        (cases without a row are `not_run`). Says so on stderr."""
        import sys

        from suite.plan.case import Case

        cases = [Case.from_key(key) for key in self.plan()["cases"]]
        rows = self.journal.read().rows
        print(f"note: run {self.name} stopped before writing its table; written from its journal "
              f"({len({r.case_id for r in rows})} of {len(cases)} cases measured)", file=sys.stderr)
        return self.write_table(table.table(cases, rows))

    def read_table(self) -> pd.DataFrame:
        return table.read(self.path / self.PARQUET)

    def write_table(self, frame: pd.DataFrame) -> list[Path]:
        return table.write(frame, self.path / self.PARQUET, self.path / self.CSV)

    def ab_lines(self) -> tuple[list[dict], list[str]]:
        """`suite ab`'s journal: its blocks as objects, and a problem per unreadable line."""
        lines, problems = Journal(self.path / self.AB_JOURNAL).lines()
        return [data for _, data in lines], problems

    def write_ab_table(self, frame: pd.DataFrame) -> None:
        frame.to_parquet(self.path / self.AB_PARQUET, index=False)
        frame.drop(columns=["samples"], errors="ignore").to_csv(self.path / self.AB_CSV, index=False)

    def copy_to(self, target: Path, names=SAVED) -> None:
        for name in names:
            if (self.path / name).is_file():
                shutil.copyfile(self.path / name, Path(target) / name)


# ---------------------------------------------------------------------- baselines
def baseline_path(results_dir: Path, fingerprint_id: object, grid: object) -> Path:
    return (Path(results_dir) / BASELINES / check_name("env.json fingerprint_id", fingerprint_id)
            / check_name("plan.json grid", grid))


def save_baseline(run: RunDir, results_dir: Path) -> Path:
    """Copy the run to the baseline of its fingerprint and grid (replacing the one there)."""
    env, plan = run.env(), run.plan()
    target = baseline_path(results_dir, env.get("fingerprint_id"), plan.get("grid"))
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    run.copy_to(target)
    (target / RunDir.BASELINE).write_text(json.dumps({
        "run": run.name, "git_commit": env.get("git_commit"), "fingerprint_id": env.get("fingerprint_id"),
        "grid": plan.get("grid"), "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=1))
    return target


def baselines(results_dir: Path) -> list[tuple[Path, dict]]:
    root = Path(results_dir) / BASELINES
    return [(path.parent.relative_to(root), json.loads(path.read_text()))
            for path in sorted(root.glob(f"*/*/{RunDir.BASELINE}"))]
