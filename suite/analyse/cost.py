"""A series' time as the sum of its own terms, and the verdict on the claim's leading term
(docs/CLAIMS.md, "Verdicts").

    time(n) ≈ c_call + c_rows·n + c_lead·nᵖ·f_path(n)·(1 + Σ_L s_L·ramp_L(n))

a call's floor, a cost per row or per block (for a claim above n¹), the claim's leading term, and
for each cache level L that the series' working set (the bytes model's: docs/CLAIMS.md, "Bytes")
passes inside the measured span, a step s_L in the time per unit of the leading term's work, where
the working set leaves L. A step is the machine's because it stops (the span must show lengths
past it, so that a term that keeps growing is not taken for one) and because it is bounded: it
raises the time per unit of work at most by the run's cache over memory bandwidth, less one. For an
implementation whose leading term's work is random gathers (Impl.gathers), the run's measured rate of
such gathers stands in for the steps: s·(g(n)/min g − 1), g the ns a gathered pair at a head's K at n
(suite.machine.gathers), 0 ≤ s ≤ 1. Where the implementation changes how it runs within the span and
says so (its notes' "path" per length: suite.analyse.paths), f_path is 1 on its first path and a
fitted factor on each later one, else 1; where its top path alone spans MIN_SPAN, the model is fitted
on that path alone (an earlier path's own call and row costs are no part of the claim). Every coefficient
is ≥ 0 (a term never saves time); the fit is least squares on the relative error (a 256 and a 65536 weigh alike).

The verdict judges the leading term, nested models against each other by the F test:
- **needed**: with the next lower class in its place (n^1 for n^1.5, the floor alone for n^1) the
  model fits worse at NEED_LEVEL;
- **a higher term needed**: adding the next higher class, or n², fits better at HIGHER_LEVEL and the
  term carries at least MIN_HIGHER_SHARE of the largest length's time.
Confirmed when the leading term is needed and no higher one is; refuted when a higher one is (where
a cache level sits at the span's top edge, only if it is needed with that level's step too);
inconclusive otherwise, saying what would tell. The rule and its reasons are suite.analyse.claim_rule's. A time that grows slower than the claim is never
refuted here: its overheads hide the leading term, and a longer span shows it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

import numpy as np

from suite.analyse import claim_rule
from suite.analyse.claim_rule import (  # noqa: F401
    CONFIRM_DOF,
    DOMINANT,
    HIGHER_LEVEL,
    MARGIN,
    MIN_HIGHER_SHARE,
    NEED_LEVEL,
    Note,
    Reason,
    Why,
    power_name,
)
from suite.analyse.paths import Paths, least, rate
from suite.analyse.steps import Machine

CLASSES = (0.0, 1.0, 1.5, 2.0, 3.0)  # the complexity classes a term is drawn from, beside the claim
MIN_SPAN = 16.0  # as the power-law rule (suite.analyse.fits)
# A cache step: a logistic in octaves of working set, 10–90% over 1.5 octaves, centred at the cache's
# size or up to an octave below it (the tiles, the output and the intermediates share the cache):
# the centre is chosen on this grid, and counts as a parameter of the fit
CENTRES = (-1.0, -0.5, 0.0)
TIE = 1e-6  # models whose SSE (of relative errors) differ by less than this share, or this RMS, fit alike (`best`)
# random gathers' term (Impl.gathers): at most the whole of the leading term's time follows their measured rate
GATHERS, GATHERS_MAX = "gathers", 1.0
BOOTSTRAP = 200
NAMED = 0.005  # a term's share of the largest length's time under which it is not named (suite.analyse.terms.explain)


@dataclass(frozen=True)
class Model:
    """One fitted model: its terms, coefficients, fit, and its cache steps' centres."""

    names: tuple[str, ...]
    coef: tuple[float, ...]
    sse: float
    shares: dict[str, float]  # each term's share of the modelled time at the largest length
    centres: dict[str, float] = field(default_factory=dict)
    factors: dict[str, float] = field(default_factory=dict)  # path -> its factor on the leading term's rate

    @property
    def k(self) -> int:  # a step's centre and a path's factor are parameters too
        return len(self.names) + len(self.centres) + len(self.factors)


@dataclass(frozen=True)
class CostVerdict:
    verdict: str
    reason: Why  # what decided it, with its figures (suite.analyse.claim_rule); `why` is its English
    model: Model | None = None  # what the time is read off: the claim's model, or with its higher term where refuted
    need_p: float = math.nan  # F test: the model with the next lower class in the leading term's place
    higher_p: float = math.nan  # the most significant higher term's F test
    higher: str = ""  # that term's name
    higher_share: float = math.nan
    steps: dict[str, float] = field(default_factory=dict)  # cache level -> length its step centres on
    share_lo: dict[str, float] = field(default_factory=dict)  # bootstrap 95% interval of each share
    share_hi: dict[str, float] = field(default_factory=dict)
    higher_needed: bool = False  # a term above the claim was needed (refuted, or inconclusive for an edge step)
    paths: tuple[tuple[str, float, float], ...] = ()  # (path, its first length, factor on the leading term's rate)
    alone: float = math.nan  # where the top path was fitted alone, its first length (the factors above are NaN)

    @property
    def why(self) -> str:
        return claim_rule.text(self.reason)

    @property
    def at_level(self) -> bool:
        """The higher term's test within MARGIN of its level, for a term that would matter (claim_rule.at_level)."""
        return claim_rule.at_level(self.verdict, self.higher_p, self.higher_share)


def design(
    x: np.ndarray,
    top: float | None,
    centres: dict[str, float],
    hw: Machine | None,
    extra: float | None = None,
    rate: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """The columns of a model whose largest term is n^top (None: no term at all), lengths scaled to
    the largest (columns of one size), with a step in its top term's rate at each centre; `rate`, each
    length's path factor on the top term's (and the higher term's and the steps') time per unit of work."""
    if top is None:
        return {}
    u = x / x.max()
    w = np.ones_like(u) if rate is None else rate
    cols = {"call": np.ones_like(u)}
    if top > 1:
        cols["rows"] = u
    if top > 0:
        cols[power_name(top)] = u**top * w
    if extra is not None:
        cols[power_name(extra)] = u**extra * w
    for level, centre in centres.items():
        cols[f"{level} step"] = u**top * hw.ramp(centre) * w
    if hw is not None and hw.gathers is not None and top > 0:
        cols[GATHERS] = u**top * (hw.gathers / hw.gathers.min() - 1.0) * w
    return cols


def fit(
    cols: dict[str, np.ndarray],
    y: np.ndarray,
    centres: dict[str, float] | None = None,
    cap: tuple[str, float] | None = None,
    factors: dict[str, float] | None = None,
) -> Model:
    """Non-negative least squares of y on the columns on the relative error; `cap` = (the leading
    column, S): each step's coefficient at most S times the leading term's, the gathers' at most
    GATHERS_MAX times (a term whose bound binds is held on it: the active set)."""
    from scipy.optimize import nnls

    if not cols:
        return Model((), (), float(len(y)), {})
    root = np.ones(len(y))
    names = list(cols)
    a = np.column_stack(list(cols.values())) / y[:, None] * root[:, None]
    coef = nnls(a, root)[0]
    bound = {
        j: cap[1] if name.endswith(" step") else GATHERS_MAX
        for j, name in enumerate(names)
        if cap is not None and (name.endswith(" step") or name == GATHERS)
    }
    bound = {j: b for j, b in bound.items() if np.isfinite(b)}
    held: list[int] = []
    while bound:
        lead = names.index(cap[0])
        over = [j for j, b in bound.items() if j not in held and coef[j] > b * coef[lead] * (1 + 1e-9)]
        if not over:
            break
        held.append(over[0])
        free = [j for j in range(len(names)) if j not in held]
        merged = a[:, free].copy()
        merged[:, free.index(lead)] += sum(bound[j] * a[:, j] for j in held)
        sub = nnls(merged, root)[0]
        coef = np.zeros(len(names))
        coef[free] = sub
        for j in held:
            coef[j] = bound[j] * coef[lead]
    sse = float(((root - a @ coef) ** 2).sum())
    top = np.array([col[-1] for col in cols.values()]) * coef
    total = top.sum()
    shares = {name: float(v / total) if total > 0 else math.nan for name, v in zip(cols, top)}
    return Model(tuple(cols), tuple(map(float, coef)), sse, shares, dict(centres or {}), dict(factors or {}))


def best(x, y, top, hw: Machine | None, extra=None, paths: Paths | None = None) -> Model:
    """The model with its steps' centres chosen on CENTRES about each level's size, and its paths'
    factors (`factored`), at the least SSE."""
    sizes = hw.levels()[0] if hw is not None else {}
    if top is None or not sizes:
        return factored(x, y, top, {}, hw, extra, paths)
    grid = itertools.product(*[[size + c for c in CENTRES] for size in sizes.values()])
    models = [factored(x, y, top, dict(zip(sizes, centres)), hw, extra, paths) for centres in grid]
    lowest = min(m.sse for m in models)
    # NB: a step the fit leaves at zero fits alike at every centre; the last bits of the SSE, which differ
    # with the BLAS kernel (AVX2 or AVX-512), must not choose it: among ties, the centre on the level's size
    return min(
        (m for m in models if m.sse <= lowest * (1 + TIE) + len(y) * TIE**2),
        key=lambda m: sum(abs(c - sizes[level]) for level, c in m.centres.items()),
    )


def factored(x, y, top, centres: dict[str, float], hw: Machine | None, extra=None, paths: Paths | None = None) -> Model:
    """The model with its centres held, and each later path's factor on the leading term's rate chosen
    by least squares (suite.analyse.paths.least)."""

    def model(factors: dict[str, float]) -> Model:
        return fit(design(x, top, centres, hw, extra, rate(paths, factors, x)), y, centres, _cap(top, hw), factors)

    if paths is None or top is None or top == 0:
        return model({})
    return least(paths, model)


def _cap(top: float | None, hw: Machine | None) -> tuple[str, float] | None:
    """The leading column of a model whose largest term is n^top, and its steps' bound."""
    if top is None or hw is None:
        return None
    return ("call" if top == 0 else power_name(top), hw.step_max)


def f_test(reduced: Model, full: Model, points: int) -> float:
    """The p-value of the full model's better fit (the extra-sum-of-squares F test); NaN where the
    full model leaves no degree of freedom."""
    from scipy import stats

    extra, dof = full.k - reduced.k, points - full.k
    if dof < 1 or extra < 1:
        return math.nan
    if reduced.sse <= full.sse:
        return 1.0
    f = ((reduced.sse - full.sse) / extra) / max(full.sse / dof, 1e-300)
    return float(stats.f.sf(f, extra, dof))


def lower_class(p: float) -> float | None:
    return max((c for c in CLASSES if c < p - 1e-9), default=None)


def higher_classes(p: float) -> list[float]:
    nxt = min((c for c in CLASSES if c > p + 1e-9), default=p + 1)
    return sorted({nxt, *([2.0] if p < 2 - 1e-9 else [])})


@dataclass(frozen=True)
class Tests:
    """The claim's model and its two tests on one set of points."""

    claim: Model
    need_p: float
    higher_p: float
    higher: str
    higher_share: float
    with_higher: Model | None = None  # the claim's model with that higher term
    higher_q: float | None = None  # that term's exponent


def tests(x, y, claimed: float, hw: Machine | None, paths: Paths | None = None) -> Tests:
    """The claim's model; the F test of its leading term (the next lower class's model against it
    with the claim's term added: nested, on the lower model's paths' factors, or the claim's where the
    lower model has none, a floor); each higher class added to the claim's model (on the claim's own
    factors too, where those fit better than the ones searched anew: nested)."""
    claim = best(x, y, claimed, hw, None, paths)
    low = lower_class(claimed)
    if low is None:
        need_p = 0.0  # a constant claimed: nothing lower than the floor
    else:
        lower = best(x, y, low, hw, None, paths)
        factors = lower.factors or claim.factors
        both = fit(
            {
                **design(x, low, lower.centres, hw, None, rate(paths, lower.factors, x)),
                power_name(claimed): (x / x.max()) ** claimed * rate(paths, factors, x),
            },
            y,
            lower.centres,
            _cap(low, hw),
            factors,
        )
        need_p = f_test(lower, both, len(x))
    found = []
    for q in higher_classes(claimed):
        model = best(x, y, claimed, hw, q, paths)
        if paths is not None:
            held = fit(
                design(x, claimed, claim.centres, hw, q, rate(paths, claim.factors, x)),
                y,
                claim.centres,
                _cap(claimed, hw),
                claim.factors,
            )
            model = min(model, held, key=lambda m: m.sse)
        found.append((f_test(claim, model, len(x)), power_name(q), model.shares.get(power_name(q), 0.0), model, q))
    higher_p, name, share, model, q = min(found, key=lambda h: (math.inf if math.isnan(h[0]) else h[0], -h[2]))
    return Tests(claim, need_p, higher_p, name, share, model, q)


def judge(
    x,
    y,
    claimed: float,
    hw: Machine | None = None,
    *,
    process_times: list | None = None,
    bootstrap: int = BOOTSTRAP,
    seed: int = 0,
    paths: Paths | None = None,
    rule=claim_rule.decide,
) -> CostVerdict:
    """The verdict on `claimed` for time `y` at lengths `x` (one point per length), with the
    machine's cache steps where `hw` is known, and a factor on the leading term's rate for each path
    after the first where the implementation declared a change of path (`paths`, per length). `rule`: what
    reads the tests (claim_rule.decide; claim_rule.decide_memory for a peak, fitted with hw None)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    order = np.argsort(x)
    x, y = x[order], y[order]
    hw = hw.subset(order) if hw is not None else None
    paths = paths.subset(order) if paths is not None else None
    if process_times is not None:
        process_times = [process_times[i] for i in order]
    if len(x) < 3:
        return CostVerdict("inconclusive", Why(Reason.FEW_LENGTHS, {"lengths": len(x), "needed": 3}))
    if x[-1] / x[0] < MIN_SPAN:
        return CostVerdict(
            "inconclusive", Why(Reason.SHORT_SPAN, {"span": x[-1] / x[0], "after": "", "needed": MIN_SPAN})
        )
    if paths is not None and paths.alone(
        x, MIN_SPAN
    ):  # the claim is the top path's: the earlier ones' costs are their own
        keep = np.arange(paths.alone(x, MIN_SPAN), len(x))
        on = judge(
            x[keep],
            y[keep],
            claimed,
            hw.subset(keep) if hw is not None else None,
            bootstrap=bootstrap,
            seed=seed,
            process_times=None if process_times is None else [process_times[i] for i in keep],
            rule=rule,
        )
        return replace(
            on,
            reason=on.reason.noted(Note.TOP_PATH_ALONE, path=paths.labels[-1], first=x[keep[0]]),
            paths=tuple((name, first, math.nan) for name, first in paths.changes(x)),
            alone=x[keep[0]],
        )
    factors = len(paths.names) - 1 if paths is not None else 0
    while (
        hw is not None
        and hw.levels()[0]
        and len(x) - len(design(x, claimed, {}, None, 3.0)) - factors - 2 * len(hw.levels()[0]) < 2
    ):
        seen = hw.levels()[0]  # too few lengths for every step: the outermost level goes first
        hw = hw.without(max(seen, key=seen.get))
    # NB: every length weighs alike: weights from the spread of the processes' medians followed the
    # machine's load, not the fastest call's noise (on a busy run they went from 0.001 to 1 across
    # fixed/flex's lengths and left the F tests no power: n^1.95 "confirmed" as n^1.5)
    result = tests(x, y, claimed, hw, paths)
    status, why = rule(
        claimed,
        result.need_p,
        result.higher_p,
        result.higher,
        result.higher_share,
        result.claim.k,
        float(x[-1]),
        len(x),
    )
    if status == "confirmed" and paths is not None and paths.short():
        status, why = "inconclusive", paths.withheld(x, why)
    higher_needed = status == "refuted"  # by time; an edge step may make it inconclusive, still needed
    if status == "refuted" and hw is not None and hw.levels()[1]:
        status, why = _edge(x, y, claimed, hw, why, paths)
    shown, extra = result.claim, None
    if status == "refuted" and result.with_higher is not None:
        shown, extra = result.with_higher, result.higher_q
    lo, hi = _share_intervals(x, y, claimed, shown, hw, process_times, bootstrap, seed, extra, paths)
    steps = {
        level: float(np.exp(np.interp(c, np.log2(hw.working_set), np.log(x))))
        for level, c in shown.centres.items()
        if _named(shown, lo, f"{level} step")
    }
    changes = tuple((name, first, shown.factors.get(name, 1.0)) for name, first in paths.changes(x)) if paths else ()
    return CostVerdict(
        status,
        why,
        shown,
        result.need_p,
        result.higher_p,
        result.higher,
        result.higher_share,
        steps,
        lo,
        hi,
        higher_needed,
        changes,
    )


def _named(model: Model, lo: dict[str, float], name: str) -> bool:
    """A term worth naming: over NAMED of the largest length's time, and its 95% interval's lower end too
    where the intervals were drawn (the least-squares fit leaves a step a sliver of the time, 1e-15, where
    there is none, and a few percent of the noise where the series has no step: neither is a cache passed)."""
    share = model.shares.get(name, 0.0)
    return share > NAMED and lo.get(name, share) > NAMED


def _edge(x, y, claimed: float, hw: Machine, why: Why, paths: Paths | None = None) -> tuple[str, Why]:
    """A refutation with a cache level at the span's top edge stands only if it survives that
    level's step too; else it is inconclusive, and says what would tell."""
    edge = hw.levels()[1]
    level = min(edge, key=edge.get)
    n_edge = float(np.exp(np.interp(edge[level] - 1, np.log2(hw.working_set), np.log(x))))
    again = tests(x, y, claimed, replace(hw, with_edge=True), paths)
    if again.higher_p < HIGHER_LEVEL and again.higher_share >= MIN_HIGHER_SHARE:
        return "refuted", Why(Reason.EDGE_KEPT, {"level": level}, why)
    return "inconclusive", Why(Reason.EDGE, {"level": level, "n_edge": n_edge, "until": 8 * n_edge}, why)


def _share_intervals(
    x,
    y,
    claimed,
    claim: Model,
    hw,
    process_times,
    bootstrap: int,
    seed: int,
    extra: float | None = None,
    paths: Paths | None = None,
):
    """95% intervals of each term's share at the largest length in the model shown (`claim`, with its
    higher term n^extra where it has one; the steps' centres and the paths' factors held): the points redrawn from their
    processes (each length's per-process medians, resampled), or from the model's relative residuals
    where no length has several processes."""
    if bootstrap <= 0 or not claim.names:
        return {}, {}
    rng = np.random.default_rng(seed)
    cols = design(x, claimed, claim.centres, hw, extra, rate(paths, claim.factors, x))
    assert tuple(cols) == claim.names, (tuple(cols), claim.names)  # the intervals are of the model shown
    modelled = np.column_stack(list(cols.values())) @ np.array(claim.coef)
    resid = y / np.where(modelled > 0, modelled, y)
    per_process = [
        np.asarray(p, float) if p is not None and len(p) > 1 else None
        for p in (process_times if process_times is not None else [None] * len(x))
    ]
    if any(p is not None for p in per_process):  # each length's processes redrawn: its factor on y
        factors = np.ones((bootstrap, len(x)))
        for i, p in enumerate(per_process):
            if p is not None:
                factors[:, i] = p[rng.integers(0, len(p), (bootstrap, len(p)))].mean(1) / p.mean()
        samples = y * factors
    else:
        samples = modelled * resid[rng.integers(0, len(resid), (bootstrap, len(resid)))]
    draws = [fit(cols, sample, None, _cap(claimed, hw)).shares for sample in samples]
    table = np.array([[d[name] for name in cols] for d in draws])
    return (
        {n: float(v) for n, v in zip(cols, np.nanpercentile(table, 2.5, axis=0))},
        {n: float(v) for n, v in zip(cols, np.nanpercentile(table, 97.5, axis=0))},
    )
