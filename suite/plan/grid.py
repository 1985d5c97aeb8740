"""Grids are data: named presets shipped with the package, or a user's TOML/YAML file, same schema.

    name = "mine"
    [settings]            # how to measure (all optional)
    threads = 1
    [defaults]            # axes every block starts from
    seq_len = [256, 512, 1024]
    [[block]]             # one Cartesian product of axes; blocks are unioned
    variant = ["sliding_window"]
    impl = ["native", "sdpa"]
    params = { window = [64, 128] }

Everything is validated before any case runs: an error names the field, the value and what is
allowed (ConfigError; the command line exits 2 and writes nothing).
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import variants
from suite.plan.case import DEVICES, DTYPES, MODES, Case

PRESETS = ("smoke", "quick", "full", "pr")
AXES = ("variant", "impl", "device", "dtype", "mode", "batch", "seq_len", "num_heads",
        "num_kv_heads", "head_dim", "causal", "params")
TOP_LEVEL = ("name", "description", "settings", "defaults", "block")


class ConfigError(ValueError):
    """A grid that cannot be run, with the field, the value and what is allowed."""


@dataclass(frozen=True)
class Settings:
    """How cases are measured. Chosen for this 2-core machine (see the README for the figures)."""

    threads: int = 1  # NB: two threads gave bimodal timings here (CV ~35%); one gives CV ~1-2%
    min_run_time_s: float = 0.2  # torch.utils.benchmark blocked_autorange
    max_samples: int = 50
    case_timeout_s: float = 300.0
    memory_budget_gib: float = 16.0  # CPU address-space limit of a worker
    check_seq_len: int = 96  # correctness check against the dense reference at this n
    allocator: str = "retain"
    replicates: int = 1  # worker processes each case is timed in (process-level replicates)

    LIMITS = {
        "threads": (int, 1, 256), "min_run_time_s": (float, 0.0, 600.0), "max_samples": (int, 1, 100000),
        "case_timeout_s": (float, 1.0, 86400.0), "memory_budget_gib": (float, 0.5, 4096.0),
        "check_seq_len": (int, 1, 4096), "allocator": (str, None, None), "replicates": (int, 1, 64),
    }


@dataclass(frozen=True)
class Grid:
    name: str
    description: str
    settings: Settings
    cases: tuple[Case, ...]
    source: str = ""
    blocks: tuple[dict, ...] = field(default=(), repr=False)


def _fail(where: str, name: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{where}: field '{name}' = {value!r} (allowed: {allowed})")


def _as_list(where: str, name: str, value: Any) -> list:
    values = value if isinstance(value, list) else [value]
    if not values:
        _fail(where, name, value, "a non-empty list")
    return values


def _ints(where, name, values, minimum=1):
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            _fail(where, name, v, f"integers >= {minimum}")
    return values


def _choices(where, name, values, allowed):
    for v in values:
        if v not in allowed:
            _fail(where, name, v, ", ".join(map(str, allowed)))
    return values


def load(spec: str) -> dict:
    """Read a preset name or a TOML/YAML file into a plain dict."""
    if spec in PRESETS:
        return tomllib.loads(resources.files("suite.plan.grids").joinpath(f"{spec}.toml").read_text())
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"--grid {spec!r}: no such preset or file (presets: {', '.join(PRESETS)})")
    text = path.read_text()
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = tomllib.loads(text)
    except Exception as err:  # tomllib.TOMLDecodeError, yaml.YAMLError
        kind = "YAML" if path.suffix in (".yaml", ".yml") else "TOML"
        raise ConfigError(f"{path}: malformed {kind}: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a table/mapping, got {type(data).__name__}")
    return data


def parse(data: dict, source: str = "", *, devices: list[str] | None = None,
          only_variants: list[str] | None = None) -> Grid:
    """Validate a grid and expand it into cases; raise ConfigError at the first problem."""
    for key in data:
        if key not in TOP_LEVEL:
            _fail(source or "grid", key, "…", f"top-level keys {', '.join(TOP_LEVEL)}")
    settings = _settings(data.get("settings", {}), f"{source}: [settings]")
    defaults = data.get("defaults", {})
    _check_axes(defaults, f"{source}: [defaults]")
    blocks = data.get("block", [{}])
    if not isinstance(blocks, list) or not blocks:
        _fail(source, "block", blocks, "a non-empty list of tables ([[block]])")
    if only_variants:
        for name in only_variants:
            _variant(f"{source}: --variant", name)
    cases: dict[str, Case] = {}
    for index, block in enumerate(blocks):
        where = f"{source}: block {index + 1}"
        if not isinstance(block, dict):
            _fail(where, "block", block, "a table")
        _check_axes(block, where)
        axes = {**defaults, **block}
        if devices is not None:
            axes["device"] = devices
        for case in _expand(axes, where, only_variants):
            cases.setdefault(case.case_id, case)
    name = data.get("name", Path(source).stem if source else "grid")
    return Grid(name=str(name), description=str(data.get("description", "")), settings=settings,
                cases=tuple(cases.values()), source=source, blocks=tuple(blocks))


def _settings(raw: dict, where: str) -> Settings:
    if not isinstance(raw, dict):
        _fail(where, "settings", raw, "a table")
    values = {}
    for key, value in raw.items():
        if key not in Settings.LIMITS:
            _fail(where, key, value, ", ".join(Settings.LIMITS))
        kind, low, high = Settings.LIMITS[key]
        if key == "allocator":
            from suite.run.allocator import MODES as ALLOCATORS

            _choices(where, key, [value], ALLOCATORS)
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
            _fail(where, key, value, f"a number ({kind.__name__}) in {low}..{high}")
        elif not low <= value <= high:
            _fail(where, key, value, f"{low}..{high}")
        values[key] = value
    return Settings(**values)


def _check_axes(axes: dict, where: str) -> None:
    if not isinstance(axes, dict):
        _fail(where, "axes", axes, "a table")
    for key in axes:
        if key not in AXES:
            _fail(where, key, axes[key], f"axes {', '.join(AXES)}")


def _variant(where: str, name: str):
    try:
        return variants.get(name)
    except ValueError:
        _fail(where, "variant", name, ", ".join(variants.names()))


def _expand(axes: dict, where: str, only_variants: list[str] | None):
    names = _as_list(where, "variant", axes.get("variant", ["*"]))
    explicit_variants = names != ["*"]
    names = variants.names() if not explicit_variants else names
    specs = [_variant(where, n) for n in names]
    if only_variants:
        specs = [s for s in specs if s.name in only_variants]
    impls = _as_list(where, "impl", axes.get("impl", ["*"]))
    device = _choices(where, "device", _as_list(where, "device", axes.get("device", ["cpu"])), DEVICES)
    dtype = _choices(where, "dtype", _as_list(where, "dtype", axes.get("dtype", ["float32"])), list(DTYPES))
    mode = _choices(where, "mode", _as_list(where, "mode", axes.get("mode", ["fwd"])), MODES)
    batch = _ints(where, "batch", _as_list(where, "batch", axes.get("batch", [1])))
    seq_len = _ints(where, "seq_len", _as_list(where, "seq_len", axes.get("seq_len", [1024])))
    heads = _ints(where, "num_heads", _as_list(where, "num_heads", axes.get("num_heads", [8])))
    head_dim = _ints(where, "head_dim", _as_list(where, "head_dim", axes.get("head_dim", [64])))
    causal = _choices(where, "causal", _as_list(where, "causal", axes.get("causal", [False])), [False, True])
    kv_axis = axes.get("num_kv_heads")
    kv_values = None if kv_axis is None else _ints(where, "num_kv_heads", _as_list(where, "num_kv_heads", kv_axis))
    params = axes.get("params", {})
    if not isinstance(params, dict):
        _fail(where, "params", params, "a table of parameter name = [values]")
    param_names = list(params)
    param_values = [_as_list(where, f"params.{k}", v) for k, v in params.items()]

    for impl in impls:
        if impl != "*" and not any(impl in s.impls for s in specs):
            _fail(where, "impl", impl, "implementations of the chosen variants: "
                  + ", ".join(sorted({i for s in specs for i in s.impls})))
    for spec in specs:
        chosen = list(spec.impls) if impls == ["*"] else [i for i in impls if i in spec.impls]
        for name in param_names:
            if name not in {p.name for p in spec.params}:
                if explicit_variants:
                    _fail(where, f"params.{name}", params[name],
                          f"parameters of {spec.name}: {', '.join(p.name for p in spec.params) or 'none'}")
        if param_names and not explicit_variants and not set(param_names) <= {p.name for p in spec.params}:
            continue  # a parameter sweep under variant "*" applies to the variants that have it
        for m in mode:
            if m == "decode" and not spec.decode:
                if explicit_variants:
                    _fail(where, "mode", m, f"fwd, fwd_bwd for {spec.name} (decode is for full, mqa, gqa)")
                continue
            for impl, dev, dt, b, n, h, d, c, combo in itertools.product(
                chosen, device, dtype, batch, seq_len, heads, head_dim, causal,
                itertools.product(*param_values) if param_values else [()],
            ):
                if m == "decode" and c:
                    continue  # a single last query sees every key: causal adds nothing
                pvals = dict(zip(param_names, combo))
                try:
                    spec.resolve(n, pvals)
                except ValueError as err:
                    raise ConfigError(f"{where}: {err}") from None
                for kv in _kv_heads(spec, h, kv_values, where):
                    yield Case(spec.name, impl, dev, dt, m, b, n, h, kv, d, c, tuple(sorted(pvals.items())))


def _kv_heads(spec, heads: int, values: list[int] | None, where: str) -> list[int]:
    """KV heads of a case: H for ordinary attention, 1 for MQA, the axis (or H/4) for GQA."""
    if spec.kv_heads == "equal":
        return [heads]
    if spec.kv_heads == "one":
        return [1]
    if values is None:
        values = [max(1, heads // 4) if heads % 4 == 0 else 1]
    for kv in values:
        if heads % kv:
            _fail(where, "num_kv_heads", kv, f"a divisor of num_heads={heads}")
    return values


def resolve(spec: str, *, devices=None, only_variants=None) -> Grid:
    source = spec if spec not in PRESETS else f"preset {spec}"
    return parse(load(spec), source, devices=devices, only_variants=only_variants)
