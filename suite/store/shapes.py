"""What the JSON files beside a run's table hold, field by field, as their readers use them.

RunDir checks each file against its shape on reading, so that a damaged or foreign file (a list for an
object, text for a number) is a UsageError naming it and the field, not a traceback deep in a report.
A shape is a type (or a tuple of them), a dict of the fields it knows (a field may be absent, and one
it does not know passes: newer versions add fields), `Each(shape)` for an object whose every value has
the shape, or `[shape]` for a list of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NUMBER = (int, float)
TEXT_OR_NONE = (str, type(None))


@dataclass(frozen=True)
class Each:
    """An object with any keys, every value of this shape (a device, a dtype, a shape's name)."""

    shape: object


ENV = {
    "devices": [str],
    "cpu_count": (int, type(None)),
    "threads": int,
    "fingerprint_id": str,
    "git_commit": TEXT_OR_NONE,
    "cpu_caches": Each({"bytes": NUMBER, "shared_by": NUMBER}),
    **{
        name: TEXT_OR_NONE
        for name in ("torch", "xformers", "cuda", "python", "platform", "cpu_model", "allocator", "cuda_device")
    },
}
PROBE = Each(
    Each(
        {
            "flops_per_s": NUMBER,
            "spread": NUMBER,
            "shape": str,
            "threads": int,
            "error": str,
            "by_shape": Each({"what": str, "flops_per_s": NUMBER, "rounds": [NUMBER], "spread": NUMBER}),
            "by_size": Each(NUMBER),
        }
    )
)
BANDWIDTH = Each(
    {
        "bytes_per_s": NUMBER,
        "spread": NUMBER,
        "kernel": str,
        "cache_bytes_per_s": NUMBER,
        "cache_spread": NUMBER,
        "cache_kernel": str,
        "threads": int,
        "error": str,
        "by_kernel": Each(
            {
                "kernel": str,
                "level": str,
                "buffer_bytes": NUMBER,
                "bytes_per_s": NUMBER,
                "rounds": [NUMBER],
                "spread": NUMBER,
            }
        ),
        "gathers": {
            "lengths": [int],
            "table_bytes": [NUMBER],
            "ns_per_pair": [NUMBER],
            "spread": NUMBER,
            "processes": [[NUMBER]],
            "error": str,
        },
        "sweep": {
            "buffer_bytes": [NUMBER],
            "bytes_per_s": [NUMBER],
            "rounds": [[NUMBER]],
            "reach_bytes": (int, float, type(None)),
            "error": str,
            "note": str,
        },
    }
)
LADDERS = {
    "ladders": [
        {
            "series": str,
            "label": str,
            "stop": str,
            "why": str,
            "lengths": [int],
            "template": dict,
            "min": int,
            "max": int,
            "step": int,
        }
    ]
}
PLAN = {
    "grid": str,
    "source": str,
    "description": str,
    "grid_id": str,
    "grid_cases": int,
    "grid_index": [int],
    "settings": dict,
    "plugins": [str],
    "cases": list,
    "ladders": [dict],
    "shard": {"k": int, "n": int},
    "grid_cases_held": int,
    "merged_from": [str],
    "shards": list,
    "complete": bool,
}  # (suite.plan.plan.PLAN_FIELDS)
BASELINE = {"run": str, "git_commit": TEXT_OR_NONE, "fingerprint_id": str, "grid": str, "saved_at": str}


def mismatch(data: object, shape: object, where: str = "") -> str | None:
    """Where `data` differs from `shape` ('field a.b holds a str, not ...'), or None where it does not."""
    if isinstance(shape, Each):
        if not isinstance(data, dict):
            return _wrong(data, "an object", where)
        return next((m for key, value in data.items() if (m := mismatch(value, shape.shape, _at(where, key)))), None)
    if isinstance(shape, dict):
        if not isinstance(data, dict):
            return _wrong(data, "an object", where)
        return next(
            (m for key, inner in shape.items() if key in data and (m := mismatch(data[key], inner, _at(where, key)))),
            None,
        )
    if isinstance(shape, list):
        if not isinstance(data, list):
            return _wrong(data, "a list", where)
        return next((m for i, item in enumerate(data) if (m := mismatch(item, shape[0], f"{where}[{i}]"))), None)
    kinds = shape if isinstance(shape, tuple) else (shape,)
    if isinstance(data, bool) and bool not in kinds or not isinstance(data, kinds):  # NB: True is an int to Python
        return _wrong(
            data,
            " or ".join(NAMES.get(kind, kind.__name__) for kind in kinds) if kinds != NUMBER else "a number",
            where,
        )
    if kinds == NUMBER and not _finite(data):  # NB: 1e400 reads as inf, 10**400 as an int no float holds
        return _wrong(data, "a finite number", where)
    return None


def _finite(number: int | float) -> bool:
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else str(key)


def _wrong(data: object, wanted: str, where: str) -> str:
    return f"{'field ' + where if where else 'the file'} holds {json_type(data)} {data!r:.40}, not {wanted}"


NAMES = {
    dict: "an object",
    list: "a list",
    str: "text",
    bool: "a boolean",
    type(None): "null",
    int: "an integer",
    float: "a number",
}


def json_type(data: object) -> str:
    return NAMES.get(type(data), type(data).__name__)
