"""One grid point: a frozen, hashable Case with a stable id, and what theory says about it."""

from __future__ import annotations

import hashlib
import json
import numbers
from dataclasses import asdict, dataclass

import numpy as np
import torch

import variants
from suite.errors import shown
from variants.rules import (
    MODES,  # noqa: F401  (re-exported: the modes a case may have)
    valid_lengths,
)

MAX_SIZE = 2**31 - 1  # a size (batch, length, heads, head_dim): int32, so it fits a table's integer column
OPTIONAL = {"kv_len": int, "valid_fraction": float}  # fields a case's key holds only when they are set
SERIES_INTS = ("batch", "num_heads", "num_kv_heads", "head_dim")  # NB: float in a table that had NaNs merged in
SERIES = [
    "variant",
    "impl",
    "device",
    "dtype",
    "mode",
    "batch",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "causal",
    "params",
]
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class Case:
    variant: str
    impl: str
    device: str
    dtype: str
    mode: str
    batch: int
    seq_len: int  # queries and keys; in decode one query against a cache of seq_len; with kv_len the queries
    num_heads: int
    num_kv_heads: int
    head_dim: int
    causal: bool
    params: tuple[tuple[str, object], ...] = ()  # explicit variant parameters, sorted
    kv_len: int | None = None  # keys of another sequence (cross attention); None: seq_len, self-attention
    valid_fraction: float | None = None  # a padded batch: valid tokens about this share of B·n; None: no padding

    @property
    def key(self) -> dict:
        """The identity of a case: every field, as plain JSON values. NB: a case without kv_len or
        valid_fraction has neither in its key, so its id is the one it had before the fields existed."""
        out = asdict(self)
        out["params"] = dict(self.params)
        for name in OPTIONAL:
            if out[name] is None:
                del out[name]
        return out

    @property
    def case_id(self) -> str:
        """Stable across runs and machines: the hash of the canonical JSON of the key."""
        text = json.dumps(self.key, sort_keys=True, separators=(",", ":"))
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    @property
    def query_len(self) -> int:
        return 1 if self.mode == "decode" else self.seq_len

    @property
    def key_len(self) -> int:
        return self.seq_len if self.kv_len is None else self.kv_len

    @property
    def lengths(self) -> tuple[int, ...] | None:
        """A padded batch's valid tokens per sequence (seeded, variants.rules.padding); None without padding."""
        if self.valid_fraction is None:
            return None
        return valid_lengths(self.batch, self.seq_len, self.valid_fraction)

    def label(self) -> str:
        params = ",".join(f"{k}={v}" for k, v in self.params)
        extra = f" {params}" if params else ""
        kv = f"/{self.num_kv_heads}" if self.num_kv_heads != self.num_heads else ""
        causal = " causal" if self.causal else ""
        n = (
            f"n={self.seq_len}"
            + (f" n_k={self.kv_len}" if self.kv_len is not None else "")
            + (f" valid={self.valid_fraction:g}" if self.valid_fraction is not None else "")
        )
        return (
            f"{self.variant}/{self.impl} {self.device} {self.dtype} {self.mode} {n} "
            f"B={self.batch} H={self.num_heads}{kv} d={self.head_dim}{causal}{extra}"
        )

    @classmethod
    def from_key(cls, key: dict) -> "Case":
        """The case of a key (plan.json, a journal line); ValueError naming the field that is wrong."""
        fields = checked_key(key)
        fields["params"] = tuple(sorted(fields.get("params", {}).items()))
        for name, kind in OPTIONAL.items():  # NB: NaN or absent in a table where no case has them
            value = fields.get(name)
            try:
                fields[name] = None if value is None or value != value else kind(value)
            except OverflowError:
                raise ValueError(f"case field {name} = {value!r:.40}: too large") from None
        return cls(**fields)


KEY_KINDS = {
    "variant": str,
    "impl": str,
    "device": str,
    "dtype": str,
    "mode": str,
    "batch": int,
    "seq_len": int,
    "num_heads": int,
    "num_kv_heads": int,
    "head_dim": int,
    "causal": bool,
    "params": dict,
    "kv_len": int,
    "valid_fraction": float,
}


def checked_key(key: object) -> dict:
    """A copy of a case's key whose fields are all known and of their kind; ValueError naming the first
    that is not (a damaged or hand-edited plan or journal must not reach the measuring code)."""
    if not isinstance(key, dict):
        raise ValueError(f"a case must be an object of fields, not {type(key).__name__}")
    unknown = sorted(set(key) - set(KEY_KINDS))
    missing = sorted(set(KEY_KINDS) - set(key) - set(OPTIONAL) - {"params"})
    if unknown or missing:
        raise ValueError(f"case fields: unknown {unknown}, missing {missing} (known: {', '.join(KEY_KINDS)})")
    for name, value in key.items():
        if not _is_kind(value, KEY_KINDS[name], optional=name in OPTIONAL):
            raise ValueError(f"case field {name} = {shown(value)}: not {KEY_KINDS[name].__name__}")
    params = key.get("params", {})
    for name, value in params.items():
        if not isinstance(name, str) or not isinstance(value, (str, int, float, bool)):
            raise ValueError(
                f"case field params: {name!r} = {shown(value)} (allowed: names with numbers, text or true/false)"
            )
    return dict(key)


def _is_kind(value: object, kind: type, optional: bool) -> bool:
    if value is None or (optional and isinstance(value, float) and value != value):
        return optional  # NaN: a table's missing value
    if kind is bool:
        return isinstance(value, (bool, np.bool_))
    if kind is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if kind is float:
        return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    return isinstance(value, kind)


def reasons_of(case: Case) -> list[str]:
    """Why the case's implementation cannot run it here ([] when it can); ValueError for a length or
    parameter the variant does not take."""
    return variants.get(case.variant).reasons(
        case.impl,
        params=dict(case.params),
        device=case.device,
        dtype=DTYPES[case.dtype],
        batch=case.batch,
        num_heads=case.num_heads,
        num_kv_heads=case.num_kv_heads,
        seq_len=case.seq_len,
        head_dim=case.head_dim,
        causal=case.causal,
        kv_len=case.kv_len,
        padded=case.valid_fraction is not None,
        decode=case.mode == "decode",
    )


def theory_of(case: Case) -> dict:
    """The case's analytic figures, from its variant's mode-aware theory (docs/CLAIMS.md)."""
    theory = variants.get(case.variant).theory(
        seq_len=case.seq_len,
        batch=case.batch,
        num_heads=case.num_heads,
        num_kv_heads=case.num_kv_heads,
        head_dim=case.head_dim,
        causal=case.causal,
        dtype_bytes=DTYPES[case.dtype].itemsize,
        mode=case.mode,
        kv_len=case.kv_len,
        lengths=case.lengths,
        **dict(case.params),
    )
    return {
        "flops": int(theory.flops),
        "pairs": theory.pairs,
        "claimed_exponent_n": theory.claimed_exponent_n,
        "claimed_exponent_d": theory.claimed_exponent_d,
        "kv_bytes": theory.kv_bytes,
        "compulsory_bytes": theory.compulsory_bytes,
        "traffic_bytes": theory.traffic_bytes,
        "extra_flops": theory.extra_flops,
        "claimed_exponent_q": theory.exponent_q,
        "claimed_exponent_k": theory.exponent_k,
        "claimed_memory_exponent_n": theory.claimed_memory_exponent_n,
        "valid_tokens": None if case.lengths is None else sum(case.lengths),
    }


def series_key(fields) -> str:
    """The identity of a series: every shape field but seq_len (params as canonical JSON text). NB:
    kv_len and valid_fraction only where set, so a series keeps the key it had before those fields."""
    params = fields["params"]
    if isinstance(params, str):
        params = json.loads(params) if params else {}
    out = {k: fields[k] for k in SERIES if k != "params"}
    out = {k: bool(v) if k == "causal" else int(v) if k in SERIES_INTS else str(v) for k, v in out.items()}
    for name, kind in OPTIONAL.items():
        value = fields.get(name)
        if value is not None and value == value:  # not None, not NaN
            out[name] = kind(value)
    return json.dumps({**out, "params": dict(params)}, sort_keys=True)
