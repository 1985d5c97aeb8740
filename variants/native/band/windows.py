"""The band of blocks: each query block against its `left` and `right` neighbouring key blocks.

Sliding window, strided's local part, fixed's own block and bigbird's window are bands. A band is
planned once in setup (`band_plan`: block size, reach, the additive mask of the blocked layout)
and scored in steps of a few blocks (`band_part`), each step a part's output and log-sum-exp
(variants.native), so a call holds one output and a step, whatever n is.

On the CPU the forward's interior runs go through torch's fused attention kernel (`variants.native.core.fused_kernel`),
each block a "head" of it, in blocks of 32 rows; elsewhere (and for the blocks at the ends) a step is a
batched matmul, a softmax and a matmul. The backward (`BandPlan.grads`) is the same on every device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from variants.native.core import (
    Blocks,
    KeySet,
    Partial,
    additive,
    cache_sized,
    empty_rows,
    fused,
    fused_attention,
    grad_of,
    softmax_part,
    step_elements,
    tile_grads,
)
from variants.rules.paths import took


def band_bias(
    seq_len: int,
    block: int,
    left: int,
    right: int,
    allowed: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    like: torch.Tensor,
) -> torch.Tensor:
    """Additive mask of the blocked layout: (nb, block, span), 0 where allowed, -inf elsewhere.

    Query block t covers positions t·block + a; its columns are keys (t − left)·block + c.
    O(n · span): built once in setup.
    """
    nb = -(-seq_len // block)
    span = (left + right + 1) * block
    device = like.device
    t = torch.arange(nb, device=device)[:, None, None]
    i = t * block + torch.arange(block, device=device)[None, :, None]  # (nb, block, 1)
    j = (t - left) * block + torch.arange(span, device=device)[None, None, :]  # (nb, 1, span)
    keep = (j >= 0) & (j < seq_len) & allowed(i, j)
    return additive(keep, like.dtype)


# NB: blocks of 32 rows for the fused forward (variants.native.core.fused_kernel) of a reach-defined
# band: w = 128 then scores 288 keys a row, not 384 (blocks of 128), and the kernel keeps its tiles
# in cache; smaller blocks were faster down to 32 (docs/performance.md, "Figures behind the code's choices").
FUSED_BLOCK = 32


# Small blocks are scored in runs of about GROUP_ROWS query rows (fewer, larger matmuls, at the
# price of copying overlapping K windows); blocks of 128 rows or more go one by one, copy-free.
GROUP_ROWS = 256


def band_part(
    q,
    k,
    v,
    *,
    block: int,
    left: int,
    right: int,
    bias: torch.Tensor,
    need_lse: bool,
    into: Partial | None = None,
    empty: torch.Tensor | None = None,
) -> Partial:
    """Each query block attends to `left` blocks before and `right` after its own.

    On the CPU without autograd, interior runs of blocks of every head through the fused kernel,
    each run at most half an output (`step_elements`), the rest as below. Otherwise:
    steps of about GROUP_ROWS query rows against plain slices of K and V: no padding and a working
    set of a few blocks whatever n is. An interior run of small blocks is scored at once against
    overlapping windows of K (a strided view); blocks at the ends, one at a time, against keys
    clipped to [0, n) with the matching columns of the bias. Heads go in groups, and a block's
    rows in slices, so that a step holds at most `step_elements`. Time O(n · span · d).
    """
    b, h, n, d = q.shape
    span = bias.shape[2]
    q3, k3, v3 = (x.reshape(b * h, x.shape[2], d) for x in (q, k, v))  # a view for contiguous inputs
    dest = Blocks(q3, need_lse, into)
    budget = step_elements(q3)
    if fused(q3) and not grad_of(q, k, v):  # a run of blocks of every head at once: its output and lse
        group = max(1, budget // (b * h * block * (d + 1)))
        _band_heads(
            q3,
            k3,
            v3,
            slice(None),
            dest,
            block=block,
            left=left,
            right=right,
            bias=bias,
            need_lse=need_lse,
            group=group,
            rows=block,
            grad=False,
            fuse=True,
            empty=empty,
        )
        return dest.partial(b, h)
    # scores, output, and the copies matmul makes to batch a run over heads: its rows and K/V windows
    per_head = lambda g: g * (block * span + 2 * span * d + 2 * block * d)
    if cache_sized(q3):  # runs of about GROUP_ROWS rows, over as many heads as fit
        group = max(1, GROUP_ROWS // block) if block < 128 else 1
        while group > 1 and per_head(group) > budget:
            group //= 2
        heads = max(1, min(b * h, budget // per_head(group)))
    else:  # a step is launches: as many heads as fit, then as many blocks of each
        heads = max(1, min(b * h, budget // per_head(1)))
        group = max(1, min(bias.shape[0], budget // (heads * per_head(1))))
    single = max(1, min(b * h, budget // (block * (span + d))))  # heads of a one-block step: scores, output
    if group > 1 and _steps(b * h, single, bias.shape[0], 1) < _steps(b * h, heads, bias.shape[0], group):
        group, heads = (
            1,
            single,
        )  # NB: small n: one block over many heads beats runs of one head (n = 256: 8 steps, not 40)
    rows = block if group > 1 else max(1, min(block, budget // (span + d)))  # rows of a one-block step
    for h0 in range(0, b * h, heads):
        hs = slice(h0, min(h0 + heads, b * h))
        _band_heads(
            q3[hs],
            k3[hs],
            v3[hs],
            hs,
            dest,
            block=block,
            left=left,
            right=right,
            bias=bias,
            need_lse=need_lse,
            group=group,
            rows=rows,
            grad=grad_of(q, k, v),
        )
    return dest.partial(b, h)


def _steps(heads_total: int, heads: int, nb: int, group: int) -> int:
    """Steps of a band over nb blocks: groups of `heads` heads times runs of `group` blocks."""
    return -(-heads_total // heads) * -(-nb // group)


def _band_heads(
    q3,
    k3,
    v3,
    hs: slice,
    dest: "Blocks",
    *,
    block,
    left,
    right,
    bias,
    need_lse,
    group,
    rows,
    grad,
    fuse=False,
    empty=None,
):
    """band_part on one group of heads `hs`: q3, k3, v3 are their (heads, n, d) slices."""
    nb, span, n, d = bias.shape[0], bias.shape[2], q3.shape[1], q3.shape[2]
    buffers, fused_any = None, False
    t = 0
    while t < nb:
        g = min(group, nb - t)
        first, last = (t - left) * block, (t + g + right) * block  # keys the run needs
        r0 = t * block
        inner = min(g, n // block - right - t)  # blocks of the run whose keys all exist
        if fuse and first >= 0 and inner >= 1:  # interior run of blocks, through the fused kernel
            g = inner
            fused_any = True
            _fused_run(
                q3, k3, v3, dest, t, g, block=block, left=left, span=span, bias=bias, empty=empty, need_lse=need_lse
            )
            t += g
            continue
        if g > 1 and first >= 0 and inner > 1:  # interior run of g blocks (the run's last keys exist)
            g = min(g, inner)
            last, r1 = (t + g + right) * block, r0 + g * block  # g clipped to the blocks whose keys exist
            kw, vw = (_windows(x[:, first:last], g, block, span) for x in (k3, v3))  # (heads, g, span, d)
            scores = q3[:, r0:r1].view(-1, g, block, d) @ kw.transpose(-1, -2)  # (heads, g, block, span)
            scores.mul_(d**-0.5).add_(bias[t : t + g])
            o, l = softmax_part(scores, lambda p: p @ vw, need_lse)
            dest.put(slice(r0, r1), o.view(-1, g * block, d), l.view(-1, g * block) if need_lse else None, hs)
            del scores, o, l  # before the next step's (see step_elements)
            t += g
            continue
        k0, k1 = max(first, 0), min((t + 1 + right) * block, n)  # one block, keys clipped to those that exist
        for s0 in range(r0, min(r0 + block, n), rows):  # the block's rows, in slices of `rows`
            s1 = min(s0 + rows, r0 + block, n)
            own = slice(s0 - r0, s1 - r0) if bias.shape[1] > 1 else slice(None)  # a row-free bias broadcasts
            whole = s1 - s0 == rows and k1 - k0 == span and not grad  # out= buffers have no autograd
            if whole and buffers is None:
                # NB: interior blocks reuse two buffers: fresh megabyte-sized tensors at every block
                # cost page faults (glibc maps and unmaps them), a large share of the time.
                buffers = (q3.new_empty(q3.shape[0], rows, span), q3.new_empty(q3.shape[0], rows, d))
            scores = torch.baddbmm(  # (heads, rows, keys) = bias + scale · q kᵀ
                bias[t, own, k0 - first : k1 - first],
                q3[:, s0:s1],
                k3[:, k0:k1].transpose(1, 2),
                alpha=d**-0.5,
                out=buffers[0] if whole else None,
            )
            o, l = softmax_part(
                scores, lambda p: torch.bmm(p, v3[:, k0:k1], out=buffers[1] if whole else None), need_lse
            )
            dest.put(slice(s0, s1), o, l, hs)
            del scores, o, l
        t += 1
    if fuse:  # NB: whether any interior went through the fused kernel, not each block's way (remainders)
        took("fused interior" if fused_any else "no fused interior")


def _fused_run(q3, k3, v3, dest: "Blocks", t: int, g: int, *, block, left, span, bias, empty, need_lse) -> None:
    """Blocks t … t + g − 1 of every head through the fused kernel (rows with no key: lse −inf)."""
    r0 = t * block
    out, lse = fused_blocks(
        q3, k3, v3, r0, g, block, (t - left) * block, span, bias[t : t + g], None if empty is None else empty[t : t + g]
    )
    dest.put(slice(r0, r0 + g * block), out, lse.reshape(-1, g * block) if need_lse else None)
    del out, lse  # before the next step's (see step_elements)


def fused_blocks(
    q3,
    k3,
    v3,
    r0: int,
    g: int,
    block: int,
    first: int,
    span: int,
    mask: torch.Tensor,
    empty: torch.Tensor | None = None,
):
    """g blocks of `block` query rows from r0 of every head (q3, k3, v3: (B·H, n, d)), block i against
    the keys first + i·block … + span (windows of K and V read in place) with `mask` (g, block or 1,
    span) added to its scores, through the fused kernel, each block one of its "heads":
    (out (B·H, g·block, d), lse (B·H, g, block))."""
    d = q3.shape[2]
    kw, vw = (_windows(x[:, first:], g, block, span) for x in (k3, v3))  # (B·H, g, span, d), in place
    out, lse = fused_attention(q3[:, r0 : r0 + g * block].view(-1, g, block, d), kw, vw, mask[None], d**-0.5, empty)
    return out.view(-1, g * block, d), lse


def run_windows(q, k, v, q0: int, g: int, k0: int, span: int, bias: torch.Tensor, out, lse) -> None:
    """g blocks of bias.shape[1] query rows from q0 of (B, H, n, d) inputs, block i against the keys
    k0 + i·block … + span with its bias (g, block, span), or all with one (1, block, span), into `out`
    (B, H, n, d) and `lse` (B, H, n) or None. Steps of every head, each at most `step_elements` with
    its temporaries: on the CPU through the fused kernel (`fused_blocks`, windows read in place);
    elsewhere batched matmuls and a softmax, the windows copied by the batch."""
    b, h, n, d = q.shape
    block = bias.shape[1]
    q3, k3, v3 = (x.reshape(b * h, n, d) for x in (q, k, v))
    out3, lse3 = out.view(b * h, n, d), None if lse is None else lse.view(b * h, n)
    kernel = fused(q3)
    held = block * (d + 1) if kernel else block * span + 2 * span * d + 2 * block * d  # a block's, per head
    per = max(1, step_elements(q3) // (b * h * held))
    for i in range(0, g, per):
        c, r0, first = min(per, g - i), q0 + i * block, k0 + i * block
        mask = bias if len(bias) == 1 else bias[i : i + c]
        if kernel:
            o, l = fused_blocks(q3, k3, v3, r0, c, block, first, span, mask)
        else:
            kw, vw = (_windows(x[:, first:], c, block, span) for x in (k3, v3))  # (B·H, c, span, d)
            scores = (q3[:, r0 : r0 + c * block].view(-1, c, block, d) @ kw.transpose(-1, -2)).mul_(d**-0.5)
            o, l = softmax_part(scores.add_(mask), lambda p: p @ vw, lse3 is not None)  # (B·H, c, block, ·)
            del scores
        out3[:, r0 : r0 + c * block] = o.reshape(-1, c * block, d)
        if lse3 is not None:
            lse3[:, r0 : r0 + c * block] = l.reshape(-1, c * block)
        del o, l  # before the next step's (see step_elements)


def _windows(x: torch.Tensor, count: int, block: int, span: int) -> torch.Tensor:
    """Overlapping windows of `span` rows every `block` rows: (BH, rows, d) -> (BH, count, span, d)."""
    s = x.stride()
    return x.as_strided((x.shape[0], count, span, x.shape[2]), (s[0], block * s[1], s[1], s[2]))


@dataclass(frozen=True)
class BandPlan(KeySet):
    """The blocked layout of one band, built once in setup: block size, reach in blocks, bias."""

    block: int
    left: int
    right: int
    bias: torch.Tensor  # (nb, block, span)
    forward: "BandPlan | None" = None  # the same band in the fused kernel's blocks (FUSED_BLOCK rows)
    backward: "BandPlan | None" = None  # the same band in the backward's blocks (`_backward_block`)

    def __post_init__(self):
        object.__setattr__(self, "empty", empty_rows(self.bias) if fused(self.bias) else None)

    def steps(self, q, k, v, need_lse: bool, into: Partial | None) -> Partial:
        plan = self.forward if self.forward is not None and fused(q) and not grad_of(q, k, v) else self
        return band_part(
            q,
            k,
            v,
            block=plan.block,
            left=plan.left,
            right=plan.right,
            bias=plan.bias,
            need_lse=need_lse,
            into=into,
            empty=plan.empty,
        )

    def grads(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        """Blocks under RUN_BLOCK rows (every block off the CPU, where a step is launches): the
        interior head by head in runs (`_run_grads`), then the ends; larger blocks on the CPU: block
        by block over groups of heads. Each block is a tile against its
        clipped keys (variants.native.core.part_grad); dK and dV of overlapping windows add up."""
        if self.backward is not None:
            return self.backward.grads(q, k, v, lse, dout, shift, dq, dk, dv)
        b, h, n, d = q.shape
        nb, span = self.bias.shape[0], self.bias.shape[2]
        flat = lambda x: x.view(b * h, n, -1)  # noqa: E731  (B·H, n, …), in place
        q3, k3, v3, do3, dq3, dk3, dv3 = map(flat, (q, k, v, dout, dq, dk, dv))
        lse3, shift3 = lse.reshape(b * h, n), shift.reshape(b * h, n)
        edges = range(nb)
        if self.block < RUN_BLOCK or not cache_sized(q):  # small blocks (any off the CPU): runs, head by head
            took("backward runs head by head")
            inner = range(self.left, n // self.block - self.right)  # blocks whose keys all exist
            per_run = max(1, step_elements(q) // (2 * self.block * span + 2 * span * d))
            for hd in range(b * h):
                for t in range(inner.start, inner.stop, per_run):
                    _run_grads(
                        self, (q3, k3, v3, do3, dq3, dk3, dv3), lse3, shift3, hd, t, min(per_run, inner.stop - t)
                    )
            edges = [t for t in range(nb) if t not in inner]
        heads = max(1, min(b * h, step_elements(q) // (2 * self.block * span + 2 * (span + self.block) * d)))
        took("backward blocks over head groups")
        for h0 in range(0, b * h, heads):
            hs = slice(h0, min(h0 + heads, b * h))
            for t in edges:
                first, r0 = (t - self.left) * self.block, t * self.block
                r1, k0, k1 = min(r0 + self.block, n), max(first, 0), min((t + 1 + self.right) * self.block, n)
                own = slice(0, r1 - r0) if self.bias.shape[1] > 1 else slice(None)  # a row-free bias broadcasts
                qr, kt, vt = q3[hs, r0:r1], k3[hs, k0:k1], v3[hs, k0:k1]
                scores = torch.baddbmm(
                    self.bias[t, own, k0 - first : k1 - first], qr, kt.transpose(1, 2), alpha=d**-0.5
                )  # (heads, rows, keys)
                gq, gk, gv = tile_grads(scores, qr, kt, vt, lse3[hs, r0:r1], do3[hs, r0:r1], shift3[hs, r0:r1], d**-0.5)
                dq3[hs, r0:r1] += gq
                dk3[hs, k0:k1] += gk
                dv3[hs, k0:k1] += gv
                del scores, gq, gk, gv  # before the next step's (see step_elements)


# NB: the backward of blocks under 128 rows goes head by head in runs of interior blocks (batched
# tiles against overlapping windows of K and V), not block by block over all heads, which was slower
# (docs/performance.md, "Figures behind the code's choices").
RUN_BLOCK = 128


def _run_grads(plan: BandPlan, tensors, lse3, shift3, hd: int, t: int, g: int) -> None:
    """Blocks t … t + g − 1 of head hd, all interior: each a tile against its window of span keys;
    the windows overlap, so dK and dV add up by each window's blocks of rows."""
    q3, k3, v3, do3, dq3, dk3, dv3 = tensors  # (B·H, n, d)
    block, d, span = plan.block, q3.shape[2], plan.bias.shape[2]
    r0, r1, first = t * block, (t + g) * block, (t - plan.left) * block
    qr, dor = (x[hd, r0:r1].view(g, block, d) for x in (q3, do3))
    kw, vw = (_windows(x[hd : hd + 1, first:], g, block, span)[0] for x in (k3, v3))  # (g, span, d), in place
    scores = torch.baddbmm(plan.bias[t : t + g], qr, kw.transpose(1, 2), alpha=d**-0.5)  # (g, block, span)
    gq, gk, gv = tile_grads(
        scores, qr, kw, vw, lse3[hd, r0:r1].view(g, block), dor, shift3[hd, r0:r1].view(g, block), d**-0.5
    )
    dq3[hd, r0:r1].view(g, block, d).add_(gq)
    for o in range(span // block):  # block o of window i holds key block t − left + i + o
        a = first + o * block
        dk3[hd, a : a + g * block].view(g, block, d).add_(gk[:, o * block : (o + 1) * block])
        dv3[hd, a : a + g * block].view(g, block, d).add_(gv[:, o * block : (o + 1) * block])


def band_plan(seq_len: int, reach: int, causal: bool, like: torch.Tensor, block: int | None = None) -> BandPlan:
    """Plan for the sliding window |i - j| <= reach (and j <= i when causal): blocks of `block`
    rows (by default sized to the reach), and on the CPU the fused forward's finer layout."""
    block = block or _band_block(reach)
    forward = _blocked(seq_len, reach, causal, like, FUSED_BLOCK) if fused(like) and block > FUSED_BLOCK else None
    tiles = _backward_block(reach)
    own = cache_sized(like) and tiles < block and seq_len >= 8 * tiles * -(-reach // tiles)  # 3/4 interior
    backward = _blocked(seq_len, reach, causal, like, tiles) if own else None  # its forward is this one's
    return _blocked(seq_len, reach, causal, like, block, forward, backward)


def _blocked(
    seq_len: int,
    reach: int,
    causal: bool,
    like: torch.Tensor,
    block: int,
    forward: BandPlan | None = None,
    backward: BandPlan | None = None,
) -> BandPlan:
    """The band in blocks of `block` rows: reach in blocks and bias, with the given other layouts."""
    left = -(-reach // block)
    right = 0 if causal else left

    def allowed(i, j):
        ok = (i - j).abs() <= reach
        return ok & (j <= i) if causal else ok

    return BandPlan(block, left, right, band_bias(seq_len, block, left, right, allowed, like), forward, backward)


def _band_block(reach: int) -> int:
    # A block as wide as the reach (rounded up to 32 rows) wastes at most a third of a window's
    # work; small reaches still get 32 rows so the batched matmuls stay efficient.
    return min(max(-(-reach // 32) * 32, 32), 512)


# NB: the backward's tiles on the CPU are a quarter of the reach (64 rows at least): each tile is
# five products against span = (2·⌈reach/block⌉ + 1)·block keys, and smaller blocks mask fewer of
# them (w = 128: 320 keys in blocks of 64, 384 in 128), where the GEMMs stay large enough; only where
# 3/4 of the tiles are interior (the runs of `_run_grads`), else the short lengths lose (docs/performance.md,
# "Figures behind the code's choices").
def _backward_block(reach: int) -> int:
    return min(_band_block(reach), max(64, -(-reach // 128) * 32))
