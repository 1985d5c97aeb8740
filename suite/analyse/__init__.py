"""analyse: pure functions from the results table to fits, verdicts, crossovers and regressions.

Knows nothing of files or figures: tables in, tables out.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from suite.analyse.exponents import all_exponents, claims, cross, decode, padding, prepare, with_ladders
from suite.analyse.layers import layer_table
from suite.analyse.noise import Noise, noise
from suite.analyse.tables import crossovers, efficiency, speedups, status_matrix
from suite.analyse.terms import machines


@dataclass
class Analysis:
    """Everything the report shows, computed once from the table (and the run's GEMM and bandwidth probes)."""

    frame: pd.DataFrame
    fits: pd.DataFrame
    claims: pd.DataFrame
    crossovers: pd.DataFrame
    speedups: pd.DataFrame  # per sub-quadratic series and n: the speed-up over full its FLOPs allow, and measured
    efficiency: pd.DataFrame
    status: pd.DataFrame
    noise: Noise
    layers: pd.DataFrame  # the per-layer table (attention, recurrent, convolutional), measured
    cross: pd.DataFrame  # cross attention's verdicts, in n_q and in n_k
    padding: pd.DataFrame  # padded batches' verdicts, in valid tokens, and who pays for the padding
    decode: pd.DataFrame  # decode steps' verdicts, in the cache's length


def fitted(data: pd.DataFrame, bandwidth: dict | None = None, env: dict | None = None) -> pd.DataFrame:
    """Every series' fits and cost-model verdicts from a prepared table (`prepare`), the cache steps placed by the
    run's env.json and bandwidth.json: what `analyse` reads its verdicts (`claims`) off, without the rest."""
    return all_exponents(data, machines(env, bandwidth))


def verdicts(frame: pd.DataFrame, bandwidth: dict | None = None, env: dict | None = None) -> pd.DataFrame:
    """The claims table alone (`Analysis.claims` without ladders), for callers that compare verdicts across runs."""
    return claims(fitted(prepare(frame), bandwidth, env))


def analyse(
    frame: pd.DataFrame,
    peaks: dict | None = None,
    busy_limit: float = 0.5,
    ladders: list[dict] = (),
    bandwidth: dict | None = None,
    env: dict | None = None,
) -> Analysis:
    """`ladders`: ladders.json's records (adaptive lengths), shown beside the fits in n they chose;
    `peaks` and `bandwidth`: the run's GEMM and bandwidth probes (probe.json, bandwidth.json);
    `env`: env.json, whose CPU caches place the cost models' cache steps."""
    data = prepare(frame)  # NB: params are parsed here, once for the whole report
    fits = with_ladders(fitted(data, bandwidth, env), list(ladders))
    crossing = crossovers(data)
    return Analysis(
        frame=data,
        fits=fits,
        claims=claims(fits),
        crossovers=crossing,
        speedups=speedups(data),
        efficiency=efficiency(data, peaks, bandwidth),
        status=status_matrix(data),
        noise=noise(data, busy_limit),
        layers=layer_table(fits, crossing),
        cross=cross(fits),
        padding=padding(fits),
        decode=decode(fits),
    )
