"""Join shard runs of one grid into one run: the journal rows as measured, the grid's order, one table.

Refuses, with the reason, shards of different grids or settings, from environments with different
fingerprints, or from different commits of the code, and shards that overlap (a case in more than one of
them: shards of different splits, or one shard given twice); reports every journal line it cannot read.
The merged run is written in a hidden folder beside its target and renamed into place whole: a merge
stopped at any step leaves no run under the target's name, and the next merge removes what it left.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from suite.errors import UsageError
from suite.plan.case import Case
from suite.store import atomic, lock, table
from suite.store.rundir import RunDir


@dataclass
class Merged:
    run: RunDir
    cases: int
    counts: Counter
    missing: int  # cases of the grid in no shard given
    problems: list[str] = field(default_factory=list)  # journal lines that could not be read


def check_mergeable(plans: list[dict], envs: list[dict], names: list[str]) -> None:
    """UsageError unless the runs are shards of one grid, measured in one environment by one commit of
    the code (that no case is in two of them: `check_disjoint`)."""
    first, env0 = plans[0], envs[0]
    for plan, env, name in zip(plans, envs, names):
        if plan.get("grid_id", None) != first.get("grid_id") or plan.get("grid") != first.get("grid"):
            raise UsageError(
                f"{name} is from grid {plan.get('grid')!r} ({plan.get('grid_id')}), "
                f"{names[0]} from {first.get('grid')!r} ({first.get('grid_id')}): not shards of one grid"
            )
        if plan.get("settings") != first.get("settings"):
            raise UsageError(f"{name} was measured with other settings than {names[0]}")
        if env.get("fingerprint_id") != env0.get("fingerprint_id"):
            raise UsageError(
                f"{name} ran in environment {env.get('fingerprint_id')} ({env.get('cpu_model')}, "
                f"{env.get('cuda_device')}), {names[0]} in {env0.get('fingerprint_id')}: "
                "timings from different machines are not one run"
            )
        if env.get("git_commit") != env0.get("git_commit"):
            raise UsageError(
                f"{name} was measured by commit {env.get('git_commit')}, {names[0]} by "
                f"{env0.get('git_commit')}: timings of different code are not one run"
            )


def check_disjoint(cases: list[list[Case]], names: list[str]) -> None:
    """UsageError naming a few of the cases more than one shard holds, their count, and the shards that
    hold them: a merged run holds each case once, and which shard's rows to keep is no rule."""
    holders: dict[str, list[str]] = {}
    for shard_cases, name in zip(cases, names):
        for case_id in dict.fromkeys(case.case_id for case in shard_cases):
            holders.setdefault(case_id, []).append(name)
    twice = {case_id: held for case_id, held in holders.items() if len(held) > 1}
    if twice:
        shards = sorted({name for held in twice.values() for name in held}, key=names.index)
        few = ", ".join(f"{case_id} (in {', '.join(held)})" for case_id, held in list(twice.items())[:3])
        raise UsageError(
            f"the shards overlap: {len(twice)} case(s) are in more than one shard (held by "
            f"{', '.join(shards)}): {few}{', ...' if len(twice) > 3 else ''} (allowed: shards of one "
            "--shard K/N split, each given once)"
        )


def merged_plan(plans: list[dict], names: list[str]) -> dict:
    """The merged run's plan: the shards' cases in the grid's order (kept by each shard's plan), then
    the lengths each shard's ladders added (adaptive lengths), and every shard's ladders."""
    first = plans[0]
    seen, indexed, grid_cases, ladders = set(), [], 0, []
    for s, plan in enumerate(plans):
        index = list(plan.get("grid_index") or range(len(plan["cases"])))
        index += [float("inf")] * (len(plan["cases"]) - len(index))  # climbed lengths: after the grid's
        grid_cases += sum(1 for i in index if i != float("inf"))
        ladders += plan.get("ladders", [])
        for i, key in zip(index, plan["cases"]):
            case_id = Case.from_key(key).case_id
            if case_id not in seen:
                seen.add(case_id)
                indexed.append(((i, s), key))
    cases = [key for _, key in sorted(indexed, key=lambda pair: pair[0])]
    total = first.get("grid_cases")
    return {
        **{k: v for k, v in first.items() if k not in ("cases", "shard", "ladders")},
        "cases": cases,
        "ladders": ladders,
        "grid_cases_held": grid_cases,
        "merged_from": names,
        "shards": [plan.get("shard") for plan in plans],
        "complete": total is not None and grid_cases == total,
    }


def merge(shards: list[RunDir], target: RunDir) -> Merged:
    """Write `target` from the shard runs (checked first); nothing is written when they do not fit, and
    the target appears whole or not at all."""
    plans, envs = [s.plan() for s in shards], [s.env() for s in shards]
    names = [s.name for s in shards]
    check_mergeable(plans, envs, names)
    if target.path.exists():
        raise UsageError(f"--run-id {target.name!r}: {target.path} exists")
    check_disjoint([shard.cases() for shard in shards], names)  # NB: every shard's plan is read whole first
    plan = merged_plan(plans, names)
    cases = [Case.from_key(key) for key in plan["cases"]]
    climbed = [record for shard in shards for record in shard.read_json(RunDir.LADDERS).get("ladders", [])]
    wanted, problems, rows = {c.case_id for c in cases}, [], []
    for shard in shards:
        read = shard.journal.read()
        problems += [f"{shard.name}: {p}" for p in read.problems]
        rows += [row for row in read.rows if row.case_id in wanted]
    env = {**envs[0], "merged_from": {s.name: e.get("git_commit") for s, e in zip(shards, envs)}}
    with _writing(target.path) as folder:
        _write(RunDir(folder), shards, plan, env, climbed, cases, rows)
    counts = Counter(status for case_id, status in table.statuses(rows).items() if case_id in wanted)
    held = plan["grid_cases_held"]
    return Merged(target, len(cases), counts, plan.get("grid_cases", held) - held, problems)


def _write(
    run: RunDir, shards: list[RunDir], plan: dict, env: dict, climbed: list, cases: list[Case], rows: list
) -> None:
    """The merged run's files, into `run` (the hidden folder that becomes the target)."""
    run.write_json(RunDir.PLAN, plan)
    run.write_json(RunDir.ENV, env)
    shards[0].copy_to(run.path, (RunDir.PROBE, RunDir.BANDWIDTH))
    _merge_gathers(run, shards)
    if climbed:
        run.write_json(RunDir.LADDERS, {"ladders": climbed})
    journal = run.journal
    for row in rows:
        journal.append(row)
    run.write_table(table.table(cases, rows))


PARTIAL = ".{name}.merging."  # the hidden folder a merge writes in, beside its target


@contextmanager
def _writing(target: Path):
    """A hidden folder beside `target`, locked for the block (lock.held), renamed to `target` when the
    block ends without an error, removed when it ends with one. Folders that stopped merges left for
    this target (their lock no longer held) are removed first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _sweep(target)
    folder = Path(tempfile.mkdtemp(prefix=PARTIAL.format(name=target.name), dir=target.parent))
    try:
        os.chmod(folder, 0o755)  # NB: mkdtemp's 0700 would make the run unreadable to others
        with lock.held(folder):
            yield folder
            atomic.sync_dir(folder)
            try:
                atomic.rename_new(folder, target)
            except FileExistsError:  # NB: made while this merge wrote, by another
                raise UsageError(f"--run-id {target.name!r}: {target} exists") from None
        atomic.sync_dir(target.parent)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _sweep(target: Path) -> None:
    """Remove what merges stopped by a kill left beside `target`: their folders whose lock nobody holds
    (a folder without its lock file yet may be a merge starting now, and is left)."""
    for left in target.parent.glob(PARTIAL.format(name=target.name) + "*"):
        if (left / lock.NAME).is_file() and lock.holder(left) is None:
            shutil.rmtree(left, ignore_errors=True)


def _merge_gathers(target: RunDir, shards: list[RunDir]) -> None:
    """Each device's gather probe from every shard that took one (suite.machine.gathers.fastest), not shard 0's
    alone: the shard that held the random gathers' cases took it, to its own longest."""
    from suite.machine.gathers import fastest

    found, each = target.bandwidth(), [shard.bandwidth() for shard in shards]
    for device in sorted({device for b in each for device in b}):
        rate = fastest([(b.get(device) or {}).get("gathers") for b in each])
        if "ns_per_pair" in rate:
            found.setdefault(device, {})["gathers"] = rate
    if found:
        target.write_json(RunDir.BANDWIDTH, found)
