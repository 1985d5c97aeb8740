"""`python -m suite history add|backfill|check|report`: the command line's arguments (suite.history.commands runs them).

Imports nothing heavy: the parser is built on every command's start.
"""

from __future__ import annotations

DB = "results/history.duckdb"


def add_parser(sub, commands: dict, csv_list) -> None:
    h = sub.add_parser(
        "history",
        help="a history of runs over commits: add a run, backfill commits, check the "
        "newest points for a slowdown (exit 0/1/2), the trend page",
    )
    actions = h.add_subparsers(dest="action", required=True)
    a = actions.add_parser("add", help="append a finished run (adding it again adds nothing)")
    a.add_argument("run", help="a run name under --results-dir, or a run folder")
    a.add_argument("--commit-time", help="the commit's time (ISO 8601) where --repo does not have the commit")
    a.add_argument(
        "--another-fingerprint",
        action="store_true",
        help="accept a run of another machine or settings (check and report then need --fingerprint)",
    )
    _common(a)
    b = actions.add_parser(
        "backfill",
        help="check out each commit of A..B, run --grid with that commit's own "
        "code, add the run (exit 1 when a commit could not be measured)",
    )
    b.add_argument(
        "range",
        metavar="A..B",
        help="the commits after A up to B, as `git rev-list A..B` lists them (A^..B includes A)",
    )
    b.add_argument("--grid", required=True, help="a preset or a TOML/YAML file (read by each commit's checkout)")
    b.add_argument("--device", type=csv_list, help="override the grid's devices")
    b.add_argument("--variant", type=csv_list, help="only these variants (comma-separated)")
    b.add_argument(
        "--paths", nargs="+", metavar="PATH", help="only the commits that changed these paths (e.g. variants suite)"
    )
    b.add_argument(
        "--order",
        choices=["shuffled", "sequential"],
        default="shuffled",
        help="the order the commits are measured in: shuffled (the default: a host's drift over the "
        "backfill's hours is not the commits' order) or sequential (oldest first)",
    )
    b.add_argument("--seed", type=int, default=0, help="the shuffle's seed (default 0; recorded with the order)")
    _common(b)
    c = actions.add_parser(
        "check",
        help="exit 1 when the newest points of a case or an exponent form a slowdown "
        "change point, 0 when none does, 2 when it cannot judge",
    )
    c.add_argument("--fingerprint", help="the machine to judge, where the database holds several")
    c.add_argument("--markdown", help="write the verdict as Markdown here (also appended to $GITHUB_STEP_SUMMARY)")
    _against(c)
    c.add_argument(
        "--host-level",
        choices=["fail", "warn"],
        default="fail",
        help="a slowdown of the host's level (every case at once: the host, or a commit that slowed "
        "everything) fails the check (fail, the default) or is a warning (warn: a shared host "
        "whose load moves)",
    )
    c.add_argument(
        "--confirm",
        action="store_true",
        help="measure each slowdown of a case or a series' lengths again as an interleaved A/B of the "
        "commit before it against the newest run's (suite ab on the series' cases), and screen the "
        "newest points for more; fail only on those the A/B calls slower (the runs' drift over "
        "hours cancels in it)",
    )
    c.add_argument("--grid", help="with --confirm: the grid the history's runs were made with (a preset or a file)")
    c.add_argument("--device", type=csv_list, help="with --confirm: override the grid's devices, as the runs did")
    c.add_argument("--pairs", type=int, help="with --confirm: the A/B's process pairs (default: ab's)")
    c.add_argument("--rounds", type=int, help="with --confirm: A, B, B, A rounds per case in each pair (default: ab's)")
    c.add_argument(
        "--plugin", action="append", default=[], help="with --confirm: a module that registers extra variants"
    )
    c.add_argument(
        "--compile-cache",
        metavar="DIR",
        help="with --confirm: the A/B's workers keep compiled kernels in DIR (as `suite ab --compile-cache`)",
    )
    _common(c)
    r = actions.add_parser(
        "report",
        help="the trend page: each series' time and exponent over the commits, its change points, a summary first",
    )
    r.add_argument("--fingerprint", help="the machine to show, where the database holds several")
    r.add_argument("-o", "--output", default="reports/history/index.html", help="the page's path")
    _against(r)
    _common(r)
    h.set_defaults(func=commands["history"])


def _against(p) -> None:
    p.add_argument(
        "--against",
        choices=["auto", "level", "raw"],
        default="auto",
        help="judge each case's time against its run's level (the median shift of the run's other "
        "series), raw, or auto (the default: against the level where the cases' series spread "
        "less so)",
    )


def _common(p) -> None:
    p.add_argument("--db", default=DB, help=f"the history database (default {DB})")
    p.add_argument("--results-dir", default="results")
    p.add_argument("--repo", default=".", help="the git repository of the commits (default: here)")
