"""Reformer LSH attention (Kitaev et al. 2020), shared-QK as in the paper.

Keys are the unit-norm queries, k̂ = q/‖q‖ (the k input is not used). Each of `rounds` hash rounds:
1. hash: h(x) = argmax([x R; −x R]) with a seeded random rotation R (d × b/2), b = `buckets`;
2. sort positions by (bucket, position) and cut the sorted order into chunks of `chunk` rows;
3. each query attends to the keys of its own chunk and of the chunk before it (the first chunk's is
   the last), with score q·k̂/√d; its own key scores −5·10⁴ (used only when nothing else is
   allowed), and causal masks later positions.
The rounds' outputs are merged by their log-sum-exp weights. Claim: O(n log n) for the sort and
O(rounds·n·chunk·d) for the products; the sort's comparisons are a small term, so time is ~n¹.
The buckets are fixed here (default 32); the paper's n/chunk buckets make the hashing O(n²·d/chunk).
"""

from __future__ import annotations

import functools
import math
import time

import torch

from variants.impls import peer
from variants.native.lsh import native, reference
from variants.rules import (
    INDEX_BYTES,
    SOFTMAX_OPS_PER_PAIR,
    Differs,
    Impl,
    MemoryClaim,
    Param,
    Prepared,
    Theory,
    VariantSpec,
    register,
)

BUCKETS = Param("buckets", 32, "hash buckets b (even)", minimum=2)
ROUNDS = Param("rounds", 4, "hash rounds", minimum=1, maximum=lambda n: 64)
CHUNK = Param("chunk", 64, "rows per chunk after sorting", minimum=1)
SEED = Param("seed", 0, "seed of the rotations", minimum=0)


def check(seq_len: int, params: dict) -> None:
    if params["buckets"] % 2:
        raise ValueError(f"reformer: parameter buckets={params['buckets']} (allowed: an even number >= 2)")


@functools.lru_cache(maxsize=32)
def rotations(head_dim: int, buckets: int, rounds: int, seed: int) -> torch.Tensor:
    """R: (rounds, d, b/2) float64 on the CPU, standard Gaussian."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rounds, head_dim, buckets // 2, generator=gen, dtype=torch.float64)


def make(name: str, run, cost: str, work: str) -> Impl:
    def prepare(q, k, v, *, causal, params):
        start = time.perf_counter()
        rot = rotations(q.shape[-1], params["buckets"], params["rounds"], params["seed"]).to(
            q.device
        )  # float64: `hashes`
        return Prepared(lambda: run(q, k, v, causal, params, rot), {"rotations_s": time.perf_counter() - start})

    return Impl(name, prepare, cost=cost, work=work)


def library_call(q, k, v, causal, params):
    """`reformer-pytorch`'s LSHAttention on (B·H, n, d), its bucket size our chunk."""
    from reformer_pytorch.reformer_pytorch import LSHAttention

    b, h, n, d = q.shape
    layer = LSHAttention(bucket_size=params["chunk"], n_hashes=params["rounds"], causal=causal).to(q.device)
    layer.eval()
    qk, values = q.reshape(b * h, n, d), v.reshape(b * h, n, d)
    return lambda: layer(qk, values)[0].view(b, h, n, d)


def library_reasons(problem) -> list[str]:
    chunk = dict(problem.params)["chunk"]
    if problem.seq_len % (2 * chunk):
        return [f"seq_len={problem.seq_len} (reformer-pytorch needs a multiple of 2·chunk = {2 * chunk})"]
    return []


def theory(*, seq_len, batch, num_heads, num_kv_heads, head_dim, causal, dtype_bytes, params, explicit, spec):
    n, r, c, bh = seq_len, params["rounds"], params["chunk"], batch * num_heads
    keys = n if -(-n // c) == 1 else 2 * c  # keys per query: its chunk and the one before
    pairs = r * n * min(keys, n)
    rotations = r * head_dim * (params["buckets"] // 2) * dtype_bytes
    once = bh * 3 * n * head_dim * dtype_bytes  # q and v read, the output written (k is not read)
    return Theory(
        flops=4 * bh * pairs * head_dim,
        claimed_exponent_n=1.0,
        claimed_exponent_d=1.0,
        pairs=pairs,
        extra_flops={
            "hashing": bh * r * n * head_dim * params["buckets"],
            "softmax": SOFTMAX_OPS_PER_PAIR * bh * pairs,
        },
        kv_bytes=2 * batch * num_kv_heads * n * head_dim * dtype_bytes,
        note=f"plus rounds·n·log₂n ≈ {r * n * math.log2(max(n, 2)):.3g} sort comparisons per head (not FLOPs)",
        compulsory_bytes=once + rotations,
        fixed_bytes=rotations,
        traffic_bytes=rotations + bh * traffic_rows(n, r, c, head_dim, dtype_bytes),
    )


def traffic_rows(n: int, rounds: int, chunk: int, d: int, dtype_bytes: int) -> int:
    """Bytes per batch and head (docs/CLAIMS.md, "Bytes"): each round reads q to hash it, sorts (its
    permutation written and read), and its chunks read their queries, the keys of their chunk and the
    one before (k̂ from q's rows) and their values, and write the round's output and log-sum-exp; the
    merge reads every round's and writes the output."""
    key_rows = n if -(-n // chunk) == 1 else 2 * n  # each chunk reads 2c keys: 2n a round
    per_round = (n + n + 2 * key_rows + n) * d * dtype_bytes + n * dtype_bytes + 2 * n * INDEX_BYTES
    return rounds * per_round + rounds * (n * d + n) * dtype_bytes + n * d * dtype_bytes


SPEC = register(
    VariantSpec(
        name="reformer",
        family="sparse",
        summary="Reformer LSH attention, shared QK: hash, sort, attend within a chunk and the one before, rounds "
        "merged.",
        source="Kitaev et al. 2020, Reformer: The Efficient Transformer",
        memory=MemoryClaim(
            "Kitaev et al. 2020, Reformer: O(n log n) memory, chunks of c keys a query (exponent 1, as its time), "
            "in training too",
            forward=1.0,
            training=1.0,
        ),
        params=(BUCKETS, ROUNDS, CHUNK, SEED),
        theory_fn=theory,
        check_fn=check,
        cross_note="hashes shared query-keys (one sequence, keys = queries) into buckets",
        impls={
            i.name: i
            for i in (
                make("dense", reference, "O(rounds·n²): each round's pairs as an n×n mask", "all_pairs"),
                make(
                    "native",
                    native,
                    "O(rounds·(n log n + n·2c·d)): sorted chunks against themselves and the one before",
                    "algorithm",
                ),
                peer(
                    "reformer-pytorch",
                    "reformer_pytorch",
                    library_call,
                    reasons=library_reasons,
                    cost="O(rounds·(n log n + n·2c·d)) plus hashing O(n²·d/c): its buckets are n/c",
                    differs=Differs(
                        "its rotations are drawn afresh each call, its buckets are n/chunk (hashing "
                        "O(n²·d/chunk)), and all rounds are sorted together, so a round's first chunk "
                        "looks back into the previous round; checked at n = 2·chunk and one round, "
                        "where every key is in reach",
                        seq_len=lambda n, p: 2 * p["chunk"],
                        same=(("rounds", 1),),
                    ),
                ),
            )
        },
    )
)
