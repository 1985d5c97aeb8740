"""A registry of attention variants, each with its claim from the literature and its implementations.

    import variants
    spec = variants.get("sliding_window")
    out = spec.attention(q, k, v, impl="native", window=128)
    spec.theory(seq_len=4096, num_heads=8, head_dim=64).flops

Definitions, parameters and FLOP formulas follow docs/CLAIMS.md.
"""

from variants.registry import Impl, Param, Prepared, Problem, VariantSpec, get, names, register
from variants.theory import Theory

# Importing a variant module registers it. The built-in ones come first, in this order (the order
# `names()` lists and reports show); any other module in this folder is imported after them, by
# name, so a new variant is one new file here.
_FIRST = ("full", "sliding_window", "neighborhood", "global_tokens", "random_keys", "strided", "fixed", "bigbird", "reformer",
          "linear", "performer", "rfa", "linformer", "shared_kv", "classic", "recurrent", "convolution")


def _import_all() -> None:
    import importlib
    import pkgutil

    found = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    for name in [n for n in _FIRST if n in found] + [n for n in found if n not in _FIRST]:
        importlib.import_module(f"{__name__}.{name}")


_import_all()

__all__ = ["Impl", "Param", "Prepared", "Problem", "Theory", "VariantSpec", "get", "names", "register"]
