"""A registry of attention variants, each with its claim from the literature and its implementations.

    import variants
    spec = variants.get("sliding_window")
    out = spec.attention(q, k, v, impl="native", window=128)
    spec.theory(seq_len=4096, num_heads=8, head_dim=64).flops

Definitions, parameters and FLOP formulas follow docs/CLAIMS.md.
"""

from variants.registry import Impl, Param, Prepared, Problem, VariantSpec, get, names, register
from variants.theory import Theory

# Importing a variant module registers it; the order here is the order `names()` lists.
from variants import full, sliding_window, global_tokens, random_keys, strided, fixed, bigbird, linear, performer, shared_kv, classic  # noqa: E402,F401  isort: skip

__all__ = ["Impl", "Param", "Prepared", "Problem", "Theory", "VariantSpec", "get", "names", "register"]
