"""Split a grid into N balanced shards (suite.store.merge joins their runs back into one).

Balanced by predicted cost, not by count: a case costs its timing budget and its work. The work is
the variant's theory FLOPs for a `native` path, and every pair's for the others (a dense mask, a
fused kernel over a mask, the materializing reference compute all n² scores whatever the pattern).
The split is greedy longest-first onto the least-loaded shard, with ties broken by case id, so it
is the same on every machine for the same grid.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

import variants
from suite.errors import UsageError
from suite.machine import device as devices
from suite.plan.case import Case, theory_of
from suite.plan.settings import Settings
from variants.rules import score_flops

CALLS_PER_REPLICATE = 4  # warm-up, two samples and the memory pass, at least
START_S = 0.05  # per case and process: messaging, check, setup
PRICED_LENGTH = 2**14  # the longest sequence a case's theory is counted at when pricing it


class ShardError(UsageError):
    """A shard spec or a set of shards that cannot be used; the message names the problem."""


MAX_SHARDS = 4096  # machines a grid is spread over, at most


def parse(spec: str) -> tuple[int, int]:
    """'K/N' with 1 ≤ K ≤ N → (K, N)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", spec or "")
    if not match:
        raise ShardError(f"--shard {spec!r} (allowed: K/N with 1 <= K <= N, e.g. 2/4)")
    k, n = int(match[1]), int(match[2])
    if n > MAX_SHARDS:
        raise ShardError(f"--shard {spec!r}: N = {n} (allowed: 1..{MAX_SHARDS} machines)")
    if not 1 <= k <= n:
        raise ShardError(f"--shard {spec!r}: K = {k} must lie in 1..N = {n}")
    return k, n


def predicted_s(case: Case, settings: Settings) -> float:
    """A rough cost in seconds of measuring the case (all replicates): enough to balance shards."""
    per_replicate = START_S + max(settings.min_run_time_s, CALLS_PER_REPLICATE * predicted_call_s(case))
    return per_replicate * settings.replicates


def predicted_call_s(case: Case) -> float:
    """A rough time of one call: the case's work at the device's assumed FLOP rate."""
    flops = _flops(case)
    if _work(case) != "algorithm":  # a dense mask or a tiled kernel: count every pair
        flops = max(flops, score_flops(case.batch, case.num_heads, case.query_len * case.key_len, case.head_dim))
    return flops / devices.get(case.device).assumed_flop_rate


def _flops(case: Case) -> float:
    """The theory's FLOPs: counted at lengths up to PRICED_LENGTH (a theory may build a row's counts, O(n)), and
    past it scaled by the claim's exponents in the lengths, so pricing a grid allocates nothing its lengths size."""
    n_q, n_k = min(case.seq_len, PRICED_LENGTH), min(case.key_len, PRICED_LENGTH)
    priced = dataclasses.replace(case, seq_len=n_q, kv_len=None if case.kv_len is None else n_k)
    try:
        theory = theory_of(priced)
    except Exception:  # noqa: BLE001 - a case whose theory fails costs little: it fails fast
        return 0
    if priced == case:
        return theory["flops"]
    if case.kv_len is None:
        return theory["flops"] * (case.seq_len / n_q) ** theory["claimed_exponent_n"]
    in_q, in_k = theory["claimed_exponent_q"] or 1, theory["claimed_exponent_k"] or 1
    return theory["flops"] * (case.seq_len / n_q) ** in_q * (case.key_len / n_k) ** in_k


def _work(case: Case) -> str:
    try:
        return variants.get(case.variant).impls[case.impl].work
    except (KeyError, ValueError):
        return "all_pairs"


def select(cases: list[Case], settings: Settings, spec: str, ladders=()) -> tuple[list[Case], dict]:
    """Shard K of N of `spec` ('K/N') and what plan.json records of it (its identity, grid order)."""
    k, n = parse(spec)
    index = {case.case_id: i for i, case in enumerate(cases)}
    mine = split(cases, settings, n, ladders)[k - 1]
    return mine, {"shard": {"k": k, "n": n}, "grid_index": [index[c.case_id] for c in mine]}


def split(cases: list[Case], settings: Settings, shards: int, ladders=()) -> list[list[Case]]:
    """N lists of cases covering every case exactly once, balanced by predicted cost; each keeps plan order.

    A ladder's cases (adaptive lengths, suite.plan.ladder) go to one shard together: it climbs there."""
    order = {case.case_id: i for i, case in enumerate(cases)}
    series = {case.case_id: ladder.key for ladder in ladders for case in ladder.start()}
    units: dict[str, list[Case]] = {}
    for case in cases:
        units.setdefault(series.get(case.case_id, case.case_id), []).append(case)
    cost = {key: sum(predicted_s(c, settings) for c in unit) for key, unit in units.items()}
    load = [0.0] * shards
    members: list[list[Case]] = [[] for _ in range(shards)]
    for key in sorted(units, key=lambda u: (-cost[u], units[u][0].case_id)):
        target = min(range(shards), key=lambda s: (load[s], s))
        load[target] += cost[key]
        members[target].extend(units[key])
    return [sorted(group, key=lambda c: order[c.case_id]) for group in members]


def grid_id(cases: list[Case]) -> str:
    """The identity of the whole (unsharded) grid: a hash of its case ids in plan order."""
    return hashlib.sha1(",".join(c.case_id for c in cases).encode()).hexdigest()[:12]
