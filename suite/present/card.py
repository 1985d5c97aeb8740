"""A run card: one Markdown page from a run folder's own files (env, plan, probe, table, journal).

The page holds where and how the run ran (host, CPU/GPU, torch, commit, wall time), its cases by
status, the noise line, the verdict table and the efficiency table; nothing that is not in the files.
The docs' "Measured" section is these cards (`docs/runs/NAME.md`, beside the files in `docs/runs/NAME/`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pandas as pd

from suite.analyse import Analysis, analyse, glance
from suite.errors import UsageError
from suite.plan.settings import Settings
from suite.present import figures
from suite.present import markdown as md
from suite.present.report import (
    cache_levels,
    efficiency_rows,
    fmt_fitted,
    fmt_joules,
    fmt_lengths,
    fmt_shares,
    fmt_si,
    fmt_slope,
    fmt_text,
    measured_energy,
    slice_tables,
)
from suite.store.journal import Journal
from suite.store.rundir import RunDir

# A card's folder: the run's table and JSON files, and the journal's times (its lines cut to the fields below:
# the rest of each line is in the table), what the card's wall time and date are read from.
FINISHED, FINISHED_FIELDS = "finished.jsonl", ("case_id", "replicate", "status", "finished_at", "wall_s")
COPIED = tuple(name for name in RunDir.SAVED if name != RunDir.CSV) + (RunDir.BASELINE,)
FILES = COPIED + (FINISHED, RunDir.JOURNAL)  # what the card links to, where present
ROOFLINES = ("traffic", "compulsory")  # the roofline shares, by which bytes they count
STATUS_ORDER = ("ok", "skipped", "invalid", "oom", "timeout", "error", "not_run")


def analysis_of(run: RunDir) -> Analysis:
    plan = run.plan()
    return analyse(
        run.read_table(),
        run.probe(),
        Settings.from_plan(plan.get("settings", {})).busy_limit_cores,
        run.read_json(RunDir.LADDERS).get("ladders", []),
        run.bandwidth(),
        run.env(),
    )


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))


def timing(run: RunDir) -> tuple[str, str]:
    """(when it finished, its wall time), from the journal; where a folder kept no journal, what it has."""
    journal = run.path / (FINISHED if (run.path / FINISHED).is_file() else RunDir.JOURNAL)
    lines, _ = Journal(journal).lines()
    ends = [(d["finished_at"], d.get("wall_s") or 0.0) for _, d in lines if d.get("finished_at")]
    if ends:
        first = min(end - wall for end, wall in ends)
        last = max(end for end, _ in ends)
        return _utc(last), (
            f"{(last - first) / 60:.1f} min from the first case's start to the last case's end "
            "(the journal; the workers' start and the report not included)"
        )
    saved = run.read_json(RunDir.BASELINE).get("saved_at")
    when = f"saved as a baseline {saved}" if saved else "not recorded in these files"
    return when, "not recorded: this folder keeps no journal"


def _counts(frame: pd.DataFrame, plan: dict) -> str:
    counts = frame["status"].value_counts()
    order = [s for s in STATUS_ORDER if s in counts] + sorted(s for s in counts.index if s not in STATUS_ORDER)
    text = f"{len(frame)} planned: " + ", ".join(f"{counts[s]} {s}" for s in order)
    stopped = int(counts.get("not_run", 0))
    if stopped:
        text += (
            f". The run stopped after {len(frame) - stopped} of {len(frame)} cases: the {stopped} `not_run` "
            "were never reached, and nothing below is fitted on them"
        )
    if plan.get("grid_cases") and plan["grid_cases"] != len(frame):
        text += f" (the grid planned {plan['grid_cases']}; adaptive lengths added the rest)"
    return text


def _peaks(peaks: dict) -> str:
    out = []
    for device, by_dtype in peaks.items():
        for dtype, p in by_dtype.items():
            if "flops_per_s" in p:
                spread = f", rounds spread {p['spread']:.1%}" if "spread" in p else ""
                out.append(f"{device}/{dtype} {fmt_si(p['flops_per_s'], 'FLOP/s')}{spread}")
            else:
                out.append(f"{device}/{dtype} not measured ({p.get('error', 'no figure')})")
    return "; ".join(out) or "not measured in this run"


def _bandwidth(bandwidth: dict) -> str:
    out = []
    for device, b in bandwidth.items():
        if "bytes_per_s" not in b:
            out.append(f"{device} not measured ({b.get('error', 'no figure')})")
            continue
        cache = (
            f", in cache {fmt_si(b['cache_bytes_per_s'], 'B/s')} ± {50 * b.get('cache_spread', 0):.1f}%"
            if "cache_bytes_per_s" in b
            else ""
        )
        out.append(
            f"{device} {fmt_si(b['bytes_per_s'], 'B/s')} ± {50 * b.get('spread', 0):.1f}% ({b.get('kernel', '?')})"
            f"{cache}"
        )
    return "; ".join(out) or "not measured in this run (a run before the bandwidth probe)"


def _gathers(bandwidth: dict) -> str:
    """Each device's gather probe (suite.machine.gathers): ns a pair at a few lengths, over how many processes."""
    out = []
    for device, b in bandwidth.items():
        g = b.get("gathers") if isinstance(b, dict) else None
        if not isinstance(g, dict) or "ns_per_pair" not in g:
            continue
        shown = [
            (n, ns)
            for n, ns in zip(g["lengths"], g["ns_per_pair"])
            if n in (g["lengths"][0], 4096, 65536, g["lengths"][-1])
        ]
        out.append(
            f"{device} "
            + ", ".join(f"{ns:.1f} ns a pair at n = {n}" for n, ns in shown)
            + f" (the fastest of {len(g.get('processes', [0]))} process(es))"
        )
    return "; ".join(out) or "none in this run (no case of random gathers, or a run before the probe)"


def _facts(run: RunDir, frame: pd.DataFrame) -> str:
    env, plan = run.env(), run.plan()
    finished, wall = timing(run)
    host = f"{env.get('cpu_model', '?')}, {env.get('cpu_count', '?')} CPUs; {env.get('platform', '?')}"
    torch_line = (
        f"torch {env.get('torch', '?')}, CUDA {env.get('cuda') or '–'}, xformers {env.get('xformers') or '–'}; "
        f"Python {env.get('python', '?')}"
    )
    rows = [
        ["grid", md.code(plan.get("grid", "?")) + (f" ({md.text(plan['source'])})" if plan.get("source") else "")],
        ["devices", ", ".join(env.get("devices", [])) or "?"],
        ["host", host],
        ["GPU", env.get("cuda_device") or "none"],
        ["software", torch_line],
        ["threads, allocator", f"{env.get('threads', '?')}, {env.get('allocator', '?')}"],
        ["commit", md.code(env.get("git_commit", "?"))],
        ["environment fingerprint", md.code(env.get("fingerprint_id", "?"))],
        ["finished", finished],
        ["wall time", wall],
        ["cases", _counts(frame, plan)],
        ["matmul peak (the run's probe)", _peaks(run.probe())],
        ["memory bandwidth (the run's probe)", _bandwidth(run.bandwidth())],
        ["random gathers (the run's probe)", _gathers(run.bandwidth())],
        ["CPU cache levels the cost model takes", cache_levels(env, run.bandwidth())],
    ]
    return md.table(["the run", "from its files"], rows)


def _verdict_rows(table: pd.DataFrame, length: str = "n") -> list[list[str]]:
    rows = []
    for _, r in table.iterrows():
        why, lengths = (r["why"] if r["verdict"] != "confirmed" else ""), fmt_lengths(r)
        if lengths:
            why = f"{why}; lengths: {lengths}" if why else f"lengths: {lengths}"
        memory = fmt_text(r.get("memory_verdict"))
        if memory not in ("", "confirmed"):
            why = f"{why}; memory: {r['memory_why']}" if why else f"memory: {r['memory_why']}"
        claim = f"{r['claimed']:g}" if pd.notna(r["claimed"]) else "–"
        rows.append(
            [
                r["variant"],
                r["series"],
                f"{r['device']}/{r['dtype']}",
                r.get("length", length),
                claim,
                r["verdict"],
                _claim(r.get("memory_claimed")),
                memory,
                fmt_text(r.get("terms")),
                fmt_slope(r),
                fmt_text(r.get("power_verdict")),
                fmt_fitted(r),
                why,
            ]
        )
    return rows


def _claim(value) -> str:
    return f"{value:g}" if value is not None and pd.notna(value) else "–"


VERDICT_HEADERS = [
    "variant",
    "implementation",
    "device",
    "in",
    "claim",
    "verdict",
    "memory claim",
    "memory verdict",
    "what the time is made of",
    "time exponent here [95% CI]",
    "power law",
    "fitted over",
    "why, and what would settle it",
]


def _verdicts(result: Analysis) -> list[str]:
    blocks = [
        "## Verdicts: the leading term of each claim",
        "Per variant and implementation, forward, non-causal. Each series' time in n is fitted as the sum of "
        "its own terms: a call's floor, a per-row cost, the claim's leading term, and a step in the time per "
        "unit of work where the working set leaves a cache level, bounded by the run's cache-over-memory "
        "bandwidth (where the leading term is random gathers, the run's measured rate for them instead); where "
        "an implementation names the path each length took, a factor on the leading term's "
        'rate for each later path, or the top path alone where it spans 16x by itself ("fitted alone"). '
        "**Confirmed**: the leading term is needed and no higher term is; **refuted**: a higher "
        "term is needed, or the counted FLOPs grow faster than the claim; else **inconclusive**, saying what "
        "would tell. \"What the time is made of\" is each term's share of the largest n's time. The time "
        "exponent here is the power law log(time) = a + p·log(n) over the points above the overhead floor, "
        'with the verdict its interval gave against the claim ± 0.15 ("power law"): it mixes the algorithm '
        "with this machine's overheads and caches ([how to read a verdict](../report.md#how-to-read-a-verdict), "
        "[the rule](../CLAIMS.md#verdicts)). **Memory**: each call's peak above its inputs in n, against the "
        "variant's claim of extra memory (its exponent), as the sum of a floor, a per-row term (the output) and the "
        "claim's term, by the same tests: refuted where a higher term is needed, confirmed where none is and the "
        "peak keeps the claim's term or less ([memory's rule](../CLAIMS.md#memory-what-a-call-keeps)).",
        md.table(VERDICT_HEADERS, _verdict_rows(result.claims))
        if not result.claims.empty
        else "No exponent could be fitted (a series needs 3 lengths).",
    ]
    for title, table in (
        *((title, rows) for title, _, rows in slice_tables(result.fits)),
        ("Other axes: heads and head dim", _other_axes(result.fits)),
        ("Decode: one query against a cache of n", result.decode),
        ("Cross attention: in n_q and in n_k", result.cross),
        ("Padded batches: in valid tokens", result.padding),
    ):
        if not table.empty:
            blocks += [f"### {title}", md.table(VERDICT_HEADERS, _verdict_rows(table))]
    return blocks


def _other_axes(fits: pd.DataFrame) -> pd.DataFrame:
    """Heads' and head dims' time fits with a claim, the power law's verdicts (docs/CLAIMS.md, "Heads and head dim")."""
    parts = [
        glance.rows_of(fits, one).assign(length={"num_heads": "H", "head_dim": "d"}[one.axis])
        for one in glance.SLICES
        if one.axis in ("num_heads", "head_dim")
    ]
    rows = pd.concat(parts) if parts else pd.DataFrame()
    return rows.sort_values(["variant", "impl", "length", "series"]) if not rows.empty else rows


# a verdict's colour in Markdown, which has no styles: the same on GitHub, in mkdocs and in a terminal
MARKS = {"confirmed": "🟢", "refuted": "🔴", "inconclusive": "🟡"}
# the card's heading of each slice's detail (mkdocs' and GitHub's anchors of the titles in `_verdicts`)
ANCHORS = {
    "verdicts": "verdicts-the-leading-term-of-each-claim",
    "training": "training-forward-and-backward-in-n",
    "causal": "causal-in-n",
    "decode": "decode-one-query-against-a-cache-of-n",
    "other-axes": "other-axes-heads-and-head-dim",
}


def _glance(result: Analysis) -> list[str]:
    table = glance.glance(result.fits)
    if table.empty:
        return []
    rows = [
        [
            r["variant"],
            r["impl"],
            f"{r['device']}/{r['dtype']}",
            *(
                f"[{MARKS.get(glance.verdict_of(r[one.name]), '')} {r[one.name]}](#{ANCHORS[one.anchor]})"
                if r[one.name]
                else ""
                for one in glance.SLICES
            ),
        ]
        for _, r in table.iterrows()
    ]
    return [
        "## Every claim's verdict at a glance",
        "A row per variant and implementation, a column per slice of its claims; each cell the verdict of that "
        "slice's series (🟢 confirmed, 🔴 refuted, 🟡 inconclusive: refuted where any series is, inconclusive where "
        'any is not settled, "k of m" where it holds several), linking to its detail below. Heads and head dim '
        "keep the power law's verdict ([why](../CLAIMS.md#heads-and-head-dim)).",
        md.table(["variant", "implementation", "device", *(one.name for one in glance.SLICES)], rows),
    ]


def _pct(x, binds=None) -> str:
    if not pd.notna(x):
        return ""
    return f"{100 * x:.1f}%" + (f" ({binds})" if isinstance(binds, str) else "")


def _efficiency(result: Analysis) -> list[str]:
    eff = efficiency_rows(result.efficiency)
    if eff.empty:
        return []
    energy, rows = measured_energy(eff), []
    for _, r in eff.iterrows():
        roof = [_pct(r.get(f"roofline_{bound}_share"), r.get(f"roofline_{bound}_binds")) for bound in ROOFLINES]
        joules = [fmt_joules(r["energy_per_call_j"]), fmt_joules(r["energy_per_token_j"])] if energy else []
        rows.append(
            [
                r["variant"],
                r["series"],
                f"{r['device']}/{r['dtype']}",
                r.get("mode", ""),
                int(r["seq_len"]),
                fmt_si(r["time_s"], "s"),
                fmt_si(r["useful_flops_per_s"], "FLOP/s"),
                _pct(r["peak_share"]),
                _pct(r["all_terms_share"]),
                *roof,
                f"{r['memory_ratio']:.2f}" if pd.notna(r["memory_ratio"]) else "",
                fmt_shares(r.get("op_shares")),
                *joules,
            ]
        )
    return [
        "## Efficiency: against the run's matmul peak and its roofline",
        "Each series' largest n at the main shape: the median time, the algorithm's FLOPs over it, their share of "
        "the probe's peak (and with every named term); the share of the roofline bound max(FLOPs / peak, bytes / "
        "bandwidth), its FLOPs the algorithm's products (a feature map's and a projection's with its own), with the "
        "algorithm's traffic and with the compulsory bytes, and which ceiling binds "
        "(blank: no bandwidth probe in the run); the call's peak memory above its inputs in outputs; and where "
        "one warm call's time went ([the report](../report.md#efficiency), "
        "[bytes](../CLAIMS.md#bytes-what-a-call-must-move-and-what-its-algorithm-moves))"
        + (
            "; on the GPU, the energy of a call (NVML's counter over the timing window over the calls made in it, L2 "
            "flushes included: an upper bound) and per token ([GPUs](../gpu.md#what-the-gpu-was-doing))."
            if energy
            else "."
        ),
        md.table(
            [
                "variant",
                "implementation",
                "device",
                "mode",
                "n",
                "time",
                "useful FLOP/s",
                "share of peak",
                "with every term",
                "% of roofline, traffic (binds)",
                "% of roofline, compulsory (binds)",
                "memory / output",
                "where one call's time went",
            ]
            + (["energy / call", "energy / token"] if energy else []),
            rows,
        ),
    ]


def _sentence(text: str) -> str:
    return text if text.endswith((".", "…")) else text + "."


def card(run: RunDir, files: str | None = None) -> str:
    """The card's Markdown. `files`: the folder the links to the run's files go to, relative to the card
    (None: no links, for a run that stays in results/)."""
    frame = run.read_table()
    result = analysis_of(run)
    plan = run.plan()
    kept = [name for name in FILES if (run.path / name).is_file()]
    source = (
        ", ".join(f"[`{name}`]({files}/{name})" for name in kept)
        if files is not None
        else ", ".join(md.code(name) for name in kept)
    )
    return md.page(
        f"# Run `{run.name}`: grid {md.text(plan.get('grid', '?'))} on "
        f"{md.text(', '.join(run.env().get('devices', [])) or '?')}",
        md.GENERATED.format(command="card"),
        md.text((plan.get("description") or "").strip()),  # NB: the user's grid file's text, shown, never markup
        _facts(run, frame),
        f"**Noise.** {_sentence(result.noise.line())}",
        *_glance(result),
        *_verdicts(result),
        *_efficiency(result),
        "## Files",
        f"Everything on this page is computed from the run's own files: {source}. `python -m suite card FOLDER` "
        "prints it again from them; `python -m suite docs` rewrites every card under `docs/runs/`.",
    )


def figure(run: RunDir, only: list[str] | None = None) -> bytes:
    """The verdict figure: time against n, a panel per variant (of `only`, where given), the fitted law
    dashed, the claim dotted."""
    result = analysis_of(run)
    if only:
        missing = sorted(set(only) - set(result.frame["variant"]))
        if missing:
            raise UsageError(
                f"--variant {','.join(missing)}: not in run {run.name} (it has: "
                f"{', '.join(sorted(result.frame['variant'].unique()))})"
            )
        result = dataclasses.replace(
            result,
            frame=result.frame[result.frame["variant"].isin(only)],
            fits=result.fits[result.fits["variant"].isin(only)],
        )
    image = figures.scaling(result, "time_min_s")
    if image is None:
        raise UsageError(f"run {run.name}: no series with 2 lengths or more to draw")
    return image


def publish(run: RunDir, target: Path) -> Path:
    """Copy the run's files into target/NAME/ and write target/NAME.md from the copies."""
    from suite.store import atomic

    folder = Path(target) / run.name
    folder.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        if (run.path / name).is_file():
            atomic.write_bytes(folder / name, run.file(name).read_bytes(), follow_links=True)
    lines, _ = Journal(run.path / RunDir.JOURNAL).lines()
    if lines:
        atomic.write_text(
            folder / FINISHED,
            "".join(json.dumps({k: d.get(k) for k in FINISHED_FIELDS}) + "\n" for _, d in lines),
            follow_links=True,
        )
    return atomic.write_text(Path(target) / f"{run.name}.md", card(RunDir(folder), files=run.name), follow_links=True)
