"""The bounds of a grid's work, checked before any is planned: the combinations its lists make, and each
case's sizes, so that every figure a run writes fits its column. Pure: values in, the problem out, as
(field, value, allowed) for suite.plan.grid to raise."""

from __future__ import annotations

import variants
from suite.plan.case import Case

# Sizes, so that every figure a run writes (FLOPs, bytes, pairs: int64 columns) fits: each size, and a case's
# work B·n_q·max(n_k, H·d, p)·H·d (p: its largest integer parameter; H·d: the model width a projection or a
# recurrence squares), whose figures are that times a constant below 2^63 / MAX_WORK (4 FLOPs a pair and
# dimension, forward+backward's 3, up to 64 hash rounds, a recurrence's gates, the named terms)
SIZE_LIMITS = {"batch": 2**16, "num_heads": 2**16, "num_kv_heads": 2**16, "head_dim": 2**16}  # seq_len: MAX_SIZE
MAX_WORK = 2**52
UNSIZED = ("seed",)  # integer parameters that are not sizes
MAX_EXPANSION = 1_000_000  # the combinations a grid's blocks make before repeats merge, each checked once


def work(case: Case, longest: int) -> tuple[str, str, str] | None:
    """(field, value, allowed) where the case's work at its longest length passes MAX_WORK, else None."""
    queries = longest if case.mode != "decode" else 1
    keys = longest if case.kv_len is None else case.kv_len
    sizes = [v for k, v in case.params if k not in UNSIZED and isinstance(v, int) and not isinstance(v, bool)]
    width = case.num_heads * case.head_dim
    widest = max([keys, width, *sizes])
    total = case.batch * queries * widest * width
    if total <= MAX_WORK:
        return None
    return (
        "batch·seq_len·max(kv_len, num_heads·head_dim, params)·num_heads·head_dim",
        f"{case.batch}·{queries}·{widest}·{width} ≈ 2^{total.bit_length() - 1}",
        f"at most 2^{MAX_WORK.bit_length() - 1}, so that the case's FLOPs and bytes fit int64; lower a size",
    )


def expansion(axes: dict) -> tuple[int, dict[str, int]]:
    """The combinations a block's axes make, counted from its lists' lengths (repeats included) before any is
    made, and each axis' length (`*` as the most it can stand for)."""
    sizes = {name: _length(value) for name, value in axes.items() if name != "params"}
    if sizes.get("variant") is None or axes.get("variant") in ("*", ["*"]):
        sizes["variant"] = len(variants.names())
    if axes.get("impl", "*") in ("*", ["*"]):
        sizes["impl"] = max(len(variants.get(name).impls) for name in variants.names())
    params = axes.get("params", {})
    if isinstance(params, dict):
        sizes.update({f"params.{name}": _length(value) for name, value in params.items()})
    total = 1
    for size in sizes.values():
        total *= size
    return total, sizes


def too_many(axes: dict, total: int, sizes: dict[str, int]) -> tuple[str, object, str]:
    """(field, value, allowed) for a block whose combinations pass MAX_EXPANSION: its longest axis."""
    name = max(sizes, key=lambda n: sizes[n])
    value = axes["params"][name.removeprefix("params.")] if name.startswith("params.") else axes.get(name)
    made = f"{total}" if total < 10**12 else f"about 10^{len(str(total)) - 1}"
    return (
        name,
        value,
        f"axes whose lists' lengths multiply to at most {MAX_EXPANSION} combinations in a grid, "
        f"repeated values included; this block's make {made}: shorten {name} ({sizes[name]} values) or split "
        "the grid",
    )


def _length(value) -> int:
    return len(value) if isinstance(value, list) else 1
