"""The report: built from a results folder alone, self-contained, and rendered by a real browser."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from helpers import IMAGE_WIDTHS, in_browser, stored_table

from suite import analyse as analysis
from suite.present import report
from suite.store.row import COLUMNS
from suite.store.rundir import RunDir

pytestmark = (
    pytest.mark.slow
)  # the report built, and rendered in a headless browser (the fast lane: pytest -m "not slow")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A run folder with a synthetic table, a probe and an environment, and its report."""
    root = tmp_path_factory.mktemp("report")
    run = root / "results" / "synthetic"
    run.mkdir(parents=True)
    frame = stored_table()
    native = (frame["variant"] == "sliding_window") & (frame["impl"] == "native")
    frame["op_seconds"] = [
        {"bmm": 6e-3, "_softmax": 3e-3, "mul": 1e-3, "fill_": 5e-4} if is_native else None for is_native in native
    ]
    frame["traffic_bytes"] = (
        frame["flops"] / 2
    )  # 2 FLOP/B: under the ridge of the planted peak over the planted bandwidth
    frame["compulsory_bytes"] = frame["flops"] / 200
    RunDir(run).write_table(frame[COLUMNS])
    (run / "env.json").write_text(json.dumps({"torch": "2.13.0", "cpu_model": "test CPU", "fingerprint_id": "x"}))
    (run / "plan.json").write_text(json.dumps({"grid": "synthetic", "settings": {"threads": 1}}))
    shapes = {
        "1×512×512×512": {"what": "square", "flops_per_s": 1e11, "rounds": [0.9e11, 1e11, 1.1e11], "spread": 0.2},
        "8×1024×64×1024": {"what": "scores q·kᵀ", "flops_per_s": 0.8e11, "rounds": [0.8e11] * 3, "spread": 0.0},
    }
    (run / "probe.json").write_text(
        json.dumps(
            {
                "cpu": {
                    "float32": {
                        "flops_per_s": 1e11,
                        "threads": 1,
                        "spread": 0.2,
                        "shape": "1×512×512×512",
                        "by_shape": shapes,
                    }
                }
            }
        )
    )
    kernels = {
        "triad memory 128 MiB": {
            "kernel": "triad",
            "level": "memory",
            "buffer_bytes": 128 << 20,
            "bytes_per_s": 1e10,
            "rounds": [0.95e10, 1e10, 1.05e10],
            "spread": 0.1,
        },
        "copy cache 128 KiB": {
            "kernel": "copy",
            "level": "cache",
            "buffer_bytes": 128 << 10,
            "bytes_per_s": 8e10,
            "rounds": [8e10] * 3,
            "spread": 0.0,
        },
    }
    (run / "bandwidth.json").write_text(
        json.dumps(
            {
                "cpu": {
                    "bytes_per_s": 1e10,
                    "spread": 0.1,
                    "kernel": "triad memory 128 MiB",
                    "cache_bytes_per_s": 8e10,
                    "cache_spread": 0.0,
                    "cache_kernel": "copy cache 128 KiB",
                    "threads": 1,
                    "by_kernel": kernels,
                }
            }
        )
    )
    return report.build(RunDir(run), root / "reports" / "synthetic")[0]


def test_report_is_self_contained_with_embedded_figures_and_the_raw_data_beside_it(built):
    page = built.read_text()
    images = re.findall(r'<img[^>]*src="([^"]+)"', page)
    assert len(images) >= 4  # time, memory, FLOPs, efficiency
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r'(src|href)="(https?:)?//', page), "nothing may load from the network"
    for name in ("results.csv", "results.parquet", "env.json", "probe.json", "bandwidth.json"):
        assert (built.parent / name).is_file() and f'href="{name}"' in page
    assert "<script" not in page


def test_report_leads_with_the_verdicts_of_the_data(built):
    page = built.read_text()
    verdicts = page[page.index('id="verdicts"') : page.index('id="other-axes"')]
    rows = re.findall(
        r"<tr><td>(\w+)</td><td>([^<]+)</td>.*?class=\"(confirmed|refuted|inconclusive)\"", verdicts, flags=re.S
    )
    got = {(variant, impl): status for variant, impl, status in rows}
    assert got[("sliding_window", "native")] == "confirmed"
    assert got[("sliding_window", "sdpa")] == "refuted"
    assert "grows as n^2.00, not as the algorithm&#39;s n^1" in verdicts  # the masked path's diagnosis
    assert "100 GFLOP/s ± 10.0% (1×512×512×512)" in page  # the probe's peak and its spread
    efficiency = page[page.index('id="efficiency"') :]
    assert re.search(
        r"scores q·kᵀ</td><td>8×1024×64×1024</td><td class=\"num\">80 GFLOP/s</td>\s*"
        r"<td class=\"num\">80 GFLOP/s – 80 GFLOP/s</td><td class=\"num\">80%</td>",
        efficiency,
    )
    assert "memory / output" in efficiency and "<th>share with every term</th>" in efficiency
    assert "<td>bmm 57% · _softmax 29% · mul 10%</td>" in efficiency  # the profiled call's three largest
    assert "out of memory" in page  # the failed case, with its reason
    assert "10 GB/s ± 5.0% (triad memory 128 MiB), in cache 80 GB/s ± 0.0% (copy cache 128 KiB)" in page
    assert "<th>% of roofline, traffic (binds)</th>" in efficiency and 'id="roofline"' in efficiency
    # the window's native path at n = 16384: its traffic at the planted bandwidth over its measured time
    assert re.search(
        r"<td>sliding_window</td><td>native</td><td class=\"num\">16384</td>.*?"
        r"<td class=\"num\">2</td>\s*<td class=\"num\">0.5% \(memory\)</td>\s*"
        r"<td class=\"num\">0.1% \(compute\)</td>",
        efficiency,
        flags=re.S,
    )
    assert "speed-up at the largest n</th>" in page and "allowed, ×" in page  # FLOPs' bound beside the measured


def test_a_run_that_skipped_the_probes_says_so_and_draws_no_roofline(built, tmp_path):
    """`probe = false` in a grid's settings: the run's probe files carry the reason, the page shows it."""
    import shutil

    run = tmp_path / "results" / "unprobed"
    shutil.copytree(built.parent.parent.parent / "results" / "synthetic", run)
    unprobed = {"error": "not asked for: the grid's settings have probe = false"}
    (run / "probe.json").write_text(json.dumps({"cpu": {"float32": unprobed}}))
    (run / "bandwidth.json").write_text(json.dumps({"cpu": unprobed}))
    page = report.build(RunDir(run), tmp_path / "reports" / "unprobed")[0].read_text()
    said = "not measured (not asked for: the grid&#39;s settings have probe = false)"
    assert page.count(said) == 2 and "<th>probe cpu/float32</th>" not in page  # the peak's and the bandwidth's
    assert 'id="roofline"' not in page


def test_summary_prints_one_line_per_claim_fit(built):
    frame = RunDir(built.parent.parent.parent / "results" / "synthetic").read_table()
    text = report.summary(analysis.claims(analysis.all_exponents(frame)))
    lines = text.splitlines()
    settle = lines.index("not settled, and what would settle it:")  # full/dense: 5 lengths confirm nothing
    assert lines[0].startswith("variant") and settle == 1 + 4 and lines[settle + 1].startswith("  full/dense:")
    assert any("sliding_window" in line and "confirmed" in line for line in lines)


def test_summary_tells_apart_series_of_one_implementation_by_what_varies(built):
    frame = RunDir(built.parent.parent.parent / "results" / "synthetic").read_table()
    claims = analysis.claims(analysis.all_exponents(frame))
    twice = pd.concat([claims, claims.assign(dtype="bfloat16")], ignore_index=True)
    lines = report.summary(twice).splitlines()
    native = [line for line in lines[1:] if line.startswith("sliding_window") and " native " in line]
    assert len(native) == 2 and any("bfloat16" in line for line in native) and any("float32" in line for line in native)
    assert "float32" not in report.summary(claims)  # nothing varies: no column


def test_report_command_rebuilds_from_results_alone_and_names_known_runs_on_a_typo(built, tmp_path):
    from suite import cli

    results_dir = built.parent.parent.parent / "results"
    assert cli.main(["report", "synthetic", "--results-dir", str(results_dir), "--reports-dir", str(tmp_path)]) == 0
    assert (tmp_path / "synthetic" / "index.html").is_file()
    assert cli.main(["report", "synthetc", "--results-dir", str(results_dir), "--reports-dir", str(tmp_path)]) == 2


def test_report_renders_in_headless_chromium_with_no_console_errors_and_every_figure_loaded(built):
    errors, (widths, heading) = in_browser(built, IMAGE_WIDTHS, "document.querySelector('h1').innerText")
    assert errors == []
    assert len(widths) >= 6 and all(w > 100 for w in widths), widths  # with the roofline and the speed-ups
    assert "synthetic" in heading


def test_the_efficiency_table_shows_forward_and_backward_beside_forward():
    """Issue 16 asks fwd_bwd measured as fwd is: each mode's series gets its largest-n row."""
    from suite.present.report import efficiency_rows

    def row(mode, n, series):
        return {
            "variant": "linear",
            "series": series,
            "mode": mode,
            "seq_len": n,
            "status": "ok",
            "kv_len": None,
            "valid_fraction": None,
            "batch": 1,
            "num_heads": 8,
            "head_dim": 64,
            "device": "cpu",
            "dtype": "float32",
        }

    frame = pd.DataFrame(
        [
            row("fwd", 1024, "native"),
            row("fwd", 4096, "native"),
            row("fwd_bwd", 512, "native (fwd_bwd)"),
            row("fwd_bwd", 2048, "native (fwd_bwd)"),
        ]
    )
    got = efficiency_rows(frame)
    assert sorted(zip(got["series"], got["seq_len"])) == [("native", 4096), ("native (fwd_bwd)", 2048)]
