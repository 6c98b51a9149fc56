"""Fetching through a price source: incremental ranges, batching, per-ticker refusal of bad bars."""

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from ldtm_core.data.calendar import sessions_between
from ldtm_core.data.price_fetch import fetch_prices, fetch_starts
from ldtm_core.data.price_moves import large_moves
from ldtm_core.data.prices import load_prices
from ldtm_core.data.sources import PriceSource, SourceAnswer, make_source
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine

TICKERS = ["AAPL", "NVDA", "TSLA", "MSFT", "AMZN", "GOOG"]


class RecordingSource(PriceSource):
    """Synthetic bars, with per-ticker damage, recording every request it gets."""

    name = "fake"
    batch_size = 2

    def __init__(self, damage=None):
        self.requests, self.damage = [], damage or {}

    def fetch(self, tickers, start, end):
        self.requests.append((list(tickers), start, end))
        answer = SourceAnswer()
        df = generate(list(tickers), start, end, seed=3)
        for t, g in df.groupby("ticker"):
            frame = g.drop(columns="ticker").reset_index(drop=True)
            answer.frames[t] = self.damage[t](frame) if t in self.damage else frame
        return answer


def test_incremental_starts_overlap_five_sessions_and_first_fetch_uses_start(engine):
    source = RecordingSource()
    fetch_prices(engine, source, ["AAPL", "NVDA"], first_start=dt.date(2024, 1, 2), end=dt.date(2024, 2, 29))
    starts = fetch_starts(engine, ["AAPL", "NVDA", "TSLA"], dt.date(2024, 1, 2))
    last5 = sessions_between("2024-02-15", "2024-02-29")[-6]  # 5 sessions before 2024-02-29
    assert starts == {"AAPL": last5, "NVDA": last5, "TSLA": dt.date(2024, 1, 2)}

    source.requests.clear()
    fetch_prices(
        engine, source, ["AAPL", "NVDA", "TSLA"], first_start=dt.date(2024, 1, 2), end=dt.date(2024, 3, 8)
    )
    # One request per distinct start (TSLA new, the others incremental), in batches of batch_size.
    assert sorted((tuple(t), s) for t, s, _ in source.requests) == [
        (("AAPL", "NVDA"), last5),
        (("TSLA",), dt.date(2024, 1, 2)),
    ]


def _bad(kind):
    def damage(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        i = len(frame) - 2
        if kind == "nan":
            frame.loc[i, "close"] = np.nan
        elif kind == "zero":
            frame.loc[i, "open"] = 0.0
        elif kind == "negative":
            frame.loc[i, ["low"]] = -1.0
        elif kind == "high<low":
            frame.loc[i, "high"] = frame.loc[i, "low"] - 0.5
        elif kind == "duplicate":
            frame = pd.concat([frame, frame.iloc[[i]]], ignore_index=True)
        return frame

    return damage


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("nan", "missing close"),
        ("zero", "open 0 is not positive"),
        ("negative", "low -1 is not positive"),
        ("high<low", "< low"),
        ("duplicate", "duplicate date for NVDA"),
    ],
)
def test_bad_bars_refuse_only_that_ticker_and_change_nothing_stored(engine, kind, reason):
    first = dt.date(2024, 1, 2)
    fetch_prices(engine, RecordingSource(), ["AAPL", "NVDA"], first_start=first, end=dt.date(2024, 2, 29))
    before = load_prices(engine, ["AAPL", "NVDA"])
    report = fetch_prices(
        engine,
        RecordingSource({"NVDA": _bad(kind)}),
        ["AAPL", "NVDA"],
        first_start=first,
        end=dt.date(2024, 3, 8),
    )
    nvda = report.outcomes["NVDA"]
    assert nvda.status == "failed" and reason in nvda.reason and "fake NVDA" in nvda.reason
    assert report.outcomes["AAPL"].status == "ok" and report.outcomes["AAPL"].last_date == dt.date(2024, 3, 8)
    pd.testing.assert_frame_equal(load_prices(engine, ["NVDA"])["NVDA"], before["NVDA"])


def test_unknown_symbol_and_source_failures_are_named_per_ticker(engine):
    class Flaky(RecordingSource):
        def fetch(self, tickers, start, end):
            if "TSLA" in tickers:
                raise TimeoutError("read timed out")
            answer = super().fetch(tickers, start, end)
            answer.fail("NVDA", "delisted or unknown symbol: no data found")
            answer.frames["ZZZZ"] = answer.frames["AAPL"].copy()  # a symbol nobody asked for
            return answer

    report = fetch_prices(
        engine,
        Flaky(),
        ["AAPL", "NVDA", "TSLA"],
        first_start=dt.date(2024, 1, 2),
        end=dt.date(2024, 1, 31),
        universe=["AAPL", "NVDA", "TSLA"],
    )
    rows = {r["ticker"]: (r["status"], r["reason"]) for r in report.table()}
    assert rows["AAPL"][0] == "ok"
    assert rows["NVDA"] == ("failed", "delisted or unknown symbol: no data found")
    assert rows["TSLA"] == ("failed", "fake: read timed out") and report.outcomes["TSLA"].transient
    assert rows["ZZZZ"][0] == "failed" and "not in the universe" in rows["ZZZZ"][1]
    assert load_prices(engine, ["ZZZZ", "NVDA"])["ZZZZ"].empty
    assert not report.source_down


def test_synthetic_source_matches_the_full_range_generator(engine):
    source = make_source("synthetic", seed=5)
    fetch_prices(engine, source, ["AAPL"], first_start=dt.date(2024, 1, 2), end=dt.date(2024, 2, 15))
    fetch_prices(engine, source, ["AAPL"], first_start=dt.date(2024, 1, 2), end=dt.date(2024, 3, 1))
    stored = load_prices(engine, ["AAPL"])["AAPL"]
    full = generate(["AAPL"], "2024-01-02", "2024-03-01", seed=5)
    assert stored["close"].tolist() == full["close"].tolist()


def test_large_one_day_moves_are_flagged_with_an_explanation_hook(tmp_path):
    from ldtm_core.data.ingest import ingest_frame
    from ldtm_core.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'm.db'}"
    upgrade(url)
    engine = get_engine(url)
    df = generate(["NVDA", "AAPL"], "2024-05-28", "2024-06-14", seed=1)
    split = (df["ticker"] == "NVDA") & (df["date"] >= dt.date(2024, 6, 10))
    df.loc[split, ["open", "high", "low", "close", "adj_close"]] /= 10.0  # a 10:1 split, unrecorded
    ingest_frame(engine, df, "test")
    [move] = large_moves(engine, ["NVDA", "AAPL"], threshold_pct=40)
    assert (move.ticker, move.date) == ("NVDA", dt.date(2024, 6, 10)) and move.pct < -85
    assert large_moves(engine, ["NVDA"], threshold_pct=95) == []
    recorded = {("NVDA", dt.date(2024, 6, 10))}
    assert large_moves(engine, ["NVDA"], threshold_pct=40, explained=lambda t, d, r: (t, d) in recorded) == []


def test_a_source_down_for_every_ticker_is_reported_as_down(engine):
    class Down(RecordingSource):
        def fetch(self, tickers, start, end):
            raise ConnectionError("connection refused")

    report = fetch_prices(
        engine, Down(), ["AAPL", "NVDA"], first_start=dt.date(2024, 1, 2), end=dt.date(2024, 1, 31)
    )
    assert report.source_down and [o.status for o in report.outcomes.values()] == ["failed", "failed"]


def test_rerunning_a_past_evening_refetches_up_to_that_evening_only(engine):
    source = RecordingSource()
    fetch_prices(engine, source, ["AAPL"], first_start=dt.date(2024, 1, 2), end=dt.date(2024, 3, 8))
    source.requests.clear()
    report = fetch_prices(engine, source, ["AAPL"], first_start=dt.date(2024, 1, 2), end=dt.date(2024, 2, 29))
    assert report.outcomes["AAPL"].status == "ok"
    [(_, start, end)] = source.requests
    assert (start, end) == (sessions_between("2024-02-15", "2024-02-29")[-6], dt.date(2024, 2, 29))
