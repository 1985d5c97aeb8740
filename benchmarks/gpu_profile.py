"""Where a native path's time goes on a CUDA device: launches or kernels.

    python benchmarks/gpu_profile.py OUT.json [--n 16384] [--heads 16] [--dtype bfloat16] [--modes fwd,fwd_bwd]
    python benchmarks/gpu_profile.py OUT.json --set triton --n 16384,65536 --series 8192,32768 \
        --check 4096 --check-impls triton --criteria      # the `triton` paths beside their yardsticks
    python benchmarks/gpu_profile.py OUT.json --set triton --dry-run   # the rows and their reasons here

For each native path (and SDPA / FlexAttention on full attention as yardsticks), B = 1, d = 64: the
median of `triton.testing.do_bench` (CUDA events), then one profiled call (torch.profiler): how many
CUDA kernels it launched, the sum of their times, and the kernels that took most. A call whose
kernels add up to far less than its wall time is bound by launches (or host work between them), not
by the device. Runs on CPU too (`--device cpu`: wall time and the count of aten ops only), so the
script is tried before a lease.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import variants
from suite.plan.case import Case
from suite.run.measurement.inputs import build, inputs
from suite.store import atomic
from variants.rules import against_reference

PATHS = [("full", "sdpa")] + [
    (name, "native")
    for name in (
        "sliding_window",
        "neighborhood",
        "global",
        "random",
        "strided",
        "fixed",
        "bigbird",
        "linear",
        "performer",
        "rfa",
        "reformer",
        "linformer",
        "mqa",
        "gqa",
    )
]
# The `triton` paths (variants.triton), each beside the yardstick its criterion names (benchmarks/
# triton_criteria.py): FlexAttention on the patterns, flash-linear-attention on causal linear, SDPA on
# full attention; rows are (variant, impl, causal). `--series` adds lengths to the rows whose
# exponent is checked.
TRITON = (
    "sliding_window",
    "neighborhood",
    "global",
    "random",
    "strided",
    "fixed",
    "bigbird",
    "linear",
    "performer",
    "rfa",
)
TRITON_PATHS = (
    [("full", "sdpa", False)]
    + [(name, "triton", False) for name in TRITON]
    + [(name, "flex", False) for name in ("sliding_window", "neighborhood", "random", "bigbird")]
    + [("linear", "triton", True), ("linear", "fla-core", True)]
)
SERIES = {("random", "triton", False), ("bigbird", "triton", False)}
NATIVE_BESIDE = [(name, "native", False) for name in TRITON]  # --with-native
KV_HEADS = {"equal": lambda h: h, "one": lambda h: 1, "divides": lambda h: max(1, h // 4)}


class OpCount(TorchDispatchMode):
    """aten ops dispatched during a call: on CUDA nearly each one is a kernel launch."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


# torch.compile'd paths: under a dispatch mode dynamo traces them again and refuses, and after that refusal
# every later compile of the process was refused too (FlexAttention's rows, an H200 lease): never counted
COMPILED = {"flex"}


def aten_ops(fn) -> int | None:
    """None where a call cannot run under a dispatch mode (a higher-order op does not dispatch through
    modes). Counted last, after the call is timed and profiled."""
    counter = OpCount()
    try:
        with counter:
            fn()
    except Exception:
        return None
    return sum(counter.ops.values())


def median_ms(fn, device: str, rep_ms: int) -> float:
    if device == "cuda":
        from triton.testing import do_bench

        return do_bench(fn, warmup=25, rep=rep_ms, return_mode="median")
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * sorted(times)[1]


def kernels(fn) -> dict:
    """One profiled CUDA call: kernel count, summed kernel time, the five costliest kernels."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name = collections.defaultdict(lambda: [0, 0.0])
    for e in events:
        by_name[e.name][0] += 1
        by_name[e.name][1] += e.device_time / 1e3  # µs -> ms
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:5]
    return {
        "kernels": len(events),
        "kernel_ms": sum(t for _, t in by_name.values()),
        "top": [[name[:80], count, round(ms, 4)] for name, (count, ms) in top],
    }


def one(variant: str, impl: str, mode: str, args, n: int | None = None, causal: bool = False) -> dict:
    spec = variants.get(variant)
    heads, n = args.heads, n or args.n
    case = Case(variant, impl, args.device, args.dtype, mode, 1, n, heads, KV_HEADS[spec.kv_heads](heads), 64, causal)
    row = {
        "variant": variant,
        "impl": impl,
        "mode": mode,
        "n": n,
        "heads": heads,
        "kv_heads": case.num_kv_heads,
        "dtype": args.dtype,
        "causal": causal,
    }
    try:
        q, k, v = inputs(case, requires_grad=mode == "fwd_bwd")
        fn, _ = build(case, q, k, v)
        for _ in range(2):
            fn()
        if args.check and (not args.check_impls or impl in args.check_impls.split(",")):
            row["check_n"] = args.check
            row["check_error"] = checked(
                Case(
                    variant,
                    impl,
                    args.device,
                    "float32",
                    mode,
                    1,
                    args.check,
                    case.num_heads,
                    case.num_kv_heads,
                    64,
                    causal,
                )
            )
        row["median_ms"] = median_ms(fn, args.device, args.rep)
        if args.device == "cuda":
            row.update(
                kernels(fn)
            )  # NB: no peak memory here (do_bench's flush buffer, the check): the suite's is per call
        row["aten_ops"] = None if impl in COMPILED else aten_ops(fn)
    except Exception as err:  # a row says what failed; the next path still runs
        row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
    finally:
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return row


@functools.cache
def checked(small: Case) -> float:
    """The path's error against dense float64 for `small` (float32 inputs at the check's n): once per path,
    mode and causality, whatever lengths the path is profiled at (the case holds no length of theirs)."""
    return against_reference(
        variants.get(small.variant),
        small.impl,
        lambda m: inputs(small),
        small.seq_len,
        {},
        small.causal,
        grads=small.mode == "fwd_bwd",
    )[0]


def key(row: dict) -> tuple:
    return row["variant"], row["impl"], row["mode"], row["n"], row["causal"]


def kept(path: str) -> list[dict]:
    """The rows of an earlier profile into `path` that did not fail (none when there is no file)."""
    if not Path(path).exists():
        return []
    return [row for row in json.loads(Path(path).read_text()) if "error" not in row]


def planned(args) -> list[tuple[str, str, bool, int]]:
    """(variant, impl, causal, n) of every row the arguments ask for, in order."""
    lengths = [int(x) for x in str(args.n).split(",")]
    if args.set == "native":
        paths = [(v, i, False) for v, i in PATHS]
    else:
        paths = TRITON_PATHS + (NATIVE_BESIDE if args.with_native else [])
    only = set(filter(None, args.only.split(",")))
    series = sorted({*lengths, *(int(x) for x in args.series.split(",") if x)})
    return [
        (v, i, c, n) for v, i, c in paths if not only or v in only for n in (series if (v, i, c) in SERIES else lengths)
    ]


def dry_run(args) -> None:
    """The rows, and why each cannot run on this device in this dtype (nothing is run)."""
    from suite.plan.case import DTYPES

    for variant, impl, causal, n in planned(args):
        spec = variants.get(variant)
        for mode in args.modes.split(","):
            why = spec.reasons(
                impl,
                device=args.device,
                dtype=DTYPES[args.dtype],
                seq_len=n,
                causal=causal,
                num_heads=args.heads,
                head_dim=64,
            )
            print(
                f"{variant + '/' + impl:28s} {mode:8s} n={n:<7d} causal={causal!s:5s} "
                f"{'runs' if not why else 'cannot: ' + '; '.join(why)}"
            )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--n", default="16384", help="lengths, comma-separated")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--modes", default="fwd,fwd_bwd")
    parser.add_argument("--rep", type=int, default=200, help="do_bench's timed milliseconds")
    parser.add_argument("--only", default="", help="comma-separated variant names")
    parser.add_argument(
        "--set",
        choices=("native", "triton"),
        default="native",
        help="the rows: native paths, or the triton paths beside their yardsticks",
    )
    parser.add_argument(
        "--series", default="", help="more lengths for the rows whose exponent is checked (--set triton)"
    )
    parser.add_argument("--with-native", action="store_true", help="--set triton: the native paths too")
    parser.add_argument(
        "--check",
        type=int,
        default=0,
        help="also check the output (fwd) or the output and "
        "gradients (fwd_bwd) against dense float64 at this n (float32 inputs, the profiled heads)",
    )
    parser.add_argument("--check-impls", default="", help="check only these impls (comma-separated; default all)")
    parser.add_argument(
        "--criteria",
        action="store_true",
        help="then the triton criteria, pass/fail (benchmarks/triton_criteria.py); exit 1 when one fails",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the rows and their reasons; run nothing")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows OUT already holds that did not fail "
        "and run the rest (a profile that a lease's time limit stopped)",
    )
    args = parser.parse_args()
    if args.dry_run:
        return dry_run(args)
    rows = kept(args.out) if args.resume else []
    done = {key(row) for row in rows}
    print(
        f"{'path':28s} {'mode':8s} {'n':>6s} {'ms':>9s} {'kern ms':>9s} {'kernels':>8s} {'ops':>7s}  top kernel"
        + (f"  ({len(rows)} rows kept from {args.out})" if rows else "")
    )
    for variant, impl, causal, n in planned(args):
        for mode in args.modes.split(","):
            if (variant, impl, mode, n, causal) in done:
                continue
            row = one(variant, impl, mode, args, n, causal)
            rows.append(row)
            top = row.get("top", [[""]])[0][0][:40] if row.get("top") else ""
            path = variant + "/" + impl + (" causal" if causal else "")
            print(
                f"{path:28s} {mode:8s} {n:6d} {row.get('median_ms', float('nan')):9.3f} "
                f"{row.get('kernel_ms', float('nan')):9.3f} {row.get('kernels', 0):8d} {row.get('aten_ops') or -1:7d}  "
                f"{row.get('error', top)}" + (f"  check {row['check_error']:.1e}" if "check_error" in row else ""),
                flush=True,
            )
            atomic.write_text(Path(args.out), json.dumps(rows, indent=1))  # whole, after every row
    if args.criteria:
        import sys

        from triton_criteria import report  # benchmarks/, beside this script

        sys.exit(0 if report(rows) else 1)


if __name__ == "__main__":
    main()
