"""Residual IC and churn (signals.residual): a model that only rides beta or a sector move has a raw IC
and no residual one; a stock-specific edge keeps its IC; the betas use only earlier evenings; the
shipped sector map covers the universe."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ldtm_core.accountability.signals import residual
from ldtm_core.accountability.signals.rows import with_returns
from ldtm_core.data.universe import load_universe
from ldtm_core.errors import InputError
from ldtm_core.horizons import NAMES


def _rows(pred: np.ndarray, real: np.ndarray) -> pd.DataFrame:
    """evenings x tickers predicted and realised returns -> the rows frame (every horizon the same)."""
    e, n = pred.shape
    days = [d.date() for d in pd.bdate_range("2022-01-03", periods=e)]
    frame = pd.DataFrame(
        {
            "ticker": np.tile([f"T{i:02d}" for i in range(n)], e),
            "run_date": np.repeat(days, n),
            "in_sample": False,
            "model_status": "active",
            "run_date_close": 100.0,
            "direction_pred": "neutral",
        }
    )
    for h in NAMES:
        frame[f"{h}_date"] = frame["run_date"]
        frame[f"{h}_pred"], frame[f"{h}_actual"] = 100 * (1 + pred.ravel()), 100 * (1 + real.ravel())
    return with_returns(frame)


def _market(rng, evenings=300, names=30):
    beta = np.linspace(0.3, 1.8, names)
    m = rng.standard_normal(evenings) * 0.01
    eps = rng.standard_normal((evenings, names)) * 0.01
    return beta, m, eps


def test_a_model_that_only_rides_beta_has_no_residual_ic():
    rng = np.random.default_rng(0)
    beta, m, eps = _market(rng)
    real = beta * m[:, None] + eps
    pred = beta * m[:, None]  # knows the market's move and which names amplify it: nothing stock-specific
    summary = residual.residual_summary(_rows(pred, real), sectors={}).set_index("horizon").loc["next_day"]
    from ldtm_core.accountability.signals.ic import ic_summary

    raw = ic_summary(_rows(pred, real)).set_index("horizon").loc["next_day", "mean_ic"]
    assert raw > 0.3
    assert abs(summary["mean_ic_market"]) < 0.05 and abs(summary["mean_ic_sector"]) < 0.05


def test_a_sector_bet_is_taken_out_by_the_sector_step_and_a_stock_edge_survives_both():
    rng = np.random.default_rng(1)
    evenings, names = 300, 30
    sector_of = {f"T{i:02d}": f"S{i % 3}" for i in range(names)}
    groups = np.arange(names) % 3
    move = rng.standard_normal((evenings, 3)) * 0.01
    eps = rng.standard_normal((evenings, names)) * 0.01
    real = move[:, groups] + eps
    bet = residual.residual_summary(_rows(move[:, groups], real), sector_of).set_index("horizon")
    assert bet.loc["next_day", "mean_ic_market"] > 0.3 and abs(bet.loc["next_day", "mean_ic_sector"]) < 0.05
    edge = residual.residual_summary(_rows(eps + rng.standard_normal(eps.shape) * 0.01, real), sector_of)
    edge = edge.set_index("horizon").loc["next_day"]
    assert edge["mean_ic_sector"] > 0.3 and edge["sector_hac_p"] < 0.001


def test_betas_use_only_earlier_evenings():
    rng = np.random.default_rng(2)
    beta, m, eps = _market(rng, evenings=120)
    real = beta * m[:, None] + eps
    before = residual.trailing_betas(_rows(eps, real))
    changed = real.copy()
    changed[80:] *= -3.0  # rewrite the future from evening 80 on
    after = residual.trailing_betas(_rows(eps, changed))
    pd.testing.assert_frame_equal(before.iloc[:81], after.iloc[:81])
    assert not before.iloc[82:].equals(after.iloc[82:])
    assert (before.iloc[: residual.MIN_BETA_EVENINGS] == 1.0).all().all()  # too few evenings: beta 1
    # With enough history the estimate finds the planted betas.
    assert np.corrcoef(before.iloc[-1].to_numpy(), beta)[0, 1] > 0.9


def test_churn_is_zero_for_fixed_predictions_and_near_one_for_fresh_ones():
    rng = np.random.default_rng(3)
    fixed = np.tile(rng.standard_normal(20), (50, 1))
    real = rng.standard_normal((50, 20))
    assert residual.churn_series(_rows(fixed, real), "next_day").abs().max() < 1e-12
    fresh = residual.churn_series(_rows(rng.standard_normal((50, 20)), real), "next_day")
    assert len(fresh) == 49 and 0.8 < fresh.mean() < 1.2


def test_the_shipped_sector_map_covers_the_universe_and_bad_rows_are_named(tmp_path):
    sectors = residual.load_sectors()
    assert set(load_universe("full")) <= set(sectors) and set(load_universe("demo")) <= set(sectors)
    bad = tmp_path / "sectors.csv"
    bad.write_text("ticker,sector\nAAPL,Information Technology\nMSFT,\n")
    with pytest.raises(InputError, match=r"sectors.csv: row 3"):
        residual.load_sectors(str(bad))


def test_no_rows_reads_as_nothing():
    empty = _rows(np.zeros((0, 3)), np.zeros((0, 3)))
    out = residual.residual_summary(empty, sectors={}).set_index("horizon")
    assert math.isnan(out.loc["next_day", "mean_ic_sector"])
