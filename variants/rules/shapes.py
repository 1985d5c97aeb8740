"""Which shapes a variant takes: KV heads (MHA, MQA, GQA), keys of another sequence (cross attention),
a padded batch (variants.rules.padding runs it).

Rules on the spec's data (`kv_heads`, `cross`, `padding` and their notes), kept apart from the registry
that holds it.
"""

from __future__ import annotations

# What a variant on one sequence's positions says when asked for n_q ≠ n_k (docs/CLAIMS.md, "Cross attention").
POSITIONAL = "is defined on the positions of one sequence; queries and keys of two sequences share no positions"
# What a variant says when it cannot be padded (docs/CLAIMS.md, "Padding").
NOT_PREFIX = (
    "is not its own pattern on a prefix: its positions depend on the padded length (or its random "
    "draws do), so a padded sequence is not the variant at its valid length"
)


def cross_reasons(spec, shape) -> list[str]:
    """Why `spec` cannot attend n_q = shape.seq_len queries to n_k = shape.kv_len keys of another
    sequence ([] when it can)."""
    lengths = f"kv_len={shape.key_len} ≠ seq_len={shape.seq_len}"
    if not spec.cross:
        return [f"{lengths}: {spec.name} {spec.cross_note}"]
    if shape.causal:
        return [f"causal=True with {lengths}: two sequences share no positions, so no order"]
    return []


def kv_heads_for(spec, num_heads: int, num_kv_heads: int | None, params) -> int:
    """The KV heads of a problem: H (MHA), 1 (MQA), or the given divisor of H (GQA); ValueError otherwise."""
    if spec.kv_heads == "one":
        if num_kv_heads not in (None, 1):
            raise ValueError(f"{spec.name}: num_kv_heads={num_kv_heads} (allowed: 1)")
        return 1
    if spec.kv_heads == "divides":
        groups = params.get("groups")
        if None not in (groups, num_kv_heads) and groups != num_kv_heads:
            raise ValueError(f"{spec.name}: groups={groups} and num_kv_heads={num_kv_heads} (allowed: equal)")
        kv = num_kv_heads if num_kv_heads is not None else groups
        if kv is None:
            raise ValueError(
                f"{spec.name}: num_kv_heads=None and groups=None (allowed: give either, a divisor of num_heads)"
            )
        if num_heads % kv:
            raise ValueError(f"{spec.name}: num_kv_heads={kv} must divide num_heads={num_heads}")
        return kv
    if num_kv_heads not in (None, num_heads):
        raise ValueError(f"{spec.name}: num_kv_heads={num_kv_heads} (allowed: equal to num_heads={num_heads})")
    return num_heads


def padding_reasons(spec, impl) -> list[str]:
    """Why `impl` of `spec` cannot run a padded batch ([] when it can)."""
    if not spec.padding:
        return [f"valid_fraction: {spec.name} {spec.padding_note}"]
    if impl.padding is None:
        return [
            f"valid_fraction: {spec.name}/{impl.name} takes no padding (neither a key-padding mask nor "
            "packed sequences are built for it)"
        ]
    if impl.padding == "packed" and impl.differs is not None and impl.differs.seq_len is not None:
        return [
            f"valid_fraction: {spec.name}/{impl.name} is the variant only at lengths it chooses "
            f"({impl.differs.note.split(';')[0]}); a padded batch's valid lengths are any"
        ]
    return []
