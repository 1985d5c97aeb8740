"""The command line's arguments (suite.cli runs them)."""

from __future__ import annotations

import argparse

from suite import __version__
from suite.machine.device import DEVICES
from suite.plan.case import DTYPES


def csv_list(text: str) -> list[str]:
    """Comma-separated names; argparse names the option and exits 2 where there are none (`--device ,`)."""
    names = [x for x in text.split(",") if x]
    if not names:
        raise argparse.ArgumentTypeError(f"{text!r} names nothing (allowed: comma-separated names)")
    return names


def build_parser(commands: dict) -> argparse.ArgumentParser:
    """The parser; `commands` maps each command's name to the function it sets as `func`."""
    from suite.analyse.gate import Rule

    rule = Rule()
    parser = argparse.ArgumentParser(
        prog="python -m suite",
        description="Benchmark and complexity analysis of attention variants: does each scale as its paper says?",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version and exit"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _list(sub, commands)
    _run(sub, commands)
    _compare(sub, commands, rule)
    _ab(sub, commands, rule)
    _store(sub, commands)
    if "history" in commands:
        from suite.history.args import add_parser as history

        history(sub, commands, csv_list)
    d = sub.add_parser(
        "doctor",
        help="what the suite would use here: versions, devices, SDPA backends, flex, "
        "xformers, do_bench; exit 1 when a requested --device cannot be measured",
    )
    d.add_argument(
        "--device", type=csv_list, help="devices that must be measurable (default: report all, require none)"
    )
    d.set_defaults(func=commands["doctor"])
    _docs(sub, commands)
    return parser


def _list(sub, commands: dict) -> None:
    p = sub.add_parser("list", help="every variant × implementation, its claim and whether it runs here")
    p.add_argument("--variant", type=csv_list, help="comma-separated variant names (default: all)")
    p.add_argument(
        "--device", type=csv_list, default=list(DEVICES), help="devices to check (default: all the suite knows)"
    )
    p.add_argument("--dtype", choices=list(DTYPES), default="float32")
    p.add_argument("--causal", action="store_true", help="check the causal form")
    p.set_defaults(func=commands["list"])


def _run(sub, commands: dict) -> None:
    r = sub.add_parser("run", help="sweep a grid: time, FLOPs and peak memory of every case")
    r.add_argument("--grid", help="smoke, quick, full, or a TOML/YAML file (default: smoke)")
    r.add_argument("--device", type=csv_list, help="override the grid's devices: " + ",".join(DEVICES))
    r.add_argument("--variant", type=csv_list, help="only these variants (comma-separated)")
    r.add_argument("--run-id", help="name of the run folder under --results-dir (default: time and grid)")
    r.add_argument("--resume", metavar="NAME", help="finish run NAME: only the cases its journal lacks")
    r.add_argument("--dry-run", action="store_true", help="list the planned cases and their count")
    r.add_argument("--plugin", action="append", default=[], help="a module that registers extra variants")
    r.add_argument("--threads", type=int, help="override the grid's thread count")
    r.add_argument(
        "--budget",
        metavar="TIME",
        help="the run's wall time, e.g. 20m, 90s, 1.5h (0: none): the lengths "
        "climb within it (default: the grid's settings.budget_min)",
    )
    r.add_argument("--results-dir", default="results")
    r.add_argument("--reports-dir", default="reports")
    r.add_argument("--no-report", action="store_true", help="write the results only, not the HTML report")
    r.add_argument(
        "--executor",
        choices=["local", "ray"],
        default="local",
        help="local worker processes (default), or Ray actors: one per CPU slot or GPU",
    )
    r.add_argument("--address", help="with --executor ray: an existing cluster (default: start a local one)")
    r.add_argument(
        "--ray-workers",
        type=int,
        help="with --executor ray: actors per device (default: the cluster's CPUs / threads, or its GPUs)",
    )
    r.add_argument(
        "--shard",
        metavar="K/N",
        help="run only shard K of N (balanced by predicted cost); join the shards with `merge`",
    )
    _compile_cache(r)
    r.set_defaults(func=commands["run"])
    rep = sub.add_parser("report", help="the HTML report and verdicts of a run, from its results alone")
    rep.add_argument("name", help="a run name under --results-dir, or a run folder")
    rep.add_argument("--results-dir", default="results")
    rep.add_argument("--reports-dir", default="reports")
    rep.set_defaults(func=commands["report"])


def _compare(sub, commands: dict, rule) -> None:
    c = sub.add_parser("compare", help="compare two runs; exit 0 no regression, 1 regression, 2 cannot judge")
    c.add_argument(
        "base", help="a run name, a run folder, or `baseline` (the saved baseline of NEW's fingerprint and grid)"
    )
    c.add_argument("new", help="a run name or folder")
    c.add_argument("--results-dir", default="results")
    c.add_argument(
        "--allow-shift",
        action="store_true",
        help="the machine moved between the runs: test each case beyond the grid's common move, "
        "which then does not block",
    )
    c.add_argument("--force", action="store_true", help="compare runs from different environments")
    c.add_argument(
        "--confirm", action="store_true", help="re-run flagged cases with the checked-out code; keep those slower again"
    )
    c.add_argument(
        "--plugin",
        action="append",
        default=[],
        help="with --confirm: a module the run was made with (named again: run files choose no code)",
    )
    _gate_options(c, rule, "cases without a baseline do not block")
    c.set_defaults(func=commands["compare"])


def _ab(sub, commands: dict, rule) -> None:
    a = sub.add_parser(
        "ab",
        help="interleaved A/B of two commits on one grid (A, B, B, A per case and process "
        "pair); exit 0 no regression, 1 regression, 2 cannot judge",
    )
    a.add_argument(
        "base",
        nargs="?",
        help="side A: a git commit-ish of --repo, checked out into a worktree (a folder "
        "only with --base-dir; then the one commit-ish given is side B)",
    )
    a.add_argument("new", nargs="?", help="side B: a git commit-ish of --repo (a folder only with --new-dir)")
    a.add_argument(
        "--base-dir", metavar="PATH", help="side A is this folder as it is (e.g. . for the working tree), not a commit"
    )
    a.add_argument("--new-dir", metavar="PATH", help="side B is this folder as it is, not a commit")
    a.add_argument("--grid", default="pr", help="a preset or a TOML/YAML file (default: pr); read by this checkout")
    a.add_argument("--device", type=csv_list, help="override the grid's devices")
    a.add_argument("--variant", type=csv_list, help="only these variants (comma-separated)")
    a.add_argument("--pairs", type=int, help="process pairs (default: the grid's replicates, 6 at least)")
    a.add_argument("--rounds", type=int, help="A, B, B, A rounds per case in each pair (default 2)")
    a.add_argument("--plugin", action="append", default=[], help="a module that registers extra variants")
    a.add_argument("--repo", default=".", help="the git repository the commits are in (default: here)")
    a.add_argument("--run-id", help="name of the run folder under --results-dir")
    a.add_argument("--results-dir", default="results")
    _compile_cache(a)
    _gate_options(a, rule, "cases only side B has do not block")
    a.set_defaults(func=commands["ab"])


def _compile_cache(p) -> None:
    p.add_argument(
        "--compile-cache",
        metavar="DIR",
        help="keep inductor's and Triton's compiled kernels in DIR (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR), "
        "for later processes, resumed runs and CI jobs; not inside --results-dir",
    )


def _gate_options(p, rule, new_help: str) -> None:
    """The rule and the outputs that `compare` and `ab` share."""
    p.add_argument("--alpha", type=float, default=rule.alpha, help="false discovery rate over the grid")
    p.add_argument(
        "--effect-floor",
        type=float,
        default=rule.effect_floor,
        help="smallest change called, as a fraction (default 0.05)",
    )
    p.add_argument("--allow-new", action="store_true", help=new_help)
    p.add_argument("--markdown", help="write the Markdown summary here (also appended to $GITHUB_STEP_SUMMARY)")
    p.add_argument("--json", help="write the comparison as JSON here")


def _store(sub, commands: dict) -> None:
    m = sub.add_parser("merge", help="join shard runs of one grid into one run (then report, compare)")
    m.add_argument("runs", nargs="+", help="the shard runs (names under --results-dir, or folders)")
    m.add_argument("--run-id", required=True, help="the merged run's name")
    m.add_argument("--results-dir", default="results")
    m.add_argument("--reports-dir", default="reports")
    m.add_argument("--no-report", action="store_true")
    m.set_defaults(func=commands["merge"])

    b = sub.add_parser("baseline", help="save a run as the baseline of its fingerprint and grid, or list them")
    b.add_argument("action", choices=["save", "list"])
    b.add_argument("run", nargs="?", help="the run to save")
    b.add_argument("--force", action="store_true", help="replace the baseline saved for its fingerprint and grid")
    b.add_argument("--results-dir", default="results")
    b.set_defaults(func=commands["baseline"])

    e = sub.add_parser("export", help="a run's timings as pytest-benchmark or github-action-benchmark JSON")
    e.add_argument("run")
    e.add_argument("--format", choices=["pytest-benchmark", "github-action-benchmark"], required=True)
    e.add_argument("-o", "--output", required=True)
    e.add_argument("--results-dir", default="results")
    e.set_defaults(func=commands["export"])


def _docs(sub, commands: dict) -> None:
    c = sub.add_parser(
        "card",
        help="a run card: one Markdown page from a run folder's own files (host, software, "
        "cases, noise, verdicts, efficiency)",
    )
    c.add_argument("run", help="a run name under --results-dir, or a run folder")
    c.add_argument("--results-dir", default="results")
    c.add_argument("-o", "--output", help="write the page here (default: print it, unless --figure alone is asked)")
    c.add_argument(
        "--figure", metavar="PNG", help="also write the verdict figure (time against n, fits and claims) here"
    )
    c.add_argument("--variant", type=csv_list, help="with --figure: only these variants' panels (default: all)")
    c.add_argument(
        "--into",
        metavar="DIR",
        help="copy the run's files into DIR/NAME/ and write the card to DIR/NAME.md "
        "(the docs' cards: --into docs/runs)",
    )
    c.set_defaults(func=commands["card"])
    d = sub.add_parser(
        "docs",
        help="write the pages taken from the code: variant pages, the CLI reference, the run "
        "cards under docs/runs/, the README's variants table, mkdocs.yml's nav",
    )
    d.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each page that is out of date")
    d.add_argument("--root", default=".", help="the repository's root (default: here)")
    d.set_defaults(func=commands["docs"])
