"""Bytes follow docs/CLAIMS.md ("Bytes"): each formula against a direct count on small cases.

Patterns: the compulsory bytes from the dense mask (the queries and keys it touches, every index
entry of its draw), the traffic's key reads from the mask too, part by part, tile by tile (rows for
a draw, classes for strided's residues). The other forms: the storages a real call reads from
outside itself and the tensors it returns (tests/bytecount.py).
"""

from __future__ import annotations

import pytest
import torch
from bytecount import count, written
from helpers import patterns, theory

import variants
from variants.catalog.random_keys import draw
from variants.rules import INDEX_BYTES, TILE_ROWS, tiles

SHAPE = dict(batch=2, num_heads=4, head_dim=8, dtype_bytes=4)
LENGTHS = [1, 5, 127, 128, 129, 300]
DRAWN = {"random", "bigbird"}  # the patterns that store an index: their (n, r) draw


def kv_heads(spec) -> int:
    return {"one": 1, "divides": 2}.get(spec.kv_heads, SHAPE["num_heads"])


def moved(spec, query_rows: int, key_rows: int) -> int:
    """Q and O for query_rows, K and V for key_rows, at SHAPE: the bytes a direct count gives."""
    b, h, d, e = SHAPE["batch"], SHAPE["num_heads"], SHAPE["head_dim"], SHAPE["dtype_bytes"]
    return 2 * b * d * e * (h * query_rows + kv_heads(spec) * key_rows)


def index_entries(spec, n: int, params: dict) -> int:
    return draw(n, spec.resolve(n, params)["keys"], 0).numel() if spec.name in DRAWN else 0


# ------------------------------------------------------------------------------ compulsory
@pytest.mark.parametrize("name", patterns())
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq_len", LENGTHS)
def test_a_patterns_compulsory_bytes_are_the_queries_keys_and_index_its_mask_touches(name, causal, seq_len):
    spec = variants.get(name)
    mask = spec.mask(seq_len, causal=causal)
    expect = moved(spec, int(mask.any(1).sum()), int(mask.any(0).sum())) + INDEX_BYTES * index_entries(
        spec, seq_len, {}
    )
    t = theory(spec, seq_len=seq_len, causal=causal, **SHAPE)
    assert t.compulsory_bytes == expect
    both = theory(spec, seq_len=seq_len, causal=causal, mode="fwd_bwd", **SHAPE)
    assert both.compulsory_bytes == 2 * (expect - t.fixed_bytes) + t.fixed_bytes  # gradients, and dO, as large
    assert both.traffic_bytes == 3 * t.traffic_bytes  # as the FLOPs


@pytest.mark.parametrize("name", patterns())
@pytest.mark.parametrize("seq_len", [1, 5, 129, 300])
def test_a_decode_step_moves_the_last_rows_keys(name, seq_len):
    spec = variants.get(name)
    last = spec.mask(seq_len)[-1]
    draws = spec.resolve(seq_len, {})["keys"] if name in DRAWN else 0
    t = theory(spec, seq_len=seq_len, mode="decode", **SHAPE)
    assert t.compulsory_bytes == t.traffic_bytes == moved(spec, 1, int(last.sum())) + INDEX_BYTES * draws


# ------------------------------------------------------------------------------ traffic
def by_tiles(mask: torch.Tensor) -> int:
    """K and V rows read when each tile of queries reads the keys any of its rows allows."""
    return sum(int(mask[s:e].any(0).sum()) for s, e in zip(*tiles(mask.shape[0])))


def by_rows(mask: torch.Tensor) -> int:
    return int(mask.sum())


def by_classes(mask: torch.Tensor, stride: int) -> int:
    return sum(int(mask[r::stride].any(0).sum()) for r in range(stride))


def key_reads_counted(name: str, n: int, causal: bool, params: dict) -> tuple[int, torch.Tensor]:
    """The key reads of docs/CLAIMS.md's traversal, counted on masks; and the parts' union."""
    spec = variants.get(name)
    p = spec.resolve(n, params)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    seen = j <= i if causal else torch.ones(n, n, dtype=torch.bool)
    if name == "random":
        mask = spec.mask(n, causal=causal, **params)
        return by_rows(mask), mask
    if name == "strided":
        band, classes = ((i - j).abs() < p["stride"]) & seen, ((i - j) % p["stride"] == 0) & seen
        return by_tiles(band) + by_classes(classes, p["stride"]), band | classes
    if name == "bigbird":
        tiled = variants.get("sliding_window").mask(n, causal=causal, window=p["window"]) | variants.get("global").mask(
            n, causal=causal, tokens=p["tokens"]
        )
        drawn = spec.mask(n, causal=causal, **params) & ~tiled
        return by_tiles(tiled) + by_rows(drawn), tiled | drawn
    mask = spec.mask(n, causal=causal, **params)
    return by_tiles(mask), mask


PARAMS = {
    "sliding_window": [{}, {"window": 0}, {"window": 40}],
    "neighborhood": [{}, {"kernel": 1}, {"kernel": 33}],
    "global": [{}, {"tokens": 0}, {"tokens": 130}],
    "random": [{}, {"keys": 3}],
    "strided": [{}, {"stride": 7}, {"stride": 200}],
    "fixed": [{}, {"block": 7, "summary": 2}, {"block": 50}],
    "bigbird": [{}, {"window": 3, "tokens": 2, "keys": 5}],
}


@pytest.mark.parametrize("name", [n for n in patterns() if variants.get(n).key_reads_fn is not None])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq_len", LENGTHS)
def test_a_patterns_key_reads_are_counted_on_its_mask(name, causal, seq_len):
    spec = variants.get(name)
    for params in PARAMS.get(name, [{}]):
        try:
            spec.resolve(seq_len, params)
        except ValueError:
            continue
        counted, union = key_reads_counted(name, seq_len, causal, params)
        assert torch.equal(union, spec.mask(seq_len, causal=causal, **params)), "the parts are the pattern"
        assert spec.key_reads_fn(seq_len, causal, spec.resolve(seq_len, params)) == counted, params
        t = theory(spec, seq_len=seq_len, causal=causal, **SHAPE, **params)
        assert t.traffic_bytes == moved(spec, seq_len, counted) + t.fixed_bytes >= t.compulsory_bytes


def test_every_pattern_declares_its_traffic():
    assert all(variants.get(name).key_reads_fn is not None for name in patterns())


def test_the_traffic_grows_as_the_docs_say():
    """A window re-reads 2w keys per tile; a full tile reads all n; random reads its pairs."""
    n, w = 4096, 128
    assert variants.get("sliding_window").key_reads_fn(n, False, {"window": w}) < n * (1 + 2 * w / TILE_ROWS)
    assert variants.get("full").key_reads_fn(n, False, {}) == n * n // TILE_ROWS
    random = variants.get("random")
    assert random.key_reads_fn(n, False, random.resolve(n, {})) == theory(random, seq_len=n).pairs


def test_cross_attention_tiles_read_every_key_of_the_other_sequence():
    t = variants.get("full").theory(seq_len=300, kv_len=50, **SHAPE)
    assert t.traffic_bytes == moved(variants.get("full"), 300, len(tiles(300)[0]) * 50)
    assert t.compulsory_bytes == moved(variants.get("full"), 300, 50)


# ------------------------------------------------------------------------------ the other forms
def call(name: str, impl: str, mode: str, n: int, **params):
    """A real call at float64, its reads and written bytes counted (fwd_bwd: output and gradients)."""
    spec = variants.get(name)
    h, kvh, d = 2, 1 if spec.kv_heads == "one" else 2, 8
    grad = mode == "fwd_bwd"
    q, k, v = (torch.randn(1, heads, n, d, dtype=torch.float64, requires_grad=grad) for heads in (h, kvh, kvh))
    prepared = spec.prepare(q, k, v, impl=impl, **params)
    if not grad:
        reads, out = count(prepared)
        return (
            reads,
            written(out),
            spec.theory(seq_len=n, num_heads=h, num_kv_heads=kvh, head_dim=d, dtype_bytes=8, mode=mode, **params),
        )
    d_out = torch.ones(1, h, n, d, dtype=torch.float64)

    def both():
        out = prepared()
        return out, torch.autograd.grad(out, (q, k, v), d_out, allow_unused=True)

    reads, result = count(both)
    t = spec.theory(seq_len=n, num_heads=h, num_kv_heads=kvh, head_dim=d, dtype_bytes=8, mode=mode, **params)
    return reads, written([x for x in (result[0], *result[1]) if x is not None]), t


OTHERS = [
    ("full", "dense", {}),
    ("linear", "native", {}),
    ("performer", "native", {}),
    ("rfa", "native", {}),
    ("linformer", "native", {"proj_len": 16}),
    ("reformer", "native", {"chunk": 8}),
    ("rnn", "native", {}),
    ("rnn", "dense", {"cell": "gru"}),
    ("conv", "native", {}),
    ("conv", "native", {"separable": 1}),
    ("mha_fused", "dense", {}),
    ("additive", "native", {}),
    ("multiplicative", "dense", {}),
]


@pytest.mark.parametrize("name,impl,params", OTHERS)
def test_compulsory_bytes_are_what_a_real_call_reads_from_outside_and_writes(name, impl, params):
    reads, out, t = call(name, impl, "fwd", 48, **params)
    assert t.compulsory_bytes == reads.read_once + out


@pytest.mark.parametrize(
    "name,impl,params", [(n, i, p) for n, i, p in OTHERS if n in ("full", "linear", "performer", "rnn")]
)
def test_forward_backward_reads_the_outputs_gradient_and_writes_the_inputs(name, impl, params):
    reads, out, t = call(name, impl, "fwd_bwd", 40, **params)
    assert t.compulsory_bytes == reads.read_once + out  # the output's gradient among the reads


@pytest.mark.parametrize("name", ["linear", "performer", "rfa", "linformer"])
def test_a_state_or_projection_in_the_cache_moves_nothing_more(name):
    t = variants.get(name).theory(seq_len=1000, **SHAPE)
    assert t.traffic_bytes == t.compulsory_bytes


@pytest.mark.parametrize("name", ["linear", "performer"])
def test_a_linearized_decode_step_reads_and_writes_its_state(name):
    spec = variants.get(name)
    m = spec.resolve(64, {}).get("features", SHAPE["head_dim"])
    b, h, d, e = (SHAPE[key] for key in ("batch", "num_heads", "head_dim", "dtype_bytes"))
    step = spec.theory(seq_len=64, mode="decode", **SHAPE)
    params = m * d * e if name == "performer" else 0  # ω
    assert step.traffic_bytes == step.compulsory_bytes == 4 * b * h * d * e + 2 * b * h * (m * d + m) * e + params


def test_the_recurrence_reads_its_hidden_weights_at_every_step():
    """The dense form is the recurrence written out: one operator per step reads W_hh and b_hh, the
    input products are one product, written once and read by the steps."""
    n, gates, dim = 30, 4, 16
    reads, out, t = call("rnn", "dense", "fwd", n)
    products = 2 * n * gates * dim * 8  # (B, n, gates·D) written and read
    assert t.traffic_bytes == reads.per_op + products + out
    assert t.traffic_bytes - t.compulsory_bytes == (n - 1) * gates * dim * (dim + 1) * 8 + products


def test_a_convolution_tile_reads_the_weights_again():
    n = 300
    reads, out, t = call("conv", "native", "fwd", n)
    x = 1 * n * 16 * 8
    assert t.traffic_bytes == x + out + len(tiles(n)[0]) * (reads.read_once - x)


@pytest.mark.parametrize("n,chunk", [(5, 8), (8, 8), (9, 8), (16, 8), (45, 8)])
def test_reformers_chunks_read_their_chunk_and_the_one_before(n, chunk):
    """Counted on the chunks of a sorted order: chunk c reads its keys and chunk c − 1's (the first the last's)."""
    from variants.catalog.reformer import traffic_rows

    order = torch.randperm(n)
    chunks = [set(order[s : s + chunk].tolist()) for s in range(0, n, chunk)]
    key_rows = sum(len(chunks[c] | chunks[c - 1]) for c in range(len(chunks)))
    rounds, d, e = 3, 8, 4
    expect = (
        rounds * ((3 * n + 2 * key_rows) * d * e + n * e + 2 * n * INDEX_BYTES) + rounds * (n * d + n) * e + n * d * e
    )
    assert traffic_rows(n, rounds, chunk, d, e) == expect


def test_a_padded_batch_moves_its_sequences_bytes():
    spec = variants.get("sliding_window")
    padded = spec.theory(seq_len=300, batch=2, lengths=(40, 250), window=16)
    parts = [spec.theory(seq_len=n, batch=1, window=16) for n in (40, 250)]
    assert (
        padded.compulsory_bytes
        == sum(p.compulsory_bytes for p in parts)
        < spec.theory(seq_len=300, batch=2).compulsory_bytes
    )
    assert padded.traffic_bytes == sum(p.traffic_bytes for p in parts)
