"""A hole in a ticker's prices (issue 28 item 12): warned on every ingest path, never spanned by features.

A six-year hole used to pass silently, and the first bar after it got a 1-day log return against a close
six years earlier (RSI and the averages mixed both periods).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.data.calendar import sessions_between
from ldtm_core.data.feature_store import build_features, fingerprint, prices_and_features
from ldtm_core.data.features import WARMUP_ROWS, compute_features
from ldtm_core.data.ingest import ingest_frame, ingest_synthetic
from ldtm_core.data.price_fetch import fetch_prices
from ldtm_core.data.samples import build_samples
from ldtm_core.data.sources.base import RAW_COLUMNS, PriceSource, SourceAnswer
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine
from ldtm_core.errors import ConfigError

runner = CliRunner()
BEFORE_END, AFTER_START = dt.date(2011, 6, 30), dt.date(2017, 7, 3)  # the hole: 2011-07-01 .. 2017-06-30
# XNYS sessions from 2011-07-01 to 2017-06-30 (1510)
HOLE_SESSIONS = len(sessions_between(BEFORE_END + dt.timedelta(days=1), AFTER_START - dt.timedelta(days=1)))


def holey(ticker: str = "AAPL") -> pd.DataFrame:
    """Bars 2010-2011 and 2017-2018 of one ticker (long frame), nothing in between."""
    early = generate([ticker], "2010-01-04", BEFORE_END, 5)
    late = generate([ticker], AFTER_START, "2018-06-29", 5)
    return pd.concat([early, late], ignore_index=True)


def bars(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns="ticker").reset_index(drop=True)


def assert_names_the_gap(text: str, ticker: str = "AAPL") -> None:
    for fragment in (ticker, str(BEFORE_END), str(AFTER_START), f"{HOLE_SESSIONS} sessions"):
        assert fragment in text, (fragment, text)


# --- warned on every ingest path --------------------------------------------------------------------


def test_csv_ingest_warns_of_the_hole_naming_ticker_dates_and_sessions(ldtm_env, tmp_path):
    df = holey()
    path = tmp_path / "AAPL.csv"
    df[["date", "open", "high", "low", "close", "adj_close", "volume"]].to_csv(path, index=False)
    result = runner.invoke(app, ["ingest", "csv", str(path)])
    assert result.exit_code == 0, result.output
    warning = next(line for line in result.output.splitlines() if "gap" in line)
    assert warning.startswith("warning:"), result.output
    assert_names_the_gap(result.output)


def test_frame_and_synthetic_ingest_report_the_hole_and_log_it(engine, caplog):
    caplog.set_level(logging.WARNING, "ldtm.ingest")
    result = ingest_frame(engine, holey(), "test")
    assert [g.ticker for g in result.gaps] == ["AAPL"]
    assert_names_the_gap(result.gaps[0].describe())
    assert_names_the_gap(caplog.text)
    # Synthetic ingest of a later range leaves a hole after what is stored: warned too.
    first = ingest_synthetic(engine, ["MSFT"], "2010-01-04", BEFORE_END, seed=5)
    assert first.gaps == []
    later = ingest_synthetic(engine, ["MSFT"], AFTER_START, "2017-12-29", seed=5)
    assert len(later.gaps) == 1
    assert_names_the_gap(later.gaps[0].describe(), "MSFT")
    # The next ingest past the hole does not warn of it again.
    again = ingest_synthetic(engine, ["MSFT"], "2018-01-02", "2018-01-31", seed=5)
    assert again.gaps == []


class LateSource(PriceSource):
    """Has bars only from AFTER_START on, whatever it is asked (a source with a hole)."""

    name = "late"

    def fetch(self, tickers, start, end) -> SourceAnswer:
        answer = SourceAnswer()
        df = generate(list(tickers), max(start, AFTER_START), end, 5)
        for ticker, group in df.groupby("ticker"):
            answer.frames[str(ticker)] = group[RAW_COLUMNS].reset_index(drop=True)
        return answer


def test_fetch_warns_of_the_hole_it_leaves(ldtm_env, engine):
    ingest_synthetic(engine, ["AAPL"], "2010-01-04", BEFORE_END, seed=5)
    report = fetch_prices(
        engine, LateSource(), ["AAPL"], first_start=dt.date(2010, 1, 4), end=dt.date(2017, 9, 29)
    )
    assert len(report.gaps) == 1
    assert_names_the_gap(report.gaps[0].describe())


def test_fetch_cli_prints_the_warning(ldtm_env, monkeypatch):
    engine = get_engine(ldtm_env["url"])
    from ldtm_core.migrate import upgrade

    upgrade(ldtm_env["url"])
    ingest_synthetic(engine, ["AAPL"], "2010-01-04", BEFORE_END, seed=5)
    monkeypatch.setattr("ldtm_core.data.sources.make_source", lambda spec, seed=0: LateSource())
    result = runner.invoke(app, ["ingest", "fetch", "-t", "AAPL", "--end", "2017-09-29"])
    assert result.exit_code == 0, result.output
    assert_names_the_gap(result.output)


def test_short_gaps_within_the_setting_are_not_warned(engine, monkeypatch):
    df = generate(["AAPL"], "2017-01-03", "2017-12-29", 5)
    df = df[(df["date"] < dt.date(2017, 3, 1)) | (df["date"] > dt.date(2017, 3, 6))]  # 4 sessions missing
    assert ingest_frame(engine, df, "test").gaps == []
    monkeypatch.setenv("LDTM_MAX_GAP_SESSIONS", "3")
    gaps = ingest_frame(engine, df, "again").gaps
    assert [g.sessions for g in gaps] == [4]


@pytest.mark.parametrize("value", ["-1", "x", "2.5"])
def test_the_setting_is_checked_by_name(monkeypatch, tmp_path, value):
    from ldtm_core.config import Settings

    monkeypatch.setenv("LDTM_HOME", str(tmp_path))
    monkeypatch.setenv("LDTM_MAX_GAP_SESSIONS", value)
    with pytest.raises(ConfigError, match="LDTM_MAX_GAP_SESSIONS"):
        Settings.from_env()


# --- features and windows restart after the hole ------------------------------------------------------


def test_no_feature_row_looks_back_across_the_hole():
    df = bars(holey())
    feats = compute_features(df)
    early = df[df["date"] <= BEFORE_END].reset_index(drop=True)
    late = df[df["date"] >= AFTER_START].reset_index(drop=True)
    # Each side is exactly what it would be alone: the first row after the hole is WARMUP_ROWS in.
    expected = pd.concat([compute_features(early), compute_features(late)])
    pd.testing.assert_frame_equal(feats, expected)
    after = feats[feats.index >= AFTER_START]
    assert after.index[0] == late["date"].iloc[WARMUP_ROWS]
    assert abs(after["log_return_1d"]).max() < 0.5  # no 1-day return against a close six years back


def test_no_sample_window_crosses_the_hole():
    df = bars(holey())
    samples = build_samples(df, window=30)
    feats = compute_features(df)
    dates = feats.index.to_numpy().astype("datetime64[D]")
    for end in samples.dates:
        i = int(np.searchsorted(dates, end))
        start = dates[i - 29]
        assert (start > np.datetime64(BEFORE_END)) or (end <= np.datetime64(BEFORE_END)), (start, end)
    late = df[df["date"] >= AFTER_START].reset_index(drop=True)
    first_after = build_samples(late, window=30).dates[0]
    assert samples.dates[samples.dates > np.datetime64(BEFORE_END)][0] == first_after


def test_stored_features_follow_the_same_rule(engine):
    ingest_frame(engine, holey(), "test")
    build_features(engine, ["AAPL"])
    prices, read = prices_and_features(engine, "AAPL")
    assert read.source == "store"
    pd.testing.assert_frame_equal(read.frame, compute_features(prices), check_index_type=False)
    assert not ((read.frame.index > BEFORE_END) & (read.frame.index < AFTER_START)).any()


def test_inference_window_never_spans_the_hole():
    from ldtm_core.learning.price_windows import build_windows

    df = bars(holey())
    df = df[df["date"] <= dt.date(2017, 8, 15)]  # 31 sessions after the hole: too few for a window
    arrays = {
        "AAPL": {
            "date": pd.to_datetime(df["date"]).to_numpy().astype("datetime64[D]"),
            **{f: df[f].to_numpy(dtype=np.float64) for f in ("open", "high", "low", "close", "volume")},
        }
    }
    out, skipped = build_windows(arrays, {"AAPL": 30}, dt.date(2017, 8, 15), need_rows=299)
    assert out == {} and "gap" in skipped["AAPL"], skipped


# --- data without holes: nothing changes ---------------------------------------------------------------

# Taken on the code before the gap rule: the fingerprint token, the features and the sample windows of
# a gap-free series must stay bit for bit the same (stored feature sets and fold keys stay valid). The
# float64 features differ in their last bits between CPUs (numpy's SIMD log and sums: AVX2 vs AVX-512),
# so they are pinned as float32, the precision the windows and the model use (re-taken on an EPYC Zen 3,
# whose windows hash the same as the Xeon's that took the rest).
UNCHANGED = {
    "AAPL": (
        "rows=504;first=2015-01-02;last=2016-12-30;"
        "bars=6a8b8c187dc24e2f3058d4a803ae362139fecb9c2c08b57d9566f0ce3dc988f2;ca=none",
        "0902ed859dbc3ec468670c48337a15cdba2ce6dc706be9b122aeadf0ef089f75",
        "0c63627a1bc74e2554cdc904d9f2353fe2ba0fbebb925980ca16f7f41209ee14",
    ),
    "MSFT": (
        "rows=504;first=2015-01-02;last=2016-12-30;"
        "bars=ac756ba9b7ba5fee58620fe25fb31b0541a3e58ca64a62281ca2595804c3d92a;ca=none",
        "ac03aa2fbe026f0d5e0d23cfcf605a15eefb422934b4ba065605a03fab8ef800",
        "49047ed049a7c1e9090354305184884d2e68e961fae2cfde603f45f7acdd0660",
    ),
}


@pytest.mark.parametrize("gap_setting", [None, "0"])
def test_gap_free_data_keeps_its_fingerprint_features_and_windows(monkeypatch, gap_setting):
    from ldtm_core.data.feature_store import FEATURE_DEFINITION

    if gap_setting is not None:
        monkeypatch.setenv("LDTM_MAX_GAP_SESSIONS", gap_setting)
    # The market these were taken on: opens without the overnight move (the closes are the same).
    df = generate(["AAPL", "MSFT"], "2015-01-02", "2016-12-30", 3, overnight_share=0.0)
    for ticker, group in df.groupby("ticker"):
        p = bars(group)
        token, features_sha, windows_sha = UNCHANGED[ticker]
        assert fingerprint(p).token == token
        f = compute_features(p)
        assert hashlib.sha256(np.ascontiguousarray(f.to_numpy(), "<f4").tobytes()).hexdigest() == features_sha
        assert hashlib.sha256(build_samples(p, 30).x.tobytes()).hexdigest() == windows_sha
    assert FEATURE_DEFINITION.startswith("ldtm-features-1:")


def test_a_hole_changes_the_fingerprint_so_old_stored_features_are_rebuilt():
    df = bars(holey())
    with_hole = fingerprint(df)
    assert "gaps=" in with_hole.token
    from ldtm_core.data.feature_store import PriceFingerprint

    assert PriceFingerprint.from_token(with_hole.token) == with_hole
