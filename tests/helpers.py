"""What the tests share: registry-driven cases and inputs, the `suite` command in a process or in this one,
tiny grids, the legacy run, a synthetic results table, the browser. Test modules import from here, never
from each other."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

import variants
from suite.plan import grid as grids

SKIP_IN_SWEEP = {"flex", "xformers"}  # compiled / CUDA-only: covered by their own tests


def kv_heads_for(spec, heads: int) -> int:
    if spec.kv_heads == "one":
        return 1
    if spec.kv_heads == "divides":
        return max(d for d in range(1, heads) if heads % d == 0) if heads > 1 else 1
    return heads


def inputs(spec, *, batch=2, heads=4, seq_len=37, head_dim=8, dtype=torch.float64, seed=0, kv_heads=None):
    gen = torch.Generator().manual_seed(seed)
    kv = kv_heads_for(spec, heads) if kv_heads is None else kv_heads
    q = torch.randn(batch, heads, seq_len, head_dim, generator=gen, dtype=dtype)
    k = torch.randn(batch, kv, seq_len, head_dim, generator=gen, dtype=dtype)
    v = torch.randn(batch, kv, seq_len, head_dim, generator=gen, dtype=dtype)
    return q, k, v


def all_impls(exclude=frozenset()):
    """Every (variant, impl) that computes the variant's own definition (peers apart: `peer_impls`)."""
    return [
        (name, impl)
        for name in variants.names()
        for impl, i in variants.get(name).impls.items()
        if impl != "dense" and impl not in exclude and i.differs is None
    ]


def peer_impls():
    """Library implementations whose definition differs from the variant's (checked where they coincide)."""
    return [
        (name, impl)
        for name in variants.names()
        for impl, i in variants.get(name).impls.items()
        if i.differs is not None
    ]


def causal_unsupported(spec, impl: str, causal: bool, params=None) -> bool:
    """The implementation refuses this form (linformer's causal, rfa's gate without causal)."""
    return bool(spec.reasons(impl, params or {}, causal=causal, dtype=torch.float64))


def patterns():
    return [name for name in variants.names() if variants.get(name).mask_fn is not None]


def theory(spec, **kw):
    """spec.theory with the KV heads a gqa case needs (pairs and FLOPs do not depend on them)."""
    if spec.kv_heads == "divides" and "num_kv_heads" not in kw:
        kw["num_kv_heads"] = 2
    return spec.theory(**kw)


TESTS = Path(__file__).parent
ROOT = TESTS.parent
PACED = {
    "threads": 1,
    "min_run_time_s": 0.01,
    "max_samples": 10,
    "case_timeout_s": 60,
    "memory_budget_gib": 4,
    "check_seq_len": 16,
    "replicates": 6,
    "probe": False,
}


def paced_grid(lengths, name: str = "abreal", **settings) -> str:
    """A grid of `paced/native` (tests/fault_variants.py, --plugin fault_variants) at `lengths`: the real
    sweeps' grid (`settings` over PACED)."""
    values = "\n".join(
        f"{key} = {str(value).lower() if isinstance(value, bool) else value}"
        for key, value in {**PACED, **settings}.items()
    )
    return (
        f'name = "{name}"\n[settings]\n{values}\n[defaults]\nbatch = [1]\nnum_heads = [1]\nhead_dim = [8]\n'
        f'[[block]]\nvariant = ["paced"]\nimpl = ["native"]\nseq_len = [{", ".join(map(str, lengths))}]\n'
    )


TINY = """
name = "{name}"
[settings]
threads = 1
min_run_time_s = 0.001
max_samples = 3
case_timeout_s = {timeout}
memory_budget_gib = {budget}
check_seq_len = 16
probe = {probe}
[defaults]
batch = [1]
num_heads = [2]
head_dim = [8]
seq_len = [16]
"""


def suite(*args, cwd, timeout=600, report=False, env_extra=None, **kw):
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **(env_extra or {})}
    if args[0] == "run" and not report and "--dry-run" not in args:
        args = (*args, "--no-report")  # the report has its own tests; one run below makes it
    return subprocess.run(
        [sys.executable, "-m", "suite", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, **kw
    )


def suite_in_process(*args, cwd, env_extra=None) -> subprocess.CompletedProcess:
    """`python -m suite ARGS` as `suite.cli.main(ARGS)` in this process: the same code from the parser
    on, without a new interpreter's start-up. For bad input, which stops before any work,
    and commands that start no worker (compare of stored runs, baseline); the exit status of a real
    process is tested where bad input is refused elsewhere (test_registry, test_ab, test_distributed)."""
    import contextlib
    import io
    from unittest import mock

    from suite import cli

    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            mock.patch.dict(os.environ, env_extra or {}),
        ):
            try:
                code = cli.main(list(args))
            except SystemExit as stop:  # argparse's own errors
                code = stop.code if isinstance(stop.code, int) else 1
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(["suite", *args], code, out.getvalue(), err.getvalue())


def write_grid(tmp_path: Path, body: str, name="t", timeout=60, probe=False) -> Path:
    """A tiny grid; without the machine's probes (GEMM, bandwidth and its sweep: seconds a run) unless `probe`: the
    tests that read them ask, and get a 1 GiB budget (the bandwidth probe's memory-level buffers are a quarter of it,
    or of the address space the worker has left, where 3 GiB's would take seconds more); 3 GiB otherwise."""
    path = tmp_path / f"{name}.toml"
    path.write_text(TINY.format(name=name, timeout=timeout, probe=str(probe).lower(), budget=1 if probe else 3) + body)
    return path


def preset_copy(preset: str, folder: Path, **settings) -> Path:
    """A copy of a preset grid in `folder` with `settings` set in its [settings] table (ints and booleans)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = (ROOT / "suite" / "plan" / "grids" / f"{preset}.toml").read_text().splitlines()
    assert lines.count("[settings]") == 1, preset
    for key, value in settings.items():
        assert isinstance(value, (bool, int)), (key, value)
        text = str(value).lower()
        found = [i for i, line in enumerate(lines) if line.split("=")[0].strip() == key]
        assert len(found) <= 1, (preset, key)
        if found:
            lines[found[0]] = f"{key} = {text}"
        else:
            lines.insert(lines.index("[settings]") + 1, f"{key} = {text}")
    path = folder / f"{preset}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def unprobed(preset: str, folder: Path) -> Path:
    """A copy of a preset grid with the probes off, in `folder`: for a test that reads none of what they measure."""
    return preset_copy(preset, folder, probe=False)


LEGACY = Path(__file__).parent / "fixtures" / "legacy" / "legacy-a"


def legacy_run(tmp_path: Path, name: str = "r") -> Path:
    shutil.copytree(LEGACY, tmp_path / name)
    return tmp_path / name


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def browser_or_skip():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if sync_playwright is None or not os.path.exists(CHROMIUM):
        if os.environ.get("SUITE_REQUIRE_BROWSER"):
            pytest.fail(f"SUITE_REQUIRE_BROWSER is set but playwright or {CHROMIUM} is missing")
        pytest.skip(f"needs playwright and Debian's chromium at {CHROMIUM} (apt-get install chromium)")
    return sync_playwright


IMAGE_WIDTHS = "Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)"  # 0: an image that did not load


def in_browser(path: Path, *expressions: str) -> tuple[list[str], list]:
    """Open a local page in headless Chromium: the errors it logged (console and uncaught) and each
    JavaScript expression's value. Skips (or fails under SUITE_REQUIRE_BROWSER) without a browser."""
    sync_playwright = browser_or_skip()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        errors: list[str] = []
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(Path(path).as_uri(), wait_until="load")
        values = [page.evaluate(expression) for expression in expressions]
        browser.close()
    return errors, values


# ----------------------------------------------------------------------------- on a results table
def table() -> pd.DataFrame:
    """A synthetic results table: full (sdpa, dense) and sliding_window (native, sdpa) over n, one OOM row."""
    n = [256, 512, 1024, 2048, 4096, 8192, 16384]
    rows = (
        synthetic_rows("full", "sdpa", {x: 1e-9 * x**2 for x in n}, claimed=2.0)
        + synthetic_rows("full", "dense", {x: 3e-9 * x**2 for x in n[:5]}, claimed=2.0)
        + synthetic_rows(
            "sliding_window",
            "native",
            {x: 2e-5 * x for x in n},
            claimed=1.0,
            flops_counted=lambda x: 4 * 8 * 64 * 257 * x,
        )
        + synthetic_rows(
            "sliding_window",
            "sdpa",
            {x: 1.1e-9 * x**2 for x in n[:5]},
            claimed=1.0,
            flops_counted=lambda x: 4 * 8 * 64 * x**2,
        )
    )
    rows.append({**rows[0], "seq_len": 32768, "status": "oom", "reason": "out of memory", "time_s": None})
    return pd.DataFrame(rows)


def stored_table() -> pd.DataFrame:
    """`table()` as a run stores it: every column of a row, each time its own single sample and fastest call."""
    from suite.store.row import COLUMNS

    frame = table()
    for col in COLUMNS:
        if col not in frame:
            frame[col] = None
    frame["samples"] = frame["time_s"].map(lambda t: [t] if t == t and t is not None else None)
    frame["time_min_s"] = frame["time_s"]
    frame["case_id"] = [f"{r.variant}-{r.impl}-{r.seq_len}-{r.status}" for r in frame.itertuples()]  # text, as a run's
    return frame


def synthetic_rows(variant, impl, times: dict, *, claimed, flops_counted=None, peak=None, **shape):
    base = dict(
        variant=variant,
        impl=impl,
        device="cpu",
        dtype="float32",
        mode="fwd",
        batch=1,
        num_heads=8,
        num_kv_heads=8,
        head_dim=64,
        causal=False,
        params="{}",
        status="ok",
        reason="",
        claimed_exponent_n=claimed,
        claimed_exponent_d=1.0,
    )
    base.update(shape)
    out = []
    for n, t in times.items():
        flops = 4 * 8 * 64 * n**claimed
        out.append(
            {
                **base,
                "seq_len": n,
                "time_s": t,
                "flops": flops,
                "flops_counted": flops_counted(n) if flops_counted else flops,
                "peak_bytes": peak(n) if peak else 1e3 * n,
            }
        )
    return out


def fwd_bwd_length(name: str) -> int:
    """The full grid's largest fwd_bwd length of `name`'s native path, a planned one or the top of its adaptive
    range: where its timed backward is checked."""
    grid = grids.resolve("full")
    return max(
        [case.seq_len for case in grid.cases if _native_fwd_bwd(case, name)]
        + [ladder.high for ladder in grid.ladders if _native_fwd_bwd(ladder.template, name)]
    )


def _native_fwd_bwd(case, name: str) -> bool:
    return case.mode == "fwd_bwd" and case.variant == name and case.impl == "native"


# a grid of three variants and two faults, for the sharded and the Ray runs
SMALL = """
[[block]]
variant = ["full", "sliding_window", "linear"]
impl = ["sdpa", "native", "dense"]
seq_len = [16, 32]
[[block]]
variant = ["fault_raise", "fault_exit"]
impl = ["native"]
"""
