"""Alpha158-style price features: each one against a by-hand reference, no look-ahead, tickers kept apart
in a panel, warm-up and LOOKBACK, never inf, input errors that say where, and the registry fingerprint."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pandas as pd
import pytest

from ldtm_core.data import price_features as pf
from ldtm_core.errors import InputError

VALUES = ["open", "high", "low", "close", "volume"]


def bars_of(n: int, seed: int = 0, start: str = "2020-01-01") -> pd.DataFrame:
    """n random but coherent daily bars (low <= open, close <= high), business days from `start`."""
    rng = np.random.default_rng(seed)
    c = 50 * np.exp(np.cumsum(rng.normal(0, 0.02, n)))
    o = c * np.exp(rng.normal(0, 0.005, n))
    return pd.DataFrame(
        {
            "date": pd.bdate_range(start, periods=n),
            "open": o,
            "high": np.maximum(o, c) * (1 + rng.uniform(0, 0.02, n)),
            "low": np.minimum(o, c) * (1 - rng.uniform(0, 0.02, n)),
            "close": c,
            "volume": rng.integers(100_000, 5_000_000, n).astype(float),
        }
    )


def degenerate_bars() -> pd.DataFrame:
    """Bars with the zero denominators: 70 sessions without volume (longer than any window) and 25 flat
    sessions (high == low == close), one of them with a close outside its own high-low range."""
    bars = bars_of(260, seed=7)
    bars.loc[100:169, "volume"] = 0.0
    bars.loc[200:224, ["open", "high", "low", "close"]] = 42.0
    bars.loc[224, "close"] = 42.5  # bad data a source may send; must give NaN, not inf
    return bars


def reference(bars: pd.DataFrame) -> dict[str, np.ndarray]:
    """Every feature by its definition, row by row, from the spec (not from the module's registry)."""
    c, h, lo, v = (bars[k].to_numpy(dtype=float) for k in ("close", "high", "low", "volume"))
    n = len(c)
    names = [
        *(f"ret_{k}" for k in (1, 5, 10, 20, 60)),
        *(f"vol_{m}" for m in (5, 20, 60)),
        *(f"vratio_{m}" for m in (5, 20, 60)),
        *(f"ma_ratio_{m}" for m in (5, 10, 20, 60)),
        "range_1",
        "range_20",
        "pos_20",
        "dd_60",
    ]
    ref = {name: np.full(n, np.nan) for name in names}
    r = np.full(n, np.nan)
    for t in range(1, n):
        r[t] = math.log(c[t] / c[t - 1])
    for t in range(n):
        for k in (1, 5, 10, 20, 60):
            if t >= k:
                ref[f"ret_{k}"][t] = math.log(c[t] / c[t - k])
        for m in (5, 20, 60):
            if t >= m:  # m returns, the first of which needs bar 0 and bar 1
                ref[f"vol_{m}"][t] = np.std(r[t - m + 1 : t + 1], ddof=1)
            if t >= m - 1:
                mean = v[t - m + 1 : t + 1].mean()
                ref[f"vratio_{m}"][t] = v[t] / mean if mean > 0 else np.nan
        for m in (5, 10, 20, 60):
            if t >= m - 1:
                ref[f"ma_ratio_{m}"][t] = c[t] / c[t - m + 1 : t + 1].mean() - 1
        ref["range_1"][t] = (h[t] - lo[t]) / c[t]
        if t >= 19:
            w = slice(t - 19, t + 1)
            ref["range_20"][t] = np.mean((h[w] - lo[w]) / c[w])
            top, bottom = h[w].max(), lo[w].min()
            ref["pos_20"][t] = (c[t] - bottom) / (top - bottom) if top > bottom else np.nan
        if t >= 59:
            ref["dd_60"][t] = c[t] / c[t - 59 : t + 1].max() - 1
    return ref


def day(bars: pd.DataFrame, i: int) -> str:
    return pd.Timestamp(bars["date"].iloc[i]).date().isoformat()


# --- values ----------------------------------------------------------------------------------------------


# By name, not by frame: the conftest compares parameter values, which a DataFrame cannot take part in.
@pytest.mark.parametrize("series", ["random", "zero-denominators"])
def test_each_feature_equals_its_by_hand_definition(series):
    bars = bars_of(300) if series == "random" else degenerate_bars()
    out = pf.compute(bars, "TST")
    ref = reference(bars)
    assert set(ref) == set(pf.feature_names())  # the spec's list, no more, no less
    for name in pf.feature_names():
        # equal_nan: the warm-up and undefined rows must coincide too, not just the values.
        np.testing.assert_allclose(out[name], ref[name], rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=name)


def test_output_keeps_the_input_index_and_dates_then_the_registry_columns():
    bars = bars_of(80).set_index(pd.Index(range(1000, 1080)))
    out = pf.compute(bars)
    assert list(out.columns) == ["date", *pf.feature_names()]
    assert out.index.equals(bars.index)
    assert out["date"].equals(bars["date"])


# --- point in time ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", [0, 4, 19, pf.LOOKBACK - 2, pf.LOOKBACK - 1, 120, 199])
def test_no_row_reads_a_later_bar(t):
    bars = bars_of(200, seed=1)
    full = pf.compute(bars)
    prefix = full.iloc[: t + 1]
    # The series cut at t gives exactly the rows up to t...
    pd.testing.assert_frame_equal(pf.compute(bars.iloc[: t + 1]), prefix, check_exact=True)
    # ...and so does any other future: later bars rewritten leave every row <= t bit-for-bit unchanged.
    future = bars.copy()
    rng = np.random.default_rng(t)
    later = future.index > t
    for col in VALUES:
        future.loc[later, col] *= rng.uniform(0.5, 2.0, later.sum())
    pd.testing.assert_frame_equal(pf.compute(future).iloc[: t + 1], prefix, check_exact=True)


# --- panel -----------------------------------------------------------------------------------------------


def panel_of(parts: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The tickers' rows interleaved by date (as a database returns them), on a shuffled index."""
    long = pd.concat([p.assign(ticker=t) for t, p in parts.items()], ignore_index=True)
    long = long.sort_values(["date", "ticker"], kind="stable").reset_index(drop=True)
    return long.set_index(pd.Index(np.random.default_rng(0).permutation(len(long)) + 10_000))


def test_panel_rows_equal_each_ticker_computed_alone():
    parts = {
        "AAA": bars_of(150, seed=2, start="2020-01-01"),
        "BBB": bars_of(90, seed=3, start="2020-03-02"),
        "CCC": bars_of(30, seed=4, start="2020-02-03"),  # shorter than LOOKBACK
    }
    panel = panel_of(parts)
    assert (panel["ticker"] != panel["ticker"].shift()).sum() > len(parts)  # rows really interleave
    out = pf.compute_panel(panel)

    assert list(out.columns) == ["ticker", "date", *pf.feature_names()]
    assert out.index.equals(panel.index)
    assert (out["ticker"] == panel["ticker"]).all() and (out["date"] == panel["date"]).all()
    for ticker, bars in parts.items():
        mine = out[out["ticker"] == ticker].drop(columns="ticker").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, pf.compute(bars, ticker), check_exact=True)

    # The same panel in ticker-major order gives the same row for each (ticker, date).
    by_ticker = pf.compute_panel(panel.sort_values(["ticker", "date"]))
    pd.testing.assert_frame_equal(by_ticker.loc[out.index], out, check_exact=True)


def test_a_ticker_never_leaks_into_another():
    a, b = bars_of(120, seed=5), bars_of(120, seed=6)
    base = pf.compute_panel(panel_of({"AAA": a, "BBB": b}))
    wild = b.copy()
    wild[["open", "high", "low", "close"]] *= 1000.0
    wild["volume"] = 0.0
    changed = pf.compute_panel(panel_of({"AAA": a, "BBB": wild}))
    is_a = base["ticker"] == "AAA"
    pd.testing.assert_frame_equal(changed[is_a], base[is_a], check_exact=True)
    assert changed.loc[~is_a, "vratio_5"].isna().all()  # BBB did change


# --- warm-up and undefined values ------------------------------------------------------------------------


def test_warm_up_is_window_minus_one_rows_and_lookback_is_the_longest_window():
    expected = {"ret_1": 2, "ret_5": 6, "ret_60": 61, "vol_5": 6, "vol_60": 61, "vratio_20": 20}
    expected |= {"ma_ratio_10": 10, "range_1": 1, "range_20": 20, "pos_20": 20, "dd_60": 60}
    windows = {f.name: f.window for f in pf.FEATURES}
    assert {k: windows[k] for k in expected} == expected
    assert pf.LOOKBACK == max(windows.values()) == 61

    out = pf.compute(bars_of(pf.LOOKBACK + 40, seed=8))
    for f in pf.FEATURES:
        col = out[f.name].to_numpy()
        assert np.isnan(col[: f.window - 1]).all(), f.name
        assert np.isfinite(col[f.window - 1 :]).all(), f.name
    values = out[list(pf.feature_names())]
    assert values.iloc[pf.LOOKBACK - 2].isna().any()
    assert np.isfinite(values.iloc[pf.LOOKBACK - 1 :].to_numpy()).all()


def test_zero_volume_and_flat_bars_give_nan_never_inf():
    bars = degenerate_bars()
    out = pf.compute(bars)
    values = out[list(pf.feature_names())].to_numpy()
    assert not np.isinf(values).any()
    # A 60-session window entirely inside the 70 silent sessions has no mean volume: undefined.
    assert out.loc[159:169, ["vratio_5", "vratio_20", "vratio_60"]].isna().all().all()
    assert (out.loc[100:104, "vratio_60"] == 0).all()  # silent today, volume in the window: 0
    # 20 flat sessions: no range to sit in; range itself 0.
    assert out.loc[219:224, "pos_20"].isna().all()
    assert (out.loc[200:224, "range_1"] == 0).all()
    assert (out.loc[219:224, "range_20"] == 0).all()

    silent = bars_of(80).assign(volume=0.0)
    assert not np.isinf(pf.compute(silent)[list(pf.feature_names())].to_numpy()).any()


# --- input errors ----------------------------------------------------------------------------------------

BAD_ROW = 30


def _set(col, value):
    def edit(bars):
        bars[col] = bars[col].astype(object)
        bars.loc[BAD_ROW, col] = value
        return bars

    return edit


def _swap_dates(bars):
    bars.loc[[BAD_ROW - 1, BAD_ROW], "date"] = bars.loc[[BAD_ROW, BAD_ROW - 1], "date"].to_numpy()
    return bars


def _repeat_date(bars):
    bars.loc[BAD_ROW, "date"] = bars.loc[BAD_ROW - 1, "date"]
    return bars


@pytest.mark.parametrize(
    "edit, column, problem",
    [
        (_set("close", 0.0), "close", "must be a positive number, got 0.0"),
        (_set("close", -3.5), "close", "must be a positive number, got -3.5"),
        (_set("close", np.nan), "close", "must be a positive number, got nan"),
        (_set("close", "n/a"), "close", "must be a positive number, got 'n/a'"),
        (_set("low", 0.0), "low", "must be a positive number, got 0.0"),
        (_set("volume", -1.0), "volume", "must be a non-negative number, got -1.0"),
        (_set("volume", np.inf), "volume", "must be a non-negative number, got inf"),
        (_repeat_date, "date", "must strictly increase: {prev} is repeated"),
        (_swap_dates, "date", "must strictly increase: {prev} comes after {this}"),
    ],
)
def test_bad_bars_name_the_ticker_the_column_and_the_date(edit, column, problem):
    bars = bars_of(60)
    this, prev = day(bars, BAD_ROW), day(bars, BAD_ROW - 1)
    bars = edit(bars)
    problem = problem.format(this=this, prev=prev)  # swapped: row BAD_ROW now holds the earlier date
    tail = "" if column == "date" else f" on {this}"
    with pytest.raises(InputError, match=re.escape(f"XYZ: column '{column}' {problem}") + re.escape(tail)):
        pf.compute(bars, "XYZ")


def test_missing_columns_and_unreadable_dates_are_named():
    with pytest.raises(InputError, match=r"XYZ: bars lack column\(s\) 'high', 'volume'"):
        pf.compute(bars_of(10).drop(columns=["volume", "high"]), "XYZ")
    bars = bars_of(10)
    bars["date"] = bars["date"].dt.strftime("%Y-%m-%d").astype(object)
    bars.loc[4, "date"] = "someday"
    with pytest.raises(InputError, match=r"XYZ: column 'date' holds 'someday' on row 4, not a date"):
        pf.compute(bars, "XYZ")
    with pytest.raises(InputError, match=r"panel: bars lack column\(s\) 'ticker'"):
        pf.compute_panel(bars_of(10))


def test_a_bad_row_in_a_panel_names_its_ticker():
    b = bars_of(60, seed=1)
    b.loc[BAD_ROW, "volume"] = -5.0
    with pytest.raises(InputError, match=rf"BBB: column 'volume' .* on {day(b, BAD_ROW)}"):
        pf.compute_panel(panel_of({"AAA": bars_of(60), "BBB": b}))
    # The same date twice for one ticker is an error; for two tickers it is the normal case.
    twice = panel_of({"AAA": bars_of(60), "BBB": bars_of(60).iloc[[0, 1, 1, 2]]})
    with pytest.raises(
        InputError, match=rf"BBB: column 'date' must strictly increase: {day(b, 1)} is repeated"
    ):
        pf.compute_panel(twice)


# --- registry --------------------------------------------------------------------------------------------


def test_registry_names_are_unique_and_documented():
    names = pf.feature_names()
    assert len(set(names)) == len(names) == len(pf.FEATURES)
    assert all(re.fullmatch(r"[a-z_]+_\d+", n) for n in names)
    for f in pf.FEATURES:
        assert f"| `{f.name}` | {f.window} | `{f.doc}` |" in pf.__doc__  # the table is the registry


def test_fingerprint_is_stable_and_follows_every_definition(monkeypatch):
    fp = pf.fingerprint()
    assert fp == pf.fingerprint()
    assert re.fullmatch(r"[0-9a-f]{64}", fp)
    first, rest = pf.FEATURES[0], pf.FEATURES[1:]
    edits = [
        (dataclasses.replace(first, doc=first.doc + " "), *rest),
        (dataclasses.replace(first, window=first.window + 1), *rest),
        (dataclasses.replace(first, name="ret_1b"), *rest),
        rest,
        (*rest, first),
    ]
    seen = {fp}
    for registry in edits:
        monkeypatch.setattr(pf, "FEATURES", registry)
        seen.add(pf.fingerprint())
    assert len(seen) == 1 + len(edits)

    monkeypatch.setattr(pf, "FEATURES", (dataclasses.replace(first, fn=lambda b: b.close), *rest))
    assert pf.fingerprint() == fp  # the code is not hashed: a change of code alone bumps VERSION
    monkeypatch.setattr(pf, "VERSION", pf.VERSION + 1)
    assert pf.fingerprint() != fp
