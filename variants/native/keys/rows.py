"""Key lists per query row (`RowKeys`: a gather, or SDDMM/SpMM on a CSR pattern) and a fixed subset of
keys for every row (`KeySubset`): the key sets of the random, global and BigBird patterns."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from variants.native.core import (
    NEG_INF,
    Blocks,
    KeySet,
    Partial,
    additive,
    cache_elements,
    empty_rows,
    exp_,
    fused,
    fused_attention,
    grad_of,
    softmax_part,
    step_elements,
    tile_grads,
)
from variants.native.keys.csr_slices import Slice, csr_matmul, csr_slices, fastest, sampled_scores


# ------------------------------------------------------------------------------- gathered keys
def gather_part(
    q, k, v, *, idx: torch.Tensor, valid: torch.Tensor, need_lse: bool, chunk: int = 1024, into: Partial | None = None
) -> Partial:
    """Query i attends to keys idx[i, :] where valid[i, :]: time and memory O(n · r · d).

    Queries go in chunks so the gathered (chunk, r, d) keys stay small.
    """
    b, h, n, d = q.shape
    if grad_of(q, k, v):  # autograd: whole chunks kept, concatenated out of place
        outs = [_gathered(q, k, v, idx, valid, slice(s, min(s + chunk, n)), need_lse) for s in range(0, n, chunk)]
        return Partial(
            torch.cat([o for o, _ in outs], dim=2), torch.cat([l for _, l in outs], dim=2) if need_lse else None
        )
    dest = Blocks(q.reshape(b * h, n, d), need_lse, into)
    for start in range(0, n, chunk):
        rows = slice(start, min(start + chunk, n))
        out, lse = _gathered(q, k, v, idx, valid, rows, need_lse)
        dest.put(rows, out.view(b * h, -1, d), lse.view(b * h, -1) if need_lse else None)
        del out, lse  # before the next step's (see step_elements)
    return dest.partial(b, h)


def _gathered(q, k, v, idx, valid, rows: slice, need_lse: bool):
    ix = idx[rows]  # (C, r)
    kg, vg = k[:, :, ix], v[:, :, ix]  # (B, H, C, r, d)
    scores = (kg @ q[:, :, rows, :, None]).squeeze(-1).mul_(q.shape[-1] ** -0.5)  # (B, H, C, r)
    scores.masked_fill_(~valid[rows], NEG_INF)
    return softmax_part(scores, lambda p: (p[..., None, :] @ vg).squeeze(-2), need_lse)


# ------------------------------------------------------------------------------- sparse rows
SPARSE_DTYPES = (torch.float32, torch.float64)  # NB: torch's CSR sampled_addmm rejects bf16/fp16


@dataclass(frozen=True)
class RowKeys(KeySet):
    """Per-query key lists (n, w) with a validity mask.

    In float32/64 the scores are a sampled dense-dense product on a CSR pattern (SDDMM) and the
    output a sparse × dense product: O(n·w·d) with no gathered copy of K or V. Other dtypes fall
    back to `gather_part` (chunks of gathered keys).
    """

    idx: torch.Tensor  # (n, w) long, sorted per row
    valid: torch.Tensor  # (n, w) bool
    pattern: torch.Tensor | None  # CSR (n, n) for the SDDMM, or None: gather
    transposed: tuple | None = None  # the pattern's transpose: crow (n + 1,), col (n·w,), entry order (n·w,)
    slices: tuple = ()  # the forward's pattern, by slices of keys (variants.native.keys.csr_slices)

    def steps(self, q, k, v, need_lse: bool, into: Partial | None) -> Partial:
        if self.pattern is None:
            return gather_part(q, k, v, idx=self.idx, valid=self.valid, need_lse=need_lse, into=into)
        return sparse_part(q, k, v, rows=self, need_lse=need_lse, into=into)

    def grads(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        """On the CSR pattern where there is one (`sparse_grads`); else by chunks of query rows,
        each row a tile of one query and its r keys (variants.native.core.part_grad), dK and dV landing on
        the keys by `index_add_`."""
        if self.pattern is not None:
            return sparse_grads(q, k, v, self, lse, dout, shift, dq, dk, dv)
        b, h, n, d = q.shape
        r = self.idx.shape[1]
        chunk = max(1, step_elements(q) // (4 * b * h * max(1, r) * d))  # K, V gathered, dK, dV of the tile
        for start in range(0, n, chunk):
            rows = slice(start, min(start + chunk, n))
            ix = self.idx[rows]  # (C, r)
            kg, vg = k[:, :, ix], v[:, :, ix]  # (B, H, C, r, d)
            qr = q[:, :, rows, None]  # (B, H, C, 1, d)
            scores = (qr @ kg.transpose(-1, -2)).mul_(d**-0.5).masked_fill_(~self.valid[rows, None], NEG_INF)
            at = lambda x: x[:, :, rows, None]  # noqa: E731  (B, H, C, 1, …): one query per tile
            gq, gk, gv = tile_grads(scores, qr, kg, vg, at(lse), at(dout), at(shift), d**-0.5)
            dq[:, :, rows] += gq.squeeze(-2)
            dk.index_add_(2, ix.reshape(-1), gk.reshape(b, h, -1, d))
            dv.index_add_(2, ix.reshape(-1), gv.reshape(b, h, -1, d))
            del kg, vg, scores, gq, gk, gv  # before the next step's (see step_elements)


def row_keys(idx: torch.Tensor, valid: torch.Tensor, like: torch.Tensor) -> RowKeys:
    """Sort each row's keys (CSR wants sorted columns) and build the pattern for `like`'s dtype."""
    import warnings

    idx, order = idx.sort(dim=1)
    valid = valid.gather(1, order)
    idx, valid = idx.to(like.device), valid.to(like.device)
    n = like.shape[2]
    # NB: torch's CSR sampled_addmm fails when a matrix stores more entries than n² (tiny n).
    if like.dtype not in SPARSE_DTYPES or not 0 < idx.shape[1] <= n:
        return RowKeys(idx, valid, None)
    w = idx.shape[1]
    crow = torch.arange(0, n * w + 1, w, device=like.device)
    with warnings.catch_warnings():  # "sparse CSR support is in beta": known, and tested here
        warnings.simplefilter("ignore")
        pattern = torch.sparse_csr_tensor(
            crow,
            idx.flatten(),
            torch.zeros(n * w, dtype=like.dtype, device=like.device),
            (n, n),
            check_invariants=False,
        )
    entries = torch.argsort(idx.flatten(), stable=True)  # by key, then by query: the transpose's rows
    crow_t = torch.zeros(n + 1, dtype=torch.long, device=like.device)
    crow_t[1:] = torch.bincount(idx.flatten(), minlength=n).cumsum(0)
    slices = csr_slices(idx, pattern, like.shape[3] * like.element_size())
    return RowKeys(idx, valid, pattern, (crow_t, entries // w, entries), fastest(slices, pattern, like.shape[3]))


def sparse_part(q, k, v, *, rows: RowKeys, need_lse: bool, into: Partial | None = None) -> Partial:
    """Scores only at the listed (i, j) by SDDMM, softmax over each row's w entries, then SpMM.

    One head at a time: the sampled scores (with the index copies CSR carries) are one head's n·w,
    never all B·H heads' at once (also faster than batched). Past
    a few MiB of K the SDDMM goes by slices of keys that stay in cache; the product by the pattern
    is one `csr_matmul` (variants.native.keys.csr_slices)."""
    b, h, n, d = q.shape
    q3, k3, v3 = (x.reshape(b * h, n, d) for x in (q, k, v))
    w = rows.idx.shape[1]
    dest = Blocks(q3, need_lse, into)
    slices = rows.slices or (Slice(0, n, rows.pattern, None),)
    crow, col = rows.pattern.crow_indices(), rows.pattern.col_indices()
    for i in range(b * h):
        scores = sampled_scores(slices, q3[i], k3[i], d**-0.5).view(n, w).masked_fill_(~rows.valid, NEG_INF)
        out, lse = softmax_part(scores, lambda p: csr_matmul(crow, col, p.reshape(-1), v3[i]), need_lse)
        dest.put(slice(None), out, lse, head=i)
        del scores, out, lse  # before the next head's (see step_elements)
    return dest.partial(b, h)


def sparse_grads(q, k, v, rows: RowKeys, lse, dout, shift, dq, dk, dv) -> None:
    """The backward on the CSR pattern, one head at a time: P and dO·Vᵀ sampled at the listed
    (i, j) (SDDMM), dS = P ∘ (dO·Vᵀ − shift), then dQ = dS·K, and dK = dSᵀ·Q, dV = Pᵀ·dO on the
    transposed pattern (its values are the entries in key order): O(n·w·d), no gathered K or V."""
    b, h, n, d = q.shape
    w = rows.idx.shape[1]
    crow, col = rows.pattern.crow_indices(), rows.pattern.col_indices()
    crow_t, col_t, entries = rows.transposed
    q3, k3, v3, do3, dq3, dk3, dv3 = (x.reshape(b * h, n, d) for x in (q, k, v, dout, dq, dk, dv))
    lse3, shift3 = lse.reshape(b * h, n, 1), shift.reshape(b * h, n, 1)
    for i in range(b * h):
        s = torch.sparse.sampled_addmm(rows.pattern, q3[i], k3[i].T, beta=0.0, alpha=d**-0.5).values().view(n, w)
        p = exp_(s.masked_fill_(~rows.valid, NEG_INF).sub_(lse3[i]))  # (n, w)
        dp = torch.sparse.sampled_addmm(rows.pattern, do3[i], v3[i].T, beta=0.0).values().view(n, w)
        ds = dp.sub_(shift3[i]).mul_(p).mul_(d**-0.5).view(-1)
        dv3[i] += csr_matmul(crow_t, col_t, p.view(-1)[entries], do3[i])
        dq3[i] += csr_matmul(crow, col, ds, k3[i])
        dk3[i] += csr_matmul(crow_t, col_t, ds[entries], q3[i])
        del s, p, dp, ds  # before the next head's (see step_elements)


# ------------------------------------------------------------------------------- dense key subset
@dataclass(frozen=True)
class KeySubset(KeySet):
    """Every query scores the same small key subset `keys` (s,), masked by valid (n, s): O(n·s·d)
    (fixed's summaries, bigbird's global tokens)."""

    keys: torch.Tensor  # (s,) long
    valid: torch.Tensor  # (n, s) bool

    def __post_init__(self):  # the fused kernel's additive mask and the rows with no key, in setup
        bias = empty = None
        if fused(self.valid) and self.keys.numel():
            bias = additive(self.valid)
            empty = empty_rows(bias)
        object.__setattr__(self, "fused_mask", (bias, empty))

    def steps(self, q, k, v, need_lse: bool, into: Partial | None, budget: int = 1 << 18) -> Partial:
        """Rows in chunks whose scores hold about `budget` elements, and at most `step_elements`
        with their output (through the fused kernel on the CPU: chunks of half an output)."""
        b, h, n, d = q.shape
        q3 = q.reshape(b * h, n, d)
        ks, vs = (x[:, :, self.keys].reshape(b * h, -1, d) for x in (k, v))  # (B·H, s, d)
        dest = Blocks(q3, need_lse, into)
        bias, empty = self.fused_mask
        if bias is not None and fused(q) and not grad_of(q, k, v):
            chunk = max(1, step_elements(q) // (b * h * (d + 1)))
            for rows in (slice(r, min(r + chunk, n)) for r in range(0, n, chunk)):
                out, lse = fused_attention(
                    q3[None, :, rows],
                    ks[None],
                    vs[None],
                    bias[rows].to(q.dtype),
                    d**-0.5,
                    None if empty is None else empty[rows],
                )
                dest.put(rows, out[0], lse[0])  # (B·H, C, d), (B·H, C)
                del out, lse  # before the next step's (see step_elements)
            return dest.partial(b, h)
        for rows in self._chunks(q, cache_elements(q, budget)):
            # NB: bmm reads the rows of every head in place; a 4-D matmul copied them to fold the batch
            scores = torch.bmm(q3[:, rows], ks.transpose(1, 2)).mul_(d**-0.5).masked_fill_(~self.valid[rows], NEG_INF)
            out, lse = softmax_part(scores, lambda p: torch.bmm(p, vs), need_lse)  # (B·H, C, d), (B·H, C)
            dest.put(rows, out, lse)
            del scores, out, lse  # before the next step's (see step_elements)
        return dest.partial(b, h)

    def grads(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        """By the same chunks of rows, each a tile against the whole subset; dK, dV of the subset
        summed over the chunks, then added to its keys."""
        b, h, n, d = q.shape
        flat = lambda x: x.reshape(b * h, n, *x.shape[3:])  # noqa: E731  (B·H, n, …)
        q3, do3, lse3, shift3 = map(flat, (q, dout, lse, shift))
        dq3 = dq.view(b * h, n, d)
        ks, vs = (x[:, :, self.keys].reshape(b * h, -1, d) for x in (k, v))  # (B·H, s, d)
        dks, dvs = torch.zeros_like(ks), torch.zeros_like(vs)
        for rows in self._chunks(q, cache_elements(q, 1 << 18), tensors=3):
            scores = torch.bmm(q3[:, rows], ks.transpose(1, 2)).mul_(d**-0.5).masked_fill_(~self.valid[rows], NEG_INF)
            gq, gk, gv = tile_grads(scores, q3[:, rows], ks, vs, lse3[:, rows], do3[:, rows], shift3[:, rows], d**-0.5)
            dq3[:, rows] += gq
            dks += gk
            dvs += gv
            del scores, gq, gk, gv  # before the next step's (see step_elements)
        dk.index_add_(2, self.keys, dks.view(b, h, -1, d))
        dv.index_add_(2, self.keys, dvs.view(b, h, -1, d))

    def _chunks(self, q, budget: int, tensors: int = 1):
        """Slices of rows whose scores hold about `budget` elements and, with `tensors` (C, s) and
        (C, d) tensors per head, at most `step_elements`."""
        b, h, n, d = q.shape
        s = self.keys.numel()
        chunk = max(1, min(budget // max(1, b * h * s), step_elements(q) // (tensors * b * h * (s + d) + s)))
        return [slice(start, min(start + chunk, n)) for start in range(0, n, chunk)]


def random_keys(seq_len: int, keys: int, seed: int) -> torch.Tensor:
    """r distinct keys per query drawn uniformly from [0, n) without replacement: (n, r) long.

    Robert Floyd's algorithm, vectorized over rows: r steps, O(n · r²) time, O(n · r) memory,
    deterministic for a seed on every device (drawn on the CPU).
    """
    gen = torch.Generator().manual_seed(seed)
    chosen = torch.empty(seq_len, keys, dtype=torch.long)
    for s, top in enumerate(range(seq_len - keys, seq_len)):
        pick = (torch.rand(seq_len, generator=gen, dtype=torch.float64) * (top + 1)).long().clamp_(max=top)
        seen = (chosen[:, :s] == pick[:, None]).any(dim=1)
        chosen[:, s] = torch.where(seen, torch.full_like(pick, top), pick)
    return chosen
