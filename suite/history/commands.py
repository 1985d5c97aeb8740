"""The `history` command's actions: add, backfill, check, report (suite.cli maps UsageError to exit 2).

check's exit codes: 0 no series' newest points form a slowdown change point; 1 some do (each named,
with its size, interval and commit range), a case that ran before failed in the newest run, or the
host's level does (every case slower at once: the
host, or a commit that slowed everything) unless `--host-level warn`; a slowdown with no commit
between its two sides (the same code measured before and after it) is the machine's or the
environment's, and is a warning only; 2 it cannot judge (no database,
no series with enough points, several fingerprints and none chosen, a damaged file). A case is judged
against its run's level (suite.history.level) where that makes the cases' series quieter, raw
elsewhere (`--against`); the output's second line says which, and why. With `--confirm` a case's or a
series' slowdown (the screen's too: suite.history.changes) fails the check only where an interleaved A/B
of the commit before it against the newest run's calls it again (suite.history.confirm); one it does not
call is a warning. Without `--confirm` each slowdown that fails the check is printed, and summed up in
the last line, as suspected, not confirmed: a history alone cannot tell the host's drift from the code's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd

from suite.errors import UsageError, check_name
from suite.history import changes, store
from suite.store import atomic


def history(args) -> int:
    return {"add": add, "backfill": backfill, "check": check, "report": report}[args.action](args)


def add(args) -> int:
    from suite.history import runs

    run = runs.load(args.run, Path(args.results_dir), Path(args.repo), args.commit_time)
    added = store.add(Path(args.db), run, args.another_fingerprint)
    what = "added" if added else "already there, nothing added"
    print(
        f"history {args.db}: run {run.run_name} (commit {run.git_commit[:12]}, fingerprint {run.fingerprint_id}, "
        f"{len(run.cases)} cases, {len(run.exponents)} exponents): {what}"
    )
    return 0


def backfill(args) -> int:
    from suite.history import backfill as filling

    failed = filling.backfill(args)
    for commit, why in failed:
        print(f"warning: commit {commit[:12]} not added: {why}", file=sys.stderr)
    return 1 if failed else 0


def _load(args):
    """The database's runs, cases and exponents of one fingerprint (--fingerprint, or the only one)."""
    runs, cases, exponents = store.read(Path(args.db))
    prints = sorted(runs["fingerprint_id"].unique())
    if args.fingerprint is not None:
        check_name("--fingerprint", args.fingerprint)
        if args.fingerprint not in prints:
            raise UsageError(f"--fingerprint {args.fingerprint} (allowed: {', '.join(prints) or 'none: it is empty'})")
        chosen = args.fingerprint
    elif len(prints) > 1:
        raise UsageError(
            f"history {args.db} holds runs of {len(prints)} fingerprints ({', '.join(prints)}): their "
            "times are not one series; choose one with --fingerprint"
        )
    elif not prints:
        raise UsageError(f"history {args.db} holds no run (add one: python -m suite history add RUN)")
    else:
        chosen = prints[0]

    def mine(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[frame["fingerprint_id"] == chosen]

    return chosen, mine(runs), mine(cases), mine(exponents)


def _line(row) -> str:
    from suite.history.page import fmt_size

    what = {"time": f"time n={row['seq_len']:.0f}", "exponent": "exponent in n"}.get(
        row["kind"], "time, its lengths together"
    )
    step = f" (a step of its lengths {row['lengths']})" if row.get("rule") == "step" else ""
    return f"{row['series']}: {what} {fmt_size(row)} in {row['commits']}{step}"


def _regressions(bad: pd.DataFrame, confirmed: bool) -> list[str]:
    """The slowdowns that fail the check; without an A/B (`confirmed` False) each is suspected, not confirmed."""
    word = "stands after --confirm" if confirmed else "suspected, not confirmed"
    lines = [f"REGRESSION {_line(row)}: {word}" for _, row in bad.iterrows()]
    if lines and not confirmed:
        lines.append(
            f"{len(bad)} slowdowns suspected, not confirmed: a history alone cannot tell the host's drift "
            "from the code's; check --confirm --grid GRID times the commits on each side as an A/B"
        )
    return lines


def _host_lines(found: pd.DataFrame, fail: bool) -> tuple[list[str], bool]:
    """The host level's slowdowns: a regression (fails the check unless --host-level warn) or suspicious."""
    from suite.history.page import fmt_size

    mine = found[(found["kind"] == "level") & found["slower"]]
    new, machine = _by_commit(mine[(mine["class"] == "regression") & mine["newest"]])
    why = "every case slower at once: the host (busier) or a commit that slowed everything (e.g. a library upgrade)"
    lines = [
        f"{'HOST LEVEL REGRESSION' if fail else 'host level slower (warning only: --host-level warn)'} "
        f"{fmt_size(row)} in {row['commits']}: {why}"
        for _, row in new.iterrows()
    ]
    lines += [
        f"host level slower with no commit between (warning only) {fmt_size(row)} in {row['commits']}"
        for _, row in machine.iterrows()
    ]
    lines += [
        f"suspicious host level {fmt_size(row)} in {row['commits']}: {why}"
        for _, row in mine[mine["class"] == "suspicious"].iterrows()
    ]
    return lines, bool(len(new)) and fail


def _by_commit(changes: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The change points with a commit between their two sides, and those without (the same code
    measured before and after: the machine's or the environment's, never the code's)."""
    same = changes["before_commit"] == changes["after_commit"]
    return changes[~same], changes[same]


def _broken(runs: pd.DataFrame, cases: pd.DataFrame) -> list[str]:
    """The cases that did not run in the newest run (failed, out of memory, timed out) and ran in an earlier
    one: a time series cannot show them (its points are the runs that measured), and a commit that breaks
    a path is a regression."""
    if runs.empty:
        return []
    newest = runs["run_key"].iloc[-1]
    earlier = cases[(cases["run_key"] != newest) & (cases["status"] == "ok")].groupby("case_id").size()
    now = cases[(cases["run_key"] == newest) & (cases["status"] != "ok") & cases["case_id"].isin(earlier.index)]
    return [
        f"FAILED {row['series']} n={row['seq_len']}: {row['status']} in the newest run "
        f"({str(row['reason'] or 'no reason given')[:200]}); ok in {earlier[row['case_id']]} earlier runs"
        for _, row in now.sort_values(["series", "seq_len"]).iterrows()
    ]


def _confirming(args):
    """--confirm's grid, design and rule, checked before any work (None without --confirm)."""
    if not args.confirm:
        given = [
            name
            for name, value in (
                ("--grid", args.grid),
                ("--device", args.device),
                ("--pairs", args.pairs),
                ("--rounds", args.rounds),
                ("--plugin", args.plugin),
                ("--compile-cache", args.compile_cache),
            )
            if value
        ]
        if given:
            raise UsageError(f"{', '.join(given)}: only with --confirm (they say how its A/Bs run)")
        return None
    from suite.analyse.gate import Rule
    from suite.machine import compile_cache
    from suite.plan import grid as grids
    from suite.run import executors, plugins
    from suite.run.ab import session

    if not args.grid:
        raise UsageError(
            "--confirm needs --grid: the grid the history's runs were made with (its cases are re-measured)"
        )
    if not Path(args.repo).is_dir():
        raise UsageError(f"--repo {args.repo!r}: no such folder (allowed: a git repository's folder)")
    compile_cache.use(args.compile_cache, Path(args.results_dir))  # the A/B's workers inherit it
    plugins.load(args.plugin, Path(args.results_dir))
    grid = grids.resolve(args.grid, devices=args.device)
    executors.check("local", None, None, grid.settings.allocator)
    pairs, rounds = session.design(grid, args.pairs, args.rounds)
    return grid, pairs, rounds, Rule()


def _confirmed(
    args, setup, bad: pd.DataFrame, runs: pd.DataFrame, cases: pd.DataFrame
) -> tuple[pd.DataFrame, list[str]]:
    """The slowdowns that stand after their A/Bs (suite.history.confirm), and a line for each one measured."""
    from suite.history import confirm

    grid, pairs, rounds, rule = setup
    asks = confirm.asked(bad, cases, runs["run_key"].iloc[-1], runs["git_commit"].iloc[-1])
    answers = confirm.confirm(
        asks, grid, Path(args.repo).resolve(), Path(args.results_dir), pairs, rounds, list(args.plugin), rule
    )
    keep, lines = pd.Series(True, index=bad.index), []
    for ask, said in zip(asks, answers):
        rows = bad[
            (bad["series_key"] == ask.series_key)
            & (bad["before_commit"] == ask.before)
            & bad["kind"].isin(confirm.CONFIRMED_KINDS)
        ]
        word = {
            True: "confirmed",
            False: "not confirmed (the runs' drift: a warning only)",
            None: "the slowdown stands",
        }[said.confirmed]
        lines.append(f"A/B of {ask.series} {ask.before[:10]}..{ask.after[:10]}: {word}; {said.text}")
        if said.confirmed is False:
            keep[rows.index] = False
            lines += [f"not confirmed {_line(row)}" for _, row in rows.iterrows()]
    return bad[keep], lines


def check(args) -> int:
    from suite.history.page import rule_text
    from suite.history.series import judge

    atomic.check_outputs({"--markdown": args.markdown}, summary=True)
    setup = _confirming(args)
    fingerprint, runs, cases, exponents = _load(args)
    judged = judge(runs, cases, exponents, args.against, screen=setup is not None)
    verdicts, found = judged.verdicts[judged.verdicts["kind"] != "level"], judged.changes
    counts = verdicts["class"].value_counts().to_dict()
    tally = ", ".join(f"{n} {name}" for name, n in counts.items())
    if verdicts.empty or (verdicts["class"] == "insufficient data").all():
        print(
            f"cannot judge: {len(runs)} runs of fingerprint {fingerprint} in {args.db}; a series needs "
            f"{changes.MIN_POINTS} points ({tally or 'no series'})",
            file=sys.stderr,
        )
        return 2
    host, host_fails = _host_lines(found, args.host_level == "fail")
    found = found[found["kind"] != "level"]
    screened = found["rule"] == "screen"  # with --confirm: slowdowns to measure again, no class of their own
    bad, machine = _by_commit(found[((found["class"] == "regression") & found["newest"]) | screened])
    lines = [
        f"history check {args.db} (fingerprint {fingerprint}, {len(runs)} runs): {tally}",
        rule_text(judged),
        *host,
    ]
    broken = _broken(runs, cases)
    lines += broken
    if setup is not None and not bad.empty:
        bad, measured = _confirmed(args, setup, bad, runs, cases)
        lines += measured
    lines += _regressions(bad, setup is not None)
    lines += [
        f"slower with no commit between (the machine or the environment; warning only) {_line(row)}"
        for _, row in machine.iterrows()
    ]
    lines += [
        f"suspicious {_line(row)}"
        for _, row in found[(found["class"] == "suspicious") & found["slower"] & ~screened].iterrows()
    ]
    text = "\n".join(lines)
    print(text)
    _markdown(args, text)
    return 1 if len(bad) or host_fails or broken else 0


def _markdown(args, text: str) -> None:
    body = "```\n" + text + "\n```\n"
    if args.markdown:
        atomic.write_text(Path(args.markdown), body, follow_links=True)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as summary:
            summary.write(body)


def report(args) -> int:
    from suite.history.page import render
    from suite.history.series import judge

    output = atomic.check_target("--output", args.output, parents=True)
    fingerprint, runs, cases, exponents = _load(args)
    judged = judge(runs, cases, exponents, args.against)
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(output, render(judged, {"fingerprint": fingerprint, "db": str(args.db)}))
    print(
        f"history report: {output} ({len(runs)} runs, {len(judged.verdicts)} series, "
        f"{len(judged.changes)} change points)"
    )
    return 0
