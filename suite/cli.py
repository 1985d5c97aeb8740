"""Command line: `python -m suite list | run | report | compare | ab | merge | baseline | export | doctor | card | docs
| history`.

Thin: it parses, delegates to the stages, prints, and maps bad input (UsageError) to exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import variants
from suite.errors import UsageError
from suite.plan.case import DTYPES, Case
from suite.plan.settings import Settings
from suite.signals import stop_on_signals
from suite.store import atomic, lock
from suite.store.rundir import RunDir, reading


def cmd_list(args: argparse.Namespace) -> int:
    from suite.present import listing

    for line in listing.lines(
        args.variant or variants.names(), args.device, args.dtype, DTYPES[args.dtype], args.causal
    ):
        print(line)
    return 0


@dataclass
class Job:
    """What `run` will do: the cases, how, and where."""

    run: RunDir
    cases: list[Case]
    settings: Settings
    plugins: list[str]
    label: str
    grid: object = None  # the Grid of a new run (None when resuming: its folder exists)
    shard: dict | None = None  # plan.json's record of the shard, when one
    ladders: list = dataclasses.field(default_factory=list)  # series with adaptive lengths


def _job(args: argparse.Namespace) -> Job:
    from suite.plan import grid as grids
    from suite.plan import shard as shards
    from suite.run import executors, plugins, runner

    plugins.load(args.plugin, Path(args.results_dir))
    if args.resume:
        given = [f"--{name.replace('_', '-')}" for name in RESUME_FIXED if getattr(args, name) is not None]
        if given:
            raise UsageError(
                f"--resume {args.resume} finishes the run as it was planned: {', '.join(given)} "
                "cannot change it (start a new run for other cases or settings)"
            )
        run = RunDir.started(Path(args.results_dir), args.resume)
        plan = runner.load(run)
        plugins.require(plan.plugins, args.plugin, run.name)
        grids.check_plan(
            plan.cases, plan.ladders, str(run.path / RunDir.PLAN)
        )  # NB: an edited plan fails here, not in a worker
        _check_threads(plan.settings.threads, "plan.json settings.threads", args.executor)
        settings = executors.resolved(_budgeted(plan.settings, args), args.executor)
        return Job(run, plan.cases, settings, plan.plugins, f"{plan.grid} (resumed)", ladders=plan.ladders)
    grid = grids.resolve(args.grid or "smoke", devices=args.device, only_variants=args.variant)
    if args.threads is not None:
        _check_threads(args.threads, "--threads", args.executor)
        grid = dataclasses.replace(grid, settings=dataclasses.replace(grid.settings, threads=args.threads))
    _check_threads(grid.settings.threads, f"grid {grid.name}: settings.threads", args.executor)
    grid = dataclasses.replace(grid, settings=_budgeted(grid.settings, args))
    grid = dataclasses.replace(grid, settings=executors.resolved(grid.settings, args.executor))  # the plan says which
    cases, info, label, suffix = list(grid.cases), None, grid.name, ""
    if args.shard is not None:
        cases, info = shards.select(cases, grid.settings, args.shard, grid.ladders)
        k, n = info["shard"]["k"], info["shard"]["n"]
        label, suffix = f"{grid.name} shard {k}/{n}", f"-shard{k}of{n}"
    run = RunDir.new(Path(args.results_dir), args.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{grid.name}{suffix}")
    mine = {case.case_id for case in cases}  # a shard climbs the ladders it holds (they are never split)
    ladders = [ladder for ladder in grid.ladders if ladder.template.case_id in mine]
    return Job(run, cases, grid.settings, list(args.plugin), label, grid, info, ladders)


def _budgeted(settings, args: argparse.Namespace):
    """The settings with --budget's minutes where it is given (a resumed run may take a new budget)."""
    from suite.run import budget

    given = getattr(args, "budget", None)
    return settings if given is None else dataclasses.replace(settings, budget_min=budget.parse(given))


# What a resumed run takes from its plan, never from the command line
RESUME_FIXED = ("grid", "threads", "shard", "variant", "device", "run_id")


def _check_threads(threads: int, field: str, executor: str) -> None:
    """Threads a worker may use: at least 1, at most this machine's CPUs (a Ray cluster's are its own)."""
    most = os.cpu_count() or 1
    if threads < 1 or (executor == "local" and threads > most):
        raise UsageError(f"{field} {threads} (allowed: 1..{most}, the CPUs of this machine)")


def cmd_run(args: argparse.Namespace) -> int:
    from suite.machine import compile_cache
    from suite.plan import shard as shards
    from suite.run import executors, runner
    from suite.run.executors.local import WorkerError

    try:
        compile_cache.use(args.compile_cache, Path(args.results_dir))
        job = _job(args)
        executors.check(args.executor, args.address, args.ray_workers, job.settings.allocator)
        atomic.check_outputs({}, {"--reports-dir": None if args.dry_run or args.no_report else args.reports_dir})
    except (UsageError, ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.dry_run:
        if args.shard is not None:
            predicted = sum(shards.predicted_s(case, job.settings) for case in job.cases)
            print(f"shard {args.shard}: predicted {predicted / 60:.1f} min of measuring")
        for case in job.cases:
            print(case.label())
        climbing = (
            f"; {len(job.ladders)} series of them have adaptive lengths and may climb further" if job.ladders else ""
        )
        print(f"{len(job.cases)} cases planned (grid {job.label}){climbing}; nothing run, nothing written")
        return 0
    if job.grid is not None:
        runner.start(job.grid, job.run, job.plugins, cases=job.cases if job.shard else None, extra=job.shard)
    with lock.held(job.run.path):
        print(
            f"run {job.run.name}: {len(job.cases)} cases, grid {job.label}, results in {job.run.path}/", file=sys.stderr
        )
        started = time.perf_counter()
        try:
            counts = runner.run(
                run=job.run,
                cases=job.cases,
                settings=job.settings,
                plugins=job.plugins,
                resume=bool(args.resume),
                executor=args.executor,
                address=args.address,
                slots=args.ray_workers,
                ladders=job.ladders,
            )
        except WorkerError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    print(f"done in {time.perf_counter() - started:.1f}s: {summary}")
    print(f"results: {job.run.path / RunDir.PARQUET} and results.csv; environment: {job.run.path / RunDir.ENV}")
    return 0 if args.no_report else make_report(job.run, Path(args.reports_dir) / job.run.name)


def make_report(run: RunDir, report_dir: Path) -> int:
    from suite.present import report

    started = time.perf_counter()
    with lock.reading(run.path, "report"):
        path, result = report.build(run, report_dir)
    if not result.claims.empty or (result.cross.empty and result.padding.empty and result.decode.empty):
        print(report.summary(result.claims))
    if not result.decode.empty:
        print("decode, one query against a cache of n:")
        print(report.summary(result.decode))
    if not result.cross.empty:
        print("cross attention, each series in the length it does not hold:")
        print(report.summary(result.cross, "n_q | n_k"))
    if not result.padding.empty:
        print("padded batches, in valid tokens at a fixed padded n (or in n at a fixed valid fraction):")
        print(report.summary(result.padding, "valid tokens | n"))
    print(result.noise.line())
    print(f"report: {path} ({time.perf_counter() - started:.1f}s)")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Rebuild the report of a run from its results folder alone."""
    atomic.check_folder("--reports-dir", args.reports_dir)
    with reading(args.name, Path(args.results_dir), "report") as run:
        return make_report(run, Path(args.reports_dir) / run.name)


def _rule(args: argparse.Namespace):
    """The gate's rule from --alpha, --effect-floor, --allow-new (and compare's --allow-shift)."""
    from suite.analyse.gate import Rule

    for name, value, low, high in (("--alpha", args.alpha, 0, 1), ("--effect-floor", args.effect_floor, 0, 10)):
        if not low < value < high:
            raise UsageError(f"{name} {value} (allowed: {low} < value < {high})")
    return Rule(
        alpha=args.alpha,
        effect_floor=args.effect_floor,
        allow_new=args.allow_new,
        allow_shift=getattr(args, "allow_shift", False),
    )


def cmd_compare(args: argparse.Namespace) -> int:
    rule = _rule(args)
    atomic.check_outputs({"--markdown": args.markdown, "--json": args.json}, summary=True)
    results_dir = Path(args.results_dir)
    with reading(args.new, results_dir, "compare") as new, reading(args.base, results_dir, "compare", new) as base:
        return _compared(base, new, rule, args)


def _compared(base: RunDir, new: RunDir, rule, args: argparse.Namespace) -> int:
    """The verdict on two runs the caller reads (`reading`), confirmed where asked, printed and written."""
    from suite.analyse import regression
    from suite.analyse.terms import machines

    base_frame = base.read_table()
    hosts = tuple(machines(run.env(), run.bandwidth()) for run in (base, new))  # the cache steps each report fits
    verdict = regression.decide(
        base_frame, new.read_table(), base.env(), new.env(), rule, force=args.force, hosts=hosts
    )
    if args.confirm and verdict.code == 1:
        from suite.run import plugins
        from suite.run.confirm import confirm

        plugins.load(args.plugin, Path(args.results_dir))
        verdict = confirm(verdict, base_frame, new, rule, force=args.force, given_plugins=args.plugin)
    return _emit(verdict, base.name, new.name, rule, args)


def _emit(verdict, base_name: str, new_name: str, rule, args: argparse.Namespace, also: Path | None = None) -> int:
    """Print the comparison; write its Markdown and JSON where asked (and into `also`, a folder)."""
    from suite.present import comparison

    text = comparison.markdown(verdict, base_name, new_name, rule)
    payload = json.dumps(comparison.as_json(verdict, base_name, new_name, rule), indent=1, default=str)
    print(text)
    targets = [(args.markdown, text), (args.json, payload)]
    if also is not None:
        targets += [(also / "compare.md", text), (also / "compare.json", payload)]
    for path, content in targets:
        if path:
            atomic.write_text(Path(path), content, follow_links=True)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as summary:
            summary.write(text)
    return verdict.code


def cmd_ab(args: argparse.Namespace) -> int:
    """Interleaved A/B of two checkouts on one grid: A, B, B, A per case and process pair."""
    from suite.analyse import paired
    from suite.machine import compile_cache
    from suite.plan import grid as grids
    from suite.run import executors, plugins
    from suite.run.ab import checkouts as sides
    from suite.run.ab import session

    rule = _rule(args)
    atomic.check_outputs({"--markdown": args.markdown, "--json": args.json}, summary=True)
    compile_cache.use(args.compile_cache, Path(args.results_dir))  # the servers of both sides inherit it
    plugins.load(args.plugin, Path(args.results_dir))
    if not Path(args.repo).is_dir():
        raise UsageError(f"--repo {args.repo!r}: no such folder (allowed: a git repository's folder)")
    repo = Path(args.repo).resolve()
    grid = grids.resolve(args.grid, devices=args.device, only_variants=args.variant)
    executors.check("local", None, None, grid.settings.allocator)
    pairs, rounds = session.design(grid, args.pairs, args.rounds)
    base, new = sides.chosen(args.base, args.new, args.base_dir, args.new_dir, repo)  # a folder only where named so
    run = RunDir.new(Path(args.results_dir), args.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-ab-{grid.name}")
    try:
        frame = session.measure(run, grid, base, new, repo, pairs, rounds, list(args.plugin))
    except RuntimeError as err:  # a side whose workers cannot start: nothing to judge
        print(f"error: {err}", file=sys.stderr)
        return 2
    verdict = paired.verdict(frame, rule)
    return _emit(verdict, f"A {base}", f"B {new}", rule, args, also=run.path)


def cmd_baseline(args: argparse.Namespace) -> int:
    from suite.store import rundir

    results_dir = Path(args.results_dir)
    if args.action == "list":
        for where, info in rundir.baselines(results_dir):
            print(
                f"{where}: from run {info.get('run', '?')} (commit {info.get('git_commit')}, "
                f"{info.get('saved_at', '?')})"
            )
        return 0
    if not args.run:
        raise UsageError("baseline save: which run? (python -m suite baseline save RUN)")
    with reading(args.run, results_dir, "baseline save") as run:
        target = rundir.save_baseline(run, results_dir, force=args.force)
    print(
        f"baseline for fingerprint {run.env().get('fingerprint_id')}, grid {run.plan().get('grid')}: "
        f"{target} (from {run.name})"
    )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from suite.present import export

    atomic.check_target("--output", args.output)
    with reading(args.run, Path(args.results_dir), "export") as run:
        frame = run.read_table()
        payload = (
            export.pytest_benchmark(frame, run.env())
            if args.format == "pytest-benchmark"
            else export.github_action_benchmark(frame)
        )
    atomic.write_text(Path(args.output), json.dumps(payload, indent=1), follow_links=True)
    print(f"{args.format}: {args.output}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    """Join shard runs into one run: the same journal rows, one plan, one table, one report."""
    from suite.store.merge import merge

    results_dir = Path(args.results_dir)
    atomic.check_outputs({}, {"--reports-dir": None if args.no_report else args.reports_dir})
    with contextlib.ExitStack() as stack:
        shards = [stack.enter_context(reading(name, results_dir, "merge")) for name in args.runs]
        merged = merge(shards, RunDir.new(results_dir, args.run_id))
    for problem in merged.problems:
        print(f"warning: {problem}", file=sys.stderr)
    print(
        f"merged {len(shards)} shard(s) into {merged.run.path}: {merged.cases} cases ("
        + ", ".join(f"{n} {s}" for s, n in sorted(merged.counts.items()))
        + ")"
        + (f"; {merged.missing} cases of the grid are in no shard given" if merged.missing else "")
    )
    return 0 if args.no_report else make_report(merged.run, Path(args.reports_dir) / merged.run.name)


def cmd_doctor(args: argparse.Namespace) -> int:
    from suite.run.doctor import doctor

    checks, code = doctor(args.device or [])
    for check in checks:
        print(f"{'ok ' if check.ok else 'NO '} {check.name:<16} {check.detail}")
    if code:
        print(f"error: cannot measure on {', '.join(args.device)}: see the lines marked NO", file=sys.stderr)
    return code


def cmd_card(args: argparse.Namespace) -> int:
    """A run card from the run's own files; its verdict figure where asked."""
    atomic.check_outputs({"--figure": args.figure, "--output": args.output}, {"--into": args.into})
    with reading(args.run, Path(args.results_dir), "card") as run:
        from suite.present import card

        if args.figure:
            figure = atomic.write_bytes(Path(args.figure), card.figure(run, args.variant), follow_links=True)
            print(f"figure: {figure}", file=sys.stderr)
        if args.into:
            print(f"card: {card.publish(run, Path(args.into))} (then: python -m suite docs)", file=sys.stderr)
        elif args.output:
            print(f"card: {atomic.write_text(Path(args.output), card.card(run), follow_links=True)}", file=sys.stderr)
        elif not args.figure:
            print(card.card(run), end="")
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    """Write (or --check) every page the docs take from the code and the run folders."""
    from suite.parser import build_parser
    from suite.present import site

    root = Path(args.root)
    if not (root / "mkdocs.yml").is_file():
        raise UsageError(f"--root {args.root}: no mkdocs.yml there (allowed: the repository's root)")
    parser = build_parser(COMMANDS)
    paths = site.stale(root, parser) if args.check else site.write(root, parser)
    for path in paths:
        print(f"{'out of date' if args.check else 'written'}: {path}")
    if args.check and paths:
        print("error: generated pages are out of date: run python -m suite docs", file=sys.stderr)
        return 1
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """A history of runs over commits (suite.history.commands): add, backfill, check, report."""
    from suite.history.commands import history

    return history(args)


def main(argv: list[str] | None = None) -> int:
    from suite.machine.device import get as device
    from suite.parser import build_parser

    args = build_parser(COMMANDS).parse_args(argv)
    restore = stop_on_signals()
    try:
        for name in getattr(args, "variant", None) or []:
            try:
                variants.get(name)
            except ValueError as err:
                raise UsageError(f"--variant: {err}") from None
        for name in getattr(args, "device", None) or []:
            device(name, "--device")
        return args.func(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C, or a signal turned into one: what was written stays
        name = str(err) if str(err) in signal.Signals.__members__ else "SIGINT"
        where = "in ab.jsonl; a sweep is run again" if args.func is cmd_ab else "suite run --resume NAME finishes a run"
        print(f"stopped by {name}: what was measured is kept ({where})", file=sys.stderr)
        return 128 + getattr(signal, name, signal.SIGINT)
    finally:
        restore()


COMMANDS = {
    "list": cmd_list,
    "run": cmd_run,
    "report": cmd_report,
    "compare": cmd_compare,
    "ab": cmd_ab,
    "merge": cmd_merge,
    "baseline": cmd_baseline,
    "export": cmd_export,
    "doctor": cmd_doctor,
    "card": cmd_card,
    "docs": cmd_docs,
    "history": cmd_history,
}
