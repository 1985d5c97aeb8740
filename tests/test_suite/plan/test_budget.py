"""The run's wall-time budget and the ladder's call forecasts: pure decisions on synthetic rows."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from suite.analyse.fits import fit_power
from suite.errors import UsageError
from suite.plan import grid as grids
from suite.plan.settings import Settings, validate
from suite.run import budget, climb
from suite.run.budget import Offer, Pace
from suite.run.outlook import Outlook
from suite.run.settle import Step, advance

LIMITS = dict(width=0.2, max_call_s=10.0, memory_gib=16.0)
NOISE = np.exp([0.0, 0.3, -0.3, 0.2, 0.0])  # fixed per length: an interval too wide to settle


def _ladder(low=256, high=65536):
    grid = grids.parse(
        {"block": [{"variant": ["linear"], "impl": ["native"], "seq_len": {"min": low, "max": high}}]}, "t"
    )
    return grid.ladders[0]


def _rows(n, t, claimed=1.0) -> pd.DataFrame:
    n = np.asarray(n)
    return pd.DataFrame(
        {
            "seq_len": n,
            "time_s": t,
            "claimed_exponent_n": claimed,
            "reason": "",
            "peak_bytes": 1e3 * n,
            "status": ["ok"] * len(n),
            "setup_s": 0.0,
        }
    )


def test_the_next_call_is_predicted_with_the_fits_own_slope_not_one_clamped_to_3():
    n = 256 * 2.0 ** np.arange(5)
    t = 1.0 * (n / n[-1]) ** 3.6 * NOISE
    fit = fit_power(n, t, exclude_floor=False)
    assert 2**fit.slope > 10.0 > 2**3  # a slope of 3 (the old clamp) would climb into a call past max_call_s
    step = advance(_ladder(), _rows(n, t, claimed=1.0), **LIMITS)
    assert step.stop == "time" and "n = 8192 would take ~" in step.why


def test_a_rise_at_the_top_is_predicted_with_the_top_intervals_slope_and_tried_in_one_process_first():
    n = 256 * 2.0 ** np.arange(5)
    t = 0.01 * (n / 256) * NOISE
    t[-1] *= 3.0  # a cache's step or a path change at the top
    step = advance(_ladder(), _rows(n, t, claimed=1.0), **LIMITS)
    assert step.next == 8192 and step.probe and step.limit_s == 10.0
    assert step.call_s > t[-1] * 2**1.5  # steeper than the fit's slope: the top interval's


def test_a_steady_series_runs_every_process_at_once():
    n = 256 * 2.0 ** np.arange(9)
    t = 1e-3 * (n / 256) ** 2 * (1 + 0.01 * np.cos(np.arange(9)))
    step = advance(_ladder(), _rows(n, t, claimed=1.0), **LIMITS)
    assert step.next is None or not step.probe


@pytest.mark.parametrize(
    "text, minutes", [("20m", 20.0), ("90s", 1.5), ("1.5h", 90.0), ("45", 45.0), ("0", 0.0), ("10 min", 10.0)]
)
def test_a_budget_is_read_in_minutes(text, minutes):
    assert budget.parse(text) == pytest.approx(minutes)


@pytest.mark.parametrize("text", ["5x", "", "-3m", "m", "1e3", "200h"])
def test_a_bad_budget_names_the_option_the_value_and_what_is_allowed(text):
    with pytest.raises(UsageError, match=rf"--budget {text!r} \(allowed: a time such as 90s, 20m or 1.5h"):
        budget.parse(text)


def test_a_bad_budget_in_a_grid_names_its_field():
    with pytest.raises(UsageError, match=r"field 'budget_min' = -1 \(allowed: 0.0..10080.0\)"):
        validate({"budget_min": -1}, "grid g: settings")
    assert Settings.from_plan({"budget_min": 20}).budget_min == 20


def test_each_preset_grid_states_its_budget():
    for name in ("smoke", "quick", "pr", "full"):
        assert grids.resolve(name).settings.budget_min > 0, name


def test_the_pace_is_fitted_to_the_measured_walls_and_the_hosts_speed_against_the_prior():
    calls = np.array([0.001, 0.01, 0.1, 0.5, 1.0, 2.0])
    at = budget.pace(0.3 + 5.0 * calls, calls, (0.3 + 5.0 * calls) / 3)
    assert at.overhead_s == pytest.approx(0.3) and at.calls == pytest.approx(5.0) and at.scale == pytest.approx(3.0)
    assert budget.pace([], [], []) == Pace()


def test_the_budget_buys_the_cheapest_lengths_first_and_spare_ones_last():
    offers = [Offer("dear", 50.0), Offer("cheap", 5.0), Offer("spare", 1.0, spare=True), Offer("mid", 20.0)]
    assert budget.ration(offers, 26.0) == {"cheap", "mid", "spare"}
    assert budget.ration(offers, 25.0) == {"cheap", "mid"}
    assert budget.ration(offers, 0.0) == set()


def test_a_next_length_the_budget_cannot_buy_stops_its_series_with_stop_budget():
    ladder = _ladder()
    n = 256 * 2.0 ** np.arange(6)
    rows = _rows(n, 0.1 * (n / n[-1]))
    settings = Settings(replicates=3)
    steps = [Step(ladder, 16384, call_s=0.2, limit_s=10.0)]
    (kept,) = climb.within(steps, {ladder.key: rows}, settings, Pace(0.1, 4.0), left_s=100.0)
    assert kept.next == 16384
    (stopped,) = climb.within(steps, {ladder.key: rows}, settings, Pace(0.1, 4.0), left_s=1.0)
    assert stopped.next is None and stopped.stop == "budget"
    assert stopped.why.startswith("n = 16384 not reached within the budget")


def test_spare_time_climbs_a_settled_series_whose_next_call_is_cheap():
    ladder = _ladder()
    n = 256 * 2.0 ** np.arange(6)
    rows = _rows(n, 0.01 * (n / n[-1]))
    settled = Step(ladder, None, "settled", "confirmed: [0.95, 1.05] over 32x")
    (step,) = climb.within([settled], {ladder.key: rows}, Settings(max_call_s=1.0), Pace(), left_s=600.0)
    assert step.next == 16384 and "spare time" in step.why
    (step,) = climb.within([settled], {ladder.key: rows}, Settings(max_call_s=1.0), Pace(), left_s=0.01)
    assert step is settled


def test_the_time_left_scales_the_predictions_by_the_pace_measured_so_far():
    price = {(f"c{i}", 0): 1.0 for i in range(10)}
    look = Outlook(began=0.0, budget_s=0.0, price=price, climbs_s=20.0)
    for i in range(2):  # a host 3x slower than predicted
        look.done(f"c{i}", 0, 3.0)
    assert look.left([(f"c{i}", 0) for i in range(2, 10)]) == pytest.approx(3.0 * (8 + 20))


def test_the_time_left_is_held_to_the_budget_but_a_round_already_started_finishes():
    assert budget.remaining_s(10.0, 500.0, 100.0, 300.0) == pytest.approx(200.0)
    assert budget.remaining_s(10.0, 500.0, 295.0, 300.0) == pytest.approx(10.0)
    assert budget.remaining_s(10.0, 500.0, 0.0, 0.0) == pytest.approx(510.0)


def test_a_climb_is_priced_up_to_its_call_limit():
    at = Pace(0.0, 1.0)
    assert budget.climb_s(1.0, 2.0, 2, 10, 20.0, 1, at) == pytest.approx(1 + 4 + 16)
    assert budget.climb_s(1.0, 2.0, 2, 2, 20.0, 3, at) == pytest.approx(3 * (1 + 4))
    assert math.isclose(budget.climb_s(30.0, 2.0, 2, 5, 20.0, 1, at), 0.0)
