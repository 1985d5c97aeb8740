"""The registry: a variant (`VariantSpec`: its parameters, theory and implementations) and how it is found.

A variant is data: a frozen `VariantSpec`. Capability is data too (xformers' `ops/fmha` style):
each `Impl` lists the devices and dtypes it runs on, and `VariantSpec.reasons` turns a problem into
the human-readable reasons it cannot run; an empty list means it can.
"""

from __future__ import annotations

import dataclasses
import math
import reprlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import torch

from variants.rules.differs import Differs  # noqa: F401  (re-exported: peers declare theirs here)
from variants.rules.shapes import NOT_PREFIX, POSITIONAL, cross_reasons, kv_heads_for, padding_reasons
from variants.rules.spec import FLOAT_DTYPES, PADDING, WORK, Impl, Param, Prepared, Problem, device_reasons, sqrt_n  # noqa: F401  (re-exported)
from variants.rules.theory import MemoryClaim, Theory, decode_step, for_mode


@dataclass(frozen=True)
class VariantSpec:
    """Everything the suite knows about one attention variant."""

    name: str
    family: str  # "sparse", "linear", "shared_kv", "classic"
    summary: str
    source: str
    params: tuple[Param, ...]
    theory_fn: Callable[..., Theory]
    impls: Mapping[str, Impl]
    kv_heads: str = "equal"  # "equal" (H_kv == H), "one" (MQA), "divides" (GQA)
    mask_fn: Callable[..., Callable] | None = None  # (n, causal, params) -> mask_mod predicate
    row_counts_fn: Callable[..., torch.Tensor] | None = None  # allowed keys per query row
    key_reads_fn: Callable[..., int] | None = None  # (n, causal, params) -> K, V rows read (CLAIMS.md, "Bytes")
    index_fn: Callable[[dict], int] | None = None  # params -> index entries a row stores (drawn keys)
    decode: bool = False  # a decode step: the last position's query against n keys (its pattern's last row)
    # Cross attention (n_q ≠ n_k): defined for the variant, or `cross_note` says why not (CLAIMS.md)
    cross: bool = False
    cross_note: str = POSITIONAL
    # Padding (docs/CLAIMS.md, "Padding"): a padded sequence is the variant at its valid length, with the
    # parameters of the padded length; or `padding_note` says why not
    padding: bool = False
    padding_note: str = NOT_PREFIX
    check_fn: Callable[[int, dict], None] | None = None  # limits between parameters
    approximates: str | None = None  # the variant whose output this one estimates (performer: full)
    memory: MemoryClaim | None = None  # its claim of extra memory in n, with its source (docs/CLAIMS.md)
    extras: Mapping[str, Any] = field(default_factory=dict)

    # ----------------------------------------------------------------- parameters
    def resolve(self, seq_len: int, params: Mapping[str, Any]) -> dict[str, Any]:
        """Fill defaults and validate; raise ValueError naming the parameter, value and range."""
        known = {p.name: p for p in self.params}
        for key in params:
            if key not in known:
                allowed = ", ".join(known) or "none"
                raise ValueError(f"{self.name}: unknown parameter {key!r} (allowed: {allowed})")
        out: dict[str, Any] = {}
        for p in self.params:
            value = params.get(p.name)
            if value is None:
                value = p.default_for(seq_len)
                if value is None:  # taken from the inputs (gqa groups)
                    out[p.name] = None
                    continue
                if p.maximum is not None:  # a default means "at most": 16 tokens, or n if fewer
                    value = min(value, p.maximum(seq_len))
            if p.choices is not None:
                if value not in p.choices:
                    allowed = ", ".join(map(repr, p.choices))
                    raise ValueError(f"{self.name}: parameter {p.name}={reprlib.repr(value)} (allowed: {allowed})")
                out[p.name] = value
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or (p.kind is int and not float(value).is_integer())
            ):
                raise ValueError(f"{self.name}: parameter {p.name}={reprlib.repr(value)} must be {p.kind.__name__}")
            if not math.isfinite(value):  # NB: nan passes any comparison with the range below
                raise ValueError(f"{self.name}: parameter {p.name}={value!r} must be a finite number")
            value = p.kind(value)
            upper = p.maximum(seq_len) if p.maximum is not None else None
            if value < p.minimum or (upper is not None and value > upper):
                allowed = f">= {p.minimum}" if upper is None else f"{p.minimum}..{upper} for n={seq_len}"
                raise ValueError(f"{self.name}: parameter {p.name}={value!r} out of range (allowed: {allowed})")
            out[p.name] = value
        if self.check_fn is not None:
            self.check_fn(seq_len, out)
        return out

    def explicit(self, params: Mapping[str, Any]) -> frozenset[str]:
        """Names of parameters the caller fixed (a fixed block changes the fixed pattern's claim)."""
        return frozenset(k for k, v in params.items() if v is not None)

    # ----------------------------------------------------------------- capability
    def reasons(self, impl: str, params: Mapping[str, Any] | None = None, **problem: Any) -> list[str]:
        """Why `impl` cannot run this problem (with these parameters, defaults where not given)
        here; an empty list means it can."""
        shape = Problem(**problem)
        implementation = self._impl(impl)
        why = (
            (cross_reasons(self, shape) if shape.cross else [])
            + (padding_reasons(self, implementation) if shape.padded else [])
            + (
                [f"mode=decode: {self.name}/{impl} has no decode step"]
                if shape.decode and not implementation.decode
                else []
            )
        )
        if why:
            return why
        resolved = self.resolve(shape.key_len, params or {})
        return implementation.reasons(dataclasses.replace(shape, params=tuple(sorted(resolved.items()))))

    def supported(self, impl: str, **problem: Any) -> bool:
        return not self.reasons(impl, **problem)

    def _impl(self, impl: str) -> Impl:
        if impl not in self.impls:
            raise ValueError(f"{self.name}: unknown impl {impl!r} (available: {', '.join(self.impls)})")
        return self.impls[impl]

    # ----------------------------------------------------------------- computing
    def prepare(self, q, k, v, *, impl: str, causal: bool = False, lengths=None, **params: Any) -> Prepared:
        """Validate, do every setup step, and return the zero-argument closure to time. `lengths`: a
        padded batch, sequence b valid up to lengths[b] (its output rows past that are zero)."""
        from variants.rules import padding
        from variants.rules.checks import check_inputs

        implementation = self._impl(impl)
        check_inputs(self, q, k, v, causal)
        if lengths is not None:
            padding.check_lengths(lengths, q, k)
        resolved = self.resolve(k.shape[-2], params)
        n_q, n_k = q.shape[-2], k.shape[-2]
        step = self.decode and n_q == 1 < n_k  # a decode step: the last position's query, as mode=decode runs it
        problem = Problem(
            device=q.device.type,
            dtype=q.dtype,
            batch=q.shape[0],
            num_heads=q.shape[1],
            num_kv_heads=k.shape[1],
            seq_len=n_k if step else n_q,
            kv_len=None if step or n_k == n_q else n_k,
            head_dim=q.shape[-1],
            causal=causal,
            params=tuple(sorted(resolved.items())),
            padded=lengths is not None,
            decode=step,
        )
        why = (cross_reasons(self, problem) if problem.cross else []) + (
            padding_reasons(self, implementation) if problem.padded else []
        )
        why = why or implementation.reasons(problem)
        if why:
            raise RuntimeError(f"{self.name}/{impl} cannot run here: {'; '.join(why)}")
        return padding.prepare(implementation, q, k, v, causal=causal, params=resolved, lengths=lengths)

    def attention(self, q, k, v, *, impl: str, causal: bool = False, lengths=None, **params: Any) -> torch.Tensor:
        """Attention output (B, H, n_q, d) for q (B, H, n_q, d) and k, v (B, H_kv, n_k, d)."""
        return self.prepare(q, k, v, impl=impl, causal=causal, lengths=lengths, **params)()

    # ----------------------------------------------------------------- patterns and theory
    def mask_mod(self, seq_len: int, *, causal: bool = False, **params: Any) -> Callable:
        """The allowed-pair predicate (b, h, q_idx, kv_idx) -> bool, as FlexAttention takes it."""
        if self.mask_fn is None:
            raise ValueError(f"{self.name} is not a score-based pattern: it has no mask")
        resolved = self.resolve(seq_len, params)
        return self.mask_fn(seq_len, causal, resolved)

    def mask(self, seq_len: int, *, causal: bool = False, device: str = "cpu", **params: Any) -> torch.Tensor:
        """The dense boolean (n, n) pattern, for checks and pictures at small n."""
        from variants.rules.masks import dense_mask

        _check_seq_len(seq_len)
        return dense_mask(self.mask_mod(seq_len, causal=causal, **params), seq_len, device=device)

    def row_counts(self, seq_len: int, *, causal: bool = False, **params: Any) -> torch.Tensor:
        """Allowed keys per query row, from the pattern's formula (never from the mask)."""
        if self.row_counts_fn is None:
            raise ValueError(f"{self.name} has no pair count: it is not a score-based pattern")
        _check_seq_len(seq_len)
        return self.row_counts_fn(seq_len, causal, self.resolve(seq_len, params))

    def theory(
        self,
        *,
        seq_len: int,
        batch: int = 1,
        num_heads: int = 8,
        num_kv_heads: int | None = None,
        head_dim: int = 64,
        causal: bool = False,
        dtype_bytes: int = 4,
        mode: str = "fwd",
        kv_len: int | None = None,
        lengths: tuple[int, ...] | None = None,
        **params: Any,
    ) -> Theory:
        """Pairs, FLOPs and the claimed exponents for one shape and mode, per docs/CLAIMS.md; with
        `kv_len`, seq_len queries attend kv_len keys of another sequence (cross attention); with
        `lengths`, a padded batch: the sum over its sequences at their valid lengths."""
        _check_seq_len(seq_len)
        cross = {}
        if kv_len is not None and kv_len != seq_len:
            _check_seq_len(kv_len, "kv_len")
            why = cross_reasons(self, Problem(seq_len=seq_len, kv_len=kv_len, causal=causal))
            if why or mode == "decode":
                raise ValueError(
                    why[0]
                    if why
                    else f"kv_len={kv_len} with mode=decode (allowed: fwd, fwd_bwd; "
                    "decode is one query against seq_len keys)"
                )
            cross = {"kv_len": kv_len}
        for field_name, value in (("batch", batch), ("num_heads", num_heads), ("head_dim", head_dim)):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{field_name}={reprlib.repr(value)} must be a positive int")
        resolved = self.resolve(seq_len, params)
        kv = kv_heads_for(self, num_heads, num_kv_heads, resolved)
        forward = self.theory_fn(
            seq_len=seq_len,
            batch=batch,
            num_heads=num_heads,
            num_kv_heads=kv,
            head_dim=head_dim,
            causal=causal,
            dtype_bytes=dtype_bytes,
            params=resolved,
            explicit=self.explicit(params),
            spec=self,
            **cross,
        )
        if mode == "decode":
            return self._decode(
                forward,
                seq_len=seq_len,
                batch=batch,
                num_heads=num_heads,
                num_kv_heads=kv,
                head_dim=head_dim,
                dtype_bytes=dtype_bytes,
                params=resolved,
                explicit=self.explicit(params),
            )
        if lengths is not None:
            from variants.rules import padding

            padding.check_theory(self, lengths, batch, seq_len, cross=bool(cross), mode=mode)
            forward = padding.summed(
                forward,
                [
                    self.theory_fn(
                        seq_len=n,
                        batch=1,
                        num_heads=num_heads,
                        num_kv_heads=kv,
                        head_dim=head_dim,
                        causal=causal,
                        dtype_bytes=dtype_bytes,
                        params=resolved,
                        explicit=self.explicit(params),
                        spec=self,
                    )
                    for n in lengths
                ],
            )
        claimed = self.memory_exponent(mode, forward.claimed_exponent_n)
        return replace(
            for_mode(forward, mode, batch=batch, num_heads=num_heads, seq_len=seq_len, head_dim=head_dim),
            claimed_memory_exponent_n=claimed,
        )

    def memory_exponent(self, mode: str, time_exponent: float) -> float | None:
        """The claimed exponent in n of one call's extra memory in `mode` (None: nothing claimed), given the
        forward's time claim (the pairs' exponent, which a pattern's memory claim follows)."""
        return None if self.memory is None else self.memory.exponent(mode, time_exponent)

    def _decode(self, forward: Theory, *, seq_len: int, params: dict, **shape) -> Theory:
        if not self.decode:
            raise ValueError(f"mode=decode: {self.name} has no decode step here (allowed: fwd, fwd_bwd)")
        last = None if self.row_counts_fn is None else int(self.row_counts_fn(seq_len, False, params)[-1])
        step = None if last is not None else self.theory_fn(seq_len=1, causal=False, params=params, spec=self, **shape)
        return decode_step(
            forward,
            last_row=last,
            step=step,
            batch=shape["batch"],
            num_heads=shape["num_heads"],
            head_dim=shape["head_dim"],
            num_kv_heads=shape["num_kv_heads"],
            dtype_bytes=shape["dtype_bytes"],
            index_entries=self.index_fn(params) if self.index_fn else 0,
        )


def _check_seq_len(seq_len: int, name: str = "seq_len") -> None:
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
        raise ValueError(f"{name}={seq_len!r} must be a positive int")


_REGISTRY: dict[str, VariantSpec] = {}


def register(spec: VariantSpec) -> VariantSpec:
    """Add a variant; a second variant with the same name is an error, not an override."""
    if spec.name in _REGISTRY:
        raise ValueError(f"variant {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def attach(name: str, impl: Impl) -> None:
    """Add `impl` to variant `name` at import, before any lookup (variants.triton.paths); no override."""
    if get(name).impls.setdefault(impl.name, impl) is not impl:
        raise ValueError(f"{name}: impl {impl.name!r} is already declared")


def names() -> list[str]:
    """Registered variant names, in registration order."""
    return list(_REGISTRY)


def get(name: str) -> VariantSpec:
    """The spec of `name`; an unknown name raises ValueError listing the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown variant {name!r} (known: {', '.join(_REGISTRY)})") from None
