"""File and frame ingest on SQLite and PostgreSQL: validation, atomicity per file, idempotent upserts."""

from __future__ import annotations

import datetime as dt

import exchange_calendars as xcals
import numpy as np
import pandas as pd
import pytest
from sqlalchemy import select

from ldtm_core.data.ingest import ingest_files, ingest_frame, ingest_synthetic
from ldtm_core.data.price_files import expand_paths, read_price_file
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine
from ldtm_core.errors import InputError
from ldtm_core.schema import prices

UNIVERSE = ["AAPL", "NVDA", "TSLA", "QQQ"]
YAHOO = ["Date", "Open", "High", "Low", "Close", "Adj Close", "Volume"]


def frame(ticker: str = "AAPL", n: int = 20, seed: int = 1) -> pd.DataFrame:
    """n consecutive synthetic sessions for one ticker (valid OHLCV)."""
    df = generate([ticker], "2024-01-01", "2024-06-30", seed).head(n).reset_index(drop=True)
    df["date"] = pd.to_datetime(df["date"]).dt.strftime("%Y-%m-%d")
    return df


def yahoo(df: pd.DataFrame) -> pd.DataFrame:
    out = df[["date", "open", "high", "low", "close", "adj_close", "volume"]].copy()
    out.columns = YAHOO
    return out


def write_csv(path, df: pd.DataFrame) -> None:
    path.write_text(df.to_csv(index=False))


def table_rows(url: str) -> list[tuple]:
    with get_engine(url).connect() as conn:
        return [tuple(r) for r in conn.execute(select(prices).order_by(prices.c.ticker, prices.c.date)).all()]


def line_of(i: int) -> str:
    """Data row i (0-based) of a CSV with a header sits on line i + 2."""
    return f"line {i + 2}"


# --------------------------------------------------------------------------------------------------
# Bad input: each case names file + row/date + problem and leaves the table unchanged.


def _set(df: pd.DataFrame, i: int, col: str, value) -> pd.DataFrame:
    df = df.astype({col: object})
    df.loc[i, col] = value
    return df


def case_missing_column(tmp):
    p = tmp / "AAPL.csv"
    write_csv(p, yahoo(frame()).drop(columns="Volume"))
    return p, ["missing column", "volume"]


def case_unparsable_date(tmp):
    p = tmp / "AAPL.csv"
    write_csv(p, _set(yahoo(frame()), 3, "Date", "2024-13-45"))
    return p, [line_of(3), "unparsable date", "2024-13-45"]


def case_nan_price(tmp):
    df = yahoo(frame())
    p = tmp / "AAPL.csv"
    write_csv(p, _set(df, 5, "Close", "NaN"))
    return p, [line_of(5), df.loc[5, "Date"], "missing close"]


def case_zero_price(tmp):
    df = yahoo(frame())
    p = tmp / "AAPL.csv"
    write_csv(p, _set(df, 6, "Open", 0))
    return p, [line_of(6), df.loc[6, "Date"], "open 0 is not positive"]


def case_negative_price(tmp):
    df = yahoo(frame())
    p = tmp / "AAPL.csv"
    write_csv(p, _set(df, 7, "Low", -2.5))
    return p, [line_of(7), df.loc[7, "Date"], "low -2.5 is not positive"]


def case_high_below_low(tmp):
    df = yahoo(frame())
    df.loc[8, "High"], df.loc[8, "Low"] = df.loc[8, "Low"], df.loc[8, "High"]
    p = tmp / "AAPL.csv"
    write_csv(p, df)
    return p, [line_of(8), df.loc[8, "Date"], "high", "< low"]


def case_open_outside_range(tmp):
    df = yahoo(frame())
    df.loc[9, "Open"] = df.loc[9, "High"] * 1.5
    p = tmp / "AAPL.csv"
    write_csv(p, df)
    return p, [line_of(9), df.loc[9, "Date"], "open", "outside [low"]


def case_close_outside_range(tmp):
    df = yahoo(frame())
    df.loc[2, "Close"] = df.loc[2, "Low"] / 2
    p = tmp / "AAPL.csv"
    write_csv(p, df)
    return p, [line_of(2), df.loc[2, "Date"], "close", "outside [low"]


def case_negative_volume(tmp):
    df = yahoo(frame())
    p = tmp / "AAPL.csv"
    write_csv(p, _set(df, 4, "Volume", -100))
    return p, [line_of(4), df.loc[4, "Date"], "volume -100 is negative"]


def case_nan_volume(tmp):
    df = yahoo(frame())
    p = tmp / "AAPL.csv"
    write_csv(p, _set(df, 4, "Volume", ""))
    return p, [line_of(4), df.loc[4, "Date"], "missing volume"]


def case_duplicate_dates(tmp):
    df = yahoo(frame())
    df.loc[11, "Date"] = df.loc[10, "Date"]
    p = tmp / "AAPL.csv"
    write_csv(p, df)
    return p, [line_of(11), df.loc[10, "Date"], "duplicate date", f"also at {line_of(10)}"]


def case_empty_file(tmp):
    p = tmp / "AAPL.csv"
    p.write_text("")
    return p, ["file is empty"]


def case_header_only(tmp):
    p = tmp / "AAPL.csv"
    p.write_text(",".join(YAHOO) + "\n")
    return p, ["no data rows"]


def case_truncated_csv(tmp):
    df = yahoo(frame())
    text = df.to_csv(index=False)
    last_line = text.rstrip("\n").rsplit("\n", 1)[1]
    cut = text.rstrip("\n")[: -(len(last_line) - 14)]  # keep "YYYY-MM-DD,1" of the last row
    p = tmp / "AAPL.csv"
    p.write_text(cut)
    return p, [line_of(len(df) - 1), df.iloc[-1]["Date"], "missing"]


def case_truncated_parquet(tmp):
    p = tmp / "AAPL.parquet"
    yahoo(frame()).to_parquet(p)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    return p, ["not a readable Parquet file"]


def case_bad_parquet_row(tmp):
    df = yahoo(frame())
    df.loc[3, "Close"] = -1.0
    p = tmp / "AAPL.parquet"
    df.to_parquet(p)
    return p, ["row 4", df.loc[3, "Date"], "close -1 is not positive"]


def case_invalid_ticker_file_name(tmp):
    p = tmp / "AA$PL.csv"
    write_csv(p, yahoo(frame()))
    return p, ["file name is not a ticker", "invalid ticker"]


def case_invalid_ticker_in_column(tmp):
    df = frame()
    df.loc[3, "ticker"] = "../etc"
    p = tmp / "long.csv"
    write_csv(p, df)
    return p, [line_of(3), df.loc[3, "date"], "invalid ticker"]


def case_ticker_outside_universe(tmp):
    df = frame("MSFT")
    p = tmp / "MSFT.csv"
    write_csv(p, yahoo(df))
    return p, [line_of(0), df.loc[0, "date"], "MSFT is not in the universe", "--allow-new"]


# Issue 10: what a careless user fed in and got stored.


def case_volume_beyond_int64(tmp):
    df = yahoo(frame())
    p = tmp / "AAPL.csv"
    write_csv(p, _set(_set(df, 3, "Volume", "1e19"), 4, "Volume", "1e20"))
    return p, [line_of(3), df.loc[3, "Date"], "volume 1e+19 is out of range", line_of(4), "volume 1e+20"]


def case_price_beyond_sane_bound(tmp):
    df = yahoo(frame())
    df = _set(df, 5, "High", "1e300")
    p = tmp / "AAPL.csv"
    write_csv(p, _set(df, 6, "Adj Close", "2e9"))
    return p, [line_of(5), "high 1e+300 is out of range (above 1e+09)", line_of(6), "adj_close 2000000000"]


def case_cut_inside_last_field(tmp):
    df = yahoo(frame())
    df.loc[len(df) - 1, "Volume"] = 33973585
    text = df.to_csv(index=False).rstrip("\n")
    p = tmp / "AAPL.csv"
    p.write_text(text[:-4])  # "...,33973585" cut to "...,3397", no final newline
    return p, [line_of(len(df) - 1), df.iloc[-1]["Date"], "no line terminator", "cut off"]


def case_weekend_row(tmp):
    df = yahoo(frame())
    df.loc[4, "Date"] = "2024-01-06"
    p = tmp / "AAPL.csv"
    write_csv(p, df)
    return p, [line_of(4), "2024-01-06 is a Saturday, not an XNYS session"]


def case_holiday_row(tmp):
    df = yahoo(frame())
    df.loc[9, "Date"] = "2024-01-15"
    p = tmp / "AAPL.csv"
    write_csv(p, df)
    return p, [line_of(9), "2024-01-15 is an XNYS holiday (Dr. Martin Luther King Jr. Day)"]


def case_semicolon_delimited(tmp):
    p = tmp / "AAPL.csv"
    p.write_text(yahoo(frame()).to_csv(index=False, sep=";"))
    return p, ["missing column", "semicolon-delimited", "'.' as the decimal point"]


def case_semicolon_comma_decimal(tmp):
    p = tmp / "AAPL.csv"
    p.write_text(yahoo(frame()).to_csv(index=False, sep=";", decimal=","))
    return p, ["semicolon-delimited", "185,64"]


def case_comma_decimal_quoted(tmp):
    df = yahoo(frame()).astype({"Close": object})
    df.loc[2, "Close"] = str(df.loc[2, "Close"]).replace(".", ",")
    p = tmp / "AAPL.csv"
    write_csv(p, df)
    return p, [line_of(2), "is not a number (a decimal comma? use '.' as the decimal point)"]


BAD_CASES = [
    case_missing_column,
    case_unparsable_date,
    case_nan_price,
    case_zero_price,
    case_negative_price,
    case_high_below_low,
    case_open_outside_range,
    case_close_outside_range,
    case_negative_volume,
    case_nan_volume,
    case_duplicate_dates,
    case_empty_file,
    case_header_only,
    case_truncated_csv,
    case_truncated_parquet,
    case_bad_parquet_row,
    case_invalid_ticker_file_name,
    case_invalid_ticker_in_column,
    case_ticker_outside_universe,
    case_volume_beyond_int64,
    case_price_beyond_sane_bound,
    case_cut_inside_last_field,
    case_weekend_row,
    case_holiday_row,
    case_semicolon_delimited,
    case_semicolon_comma_decimal,
    case_comma_decimal_quoted,
]


@pytest.mark.parametrize("case", BAD_CASES, ids=lambda c: c.__name__.removeprefix("case_"))
def test_bad_file_names_file_row_problem_and_writes_nothing(db_url, tmp_path, case):
    engine = get_engine(db_url)
    # Existing rows for the same ticker must survive untouched.
    seeded = frame("AAPL", n=25, seed=9)
    ingest_frame(engine, seeded, "seed")
    before = table_rows(db_url)
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    path, expected = case(bad_dir)

    [outcome] = ingest_files(engine, [path], UNIVERSE)

    assert not outcome.ok and outcome.status == "failed"
    assert outcome.written == 0
    assert outcome.error.startswith(str(path)), outcome.error
    for fragment in expected:
        assert fragment in outcome.error, (fragment, outcome.error)
    assert table_rows(db_url) == before
    with pytest.raises(InputError):
        read_price_file(path, universe=UNIVERSE)


def test_bad_rows_reported_together_with_count(tmp_path):
    df = yahoo(frame(n=30))
    for i in range(8):
        df.loc[i, "High"] = df.loc[i, "Low"] / 2
    p = tmp_path / "AAPL.csv"
    write_csv(p, df)
    with pytest.raises(InputError) as err:
        read_price_file(p)
    msg = str(err.value)
    assert "8 bad line(s)" in msg
    assert "line 2 " in msg and "line 6 " in msg and "line 7 " not in msg
    assert "and 3 more bad lines" in msg


# --------------------------------------------------------------------------------------------------
# Reading good files.


def test_yahoo_headers_any_case_and_aliases(tmp_path):
    df = frame("NVDA", n=12)
    out = yahoo(df)
    out.columns = ["DATE", "open", "HiGh", "low", "Close", "adj_close", "VOLUME"]
    p = tmp_path / "nvda.csv"
    write_csv(p, out)
    got = read_price_file(p)
    assert list(got.columns) == ["ticker", "date", "open", "high", "low", "close", "adj_close", "volume"]
    assert (got["ticker"] == "NVDA").all()
    assert got["date"].dt.strftime("%Y-%m-%d").tolist() == df["date"].tolist()
    assert got["close"].tolist() == df["close"].tolist()
    assert got["volume"].tolist() == df["volume"].tolist()


def test_long_file_with_ticker_column_and_optional_adj_close(tmp_path):
    df = pd.concat([frame("AAPL", 10), frame("TSLA", 10)]).drop(columns="adj_close")
    df = df.rename(columns={"ticker": "Symbol"}).sample(frac=1, random_state=0)  # unsorted on purpose
    p = tmp_path / "prices.csv"
    write_csv(p, df)
    got = read_price_file(p, universe=UNIVERSE)
    assert sorted(got["ticker"].unique()) == ["AAPL", "TSLA"]
    assert len(got) == 20 and got["adj_close"].isna().all()
    assert got.groupby("ticker")["date"].apply(lambda s: s.is_monotonic_increasing).all()


def test_parquet_with_date_index_and_timezone_keeps_the_exchange_date(tmp_path):
    df = frame("QQQ", n=10)
    out = yahoo(df).set_index("Date")
    # yfinance-style index: midnight New York time, which is 04:00/05:00 UTC on the same date.
    out.index = pd.DatetimeIndex(pd.to_datetime(out.index)).tz_localize("America/New_York")
    out.index.name = "Date"
    p = tmp_path / "QQQ.parquet"
    out.to_parquet(p)
    got = read_price_file(p)
    assert got["date"].dt.strftime("%Y-%m-%d").tolist() == df["date"].tolist()
    assert got["open"].tolist() == df["open"].tolist()


def test_expand_paths_directories_and_files(tmp_path):
    for name in ("B.csv", "A.parquet", "notes.txt"):
        (tmp_path / name).write_text("x")
    assert [p.name for p in expand_paths([tmp_path])] == ["A.parquet", "B.csv"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no .csv or .parquet"):
        expand_paths([empty])


# --------------------------------------------------------------------------------------------------
# Writing: idempotence, overlap, isolation between files.


def test_reingest_same_file_writes_nothing_and_keeps_rows_identical(db_url, tmp_path):
    engine = get_engine(db_url)
    p = tmp_path / "AAPL.csv"
    write_csv(p, yahoo(frame(n=40)))
    [first] = ingest_files(engine, [p], UNIVERSE)
    assert first.ok and first.rows == 40 and first.written == 40 and first.tickers == ["AAPL"]
    before = table_rows(db_url)
    assert len(before) == 40
    [again] = ingest_files(engine, [p], UNIVERSE)
    assert again.ok and again.written == 0
    assert table_rows(db_url) == before  # ingested_at included: nothing was rewritten


def test_overlapping_newer_file_updates_only_changed_rows(db_url, tmp_path):
    engine = get_engine(db_url)
    full = frame(n=60)
    old, new = full.iloc[:40].copy(), full.iloc[20:].copy()
    changed_idx = [25, 30, 35]
    for i in changed_idx:  # revised closes inside the overlap (kept within [low, high])
        new.loc[i, "close"] = round((new.loc[i, "low"] + new.loc[i, "high"]) / 2, 4)
    assert all(new.loc[i, "close"] != full.loc[i, "close"] for i in changed_idx)
    p_old, p_new = tmp_path / "old" / "AAPL.csv", tmp_path / "new" / "AAPL.csv"
    for p, df in ((p_old, old), (p_new, new)):
        p.parent.mkdir()
        write_csv(p, yahoo(df))
    ingest_files(engine, [p_old], UNIVERSE)
    before = {r[1]: r for r in table_rows(db_url)}

    # Revisions older than the last few sessions change stored history: refused unless forced (issue 20).
    [refused] = ingest_files(engine, [p_new], UNIVERSE)
    assert not refused.ok and "--force" in refused.error
    assert {r[1]: r for r in table_rows(db_url)} == before
    [outcome] = ingest_files(engine, [p_new], UNIVERSE, force=True)

    assert outcome.ok and outcome.written == 20 + len(changed_idx)
    after = {r[1]: r for r in table_rows(db_url)}
    assert len(after) == 60
    changed_dates = {dt.date.fromisoformat(full.loc[i, "date"]) for i in changed_idx}
    for day, row in before.items():
        if day in changed_dates:
            assert row != after[day]
            assert after[day][5] == new.loc[full.index[full["date"] == str(day)][0], "close"]
        else:
            assert row == after[day]  # untouched, same ingested_at


def test_bad_file_does_not_affect_other_files_in_the_same_call(db_url, tmp_path):
    engine = get_engine(db_url)
    good1, bad, good2 = tmp_path / "AAPL.csv", tmp_path / "NVDA.csv", tmp_path / "TSLA.parquet"
    write_csv(good1, yahoo(frame("AAPL", 15)))
    bad_df = yahoo(frame("NVDA", 15))
    bad_df.loc[14, "Volume"] = -1
    write_csv(bad, bad_df)
    yahoo(frame("TSLA", 12)).to_parquet(good2)

    outcomes = ingest_files(engine, [good1, bad, good2], UNIVERSE)

    assert [o.ok for o in outcomes] == [True, False, True]
    assert [o.written for o in outcomes] == [15, 0, 12]
    stored = pd.DataFrame(table_rows(db_url), columns=[c.name for c in prices.columns])
    assert stored.groupby("ticker").size().to_dict() == {"AAPL": 15, "TSLA": 12}
    assert set(stored["source"]) == {"csv", "parquet"}


def test_allow_new_accepts_ticker_outside_universe(db_url, tmp_path):
    engine = get_engine(db_url)
    p = tmp_path / "MSFT.csv"
    write_csv(p, yahoo(frame("MSFT", 10)))
    [refused] = ingest_files(engine, [p], UNIVERSE)
    assert not refused.ok
    [accepted] = ingest_files(engine, [p], UNIVERSE, allow_new=True)
    assert accepted.ok and accepted.written == 10
    assert {r[0] for r in table_rows(db_url)} == {"MSFT"}


def test_ingest_frame_rejects_bad_frame_atomically(db_url):
    engine = get_engine(db_url)
    df = pd.concat([frame("AAPL", 10), frame("NVDA", 10)], ignore_index=True)
    df.loc[15, "high"] = df.loc[15, "low"] / 2  # one bad NVDA row
    with pytest.raises(InputError, match=r"my frame: 1 bad row\(s\): row 16 .*high .* < low"):
        ingest_frame(engine, df, "test", label="my frame")
    assert table_rows(db_url) == []


def test_ingest_synthetic_is_idempotent(db_url):
    engine = get_engine(db_url)
    first = ingest_synthetic(engine, ["AAPL", "SQQQ"], "2023-01-01", "2023-12-31", seed=3)
    assert first.tickers == 2 and first.rows == 2 * 250 and first.written == first.rows
    rows = table_rows(db_url)
    again = ingest_synthetic(engine, ["AAPL", "SQQQ"], "2023-01-01", "2023-12-31", seed=3)
    assert again.written == 0 and table_rows(db_url) == rows
    # Different prices for stored sessions rewrite history: only when forced (issue 20 item 14).
    with pytest.raises(InputError, match="--force"):
        ingest_synthetic(engine, ["AAPL"], "2023-01-01", "2023-12-31", seed=4)
    assert table_rows(db_url) == rows
    other_seed = ingest_synthetic(engine, ["AAPL"], "2023-01-01", "2023-12-31", seed=4, force=True)
    assert other_seed.written == 250  # different prices replace every AAPL row


def test_two_sources_with_different_values_for_one_day_are_both_refused(db_url, tmp_path):
    """TSLA.csv and tsla.csv in one call: the last one read used to win silently."""
    engine = get_engine(db_url)
    ingest_frame(engine, frame("TSLA", n=20, seed=9), "seed")
    before = table_rows(db_url)
    upper, lower, other = tmp_path / "TSLA.csv", tmp_path / "tsla.csv", tmp_path / "AAPL.csv"
    df = yahoo(frame("TSLA", n=20, seed=1))
    write_csv(upper, df)
    revised = df.copy()
    revised.loc[7, "Close"] = revised.loc[7, "Low"]
    write_csv(lower, revised)
    write_csv(other, yahoo(frame("AAPL", n=10)))

    outcomes = ingest_files(engine, [upper, lower, other], UNIVERSE)

    assert [o.ok for o in outcomes] == [False, False, True]
    assert str(lower) in outcomes[0].error and str(upper) in outcomes[1].error
    for o in outcomes[:2]:
        assert f"TSLA {df.loc[7, 'Date']} close" in o.error and "1 (ticker, date) row(s) differ" in o.error
        assert o.written == 0
    stored = table_rows(db_url)
    assert [r for r in stored if r[0] == "TSLA"] == before  # the seeded TSLA rows are untouched
    assert sum(r[0] == "AAPL" for r in stored) == 10


def test_two_sources_that_agree_are_both_stored_once(db_url, tmp_path):
    engine = get_engine(db_url)
    a, b = tmp_path / "TSLA.csv", tmp_path / "long.csv"
    write_csv(a, yahoo(frame("TSLA", n=15)))
    write_csv(b, frame("TSLA", n=20))  # a long file overlapping the first 15 days with equal values

    outcomes = ingest_files(engine, [a, b], UNIVERSE)

    assert [o.ok for o in outcomes] == [True, True]
    assert [o.written for o in outcomes] == [15, 5]
    assert len(table_rows(db_url)) == 20


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        ("2030-01-02", "2030-03-29", "synthetic start: 2030-01-02 is beyond the XNYS calendar's range"),
        ("2024-01-02", "2031-01-02", "synthetic end: 2031-01-02 is beyond the XNYS calendar's range"),
        ("1985-01-02", "2024-01-02", "synthetic start 1985-01-02: the synthetic market begins on 1990-01-01"),
    ],
)
def test_synthetic_range_past_the_calendar_is_refused_by_name(db_url, start, end, message):
    with pytest.raises(InputError, match=message):
        ingest_synthetic(get_engine(db_url), ["AAPL"], start, end)
    assert table_rows(db_url) == []


def test_a_full_history_from_1986_is_stored_whole_and_read_back_on_its_sessions(db_url, tmp_path):
    """Issue 20 item 7: a real full download (MSFT from 1986-03-13) was refused whole, 962 lines
    'before the XNYS calendar's range, which starts at 1990-01-02'. The calendar reaches back instead."""
    from calendar_oracle import next_session

    from ldtm_core.data.calendar import is_session
    from ldtm_core.data.prices import load_prices

    # The sessions straight from exchange_calendars, independent of ldtm's calendar module.
    xnys = xcals.get_calendar("XNYS", start="1986-01-02", end="1990-12-31")
    days = [d.date() for d in xnys.sessions_in_range("1986-03-13", "1990-03-30")]
    close = 100 * np.cumprod(1 + 0.01 * np.random.default_rng(3).standard_normal(len(days)))
    df = pd.DataFrame(
        {"date": days, "open": close, "high": close * 1.01, "low": close * 0.99, "close": close}
    ).assign(adj_close=close, volume=1_000_000)
    assert df["date"].iloc[0] == dt.date(1986, 3, 13) and len(df) > 962
    path = tmp_path / "MSFT.csv"
    write_csv(path, yahoo(df))

    [outcome] = ingest_files(get_engine(db_url), [path], ["MSFT"])

    assert outcome.ok, outcome.error
    assert outcome.written == len(df)
    stored = load_prices(get_engine(db_url), ["MSFT"])["MSFT"]
    assert stored["date"].iloc[0] == dt.date(1986, 3, 13) and len(stored) == len(df)
    # Real 1980s closures, not weekdays: Hurricane Gloria (1985-09-27) and a 1987 Good Friday.
    assert not is_session("1987-04-17") and next_session("1987-04-16") == dt.date(1987, 4, 20)
    assert not is_session("1985-09-27")
