"""A registry of attention variants, each with its claim from the literature and its implementations.

    import variants
    spec = variants.get("sliding_window")
    out = spec.attention(q, k, v, impl="native", window=128)
    spec.theory(seq_len=4096, num_heads=8, head_dim=64).flops

Definitions, parameters and FLOP formulas follow docs/CLAIMS.md. The folders say what each file is:

    catalog/  the declarations, one variant per file (importing one registers it)
    impls/    implementations shared by many variants (dense, SDPA, flex, xformers, nested, the peers)
              and the builders of the forms (pattern, linearized, classic, shared KV)
    native/   our own kernels by family (band, keys, residue, global rows, LSH, linearized, grouped), on core
    triton/   our own GPU kernels in Triton by family, and the paths that attach them to their variants
    rules/    the registry's rules: spec types, registry, theory, shapes, padding, masks, checks
"""

from variants.rules.registry import Impl, Param, Prepared, Problem, VariantSpec, get, names, register
from variants.rules.theory import Theory

# Importing a declaration registers it. The built-in ones come first, in this order (the order
# `names()` lists and reports show); any other module in variants/catalog is imported after them,
# by name, so a new variant is one new file there.
_FIRST = (
    "full",
    "sliding_window",
    "neighborhood",
    "global_tokens",
    "random_keys",
    "strided",
    "fixed",
    "bigbird",
    "reformer",
    "linear",
    "performer",
    "rfa",
    "linformer",
    "mqa",
    "gqa",
    "mha_fused",
    "mha_per_head",
    "additive",
    "multiplicative",
    "recurrent",
    "convolution",
)


def _import_all() -> None:
    import importlib
    import pkgutil

    from variants import catalog

    found = sorted(m.name for m in pkgutil.iter_modules(catalog.__path__) if not m.name.startswith("_"))
    for name in [n for n in _FIRST if n in found] + [n for n in found if n not in _FIRST]:
        importlib.import_module(f"{catalog.__name__}.{name}")
    importlib.import_module("variants.triton.paths")  # the `triton` implementations, attached to their variants


_import_all()

__all__ = ["Impl", "Param", "Prepared", "Problem", "Theory", "VariantSpec", "get", "names", "register"]
