"""Command line: `python -m suite list | run | report | compare | baseline | export`."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import shutil
import sys
from collections import Counter
import time
from pathlib import Path

import torch

import variants
from suite.store import table as results

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


def availability(spec, impl: str, device: str, dtype: torch.dtype, causal: bool) -> str:
    reasons = spec.reasons(impl, device=device, dtype=dtype, causal=causal)
    return "available" if not reasons else "unavailable: " + "; ".join(reasons)


def claim_of(spec) -> str:
    # the exponents do not depend on the shape; gqa needs some KV heads to state them
    theory = spec.theory(seq_len=4096, num_heads=8, num_kv_heads=2 if spec.kv_heads == "divides" else None)
    claim = f"n^{theory.claimed_exponent_n:g}"
    if theory.claimed_exponent_d is not None and theory.claimed_exponent_d != 1:
        claim += f", d^{theory.claimed_exponent_d:g}"
    return claim


def cmd_list(args: argparse.Namespace) -> int:
    dtype = DTYPES[args.dtype]
    chosen = args.variant or variants.names()
    for name in chosen:
        spec = variants.get(name)
        defaults = ", ".join(f"{p.name}={p.describe_default()}" for p in spec.params) or "no parameters"
        print(f"{spec.name}  [{spec.family}]  claim {claim_of(spec)}  ({defaults})")
        print(f"    {spec.summary}  Source: {spec.source}.")
        for impl in spec.impls.values():
            print(f"    {impl.name:<9} {impl.cost}")
            for device in args.device:
                print(f"    {'':<9} {device}/{args.dtype}: {availability(spec, impl.name, device, dtype, args.causal)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from suite.plan import grid as grids
    from suite.run import runner
    from suite.plan import shard as shards
    from suite.plan.case import Case

    results_dir = Path(args.results_dir)
    try:
        for module in args.plugin:
            importlib.import_module(module)
        if args.resume:
            run_dir = results_dir / args.resume
            plan = runner.load_plan(run_dir)
            for module in plan["plugins"]:
                importlib.import_module(module)
            cases = [Case.from_key(key) for key in plan["cases"]]
            settings, plugins, label = plan["settings"], plan["plugins"], f"{plan['grid']} (resumed)"
        else:
            grid = grids.resolve(args.grid, devices=args.device, only_variants=args.variant)
            if args.threads is not None:
                if args.threads < 1:
                    raise grids.ConfigError(f"--threads {args.threads} (allowed: integers >= 1)")
                grid = dataclasses.replace(grid, settings=dataclasses.replace(grid.settings, threads=args.threads))
            cases, plugins = list(grid.cases), list(args.plugin)
            settings, label = dataclasses.asdict(grid.settings), grid.name
            shard_info, suffix = None, ""
            if args.shard is not None:
                k, n = shards.parse(args.shard)
                index = {case.case_id: i for i, case in enumerate(cases)}
                cases = shards.split(cases, settings, n)[k - 1]
                shard_info = {"shard": {"k": k, "n": n}, "grid_index": [index[c.case_id] for c in cases]}
                label, suffix = f"{grid.name} shard {k}/{n}", f"-shard{k}of{n}"
            run_id = args.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{grid.name}{suffix}"
            run_dir = results_dir / run_id
            if run_dir.exists():
                raise grids.ConfigError(f"--run-id {run_id!r}: {run_dir} exists (use --resume {run_id} to finish it)")
        if args.executor == "ray":
            from suite.run.ray_pool import _ray

            _ray()  # before any work: without Ray, say how to install it
        elif args.address or args.ray_workers:
            raise ValueError("--address and --ray-workers go with --executor ray")
        if args.ray_workers is not None and args.ray_workers < 1:
            raise ValueError(f"--ray-workers {args.ray_workers} (allowed: integers >= 1)")
    except (grids.ConfigError, FileNotFoundError, ImportError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.dry_run:
        if args.shard is not None:
            predicted = sum(shards.predicted_s(case, settings) for case in cases)
            print(f"shard {args.shard}: predicted {predicted / 60:.1f} min of measuring")
        for case in cases:
            print(case.label())
        print(f"{len(cases)} cases planned (grid {label}); nothing run, nothing written")
        return 0
    if not args.resume:
        runner.start(grid, run_dir, plugins, cases=cases if args.shard is not None else None, extra=shard_info)
    print(f"run {run_dir.name}: {len(cases)} cases, grid {label}, results in {run_dir}/", file=sys.stderr)
    started = time.perf_counter()
    try:
        counts = runner.run(run_dir=run_dir, cases=cases, settings=settings, plugins=plugins,
                            resume=bool(args.resume), executor=args.executor, address=args.address,
                            slots=args.ray_workers)
    except runner.WorkerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    wall = time.perf_counter() - started
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    print(f"done in {wall:.1f}s: {summary}")
    print(f"results: {run_dir / 'results.parquet'} and results.csv; environment: {run_dir / 'env.json'}")
    if args.no_report:
        return 0
    return make_report(run_dir, Path(args.reports_dir) / run_dir.name)


def make_report(run_dir: Path, report_dir: Path) -> int:
    from suite.present import report

    started = time.perf_counter()
    path, result = report.build(run_dir, report_dir)
    print(report.summary(result.claims))
    print(f"report: {path} ({time.perf_counter() - started:.1f}s)")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Rebuild the report of a run from its results folder alone."""
    try:
        run_dir = resolve_run(args.name, Path(args.results_dir))
    except FileNotFoundError as err:
        print(f"error: report: {err}", file=sys.stderr)
        return 2
    return make_report(run_dir, Path(args.reports_dir) / run_dir.name)


def resolve_run(ref: str, results_dir: Path, like: Path | None = None) -> Path:
    """A run folder from a name under results_dir, a path, or `baseline` (the baseline of `like`'s
    fingerprint and grid). Raises FileNotFoundError naming what exists."""
    if ref == "baseline":
        if like is None:
            raise FileNotFoundError("`baseline` can only stand for BASE, beside a NEW run")
        env, plan = results.read_json(like, "env.json"), results.read_json(like, "plan.json")
        path = results_dir / "baselines" / str(env.get("fingerprint_id")) / str(plan.get("grid"))
        if not (path / "results.parquet").is_file():
            raise FileNotFoundError(f"no baseline for fingerprint {env.get('fingerprint_id')} and grid "
                                    f"{plan.get('grid')} in {path.parent} (save one: python -m suite baseline save RUN)")
        return path
    path = Path(ref) if Path(ref).is_dir() else results_dir / ref
    if not (path / "results.parquet").is_file():
        known = sorted(p.parent.name for p in results_dir.glob("*/results.parquet"))
        raise FileNotFoundError(f"run {ref!r}: no {path / 'results.parquet'} (runs in {results_dir}/: "
                                f"{', '.join(known) or 'none'})")
    return path


def cmd_compare(args: argparse.Namespace) -> int:
    from suite.analyse import regression as compare

    results_dir = Path(args.results_dir)
    try:
        new_dir = resolve_run(args.new, results_dir)
        base_dir = resolve_run(args.base, results_dir, like=new_dir)
        for name, value, low, high in (("--alpha", args.alpha, 0, 1), ("--effect-floor", args.effect_floor, 0, 10)):
            if not low < value < high:
                raise ValueError(f"{name} {value} (allowed: {low} < value < {high})")
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rule = compare.Rule(alpha=args.alpha, effect_floor=args.effect_floor, allow_new=args.allow_new)
    base, new = results.read(base_dir), results.read(new_dir)
    env_base, env_new = results.read_json(base_dir, "env.json"), results.read_json(new_dir, "env.json")
    verdict = compare.decide(base, new, env_base, env_new, rule, force=args.force)
    if args.confirm and verdict.code == 1:
        verdict = confirm(verdict, base, new_dir, rule)
    text = compare.markdown(verdict, base_dir.name, new_dir.name, rule)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as summary:
            summary.write(text)
    if args.json:
        Path(args.json).write_text(json.dumps(compare.as_json(verdict, base_dir.name, new_dir.name, rule),
                                              indent=1, default=str))
    return verdict.code


def confirm(verdict, base, new_dir: Path, rule):
    """Re-run the flagged cases with the code checked out now, in fresh processes; keep only the
    cases that are slower again (a second, independent sample of the new code)."""
    from suite.analyse import regression as compare
    from suite.run import runner
    from suite.plan.case import Case

    flagged = verdict.cases[verdict.cases["status"] == "slower"]
    plan = results.read_json(new_dir, "plan.json")
    by_id = {Case.from_key(key).case_id: Case.from_key(key) for key in plan["cases"]}
    cases = [by_id[case_id] for case_id in flagged["case_id"] if case_id in by_id]
    for module in plan.get("plugins", []):
        importlib.import_module(module)
    rerun = new_dir.parent / f"{new_dir.name}-confirm-{time.strftime('%H%M%S')}"
    rerun.mkdir(parents=True)
    print(f"confirming {len(cases)} flagged case(s) in {rerun}", file=sys.stderr)
    runner.run(run_dir=rerun, cases=cases, settings=plan["settings"], plugins=plan.get("plugins", []), resume=False)
    again = compare.cases(base[base["case_id"].isin(flagged["case_id"])], results.read(rerun), rule)
    still = set(again.loc[again["status"] == "slower", "case_id"])
    table = verdict.cases.copy()
    gone = (table["status"] == "slower") & ~table["case_id"].isin(still)
    table.loc[gone, "reason"] = "slower at first, not in the confirming re-run"
    table.loc[gone, "status"] = "unconfirmed"
    reasons = [r for r in verdict.reasons if not r.startswith("slower:")] + [
        f"slower (confirmed by a re-run): {compare.case_label(row)} ×{row['ratio']:.3f}"
        for _, row in table[table["status"] == "slower"].iterrows()]
    code = 1 if reasons else (2 if any(s in compare.BLOCKING for s in table["status"]) else 0)
    return compare.Verdict(code, reasons, table, verdict.exponents, verdict.env)


def cmd_baseline(args: argparse.Namespace) -> int:
    results_dir = Path(args.results_dir)
    root = results_dir / "baselines"
    if args.action == "list":
        for path in sorted(root.glob("*/*/baseline.json")):
            info = json.loads(path.read_text())
            print(f"{path.parent.relative_to(root)}: from run {info['run']} (commit {info.get('git_commit')}, "
                  f"{info['saved_at']})")
        return 0
    try:
        if not args.run:
            raise FileNotFoundError("baseline save: which run? (python -m suite baseline save RUN)")
        run_dir = resolve_run(args.run, results_dir)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    env, plan = results.read_json(run_dir, "env.json"), results.read_json(run_dir, "plan.json")
    target = root / str(env.get("fingerprint_id")) / str(plan.get("grid"))
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for name in ("results.parquet", "results.csv", "env.json", "plan.json", "probe.json"):
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, target / name)
    (target / "baseline.json").write_text(json.dumps({
        "run": run_dir.name, "git_commit": env.get("git_commit"), "fingerprint_id": env.get("fingerprint_id"),
        "grid": plan.get("grid"), "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=1))
    print(f"baseline for fingerprint {env.get('fingerprint_id')}, grid {plan.get('grid')}: {target} (from {run_dir.name})")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from suite.present import export

    try:
        run_dir = resolve_run(args.run, Path(args.results_dir))
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    frame = results.read(run_dir)
    if args.format == "pytest-benchmark":
        payload = export.pytest_benchmark(frame, results.read_json(run_dir, "env.json"))
    else:
        payload = export.github_action_benchmark(frame)
    Path(args.output).write_text(json.dumps(payload, indent=1))
    print(f"{args.format}: {args.output}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    """Join shard runs into one run: the same journal rows, one plan, one table, one report."""
    from suite.plan import shard
    from suite.plan.case import Case
    from suite.store.journal import Journal

    results_dir = Path(args.results_dir)
    try:
        dirs = [resolve_run(name, results_dir) for name in args.runs]
        plans = [results.read_json(d, "plan.json") for d in dirs]
        envs = [results.read_json(d, "env.json") for d in dirs]
        shard.check_mergeable(plans, envs, [d.name for d in dirs])
        target = results_dir / args.run_id
        if target.exists():
            raise shard.ShardError(f"--run-id {args.run_id!r}: {target} exists")
    except (FileNotFoundError, shard.ShardError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    plan = shard.merged_plan(plans, [d.name for d in dirs])
    cases = [Case.from_key(key) for key in plan["cases"]]
    target.mkdir(parents=True)
    (target / "plan.json").write_text(json.dumps(plan, indent=1))
    (target / "env.json").write_text(json.dumps({**envs[0], "merged_from": {d.name: e.get("git_commit")
                                                                             for d, e in zip(dirs, envs)}}, indent=1))
    if (dirs[0] / "probe.json").is_file():
        shutil.copyfile(dirs[0] / "probe.json", target / "probe.json")
    journal, wanted = Journal(target / "journal.jsonl"), {c.case_id for c in cases}
    for d in dirs:
        for row in Journal(d / "journal.jsonl").read().rows:
            if row["case_id"] in wanted:
                journal.append(row)
    rows = journal.read().rows
    results.write(results.table(cases, rows), target)
    counts = Counter(status for case_id, status in results.statuses(rows).items() if case_id in wanted)
    missing = plan.get("grid_cases", len(cases)) - len(cases)
    print(f"merged {len(dirs)} shard(s) into {target}: {len(cases)} cases ("
          + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")"
          + (f"; {missing} cases of the grid are in no shard given" if missing else ""))
    if args.no_report:
        return 0
    return make_report(target, Path(args.reports_dir) / target.name)


def csv_list(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def compare_defaults():
    from suite.analyse.regression import Rule

    return Rule()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m suite", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="every variant × implementation, its claim and whether it runs here")
    p.add_argument("--variant", type=csv_list, help="comma-separated variant names (default: all)")
    p.add_argument("--device", type=csv_list, default=["cpu", "cuda"], help="devices to check (default: cpu,cuda)")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32")
    p.add_argument("--causal", action="store_true", help="check the causal form")
    p.set_defaults(func=cmd_list)

    r = sub.add_parser("run", help="sweep a grid: time, FLOPs and peak memory of every case")
    r.add_argument("--grid", default="smoke", help="smoke, quick, full, or a TOML/YAML file (default: smoke)")
    r.add_argument("--device", type=csv_list, help="override the grid's devices: cpu,cuda")
    r.add_argument("--variant", type=csv_list, help="only these variants (comma-separated)")
    r.add_argument("--run-id", help="name of the run folder under --results-dir (default: time and grid)")
    r.add_argument("--resume", metavar="NAME", help="finish run NAME: only the cases its journal lacks")
    r.add_argument("--dry-run", action="store_true", help="list the planned cases and their count")
    r.add_argument("--plugin", action="append", default=[], help="a module that registers extra variants")
    r.add_argument("--threads", type=int, help="override the grid's thread count")
    r.add_argument("--results-dir", default="results")
    r.add_argument("--reports-dir", default="reports")
    r.add_argument("--no-report", action="store_true", help="write the results only, not the HTML report")
    r.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local worker processes (default), or Ray actors: one per CPU slot or GPU")
    r.add_argument("--address", help="with --executor ray: an existing cluster (default: start a local one)")
    r.add_argument("--ray-workers", type=int, help="with --executor ray: actors per device "
                                                   "(default: the cluster's CPUs / threads, or its GPUs)")
    r.add_argument("--shard", metavar="K/N", help="run only shard K of N (balanced by predicted cost); "
                                                 "join the shards with `merge`")
    r.set_defaults(func=cmd_run)

    rep = sub.add_parser("report", help="the HTML report and verdicts of a run, from its results alone")
    rep.add_argument("name", help="a run name under --results-dir, or a run folder")
    rep.add_argument("--results-dir", default="results")
    rep.add_argument("--reports-dir", default="reports")
    rep.set_defaults(func=cmd_report)

    c = sub.add_parser("compare", help="compare two runs; exit 0 no regression, 1 regression, 2 cannot judge")
    c.add_argument("base", help="a run name, a run folder, or `baseline` (the saved baseline of NEW's "
                                "fingerprint and grid)")
    c.add_argument("new", help="a run name or folder")
    c.add_argument("--results-dir", default="results")
    c.add_argument("--alpha", type=float, default=compare_defaults().alpha, help="false discovery rate over the grid")
    c.add_argument("--effect-floor", type=float, default=compare_defaults().effect_floor,
                   help="smallest change called, as a fraction (default 0.05)")
    c.add_argument("--allow-new", action="store_true", help="cases without a baseline do not block")
    c.add_argument("--force", action="store_true", help="compare runs from different environments")
    c.add_argument("--confirm", action="store_true",
                   help="re-run flagged cases with the checked-out code; keep those slower again")
    c.add_argument("--markdown", help="write the Markdown summary here (also appended to $GITHUB_STEP_SUMMARY)")
    c.add_argument("--json", help="write the comparison as JSON here")
    c.set_defaults(func=cmd_compare)

    m = sub.add_parser("merge", help="join shard runs of one grid into one run (then report, compare)")
    m.add_argument("runs", nargs="+", help="the shard runs (names under --results-dir, or folders)")
    m.add_argument("--run-id", required=True, help="the merged run's name")
    m.add_argument("--results-dir", default="results")
    m.add_argument("--reports-dir", default="reports")
    m.add_argument("--no-report", action="store_true")
    m.set_defaults(func=cmd_merge)

    b = sub.add_parser("baseline", help="save a run as the baseline of its fingerprint and grid, or list them")
    b.add_argument("action", choices=["save", "list"])
    b.add_argument("run", nargs="?", help="the run to save")
    b.add_argument("--results-dir", default="results")
    b.set_defaults(func=cmd_baseline)

    e = sub.add_parser("export", help="a run's timings as pytest-benchmark or github-action-benchmark JSON")
    e.add_argument("run")
    e.add_argument("--format", choices=["pytest-benchmark", "github-action-benchmark"], required=True)
    e.add_argument("-o", "--output", required=True)
    e.add_argument("--results-dir", default="results")
    e.set_defaults(func=cmd_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "variant", None):
            for name in args.variant:
                variants.get(name)
        for device in getattr(args, "device", []) or []:
            if device not in ("cpu", "cuda"):
                raise ValueError(f"--device {device!r} (allowed: cpu, cuda)")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return args.func(args)
