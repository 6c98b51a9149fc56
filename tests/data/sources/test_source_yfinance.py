"""The yfinance adapter against recorded `yf.download(..., group_by="column")` answers (no network).

The fixtures were written by tests/fixtures/sources/record_yfinance.py through the real yfinance 1.7
download() (only the per-ticker HTTP call replaced), so they carry its exact shape: MultiIndex
(Price, Ticker) columns, the union Date index, all-NaN columns for the ticker it could not get.
"""

import datetime as dt
import logging
from pathlib import Path

import pandas as pd
import pytest

from ldtm_core.data.price_fetch import fetch_prices
from ldtm_core.data.prices import load_prices
from ldtm_core.data.sources.yfinance import YFinanceSource, classify

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "sources"
START, END = dt.date(2024, 6, 3), dt.date(2024, 6, 7)
ASKED = ["AAPL", "NVDA", "GAPPY", "ZZZZ"]
DELISTED = "Exception('possibly delisted; no price data found  (1d 2024-06-03 -> 2024-06-08)')"


def recorded(auto_adjust: bool) -> pd.DataFrame:
    return pd.read_csv(
        FIXTURES / f"yf_download_auto_adjust_{str(auto_adjust).lower()}.csv",
        header=[0, 1],
        index_col=0,
        parse_dates=True,
    )


class FakeDownload:
    """Stands in for yf.download: answers from a recorded frame, logs the failure as yfinance does."""

    def __init__(self, frame, failures=None):
        self.frame, self.calls, self.failures = frame, [], list(failures or [])

    def __call__(self, tickers, **kw):
        self.calls.append((list(tickers), kw))
        if self.failures:
            raise self.failures.pop(0)
        logging.getLogger("yfinance").error("\n1 Failed download:")
        logging.getLogger("yfinance").error(f"['ZZZZ']: {DELISTED}")
        keep = [c for c in self.frame.columns if c[1] in tickers]
        return self.frame[keep]


def test_recorded_answer_has_the_real_shape():
    frame = recorded(False)
    assert frame.columns.names == ["Price", "Ticker"] and frame.index.name == "Date"
    assert set(frame.columns.get_level_values("Price")) == {
        "Adj Close",
        "Close",
        "High",
        "Low",
        "Open",
        "Volume",
    }
    assert frame.xs("ZZZZ", axis=1, level="Ticker").isna().all().all()


@pytest.mark.parametrize("auto_adjust", [False, True])
def test_download_is_split_per_ticker_and_failures_are_named(auto_adjust):
    fake = FakeDownload(recorded(auto_adjust))
    source = YFinanceSource(auto_adjust=auto_adjust, download=fake, sleep=lambda s: None)
    answer = source.fetch(ASKED, START, END)

    [(tickers, kw)] = fake.calls  # one batched request for every ticker
    assert tickers == ASKED and kw["group_by"] == "column" and kw["auto_adjust"] is auto_adjust
    assert (kw["start"], kw["end"]) == ("2024-06-03", "2024-06-08")  # yfinance's end is exclusive
    assert kw["timeout"] == source.timeout
    nvda = answer.frames["NVDA"]
    assert nvda["date"].dt.strftime("%Y-%m-%d").tolist() == [
        "2024-06-03",
        "2024-06-04",
        "2024-06-05",
        "2024-06-06",
        "2024-06-07",
    ]
    if auto_adjust:  # back-adjusted: the close is already on the post-split basis
        assert nvda["close"].iloc[0] == pytest.approx(114.98)
        assert "adj_close" not in nvda  # auto_adjust drops Adj Close (only the failed column keeps one)
    else:  # raw close beside Yahoo's adjusted close
        assert nvda["close"].iloc[0] == pytest.approx(1150.00) and nvda["adj_close"].iloc[0] == pytest.approx(
            114.98
        )
    assert len(answer.frames["AAPL"]) == 5
    assert answer.failures["ZZZZ"].startswith("delisted or unknown symbol: ") and "ZZZZ" not in answer.frames
    assert answer.transient == set()


@pytest.mark.parametrize("auto_adjust", [False, True])
def test_fetch_stores_good_tickers_and_refuses_the_gap_and_the_unknown(engine, auto_adjust):
    source = YFinanceSource(
        auto_adjust=auto_adjust, download=FakeDownload(recorded(auto_adjust)), sleep=lambda s: None
    )
    report = fetch_prices(engine, source, ASKED, first_start=START, end=END, universe=ASKED)
    status = {t: o.status for t, o in report.outcomes.items()}
    assert status == {"AAPL": "ok", "NVDA": "ok", "GAPPY": "failed", "ZZZZ": "failed"}
    assert (
        "missing close" in report.outcomes["GAPPY"].reason and "2024-06-04" in report.outcomes["GAPPY"].reason
    )
    stored = load_prices(engine, ASKED)
    assert len(stored["AAPL"]) == len(stored["NVDA"]) == 5
    assert stored["GAPPY"].empty and stored["ZZZZ"].empty
    assert set(stored["NVDA"]["volume"]) >= {37014200}


def test_transient_errors_are_retried_with_backoff_then_named():
    sleeps = []
    fake = FakeDownload(recorded(False), failures=[TimeoutError("Read timed out"), ConnectionError("reset")])
    answer = YFinanceSource(download=fake, sleep=sleeps.append, base_delay=1.5).fetch(["AAPL"], START, END)
    assert "AAPL" in answer.frames and sleeps == [1.5, 3.0] and len(fake.calls) == 3

    down = FakeDownload(recorded(False), failures=[TimeoutError("Read timed out")] * 3)
    answer = YFinanceSource(download=down, sleep=lambda s: None, attempts=3).fetch(
        ["AAPL", "NVDA"], START, END
    )
    assert answer.failures == {t: "HTTP/network error: Read timed out" for t in ("AAPL", "NVDA")}
    assert answer.transient == {"AAPL", "NVDA"}


def test_error_messages_are_classified():
    assert classify("YFRateLimitError('Too Many Requests. Rate limited. Try after a while.')")[1] is True
    assert classify("HTTP Error 503: Service Unavailable")[1] is True
    assert classify(DELISTED) == (f"delisted or unknown symbol: {DELISTED}", False)


def test_missing_extra_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_yfinance(name, *a, **kw):
        if name == "yfinance":
            raise ImportError("No module named 'yfinance'")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_yfinance)
    from ldtm_core.errors import InputError

    with pytest.raises(InputError, match=r"pip install 'ldtm\[yfinance\]'"):
        YFinanceSource().fetch(["AAPL"], START, END)


def with_split_evening(frame: pd.DataFrame) -> pd.DataFrame:
    """The recorded raw answer plus 2024-06-10, NVDA's 10:1 ex-date, with the columns actions=True adds
    ('Dividends', 'Stock Splits' per ticker; 0.0 on days without an event)."""
    day = pd.Timestamp("2024-06-10")
    bar = {
        "AAPL": (196.90, 197.30, 192.15, 193.12, 193.12, 97262100),
        "NVDA": (120.37, 123.10, 117.01, 121.79, 121.79, 314162700),
    }
    frame = frame.copy()
    frame.loc[day] = float("nan")
    for t, (o, h, lo, c, adj, v) in bar.items():
        for name, value in zip(
            ("Open", "High", "Low", "Close", "Adj Close", "Volume"), (o, h, lo, c, adj, v), strict=True
        ):
            frame.loc[day, (name, t)] = value
    for t in ASKED:
        frame[("Dividends", t)] = 0.0
        frame[("Stock Splits", t)] = 0.0
    frame.loc[day, ("Stock Splits", "NVDA")] = 10.0
    return frame.sort_index(axis=1)


def test_raw_download_with_actions_records_the_split_and_the_series_stays_continuous(engine):
    from ldtm_core.data.corporate_actions import load_actions
    from ldtm_core.data.price_moves import large_moves

    fake = FakeDownload(with_split_evening(recorded(False)))
    source = YFinanceSource(auto_adjust=False, download=fake, sleep=lambda s: None)
    end = dt.date(2024, 6, 10)
    report = fetch_prices(engine, source, ["AAPL", "NVDA"], first_start=START, end=end)
    assert not report.failed
    assert fake.calls[0][1]["actions"] is True  # events only with raw closes
    [split] = load_actions(engine, ["NVDA"])["NVDA"]
    assert (split.ex_date, split.kind, split.factor, split.source) == (
        end,
        "split",
        pytest.approx(0.1),
        "yfinance",
    )
    assert load_actions(engine, ["AAPL"]) == {}
    raw = load_prices(engine, ["NVDA"], adjusted=False)["NVDA"]
    assert raw["close"].tolist()[-2:] == pytest.approx([1208.88, 121.79], rel=1e-3)  # stored as sent
    adjusted = load_prices(engine, ["NVDA"])["NVDA"]
    assert adjusted["close"].tolist()[-2:] == pytest.approx([120.888, 121.79], rel=1e-3)
    assert large_moves(engine, ["AAPL", "NVDA"], threshold_pct=40.0) == []  # the -90 % day is explained


def test_back_adjusted_download_asks_for_no_events():
    fake = FakeDownload(recorded(True))
    answer = YFinanceSource(auto_adjust=True, download=fake, sleep=lambda s: None).fetch(["NVDA"], START, END)
    assert fake.calls[0][1]["actions"] is False and answer.actions == []
