"""Split a grid into N balanced shards, and merge shard runs back into one run.

Balanced by predicted cost, not by count: a case costs its timing budget and its work. The work is
the variant's theory FLOPs for a `native` path, and every pair's for the others (a dense mask, a
fused kernel over a mask, the materializing reference compute all n² scores whatever the pattern).
The split is greedy longest-first onto the least-loaded shard, with ties broken by case id, so it
is the same on every machine for the same grid.
"""

from __future__ import annotations

import hashlib
import json
import re

from suite.plan.case import Case, theory_of

ASSUMED_FLOP_RATE = {"cpu": 2e10, "cuda": 2e13}  # only ratios between cases matter
CALLS_PER_REPLICATE = 4  # warm-up, two samples and the memory pass, at least
START_S = 0.05  # per case and process: messaging, check, setup


class ShardError(ValueError):
    """A shard spec or a set of shards that cannot be used; the message names the problem."""


def parse(spec: str) -> tuple[int, int]:
    """'K/N' with 1 ≤ K ≤ N → (K, N)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", spec or "")
    if not match:
        raise ShardError(f"--shard {spec!r} (allowed: K/N with 1 <= K <= N, e.g. 2/4)")
    k, n = int(match[1]), int(match[2])
    if not 1 <= k <= n:
        raise ShardError(f"--shard {spec!r}: K = {k} must lie in 1..N = {n}")
    return k, n


def predicted_s(case: Case, settings: dict) -> float:
    """A rough cost in seconds of measuring the case (all replicates): enough to balance shards."""
    try:
        flops = theory_of(case)["flops"]
    except Exception:  # noqa: BLE001 - a case whose theory fails costs little: it fails fast
        flops = 0
    if case.impl != "native":
        flops = max(flops, 4 * case.batch * case.num_heads * case.query_len * case.seq_len * case.head_dim)
    call_s = flops / ASSUMED_FLOP_RATE.get(case.device, 2e10)
    per_replicate = START_S + max(settings.get("min_run_time_s", 0.1), CALLS_PER_REPLICATE * call_s)
    return per_replicate * int(settings.get("replicates", 1))


def split(cases: list[Case], settings: dict, shards: int) -> list[list[Case]]:
    """N lists of cases covering every case exactly once, balanced by predicted cost; each keeps plan order."""
    order = {case.case_id: i for i, case in enumerate(cases)}
    load = [0.0] * shards
    members: list[list[Case]] = [[] for _ in range(shards)]
    for case in sorted(cases, key=lambda c: (-predicted_s(c, settings), c.case_id)):
        target = min(range(shards), key=lambda s: (load[s], s))
        load[target] += predicted_s(case, settings)
        members[target].append(case)
    return [sorted(group, key=lambda c: order[c.case_id]) for group in members]


def grid_id(cases: list[Case]) -> str:
    """The identity of the whole (unsharded) grid: a hash of its case ids in plan order."""
    return hashlib.sha1(",".join(c.case_id for c in cases).encode()).hexdigest()[:12]


def check_mergeable(plans: list[dict], envs: list[dict], names: list[str]) -> None:
    """Raise ShardError unless the runs are shards of one grid, measured in one environment."""
    first = plans[0]
    for plan, env, name in zip(plans, envs, names):
        if plan.get("grid_id", None) != first.get("grid_id") or plan.get("grid") != first.get("grid"):
            raise ShardError(f"{name} is from grid {plan.get('grid')!r} ({plan.get('grid_id')}), "
                             f"{names[0]} from {first.get('grid')!r} ({first.get('grid_id')}): not shards of one grid")
        if plan.get("settings") != first.get("settings"):
            raise ShardError(f"{name} was measured with other settings than {names[0]}")
        if env.get("fingerprint_id") != envs[0].get("fingerprint_id"):
            raise ShardError(f"{name} ran in environment {env.get('fingerprint_id')} ({env.get('cpu_model')}, "
                             f"{env.get('cuda_device')}), {names[0]} in {envs[0].get('fingerprint_id')}: "
                             "timings from different machines are not one run")
    shards = [plan.get("shard") for plan in plans]
    if len(set(map(json.dumps, shards))) != len(shards):
        raise ShardError(f"the same shard twice: {shards}")


def merged_plan(plans: list[dict], names: list[str]) -> dict:
    """The merged run's plan: the shards' cases in the grid's order (kept by each shard's plan)."""
    first = plans[0]
    seen, indexed = set(), []
    for plan in plans:
        index = plan.get("grid_index") or range(len(plan["cases"]))
        for i, key in zip(index, plan["cases"]):
            case_id = Case.from_key(key).case_id
            if case_id not in seen:
                seen.add(case_id)
                indexed.append((i, key))
    cases = [key for _, key in sorted(indexed, key=lambda pair: pair[0])]
    total = first.get("grid_cases")
    return {**{k: v for k, v in first.items() if k not in ("cases", "shard")}, "cases": cases,
            "merged_from": names, "shards": [plan.get("shard") for plan in plans],
            "complete": total is not None and len(cases) == total}

