"""The variants' pages, from the registry alone: the table (README and docs/variants/index.md) and one
page per variant (claim, parameters, implementations and their traits, where a library's definition
differs from ours). Nothing here depends on the machine: what runs here is `suite list`'s job."""

from __future__ import annotations

import variants
from suite.present import markdown as md
from suite.present.listing import claim_of
from variants.rules import PADDING, WORK

SHAPE = {"seq_len": 4096, "num_heads": 8, "head_dim": 64}  # the shape the theory section is stated at


def default_of(param) -> str:
    """A parameter's default as a reader wants it: the value, or the rule that derives it ("⌈√n⌉")."""
    if param.derive is None and param.default is not None:
        return f"{param.default:g}" if isinstance(param.default, (int, float)) else str(param.default)
    said = [part.strip().removeprefix("default").strip(" :") for part in param.doc.split(";") if "default" in part]
    return said[0] if said else "from the inputs"


def defaults(spec) -> str:
    return ", ".join(f"{p.name}={default_of(p)}" for p in spec.params)


def table_rows(link: str = "{name}.md") -> list[list[str]]:
    """variant (linked with `link`), claim, parameters, implementations: one row per registered variant."""
    rows = []
    for name in variants.names():
        spec = variants.get(name)
        rows.append(
            [f"[`{name}`]({link.format(name=name)})", claim_of(spec), defaults(spec) or "–", ", ".join(spec.impls)]
        )
    return rows


def table(link: str = "{name}.md") -> str:
    return md.table(["variant", "claim", "parameters (default)", "implementations"], table_rows(link))


def index_page() -> str:
    return md.page(
        "# Variants",
        md.GENERATED.format(command="docs"),
        "Every variant in the registry (`variants/`), with the claim it makes, its parameters and its "
        "implementations. A claim belongs to the algorithm and a cost to the implementation: `dense` and `sdpa` "
        "run a sparse pattern through an n×n mask and are O(n²) whatever the pattern. The definitions are in "
        "[Definitions](../CLAIMS.md); which implementations run on this machine, `python -m suite list` says.",
        table(),
    )


def _allowed(param) -> str:
    if param.choices is not None:
        return "one of " + ", ".join(md.code(c) for c in param.choices)
    text = f"≥ {param.minimum:g}"
    if param.maximum is not None:
        small, large = param.maximum(1024), param.maximum(65536)
        text += f", ≤ {small:g}" if small == large else f", ≤ a limit of n ({small:g} at n = 1024)"
    return text


def _params(spec) -> str:
    if not spec.params:
        return "No parameters."
    return md.table(
        ["parameter", "default", "meaning", "allowed"],
        [[md.code(p.name), default_of(p), p.doc, _allowed(p)] for p in spec.params],
    )


def _theory(spec) -> str:
    kv = 2 if spec.kv_heads == "divides" else None
    theory = spec.theory(**SHAPE, num_kv_heads=kv)
    heads = f"H = {SHAPE['num_heads']}" + (f", H_kv = {kv}" if kv else "")
    shape = f"n = {SHAPE['seq_len']}, {heads}, d = {SHAPE['head_dim']}, B = 1, float32"
    rows = [["claimed exponent in n", f"{theory.claimed_exponent_n:g}"]]
    if theory.claimed_exponent_d is not None:
        rows.append(["claimed exponent in d", f"{theory.claimed_exponent_d:g}"])
    if theory.pairs is not None:
        rows.append(["allowed pairs P (a head)", f"{theory.pairs:,}"])
    rows.append(["FLOPs of the forward (the claim's)", f"{theory.flops:,}"])
    rows += [[f"named term: {term}", f"{flops:,}"] for term, flops in theory.extra_flops.items()]
    if theory.kv_bytes is not None:
        rows.append(["bytes of K and V", f"{theory.kv_bytes:,}"])
    if theory.note:
        rows.append(["note", theory.note])
    return f"At {shape}, with the default parameters (formulas: [Definitions](../CLAIMS.md)):\n\n" + md.table(
        ["quantity", "value"], rows
    )


def _shapes(spec) -> str:
    rows = [
        ["cross attention", "yes" if spec.cross else f"no: {spec.cross_note}"],
        ["padded batches", "yes" if spec.padding else f"no: {spec.padding_note}"],
        ["decode", "yes" if spec.decode else "no decode step here"],
    ]
    return md.table(["shape", "taken"], rows)


def _devices(impl) -> str:
    return ", ".join(impl.devices) if impl.devices is not None else "any torch device"


def _dtypes(impl) -> str:
    return ", ".join(str(d).removeprefix("torch.") for d in impl.dtypes)


def _impls(spec) -> str:
    rows = []
    for impl in spec.impls.values():
        rows.append(
            [
                md.code(impl.name),
                impl.cost,
                WORK[impl.work],
                impl.library or "–",
                _devices(impl),
                _dtypes(impl),
                "yes" if impl.supports_causal else "no",
                PADDING[impl.padding] if impl.padding and spec.padding else "–",
                "yes" if impl.decode and spec.decode else "no",
                "yes" if impl.countable else "no",
                "yes" if impl.gathers else "no",
            ]
        )
    headers = [
        "implementation",
        "its own cost",
        "work",
        "library",
        "devices",
        "dtypes",
        "causal",
        "padded batches",
        "decode",
        "FLOPs countable",
        "random gathers",
    ]
    out = (
        "Devices and dtypes are the registry's table; a library adds its own checks, and "
        "`python -m suite list` says what runs on this machine.\n\n" + md.table(headers, rows)
    )
    differs = [(impl.name, impl.differs.note) for impl in spec.impls.values() if impl.differs is not None]
    if differs:
        out += "\n\n### How a library differs from our definition\n\n" + "\n".join(
            f"- {md.code(name)}: {note}" for name, note in differs
        )
    return out


def variant_page(name: str) -> str:
    spec = variants.get(name)
    return md.page(
        f"# `{spec.name}`",
        md.GENERATED.format(command="docs"),
        f"{spec.summary}\n\nSource: {spec.source}. Family: {spec.family}. Claim: {claim_of(spec)}."
        + (f" It approximates `{spec.approximates}`." if spec.approximates else ""),
        "## Parameters",
        _params(spec),
        "## Theory",
        _theory(spec),
        "## Shapes beyond self-attention",
        _shapes(spec),
        "## Implementations",
        _impls(spec),
        f"Measure it: `python -m suite run --variant {spec.name}`; what runs here: "
        f"`python -m suite list --variant {spec.name}`.",
    )


def pages() -> dict[str, str]:
    """Path under docs/ -> text, for every variant page and the index."""
    out = {"variants/index.md": index_page()}
    out.update({f"variants/{name}.md": variant_page(name) for name in variants.names()})
    return out
