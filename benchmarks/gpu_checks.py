"""On a CUDA machine, what a sweep cannot check about itself: the suite's timer against triton's
do_bench on cases of different sizes, the device's matmul rates, and device memory back at its
baseline after a case that ran out of memory.

    python benchmarks/gpu_checks.py results/gpu_checks.json

Prints a table and writes every raw figure as JSON. Exit 1 when a check fails: a median more than 5%
from do_bench's, memory left allocated after the out-of-memory case, or a case that fails after it.
"""

from __future__ import annotations

import gc
import json
import statistics
import sys

import torch

from suite.machine import device as devices
from suite.plan.case import Case
from suite.run.measurement.inputs import build, inputs
from suite.run.measurement.measure import classify

AGREE = 0.05  # the suite's median within 5% of do_bench's


def _case(variant, impl, dtype, mode, batch, n, heads, d, causal=False) -> Case:
    return Case(variant, impl, "cuda", dtype, mode, batch, n, heads, heads, d, causal)


# Five cases from launch-bound (tens of µs) to long calls: a fused kernel, a compiled one, native paths.
CASES = [
    _case("full", "sdpa", "bfloat16", "fwd", 1, 1024, 8, 64),
    _case("full", "sdpa", "bfloat16", "fwd", 4, 16384, 16, 128),
    _case("full", "flex", "bfloat16", "fwd", 1, 4096, 16, 128, causal=True),
    _case("sliding_window", "native", "float32", "fwd", 1, 8192, 8, 64),
    _case("linear", "native", "bfloat16", "fwd_bwd", 1, 32768, 8, 64),
]
PLANTED_OOM = _case("full", "dense", "bfloat16", "fwd", 1, 262144, 8, 64)  # 1 TiB of scores


ROUNDS, MORE_ROUNDS = 6, 12  # alternating rounds, and the rounds added where a case is not steady
STEADY = 1.10  # a timer's round medians within 10% of each other; beyond, the case switches state (below)


def agreement(case: Case) -> dict:
    """The suite's CUDA timer and do_bench (medians, L2 flushed by both) on the same closure (`compare`)."""
    from triton.testing import do_bench

    q, k, v = inputs(case, requires_grad=case.mode == "fwd_bwd")
    fn, _ = build(case, q, k, v)
    row = compare(
        fn,
        lambda f: devices.get("cuda").time(f, 0.1, 250, 5),
        lambda f: [ms / 1e3 for ms in do_bench(f, warmup=20, rep=100, return_mode="all")],
    )
    return {"case": case.case_id, "label": case.label(), **row}


def compare(fn, ours, theirs, rounds: int = ROUNDS, more: int = MORE_ROUNDS) -> dict:
    """Both timers' samples of `fn` in alternating rounds (which goes first alternates too), so that a drift
    of the clocks falls on both; each round's two medians are kept. Where either timer's round medians spread
    more than STEADY, `more` rounds are added: H200, stop 62: linear/native fwd_bwd (host-bound) read 12.7 to
    21.4 ms a round under either timer, and six rounds left the pooled ratio at 1.157 from which state each
    round happened to catch (earlier leases: 0.90-0.95)."""
    samples, by_round = ([], []), []

    def one(i: int) -> None:
        order = (0, 1) if i % 2 == 0 else (1, 0)
        got = [None, None]
        for which in order:
            got[which] = (ours, theirs)[which](fn)
            samples[which].extend(got[which])
        by_round.append([1e3 * statistics.median(got[0]), 1e3 * statistics.median(got[1])])

    for i in range(rounds):
        one(i)
    spread = max(max(col) / min(col) for col in zip(*by_round))
    if spread > STEADY:
        for i in range(rounds, rounds + more):
            one(i)
    row = {
        "suite_ms": 1e3 * statistics.median(samples[0]),
        "suite_samples": len(samples[0]),
        "do_bench_ms": 1e3 * statistics.median(samples[1]),
        "do_bench_samples": len(samples[1]),
        "rounds_ms": by_round,
        "first_rounds_spread": spread,
    }
    row["ratio"] = row["suite_ms"] / row["do_bench_ms"]
    return row


def matmul_rates() -> dict:
    """TFLOP/s of an 8192³ matmul on random data, per dtype (float32 with TF32 off, as torch's default)."""
    from triton.testing import do_bench

    n, out = 8192, {}
    for name in ("bfloat16", "float16", "float32"):
        a, b = (torch.randn(n, n, device="cuda", dtype=getattr(torch, name)) for _ in range(2))
        out[name] = 2 * n**3 / (do_bench(lambda: a @ b, warmup=100, rep=500, return_mode="median") / 1e3) / 1e12
        del a, b
    return out


def after_oom() -> dict:
    """Provoke an out-of-memory case; memory must return to its baseline and the next case must run."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    status, reason = "ok", ""
    try:
        q, k, v = inputs(PLANTED_OOM)
        fn, _ = build(PLANTED_OOM, q, k, v)
        fn()
        torch.cuda.synchronize()
    except BaseException as err:  # noqa: BLE001 - the OOM is the point
        status, reason = classify(err)
        del err
    q = k = v = fn = None  # noqa: F841 - the case's tensors go, as the worker drops them
    gc.collect()
    torch.cuda.empty_cache()
    left = torch.cuda.memory_allocated() - base
    next_ok = agreement(CASES[0])["suite_ms"] > 0
    return {
        "case": PLANTED_OOM.case_id,
        "status": status,
        "reason": reason[:200],
        "left_bytes": left,
        "reserved_after": torch.cuda.memory_reserved(),
        "next_case_ran": next_ok,
    }


def main(path: str) -> int:
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}
    report["matmul_tflops"] = matmul_rates()
    report["agreement"] = [agreement(c) for c in CASES]
    report["oom"] = after_oom()
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"{report['device']}, torch {report['torch']}, CUDA {report['cuda']}")
    print("matmul 8192³ TFLOP/s: " + ", ".join(f"{k} {v:.0f}" for k, v in report["matmul_tflops"].items()))
    for row in report["agreement"]:
        print(
            f"{row['label']:<62} suite {row['suite_ms']:9.4f} ms  do_bench {row['do_bench_ms']:9.4f} ms"
            f"  ratio {row['ratio']:.3f}  rounds " + " ".join(f"{a / b:.3f}" for a, b in row["rounds_ms"])
        )
    oom = report["oom"]
    print(
        f"planted OOM: {oom['status']} ({oom['reason'][:80]}); left allocated {oom['left_bytes']} B; "
        f"next case ran: {oom['next_case_ran']}"
    )
    bad = [r for r in report["agreement"] if abs(r["ratio"] - 1) > AGREE]
    failed = bool(bad) or oom["status"] != "oom" or oom["left_bytes"] != 0 or not oom["next_case_ran"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "gpu_checks.json"))
