"""Building blocks of the structure-exploiting (`native`) implementations.

A sparse pattern is split into disjoint key sets (`KeySet`), each scored in the layout that suits
it (a band of blocks, a gather per query, a residue class). Each set yields a softmax output and
log-sum-exp per query row, block by block; `union` folds every set after the first into the
first one's output as its blocks come (flash-decoding's merge of splits, in place), so a call holds
one output and a few blocks, whatever the number of sets. Under autograd the forward is the same,
and the backward recomputes each set's blocks from the output and lse (variants.part_grad). No set
ever builds an n×n tensor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from variants.csr_slices import Slice, csr_matmul, csr_slices, fastest, sampled_scores
from variants.expo import exp_
from variants.fused import additive, empty_rows, fused, fused_attention
from variants.part_grad import OwnBackward, tile_grads
from variants.steps import cache_elements, step_elements

NEG_INF = float("-inf")


@dataclass
class Partial:
    """Softmax over one key set: normalized output (B, H, n, d) and log-sum-exp (B, H, n)."""

    out: torch.Tensor
    lse: torch.Tensor | None  # None: this part is the whole softmax (single-part fast path)


def softmax_part(scores: torch.Tensor, apply_v: Callable[[torch.Tensor], torch.Tensor], need_lse: bool):
    """Softmax over the last dim of `scores` (masked with -inf), then `apply_v(probs)`.

    With `need_lse`, scores are exponentiated in place (they are not used again) and the fix-ups
    for rows with no allowed key (out = 0, lse = -inf: `fold` gives them no weight) touch only
    per-row tensors, never the scores again.
    """
    if not need_lse:  # in place (out= the scores) where autograd does not need them: no second buffer
        # NB: but torch's CPU softmax in place over a last dim that is not a multiple of 16 took
        # twice its out-of-place time at narrow widths (ns an element: 1.96 against 0.94 at 33 keys,
        # 3.5 against 1.7 at 17, 1.16 against 0.67 at 65; 1.25x at 150, 1.1x at 400; the same at 16,
        # 48, 64, 128): below 64 keys a fresh buffer, a step's size (wider, the memory counts more).
        width = scores.shape[-1]
        in_place = not scores.requires_grad and (width % 16 == 0 or width >= 64)
        return apply_v(torch.softmax(scores, dim=-1, out=scores if in_place else None)), None
    if scores.shape[-1] == 0:  # an empty key set (fixed with summary=0, random with keys=0)
        return apply_v(scores), torch.full(scores.shape[:-1], NEG_INF, dtype=scores.dtype, device=scores.device)
    top = scores.amax(dim=-1, keepdim=True).detach()  # any per-row constant is exact; no gradient
    top = top.masked_fill(top == NEG_INF, 0.0)  # empty rows: exp(-inf - 0) = 0 rather than NaN
    if scores.requires_grad:  # autograd needs the scores it saw: out of place
        probs = (scores - top).exp()
        total = probs.sum(dim=-1, keepdim=True)
        empty = total == 0  # NB: divided or logged as 1, then masked: 0/0 and log 0 gave NaN gradients
        safe = total.masked_fill(empty, 1.0)
        out = apply_v(probs) / safe
        return out, (safe.log() + top).masked_fill(empty, NEG_INF).squeeze(-1)
    probs = exp_(scores.sub_(top))
    total = probs.sum(dim=-1, keepdim=True)
    out = apply_v(probs).div_(total).masked_fill_(total == 0, 0.0)
    return out, (total.log_() + top).squeeze(-1)


def fold(acc_out: torch.Tensor, acc_lse: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> None:
    """In place: (acc_out, acc_lse) (rows…, d), (rows…) become the softmax over the union of their
    keys and the block's (disjoint). A row with no key in either stays 0 with lse −inf.

    The two weights are taken relative to the larger lse and divided by their sum, so they sum to 1
    whatever the lse's size. NB: weighting by exp(lse − logaddexp(…)) did not: at |lse| ≈ 5·10⁴
    (reformer's lone self key) float32 rounds the sum by ~0.004, and the weights missed 1 by 0.1%."""
    top = torch.maximum(acc_lse, lse)
    top = top.masked_fill(top == NEG_INF, 0.0)
    w_acc, w = torch.exp(acc_lse - top), torch.exp(lse - top)
    total = w_acc + w
    norm = total.masked_fill(total == 0, 1.0)  # no key in either: both weights 0
    acc_out.mul_((w_acc / norm).unsqueeze(-1)).addcmul_(out, (w / norm).unsqueeze(-1))
    acc_lse.copy_(total.log_().add_(top))


def grad_of(q, k, v) -> bool:
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


class KeySet:
    """A set of keys per query, disjoint from the other sets of its pattern: `steps` scores it
    without autograd, one step alive at a time (its output and lse, or folded `into` another's);
    `grads` adds its tiles' share of dQ, dK, dV given the whole softmax's lse (variants.part_grad).
    Under autograd, `part` runs `steps` inside a Function whose backward is `grads`: memory stays
    bounded both ways, where autograd through the steps kept every step's scores."""

    def part(self, q, k, v, need_lse: bool, into: Partial | None = None) -> Partial:
        if grad_of(q, k, v):
            out, lse = OwnBackward.apply(q, k, v, self)
            return Partial(out, lse if need_lse else None)
        return self.steps(q, k, v, need_lse, into)

    def steps(self, q, k, v, need_lse: bool, into: Partial | None) -> Partial:
        raise NotImplementedError

    def grads(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        raise NotImplementedError


@dataclass(frozen=True)
class Union(KeySet):
    """Exact softmax over disjoint key sets: each set after the first is folded into the first's
    output block by block; in the backward, each adds its share under the union's lse."""

    sets: tuple

    def steps(self, q, k, v, need_lse: bool, into: Partial | None) -> Partial:
        acc = self.sets[0].steps(q, k, v, True, into)
        for keys in self.sets[1:]:
            keys.steps(q, k, v, True, acc)
        return acc if need_lse else Partial(acc.out, None)

    def grads(self, *args) -> None:
        for keys in self.sets:
            keys.grads(*args)


def output(q, k, v, keys: KeySet) -> torch.Tensor:
    """The output of softmax attention over `keys` (B, H, n, d): a native path's timed call."""
    return keys.part(q, k, v, need_lse=False).out


def union(q, k, v, *sets: KeySet) -> torch.Tensor:
    """The output of softmax attention over the union of `sets` (disjoint key sets)."""
    return output(q, k, v, Union(sets))


class Blocks:
    """Where a part puts a block's (out, lse): its own (B·H, n, d) output, or folded into `into`'s."""

    def __init__(self, like3: torch.Tensor, need_lse: bool, into: Partial | None):
        self.into = into
        if into is None:
            self.out = torch.empty_like(like3)
            self.lse = like3.new_empty(like3.shape[:2]) if need_lse else None
        else:
            self.out, self.lse = into.out.view(like3.shape), into.lse.view(like3.shape[:2])

    def put(self, rows: slice, out: torch.Tensor, lse: torch.Tensor | None, head: int | slice = slice(None)) -> None:
        """The block of `rows` (of one head, or of all) is `out` (…, rows, d) with `lse` (…, rows)."""
        if self.into is None:
            self.out[head, rows] = out
            if self.lse is not None:
                self.lse[head, rows] = lse
        else:
            fold(self.out[head, rows], self.lse[head, rows], out, lse)

    def partial(self, b: int, h: int) -> Partial:
        if self.into is not None:
            return self.into
        n, d = self.out.shape[1:]
        return Partial(self.out.view(b, h, n, d), None if self.lse is None else self.lse.view(b, h, n))


# ------------------------------------------------------------------------------- gathered keys
def gather_part(q, k, v, *, idx: torch.Tensor, valid: torch.Tensor, need_lse: bool, chunk: int = 1024,
                into: Partial | None = None) -> Partial:
    """Query i attends to keys idx[i, :] where valid[i, :]: time and memory O(n · r · d).

    Queries go in chunks so the gathered (chunk, r, d) keys stay small.
    """
    b, h, n, d = q.shape
    if grad_of(q, k, v):  # autograd: whole chunks kept, concatenated out of place
        outs = [_gathered(q, k, v, idx, valid, slice(s, min(s + chunk, n)), need_lse) for s in range(0, n, chunk)]
        return Partial(torch.cat([o for o, _ in outs], dim=2), torch.cat([l for _, l in outs], dim=2) if need_lse else None)
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
    slices: tuple = ()  # the forward's pattern, by slices of keys (variants.csr_slices)

    def steps(self, q, k, v, need_lse: bool, into: Partial | None) -> Partial:
        if self.pattern is None:
            return gather_part(q, k, v, idx=self.idx, valid=self.valid, need_lse=need_lse, into=into)
        return sparse_part(q, k, v, rows=self, need_lse=need_lse, into=into)

    def grads(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        """On the CSR pattern where there is one (`sparse_grads`); else by chunks of query rows,
        each row a tile of one query and its r keys (variants.part_grad), dK and dV landing on
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
        pattern = torch.sparse_csr_tensor(crow, idx.flatten(), torch.zeros(n * w, dtype=like.dtype, device=like.device),
                                          (n, n), check_invariants=False)
    entries = torch.argsort(idx.flatten(), stable=True)  # by key, then by query: the transpose's rows
    crow_t = torch.zeros(n + 1, dtype=torch.long, device=like.device)
    crow_t[1:] = torch.bincount(idx.flatten(), minlength=n).cumsum(0)
    slices = csr_slices(idx, pattern, like.shape[3] * like.element_size())
    return RowKeys(idx, valid, pattern, (crow_t, entries // w, entries), fastest(slices, pattern, like.shape[3]))


def sparse_part(q, k, v, *, rows: RowKeys, need_lse: bool, into: Partial | None = None) -> Partial:
    """Scores only at the listed (i, j) by SDDMM, softmax over each row's w entries, then SpMM.

    One head at a time: the sampled scores (with the index copies CSR carries) are one head's n·w,
    never all B·H heads' at once (measured at n = 16384, H = 8: also 1.2x faster than batched). Past
    a few MiB of K the SDDMM goes by slices of keys that stay in cache; the product by the pattern
    is one `csr_matmul` (variants.csr_slices)."""
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
                out, lse = fused_attention(q3[None, :, rows], ks[None], vs[None], bias[rows].to(q.dtype), d**-0.5,
                                           None if empty is None else empty[rows])
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
