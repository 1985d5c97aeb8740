"""The machine's rate for rows gathered at random: ns a pair against the size of the table the rows come
from, for the work of a key list per query (random's keys, BigBird's random part).

A query that attends to w keys drawn anywhere in [0, n) reads w rows of K and of V in no order. The
algorithm's work per pair is the same at every n; the machine's time per pair is not: while a head's K
and V sit in a cache the rows come from it, past it they come from the next level, and how often a row
is read again before it leaves depends on how many other rows the pass reads meanwhile. So this probe
times the gathers alone, on a uniform random pattern of the sweep's own shape: HEADS heads of rows of
ROW_ELEMENTS float32 values (d = 64), each of n queries with KEYS sorted random keys (random's r = 32 and
its own), each head's scores by torch's CSR sampled product (SDDMM) and the product by the pattern (an
embedding bag), at each n of `lengths` (the full grid's, on to the run's longest case of random gathers). Nothing of an implementation is timed (no softmax, no slices, no
masks); what the time per pair does with n is the machine's, and the cost model takes its shape, not its
scale, for an implementation that says its leading term's work is such gathers (suite.analyse.cost).
Each length is timed in every one of ROUNDS rounds, the lengths interleaved; a length's figure is its
fastest call over the rounds.

The rate is flat while a head's K fits L2, rises as it leaves L2 and again past L3, and one process is one
draw of it (docs/performance.md, "(28) Random gathers at the machine's measured rate, and the card on it").
One head alone, its K and V read again by every timed call, climbs an octave later. NB: the
timer runs a call over RUN_TIME once, outside torch.utils.benchmark's thread setting: a process must run
at `threads` itself, as a worker does.
"""

from __future__ import annotations

import math
import warnings

ROW_ELEMENTS = 64  # a row of K or V: d = 64 in float32, 256 bytes
HEADS = 8  # the grids' heads: each head's K and V its own tables, read in turn as a call reads them
KEYS = 33  # a query's keys: random's r = 32 and its own
LENGTHS = tuple(int(round(2 ** (8 + k / 2))) for k in range(17))  # 256 to 65536 by half octaves: the full grid's
RUN_TIME = 0.05  # s a measurement


def tables(longest: int, device: str, seed: int = 0) -> tuple:
    """q, k and v of HEADS heads at the longest length, made once: a length n reads each head's first n rows
        (contiguous, as a case's head is). NB: uniform values: normal ones are far slower to draw at the longest
    lengths (docs/performance.md, "Figures behind the code's choices")."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.rand(HEADS, longest, ROW_ELEMENTS, generator=gen).to(device) for _ in range(3))


def call(n: int, device: str, qkv: tuple, seed: int = 0):
    """The gathers of one call at length n on the first n rows of `qkv` (`tables`): every head's SDDMM on a
    uniform random pattern, then its product by it."""
    import torch

    from variants.native.keys.csr_slices import csr_matmul

    gen = torch.Generator().manual_seed(seed)
    q, k, v = (x[:, :n] for x in qkv)
    idx = torch.sort(torch.randint(0, n, (n, KEYS), generator=gen), dim=1).values.to(device)
    crow, col = torch.arange(0, n * KEYS + 1, KEYS, device=device), idx.reshape(-1)
    with warnings.catch_warnings():  # NB: "sparse CSR tensor support is in beta", once a length in every worker's log
        warnings.simplefilter("ignore", UserWarning)
        pattern = torch.sparse_csr_tensor(
            crow, col, torch.zeros(col.numel(), device=device), (n, n), check_invariants=False
        )

    def gathers():
        for h in range(HEADS):
            scores = torch.sparse.sampled_addmm(pattern, q[h], k[h].T, beta=0.0, alpha=0.125).values()
            csr_matmul(crow, col, scores, v[h])

    return gathers


def lengths(longest: int | None = None) -> tuple[int, ...]:
    """The half octaves from 256 that reach `longest` (the run's longest case of random gathers; None: 65536),
    two at least."""
    top = max(longest or LENGTHS[-1], LENGTHS[1])
    every = [int(round(2 ** (8 + k / 2))) for k in range(2 * math.ceil(math.log2(top) - 8) + 1)]
    return tuple(n for i, n in enumerate(every) if i == 0 or every[i - 1] < top)


def measure(timer, device: str, threads: int, longest: int | None = None) -> dict:
    """ns a pair at each length (`lengths(longest)`), the fastest call over ROUNDS interleaved rounds (as a
    case's time for the cost model is its fastest call: another program only ever adds time, and a random
    gather shares the memory with it), and each round's fastest; `table_bytes`: a head's K at each length;
    `spread`: the largest range of the rounds over the fastest. Where the tables of the longest length cannot
    be made (out of memory), the probe stops at 65536 and `error` says why; any other failure is the worker's
    record of it (suite.run.executors.worker)."""
    from suite.machine.probe import ROUNDS

    sizes, error = list(lengths(longest)), None
    try:
        qkv = tables(sizes[-1], device)
        fns = {n: call(n, device, qkv) for n in sizes}
    except (RuntimeError, MemoryError) as err:  # the tables of the longest: fall back to none past 65536
        sizes, error = [n for n in sizes if n <= LENGTHS[-1]], f"{type(err).__name__}: {err}"[:200]
        qkv = tables(sizes[-1], device)
        fns = {n: call(n, device, qkv) for n in sizes}
    rounds: dict[int, list[float]] = {n: [] for n in sizes}
    # NB: one call a round where a call is over RUN_TIME, warmed up once: several calls a round at the longest
    # lengths made the probe a worker's longest task (docs/performance.md, "Figures behind the code's choices")
    for r in range(ROUNDS):
        for n in sizes:
            warmed = None if r == 0 else min(rounds[n]) * HEADS * n * KEYS * 1e-9
            seconds = min(timer(fns[n], RUN_TIME, 50, 1, threads, warmed=warmed))
            rounds[n].append(seconds / (HEADS * n * KEYS) * 1e9)
    fastest = [min(rounds[n]) for n in sizes]
    return {
        "lengths": list(sizes),
        "table_bytes": [n * 4 * ROW_ELEMENTS for n in sizes],
        "ns_per_pair": fastest,
        "rounds": [rounds[n] for n in sizes],
        "spread": max((max(r) - min(r)) / m for r, m in zip(rounds.values(), fastest) if m > 0),
        "heads": HEADS,
        "keys": KEYS,
        "row_bytes": 4 * ROW_ELEMENTS,
        "note": (
            f"ns a pair of {HEADS} heads' CSR SDDMM and product by a uniform random pattern of {KEYS} keys "
            f"a query, the fastest call over {ROUNDS} interleaved rounds"
        ),
        **({"error": error} if error else {}),
    }


def fastest(runs: list) -> dict:
    """Several processes' runs (or several shards' probes, suite.store.merge) as one: of those that reach
    furthest, each length's fastest, as a case's time is its fastest call over the processes that timed it
    (each worker's memory is its own, and one process is one draw: docs/performance.md, "(28) Random gathers
    at the machine's measured rate, and the card on it"); each one's figures kept (`processes`), `spread` the
    largest range over them. An error where none measured."""
    good = [r for r in runs if isinstance(r, dict) and "ns_per_pair" in r and "lengths" in r]
    if not good:
        return {
            "error": "; ".join(str(r.get("error", "no figures")) for r in runs if isinstance(r, dict)) or "no worker"
        }
    reach = max(len(r["lengths"]) for r in good)
    good = [r for r in good if len(r["lengths"]) == reach]  # NB: a run stopped short (its tables out of memory)
    each = [r["ns_per_pair"] for r in good]
    least = [min(values) for values in zip(*each)]
    return {
        **good[0],
        "ns_per_pair": least,
        "processes": each,
        "rounds": [r.get("rounds", []) for r in good],
        "spread": max((max(values) - low) / low for values, low in zip(zip(*each), least) if low > 0),
        "note": f"{good[0].get('note', '')}; the fastest of {len(good)} process(es)",
    }
