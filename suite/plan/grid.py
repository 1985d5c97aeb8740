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
    [[block]]
    variant = ["linear"]
    seq_len = {min = 256, max = 65536}   # adaptive: measured upward until the exponent settles

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
from suite.errors import UsageError, check_name, shown
from suite.machine.device import DEVICES
from suite.plan import bounds
from suite.plan import ladder as ladders
from suite.plan.case import DTYPES, MAX_SIZE, MODES, Case
from suite.plan.ladder import Ladder
from suite.plan.settings import Settings
from suite.plan.settings import validate as validate_settings

PRESETS = ("smoke", "quick", "full", "pr", "shapes")
AXES = (
    "variant",
    "impl",
    "device",
    "dtype",
    "mode",
    "batch",
    "seq_len",
    "kv_len",
    "valid_fraction",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "causal",
    "params",
)
TOP_LEVEL = ("name", "description", "settings", "defaults", "block")
MAX_CASES = 100_000  # a grid's cases: the full preset has a few hundred; a typo in a list should not plan millions


class ConfigError(UsageError):
    """A grid that cannot be run, with the field, the value and what is allowed."""


@dataclass(frozen=True)
class Grid:
    name: str
    description: str
    settings: Settings
    cases: tuple[Case, ...]
    source: str = ""
    blocks: tuple[dict, ...] = field(default=(), repr=False)
    ladders: tuple[Ladder, ...] = ()  # series with adaptive lengths (suite.plan.ladder)

    def plan(self, plugins: list[str]) -> dict:
        """plan.json's content: the grid's identity, settings, plugins and cases."""
        from suite.plan.shard import grid_id

        return {
            "grid": self.name,
            "source": self.source,
            "description": self.description,
            "settings": self.settings.to_plan(),
            "plugins": plugins,
            "grid_id": grid_id(list(self.cases)),
            "grid_cases": len(self.cases),
            "cases": [case.key for case in self.cases],
            "ladders": [ladder.to_plan() for ladder in self.ladders],
        }


def _fail(where: str, name: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{where}: field '{name}' = {shown(value)} (allowed: {allowed})")


def _as_list(where: str, name: str, value: Any) -> list:
    values = value if isinstance(value, list) else [value]
    if not values:
        _fail(where, name, value, "a non-empty list")
    return values


def _ints(where, name, values, minimum=1):
    most = bounds.SIZE_LIMITS.get(name, MAX_SIZE)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not minimum <= v <= most:
            _fail(where, name, v, f"integers from {minimum} to {most}")
    return values


def _check_work(case: Case, longest: int, where: str) -> None:
    """ConfigError where the case's work (bounds.MAX_WORK), at its longest length, gives figures past int64."""
    found = bounds.work(case, longest)
    if found is not None:
        _fail(where, *found)


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
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err}); a grid file is TOML or YAML") from None
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
    if not data:  # NB: an empty file would plan every variant at its defaults; [[block]] = {} says so on purpose
        raise ConfigError(
            f"{path}: empty (allowed: [settings], [defaults] and [[block]] tables; "
            "[[block]] alone runs every variant at its defaults)"
        )
    return data


def parse(
    data: dict, source: str = "", *, devices: list[str] | None = None, only_variants: list[str] | None = None
) -> Grid:
    """Validate a grid and expand it into cases; raise ConfigError at the first problem."""
    for key in data:
        if key not in TOP_LEVEL:
            _fail(source or "grid", key, "…", f"top-level keys {', '.join(TOP_LEVEL)}")
    description = data.get("description", "")
    if not isinstance(description, str):
        _fail(source or "grid", "description", description, "text")
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
    found: dict[str, Ladder] = {}
    expansion = 0
    for index, block in enumerate(blocks):
        where = f"{source}: block {index + 1}"
        if not isinstance(block, dict):
            _fail(where, "block", block, "a table")
        _check_axes(block, where)
        axes = {**defaults, **block}
        if devices is not None:
            axes["device"] = devices
        expansion += _check_expansion(axes, where, expansion)
        for case, ladder in _expand(axes, where, only_variants):
            if ladder is not None and found.setdefault(ladder.key, ladder) is not ladder:
                continue  # the same series twice: the first block's range holds
            for one in ladder.start() if ladder else [case]:
                cases.setdefault(one.case_id, one)
            if len(cases) > MAX_CASES:
                _fail(where, "cases", f"more than {MAX_CASES}", f"at most {MAX_CASES} cases in a grid (split it)")
    if not cases:
        raise ConfigError(f"{source or 'grid'}: no cases (every block is empty after --variant and the filters)")
    name = data.get("name", Path(source).stem if source else "grid")
    try:
        check_name(f"{source or 'grid'}: field 'name' =", name)
    except UsageError as err:
        raise ConfigError(str(err)) from None
    return Grid(
        name=str(name),
        description=description,
        settings=settings,
        cases=tuple(cases.values()),
        source=source,
        blocks=tuple(blocks),
        ladders=tuple(found.values()),
    )


def _check_expansion(axes: dict, where: str, before: int) -> int:
    """The combinations a block makes (bounds.expansion); ConfigError naming its longest axis where the grid's
    blocks would pass bounds.MAX_EXPANSION."""
    total, sizes = bounds.expansion(axes)
    if before + total > bounds.MAX_EXPANSION:
        _fail(where, *bounds.too_many(axes, total, sizes))
    return total


def _settings(raw: dict, where: str) -> Settings:
    try:
        return Settings(**validate_settings(raw, where))
    except UsageError as err:
        raise ConfigError(str(err)) from None


def _check_axes(axes: dict, where: str) -> None:
    if not isinstance(axes, dict):
        _fail(where, "axes", axes, "a table")
    for key in axes:
        if key not in AXES:
            _fail(where, key, axes[key], f"axes {', '.join(AXES)}")


def _variant(where: str, name: str):
    try:
        return variants.get(name)
    except (ValueError, TypeError):  # NB: TypeError: a table where a name goes (unhashable)
        _fail(where, "variant", name, ", ".join(variants.names()))


def _expand(axes: dict, where: str, only_variants: list[str] | None):
    names = _as_list(where, "variant", axes.get("variant", ["*"]))
    explicit_variants = names != ["*"]
    names = variants.names() if not explicit_variants else names
    specs = [_variant(where, n) for n in names]
    impls = _as_list(where, "impl", axes.get("impl", ["*"]))
    device = _choices(where, "device", _as_list(where, "device", axes.get("device", ["cpu"])), list(DEVICES))
    dtype = _choices(where, "dtype", _as_list(where, "dtype", axes.get("dtype", ["float32"])), list(DTYPES))
    mode = _choices(where, "mode", _as_list(where, "mode", axes.get("mode", ["fwd"])), MODES)
    batch = _ints(where, "batch", _as_list(where, "batch", axes.get("batch", [1])))
    seq_len, climb = _lengths(where, axes.get("seq_len", [1024]))
    kv_lens = _kv_lens(where, axes.get("kv_len"), mode)
    fractions = _fractions(where, axes.get("valid_fraction"), mode, kv_lens)
    heads = _ints(where, "num_heads", _as_list(where, "num_heads", axes.get("num_heads", [8])))
    head_dim = _ints(where, "head_dim", _as_list(where, "head_dim", axes.get("head_dim", [64])))
    causal = _bools(where, "causal", _as_list(where, "causal", axes.get("causal", [False])))
    kv_axis = axes.get("num_kv_heads")
    kv_values = None if kv_axis is None else _ints(where, "num_kv_heads", _as_list(where, "num_kv_heads", kv_axis))
    params = axes.get("params", {})
    if not isinstance(params, dict):
        _fail(where, "params", params, "a table of parameter name = [values]")
    param_names = list(params)
    param_values = [_as_list(where, f"params.{k}", v) for k, v in params.items()]

    _check_block(specs, explicit_variants, impls, params, kv_values, where)  # the block as written, then --variant
    specs = [s for s in specs if s.name in only_variants] if only_variants else specs
    for spec in specs:
        chosen = list(spec.impls) if impls == ["*"] else [i for i in impls if i in spec.impls]
        if param_names and not explicit_variants and not set(param_names) <= {p.name for p in spec.params}:
            continue  # a parameter sweep under variant "*" applies to the variants that have it
        for m in mode:
            if m == "decode" and not spec.decode:
                if explicit_variants:
                    with_step = ", ".join(n for n in variants.names() if variants.get(n).decode)
                    _fail(where, "mode", m, f"fwd, fwd_bwd for {spec.name} (decode is for {with_step})")
                continue
            for impl, dev, dt, b, n, h, d, c, combo in itertools.product(
                chosen,
                device,
                dtype,
                batch,
                seq_len,
                heads,
                head_dim,
                causal,
                itertools.product(*param_values) if param_values else [()],
            ):
                if m == "decode" and c:
                    continue  # the last row is the same causal or not: no key lies after the last position
                pvals = dict(zip(param_names, combo))
                for length in ladders.start_lengths(*climb) if climb else [n]:
                    try:
                        spec.resolve(length, pvals)
                    except ValueError as err:
                        raise ConfigError(f"{where}: {err}") from None
                    except OverflowError:  # NB: an integer no float holds
                        _fail(where, "params", f"{pvals!r:.60}…", "numbers a float holds")
                for kv, n_k, f in itertools.product(_kv_heads(spec, h, kv_values, where, pvals), kv_lens, fractions):
                    case = Case(spec.name, impl, dev, dt, m, b, n, h, kv, d, c, tuple(sorted(pvals.items())), n_k, f)
                    _check_work(case, climb[1] if climb else n, where)
                    yield case, Ladder(case, *climb) if climb else None


def check_plan(cases: list[Case], plan_ladders: list[Ladder], where: str) -> None:
    """ConfigError naming the case and field where a planned case (a resumed plan.json, perhaps edited)
    is not one a grid could make: the grid's own rules, run on a block of that case alone."""
    for i, case in enumerate(cases):
        check_case(case, f"{where}: cases[{i}]")
    for i, ladder in enumerate(plan_ladders):
        ladders.parse_range(
            {"min": ladder.low, "max": ladder.high, "step": ladder.step}, f"{where}: ladders[{i}]", _fail
        )
        check_case(ladder.template, f"{where}: ladders[{i}].template")


def check_case(case: Case, where: str) -> None:
    """ConfigError where the grid's rules would not make `case` (see check_plan)."""
    spec = _variant(where, case.variant)
    axes = {name: [value] for name, value in case.key.items() if name not in ("params", "num_kv_heads")}
    axes["params"] = {name: [value] for name, value in case.params}
    if spec.kv_heads == "divides":
        axes["num_kv_heads"] = [case.num_kv_heads]
    made = [one for one, _ in _expand(axes, where, None)]
    if not made and case.mode == "decode" and case.causal:  # NB: the grid leaves these out (the same as not causal)
        _fail(where, "causal", case.causal, "false with mode decode")
    if (
        len(made) != 1
    ):  # NB: "*" as an implementation is a wildcard in a grid, not a case ("*" as a variant fails above)
        _fail(where, "impl", case.impl, "one of the variant's implementations")
    if made[0] != case:  # NB: the grid gave it other fields (MQA's one KV head where the plan says three)
        name = next((n for n in ("num_kv_heads", *case.key) if getattr(made[0], n) != getattr(case, n)), "impl")
        _fail(where, name, getattr(case, name), f"{getattr(made[0], name)!r} for this case")


def _lengths(where: str, value) -> tuple[list[int], tuple[int, int, int] | None]:
    """A list of lengths, or a range / "auto" (adaptive): ([min], (min, max, step))."""
    if value == "auto" or isinstance(value, dict):
        low, high, step = ladders.parse_range(value, where, _fail)
        return [low], (low, high, step)
    if isinstance(value, str):
        _fail(where, "seq_len", value, 'a list of integers, a range {min = .., max = .., step = 2 or 4}, or "auto"')
    return _ints(where, "seq_len", _as_list(where, "seq_len", value)), None


def _kv_lens(where: str, value, modes: list[str]) -> list[int | None]:
    """Keys of another sequence (cross attention): a list of lengths; absent: self-attention."""
    if value is None:
        return [None]
    if isinstance(value, (dict, str)):
        _fail(where, "kv_len", value, "a list of integers (adaptive lengths are for seq_len only)")
    values = _ints(where, "kv_len", _as_list(where, "kv_len", value))
    if "decode" in modes:
        _fail(where, "mode", "decode", "fwd, fwd_bwd with kv_len (decode is one query against seq_len keys)")
    return values


def _fractions(where: str, value, modes: list[str], kv_lens: list) -> list[float | None]:
    """Padded batches: the valid tokens' share of B·n, each in (0, 1]; absent: no padding."""
    if value is None:
        return [None]
    values = _as_list(where, "valid_fraction", value)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            _fail(where, "valid_fraction", v, "numbers in (0, 1]")
    if "decode" in modes or kv_lens != [None]:
        _fail(where, "valid_fraction", value, "padding of self-attention (fwd, fwd_bwd), without kv_len or decode")
    return [float(v) for v in values]


def _bools(where: str, name: str, values: list) -> list:
    for v in values:
        if not isinstance(v, bool):  # NB: 0 == False in Python, but a case's causal must be a bool
            _fail(where, name, v, "true, false")
    return values


def _check_block(specs, explicit: bool, impls: list, params: dict, kv_values, where: str) -> None:
    """What a block names must apply to some variant it chooses: an implementation, a parameter
    (to every explicit variant; under "*" to one at least), explicit KV heads."""
    for impl in impls:
        if not isinstance(impl, str) or impl != "*" and not any(impl in s.impls for s in specs):
            _fail(
                where,
                "impl",
                impl,
                "implementations of the chosen variants: " + ", ".join(sorted({i for s in specs for i in s.impls})),
            )
    known = {p.name for s in specs for p in s.params}
    for name, values in params.items():
        for spec in specs if explicit else []:
            if name not in {p.name for p in spec.params}:
                _fail(
                    where,
                    f"params.{name}",
                    values,
                    f"parameters of {spec.name}: {', '.join(p.name for p in spec.params) or 'none'}",
                )
        if name not in known:
            _fail(where, f"params.{name}", values, "parameters of the chosen variants: " + ", ".join(sorted(known)))
    if kv_values is not None:
        shared = [s.name for s in specs if s.kv_heads == "divides"]
        if not shared or (explicit and len(shared) < len(specs)):
            _fail(
                where,
                "num_kv_heads",
                kv_values,
                "only with variants whose KV heads are an axis ("
                + ", ".join(n for n in variants.names() if variants.get(n).kv_heads == "divides")
                + ")",
            )


def _kv_heads(spec, heads: int, values: list[int] | None, where: str, params: dict) -> list[int]:
    """KV heads of a case: H for ordinary attention, 1 for MQA, the axis (or its `groups`, or H/4) for GQA."""
    if spec.kv_heads == "equal":
        return [heads]
    if spec.kv_heads == "one":
        return [1]
    if values is None:
        values = [params["groups"]] if "groups" in params else [max(1, heads // 4) if heads % 4 == 0 else 1]
    for kv in values:
        if heads % kv:
            _fail(where, "num_kv_heads", kv, f"a divisor of num_heads={heads}")
        if params.get("groups", kv) != kv:
            _fail(where, "num_kv_heads", kv, f"params.groups = {params['groups']} (the same KV heads)")
    return values


def resolve(spec: str, *, devices=None, only_variants=None) -> Grid:
    source = spec if spec not in PRESETS else f"preset {spec}"
    return parse(load(spec), source, devices=devices, only_variants=only_variants)
