"""Synthetic series with planted terms, for judging the cost-model verdict (suite.analyse.cost) where
the truth is known: a claimed class with a per-call floor, per-row costs, cache steps and noise, and
optionally a higher term of a given share at the largest length (docs/CLAIMS.md, "Verdicts").

Random gathers (`gathered`) are planted with a measured rate (the fastest of a few runs of the gather probe,
as a case's time is the fastest of its processes) and fitted with the fastest of as many other runs, as a run
fits its workers' probe: the study counts the probe's own process-to-process noise against the verdict.

The cache steps are planted with a shape the model does not assume (a logistic in the working set's
octaves of random width, 10–90% over 0.7 to 2.2 octaves, and random centre up to an octave below
the cache's size), so that the study does not test the model against itself; their size, up to
+50% of the time per unit of work a level, is the size the full runs' steps show (docs/CLAIMS.md,
"Verdicts").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Cache sizes of the two host kinds the project is developed on, as sysfs gives them for cpu0 (docs/CLAIMS.md,
# "Verdicts", names the hosts)
HOSTS = {
    "amd": {"L1d": {"bytes": 32 << 10}, "L2": {"bytes": 1 << 20}, "L3": {"bytes": 32 << 20}},
    "intel": {"L1d": {"bytes": 48 << 10}, "L2": {"bytes": 1280 << 10}, "L3": {"bytes": 48 << 20}},
}
# The same hosts without their last level: every step mid-span (K and V pass L2 near n = 2048, five
# octaves below 65536), where a span shows a step end; with L3, K and V reach it at the top length
MID_SPAN = {f"{host} (L2 only)": {k: v for k, v in caches.items() if k != "L3"} for host, caches in HOSTS.items()}
HOSTS.update(MID_SPAN)
KV_BYTES_PER_ROW = 2 * 64 * 4  # K and V rows of one head, d = 64, float32
# the model's bound on a step: a host's cache over memory bandwidth, less one (docs/CLAIMS.md, "Verdicts")
STEP_MAX = 2.0


@dataclass(frozen=True)
class Planted:
    claimed: float
    x: np.ndarray
    y: np.ndarray
    working_set: np.ndarray
    higher: float | None  # the planted higher class, if any
    higher_share: float
    paths: tuple[str, ...] | None = None  # the path each length ran on, where one is planted


def lengths(low: int = 256, high: int = 65536, midpoints: bool = True) -> np.ndarray:
    """A ladder's lengths: doublings, with the geometric midpoints below the top interval."""
    powers = [low * 2**k for k in range(int(math.log2(high / low)) + 1)]
    mids = [int(8 * round(math.sqrt(a * b) / 8)) for a, b in zip(powers[:-2], powers[1:-1])] if midpoints else []
    return np.array(sorted(powers + mids), float)


def series(
    rng: np.random.Generator,
    claimed: float,
    caches: dict,
    *,
    x: np.ndarray | None = None,
    noise: float = 0.02,
    higher: float | None = None,
    higher_share: float = 0.1,
    path: tuple[float, float] | None = None,
) -> Planted:
    """One series: the claim's term, its rate rising by up to 50% at each cache level passed; a
    per-row cost (up to 30% of the largest length's time, for a claim above n¹); a floor of up to 80%
    of the smallest length's time; a higher term n^higher carrying `higher_share` of the largest
    length's time; lognormal noise. `path` = (n, factor): from length n on, an implementation's second
    path runs the claim's term (with its steps) at `factor` times the first's time per unit of work."""
    x = lengths() if x is None else np.asarray(x, float)
    ws = x * KV_BYTES_PER_ROW
    rate = np.ones_like(x)
    for info in caches.values():
        centre = math.log2(info["bytes"]) - rng.uniform(0.0, 1.0)
        width = rng.uniform(0.15, 0.5)
        rate += rng.uniform(0.0, 0.5) / (1.0 + np.exp(-(np.log2(ws) - centre) / width))
    labels = None
    if path is not None:
        second = x >= path[0]
        rate = rate * np.where(second, path[1], 1.0)
        labels = tuple("second" if s else "first" for s in second)
    body = (x / x[-1]) ** claimed * rate
    if claimed > 1:
        rows = rng.uniform(0.0, 0.3)
        body = body + rows / (1 - rows) * body[-1] * (x / x[-1])
    return Planted(claimed, x, _finished(rng, x, body, noise, higher, higher_share), ws, higher, higher_share, labels)


def _finished(
    rng: np.random.Generator, x, body, noise: float, higher: float | None, higher_share: float, at: float | None = None
):
    """`body` with a floor of up to 80% of the smallest length's time, a higher term n^higher carrying
    `higher_share` of the time at length `at` (None: the largest), and lognormal noise."""
    floor_share = rng.uniform(0.0, 0.8)
    y = floor_share / (1 - floor_share) * body[0] + body
    if higher is not None:
        ref = len(x) - 1 if at is None else int(np.searchsorted(x, at))
        assert ref < len(x) and (at is None or x[ref] == at), f"the share's length {at} is not among the lengths"
        y = y + higher_share / (1 - higher_share) * y[ref] * (x / x[ref]) ** higher
    return y * np.exp(rng.normal(0.0, noise, len(x)))


def gathered(
    rng: np.random.Generator,
    probe: dict,
    *,
    x: np.ndarray | None = None,
    noise: float = 0.01,
    higher: float | None = None,
    higher_share: float = 0.1,
    at: float | None = None,
) -> Planted:
    """An O(n) series of random gathers: a share s (0.3 to 1) of its time per row follows `probe`'s ns a
    gathered pair at a head's K (suite.machine.gathers, as measured: not made monotone), the rest is flat; a
    floor, a higher term (its share of the time at length `at`, None: the largest) and noise as `series`."""
    from suite.analyse.steps import gather_rate

    x = lengths() if x is None else np.asarray(x, float)
    ws = x * KV_BYTES_PER_ROW
    g = gather_rate(probe, ws / 2, monotone=False)
    share = rng.uniform(0.3, 1.0)
    body = (x / x[-1]) * ((1 - share) + share * g / g.min())
    return Planted(1.0, x, _finished(rng, x, body, noise, higher, higher_share, at), ws, higher, higher_share)


def gather_study(
    probes: list[dict],
    count: int = 100,
    *,
    processes: int = 3,
    seed: int = 0,
    noise: float = 0.01,
    higher: float | None = None,
    higher_share: float = 0.1,
    same: bool = False,
    climb: bool = False,
) -> dict:
    """Verdicts on `count` `gathered` series over 256-65536, each planted with the fastest of `processes` probe runs
    drawn at random (as a case's time is its fastest over its processes) and fitted with the fastest of as many
    others (as a run's probe is: suite.machine.gathers.fastest, made monotone), or with its own (`same`); the
    higher term's share is of the time at 65536. `climb`: a verdict whose higher term's test is at its level
    (CostVerdict.at_level) takes the next doubling, with its midpoints, as the ladder does (suite.run.settle), while
    the probes reach it. Returns the verdicts' counts and rates, `caught_planted` (refuted, or inconclusive naming a
    higher term), `climbed` (the series that took a longer length) and `first` (the same series' verdicts over
    256-65536, before any climb: the paired comparison)."""
    from suite.analyse.cost import judge
    from suite.analyse.steps import gather_rate, machine
    from suite.machine.gathers import fastest

    rng = np.random.default_rng(seed)
    tally: dict[str, int] = {}
    first: dict[str, int] = {}
    climbed = 0
    for _ in range(count):
        pick = rng.permutation(len(probes))
        plant = fastest([probes[i] for i in pick[:processes]])
        fit = plant if same else fastest([probes[i] for i in pick[processes : 2 * processes]])
        reach = min(plant["lengths"][-1], fit["lengths"][-1]) if climb else 65536
        s = gathered(
            rng,
            plant,
            x=lengths(high=max(reach, 65536)),
            noise=noise,
            higher=higher,
            higher_share=higher_share,
            at=65536.0,
        )
        hw = machine(s.working_set, HOSTS["amd"], STEP_MAX, gather_rate(fit, s.working_set / 2))
        top = 65536
        while True:
            keep = np.isin(s.x, lengths(high=top))
            result = judge(s.x[keep], s.y[keep], 1.0, hw.subset(keep), bootstrap=0)
            if top == 65536:
                first[outcome(result, higher)] = first.get(outcome(result, higher), 0) + 1
            if not (climb and result.at_level and 2 * top <= reach):
                break
            top, climbed = 2 * top, climbed + (top == 65536)
        tally[outcome(result, higher)] = tally.get(outcome(result, higher), 0) + 1
    return {
        "tally": tally,
        **{k: v / count for k, v in tally.items()},
        "climbed": climbed / count,
        "first": first,
        "caught_planted": (tally.get("refuted", 0) + tally.get("caught", 0)) / count,
    }


def outcome(result, higher: float | None) -> str:
    """A planted higher term inconclusive but named (a cache step at the span's edge could also explain it): caught."""
    return "caught" if higher is not None and result.higher_needed and result.verdict != "refuted" else result.verdict


def study(
    count: int = 200,
    *,
    seed: int = 0,
    noise: float = 0.02,
    higher_share: float = 0.1,
    claims=(1.0, 1.5, 2.0),
    hosts=("amd", "intel"),
    x: np.ndarray | None = None,
    path: tuple[float, float] | None = None,
    declared: bool = True,
) -> dict:
    """Rates over `count` series per claim and host: the claim confirmed when nothing higher is
    planted; when n² (or, for a claim of n², n³) is, refuted, or caught (refuted, or inconclusive
    naming the higher term: a cache step at the span's edge could also explain it), and the counts.
    With `path`, every series changes path there (`series`), declared to the model or not."""
    from suite.analyse.cost import judge
    from suite.analyse.paths import declared as told
    from suite.analyse.steps import machine

    rng = np.random.default_rng(seed)
    tally = {"clean": {}, "planted": {}}
    for host in hosts:
        for claimed in claims:
            for kind, higher in (("clean", None), ("planted", 2.0 if claimed < 2 else 3.0)):
                for _ in range(count):
                    s = series(
                        rng, claimed, HOSTS[host], x=x, noise=noise, higher=higher, higher_share=higher_share, path=path
                    )
                    hw = machine(s.working_set, HOSTS[host], STEP_MAX)
                    result = judge(s.x, s.y, claimed, hw, bootstrap=0, paths=told(s.paths) if declared else None)
                    key = (host, claimed, outcome(result, higher))
                    tally[kind][key] = tally[kind].get(key, 0) + 1
    total = count * len(hosts) * len(claims)

    def rate(kind, verdict):
        return sum(v for (h, c, w), v in tally[kind].items() if w == verdict) / total

    return {
        "confirmed_clean": rate("clean", "confirmed"),
        "refuted_clean": rate("clean", "refuted"),
        "refuted_planted": rate("planted", "refuted"),
        "confirmed_planted": rate("planted", "confirmed"),
        "caught_planted": rate("planted", "refuted") + rate("planted", "caught"),
        "tally": tally,
    }
