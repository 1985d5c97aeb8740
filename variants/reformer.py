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

from variants.lsh_steps import SELF_SCORE, Rounds, rounds_forward, with_previous
from variants.peers import peer
from variants.registry import Differs, Impl, Param, Prepared, VariantSpec, register
from variants.theory import INDEX_BYTES, SOFTMAX_OPS_PER_PAIR, Theory

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


def hashes(q: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """Bucket of every position in every round: (B, H, rounds, n), argmax of [xR, −xR]. One function
    for both paths, so both hash alike (ties included: the first maximum, as argmax of the
    concatenation), and in float64 whatever q's dtype (rot is float64), so that a float32 call and
    its float64 reference hash alike: in float32 a near tie put one position in another bucket,
    4e-4 off the reference at n = 97 (causal). A round and an eighth of the rows at a time."""
    b, h, n, _ = q.shape
    out = torch.empty(b, h, rot.shape[0], n, dtype=torch.long, device=q.device)
    step = max(1, -(-n // 8))
    for r in range(rot.shape[0]):
        for r0 in range(0, n, step):
            proj = q[:, :, r0 : r0 + step].double() @ rot[r]  # (B, H, rows, b/2); ‖q‖ does not move the argmax
            top, low = proj.max(dim=-1), proj.min(dim=-1)
            out[:, :, r, r0 : r0 + step] = torch.where(top.values >= -low.values, top.indices,
                                                       low.indices + proj.shape[-1])
    return out


def sort_order(buckets: torch.Tensor) -> torch.Tensor:
    """Positions sorted by (bucket, position): (B, H, R, n)."""
    n = buckets.shape[-1]
    pos = torch.arange(n, device=buckets.device)
    return torch.argsort(buckets * n + pos, dim=-1)


def merge_rounds(outs: torch.Tensor, lses: torch.Tensor) -> torch.Tensor:
    """Σ_r softmax_r(lse) · out_r: (B, H, R, n, d), (B, H, R, n) -> (B, H, n, d)."""
    return (outs * torch.softmax(lses, dim=2)[..., None]).sum(dim=2)


# ----------------------------------------------------------------------------- dense reference
def allowed(order: torch.Tensor, chunk: int) -> torch.Tensor:
    """(B, H, n, n) pairs allowed in one round: the key's chunk is the query's or the one before."""
    n = order.shape[-1]
    chunks = -(-n // chunk)
    rank = torch.argsort(order, dim=-1)  # sorted position of every position
    c = rank // chunk  # (B, H, n)
    own = c[..., :, None] == c[..., None, :]
    before = c[..., None, :] == (c[..., :, None] - 1) % chunks
    return own | before


def reference(q, k, v, causal: bool, params: dict, rot) -> torch.Tensor:
    """Every round written out on the n×n scores: O(rounds·n²)."""
    n = q.shape[-2]
    keys = torch.nn.functional.normalize(q, dim=-1)
    scores = q @ keys.transpose(-1, -2) * q.shape[-1] ** -0.5  # (B, H, n, n)
    eye = torch.eye(n, dtype=torch.bool, device=q.device)
    later = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
    order = sort_order(hashes(q, rot))
    outs, lses = [], []
    for r in range(order.shape[2]):
        s = scores.masked_fill(~allowed(order[:, :, r], params["chunk"]), float("-inf"))
        if causal:
            s = s.masked_fill(later, float("-inf"))
        s = s.masked_fill(eye, SELF_SCORE)
        lses.append(torch.logsumexp(s, dim=-1))
        outs.append(torch.softmax(s, dim=-1) @ v)
    return merge_rounds(torch.stack(outs, 2), torch.stack(lses, 2))


# ----------------------------------------------------------------------------- native
def chunked(x: torch.Tensor, order: torch.Tensor, chunk: int) -> torch.Tensor:
    """Rows of x (B, H, n, d) in sorted order, padded to whole chunks: (B, H, C, chunk, d)."""
    b, h, n, d = x.shape
    padded = -(-n // chunk) * chunk
    rows = x.gather(2, order[..., None].expand(b, h, n, d))
    rows = torch.nn.functional.pad(rows, (0, 0, 0, padded - n))
    return rows.view(b, h, padded // chunk, chunk, d)


def one_round(q, keys, v, order, chunk: int, causal: bool):
    """Out and log-sum-exp of one round, in the original order: (B, H, n, d), (B, H, n)."""
    b, h, n, d = q.shape
    padded = -(-n // chunk) * chunk
    pos = torch.nn.functional.pad(order, (0, padded - n), value=-1).view(b, h, -1, chunk)  # (B, H, C, c)
    kpos = with_previous(pos)  # (B, H, C, 2c): -1 marks padding
    sq = chunked(q, order, chunk)
    s = sq @ with_previous(chunked(keys, order, chunk)).transpose(-1, -2) * d**-0.5  # (B, H, C, c, 2c)
    hidden = kpos[..., None, :] < 0
    if causal:
        hidden = hidden | (kpos[..., None, :] > pos[..., :, None])
    s = s.masked_fill(hidden, float("-inf")).masked_fill(kpos[..., None, :] == pos[..., :, None], SELF_SCORE)
    lse = torch.logsumexp(s, dim=-1)  # (B, H, C, c); padded query rows are dropped below
    out = torch.softmax(s, dim=-1) @ with_previous(chunked(v, order, chunk))  # (B, H, C, c, d)
    undo = torch.argsort(order, dim=-1)  # (B, H, n)
    out = out.view(b, h, padded, d)[:, :, :n].gather(2, undo[..., None].expand(b, h, n, d))
    return out, lse.view(b, h, padded)[:, :, :n].gather(2, undo)


def readable(q, k, v, causal: bool, params: dict, rot) -> torch.Tensor:
    """The native algorithm's readable form: every round whole, with sorted copies, merged at the
    end (O(rounds·n·c) memory; autograd through it held 57 outputs at n = 1024)."""
    order = sort_order(hashes(q, rot))
    keys = torch.nn.functional.normalize(q, dim=-1)
    rounds = [one_round(q, keys, v, order[:, :, r], params["chunk"], causal) for r in range(order.shape[2])]
    return merge_rounds(torch.stack([o for o, _ in rounds], 2), torch.stack([s for _, s in rounds], 2))


def native(q, k, v, causal: bool, params: dict, rot) -> torch.Tensor:
    """Sort, chunk, attend to two chunks: O(rounds·(n log n + n·2c·d)) time and O(n·c) memory, a
    step at a time (variants.lsh_steps); under autograd with its own backward, in a few outputs."""
    order = sort_order(hashes(q, rot))
    if torch.is_grad_enabled() and (q.requires_grad or v.requires_grad):
        return Rounds.apply(q, v, order, params["chunk"], causal)
    return rounds_forward(q, v, order, params["chunk"], causal)[0]


def make(name: str, run, cost: str, work: str) -> Impl:
    def prepare(q, k, v, *, causal, params):
        start = time.perf_counter()
        rot = rotations(q.shape[-1], params["buckets"], params["rounds"], params["seed"]).to(q.device)  # float64: `hashes`
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
        flops=4 * bh * pairs * head_dim, claimed_exponent_n=1.0, claimed_exponent_d=1.0, pairs=pairs,
        extra_flops={"hashing": bh * r * n * head_dim * params["buckets"],
                     "softmax": SOFTMAX_OPS_PER_PAIR * bh * pairs},
        kv_bytes=2 * batch * num_kv_heads * n * head_dim * dtype_bytes,
        note=f"plus rounds·n·log₂n ≈ {r * n * math.log2(max(n, 2)):.3g} sort comparisons per head (not FLOPs)",
        compulsory_bytes=once + rotations, fixed_bytes=rotations,
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


SPEC = register(VariantSpec(
    name="reformer", family="sparse",
    summary="Reformer LSH attention, shared QK: hash, sort, attend within a chunk and the one before, rounds merged.",
    source="Kitaev et al. 2020, Reformer: The Efficient Transformer",
    params=(BUCKETS, ROUNDS, CHUNK, SEED), theory_fn=theory, check_fn=check,
    cross_note="hashes shared query-keys (one sequence, keys = queries) into buckets",
    impls={i.name: i for i in (
        make("dense", reference, "O(rounds·n²): each round's pairs as an n×n mask", "all_pairs"),
        make("native", native, "O(rounds·(n log n + n·2c·d)): sorted chunks against themselves and the one before",
             "algorithm"),
        peer("reformer-pytorch", "reformer_pytorch", library_call, reasons=library_reasons,
             cost="O(rounds·(n log n + n·2c·d)) plus hashing O(n²·d/c): its buckets are n/c",
             differs=Differs("its rotations are drawn afresh each call, its buckets are n/chunk (hashing "
                             "O(n²·d/chunk)), and all rounds are sorted together, so a round's first chunk "
                             "looks back into the previous round; checked at n = 2·chunk and one round, "
                             "where every key is in reach", seq_len=lambda n, p: 2 * p["chunk"],
                             same=(("rounds", 1),))),
    )},
))
