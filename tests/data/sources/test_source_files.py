"""The files:<dir> source: each new file ingested once (path + content hash), per-ticker refusal."""

import datetime as dt

import pandas as pd
import pytest
from sqlalchemy import select

from ldtm_core.data.price_fetch import fetch_prices
from ldtm_core.data.prices import load_prices
from ldtm_core.data.sources import make_source
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine
from ldtm_core.schema import ingested_files

UNIVERSE = ["AAPL", "NVDA", "TSLA"]
START = dt.date(2024, 1, 2)


def _fetch(engine, drop):
    return fetch_prices(engine, make_source(f"files:{drop}"), UNIVERSE, first_start=START, universe=UNIVERSE)


def _ledger(engine):
    with engine.connect() as conn:
        return conn.execute(select(ingested_files.c.path, ingested_files.c.status)).all()


def test_each_new_file_is_ingested_once_and_rewritten_content_again(db_url, tmp_path):
    engine = get_engine(db_url)
    drop = tmp_path / "drop"
    drop.mkdir()
    day = generate(["AAPL", "NVDA"], "2024-03-01", "2024-03-08")
    day.to_csv(drop / "2024-03-08.csv", index=False)

    first = _fetch(engine, drop)
    assert {t: o.status for t, o in first.outcomes.items()} == {
        "AAPL": "ok",
        "NVDA": "ok",
        "TSLA": "no new data",
    }
    assert first.written == len(day)
    assert [f["status"] for f in first.files] == ["ok"]

    again = _fetch(engine, drop)  # same file, same content: skipped
    assert again.files == [] and again.written == 0
    assert len(_ledger(engine)) == 1

    # The vendor rewrites the file with a revised close: new content hash, ingested again.
    revised = day.copy()
    revised.loc[revised.index[-1], ["close", "high"]] = revised.iloc[-1]["high"] + 1.0
    revised.to_csv(drop / "2024-03-08.csv", index=False)
    third = _fetch(engine, drop)
    assert third.written == 1
    assert len(_ledger(engine)) == 2


def test_a_bad_ticker_in_a_long_file_is_refused_alone_and_stored_rows_stay(db_url, tmp_path):
    engine = get_engine(db_url)
    drop = tmp_path / "drop"
    drop.mkdir()
    generate(UNIVERSE, "2024-02-20", "2024-02-29").to_csv(drop / "a.csv", index=False)
    _fetch(engine, drop)
    before = load_prices(engine, UNIVERSE)

    nxt = generate(UNIVERSE, "2024-02-28", "2024-03-05")
    nxt.loc[(nxt["ticker"] == "NVDA") & (nxt["date"] == dt.date(2024, 3, 1)), "close"] = float("nan")
    nxt.loc[(nxt["ticker"] == "TSLA") & (nxt["date"] == dt.date(2024, 2, 29)), "low"] = 0.0
    nxt.to_csv(drop / "b.csv", index=False)
    report = _fetch(engine, drop)

    assert report.outcomes["AAPL"].status == "ok" and report.outcomes["AAPL"].last_date == dt.date(2024, 3, 5)
    assert report.outcomes["NVDA"].status == "failed"
    assert (
        "missing close" in report.outcomes["NVDA"].reason and "2024-03-01" in report.outcomes["NVDA"].reason
    )
    assert (
        report.outcomes["TSLA"].status == "failed"
        and "low 0 is not positive" in report.outcomes["TSLA"].reason
    )
    after = load_prices(engine, UNIVERSE)
    for t in ("NVDA", "TSLA"):  # nothing of theirs changed, not even the overlapping good dates
        pd.testing.assert_frame_equal(after[t], before[t])
    assert len(after["AAPL"]) > len(before["AAPL"])
    ledger = dict(_ledger(engine))
    assert ledger[str((drop / "b.csv").resolve())] == "partial"


def test_an_unreadable_or_unknown_file_is_rejected_once_and_named(db_url, tmp_path):
    engine = get_engine(db_url)
    drop = tmp_path / "drop"
    drop.mkdir()
    (drop / "AAPL.csv").write_text("Date,Open,High,Low,Close,Volume\n2024-03-01,1,2,0.5\n")
    generate(["ZZZZ"], "2024-02-26", "2024-03-01").assign(ticker="ZZZZ").to_csv(
        drop / "other.csv", index=False
    )
    report = _fetch(engine, drop)
    assert report.outcomes["AAPL"].status == "failed" and "AAPL.csv" in report.outcomes["AAPL"].reason
    assert report.outcomes["ZZZZ"].status == "failed"
    assert "unknown symbol ZZZZ: not in the universe" in report.outcomes["ZZZZ"].reason
    assert sorted(s for _, s in _ledger(engine)) == ["rejected", "rejected"]
    assert load_prices(engine, ["AAPL"])["AAPL"].empty
    assert _fetch(engine, drop).files == []  # not retried until the content changes


def test_a_bad_one_ticker_long_file_names_its_ticker(db_url, tmp_path):
    engine = get_engine(db_url)
    drop = tmp_path / "drop"
    drop.mkdir()
    day = generate(["NVDA"], "2024-02-26", "2024-03-01")
    day.loc[day.index[-1], "volume"] = -5
    day.to_csv(drop / "2024-03-01.csv", index=False)
    report = _fetch(engine, drop)
    assert (
        report.outcomes["NVDA"].status == "failed"
        and "volume -5 is negative" in report.outcomes["NVDA"].reason
    )
    assert [f["status"] for f in report.rejected_files] == ["rejected"]


def test_force_and_refetch_reread_a_file_refused_for_a_history_change(db_url, tmp_path, monkeypatch):
    """Issue 20 item 13: the refusal says 're-run with --force (or LDTM_FORCE_REINGEST=1)', but the
    refused file was in the ledger, so the forced run found 'no new file holds this ticker'."""
    monkeypatch.delenv("LDTM_FORCE_REINGEST", raising=False)
    engine = get_engine(db_url)
    drop = tmp_path / "drop"
    drop.mkdir()
    generate(["AAPL"], "2024-03-01", "2024-03-28").to_csv(drop / "a.csv", index=False)
    _fetch(engine, drop)
    revised = generate(["AAPL"], "2024-03-01", "2024-03-28")
    early = revised["date"] == dt.date(2024, 3, 5)  # far outside the 5-session revision window
    revised.loc[early, ["close", "high"]] = revised.loc[early, "high"] * 1.05
    revised.to_csv(drop / "b.csv", index=False)
    refused = _fetch(engine, drop)
    assert refused.outcomes["AAPL"].status == "failed" and "--force" in refused.outcomes["AAPL"].reason

    plain = _fetch(engine, drop)  # nothing new: the refusal is still the reason, not "no new data"
    assert plain.outcomes["AAPL"].status == "no new data"
    assert "b.csv was refused" in plain.outcomes["AAPL"].reason

    refetched = fetch_prices(
        engine, make_source(f"files:{drop}"), ["AAPL"], first_start=START, universe=UNIVERSE, refetch=True
    )  # re-read, and refused again for the same reason (not forced)
    assert refetched.outcomes["AAPL"].status == "failed" and "--force" in refetched.outcomes["AAPL"].reason

    forced = fetch_prices(
        engine, make_source(f"files:{drop}"), ["AAPL"], first_start=START, universe=UNIVERSE, force=True
    )
    assert forced.outcomes["AAPL"].status == "ok" and forced.outcomes["AAPL"].written >= 1
    stored = load_prices(engine, ["AAPL"], adjusted=False)["AAPL"]
    assert stored.loc[stored["date"] == dt.date(2024, 3, 5), "close"].item() == pytest.approx(
        revised.loc[early, "close"].item()
    )
    assert sorted(_ledger(engine)) == sorted(
        [(str((drop / "a.csv").resolve()), "ok"), (str((drop / "b.csv").resolve()), "ok")]
    )  # the refused file's ledger row now says ok; no second row
    assert _fetch(engine, drop).outcomes["AAPL"].status == "no new data"


def test_a_ticker_whose_only_file_was_refused_fails_with_that_reason_next_time(db_url, tmp_path):
    """Issue 20 item 13: after a NaN file was refused, the next fetch said NVDA 'no new data', exit 0,
    though NVDA had no prices at all."""
    engine = get_engine(db_url)
    drop = tmp_path / "drop"
    drop.mkdir()
    day = generate(["AAPL", "NVDA"], "2024-02-26", "2024-03-01")
    day.loc[(day["ticker"] == "NVDA") & (day["date"] == dt.date(2024, 2, 28)), "close"] = float("nan")
    day.to_csv(drop / "2024-03-01.csv", index=False)
    assert _fetch(engine, drop).outcomes["NVDA"].status == "failed"

    nxt = _fetch(engine, drop)
    assert nxt.outcomes["AAPL"].status == "no new data"
    nvda = nxt.outcomes["NVDA"]
    assert nvda.status == "failed", nvda
    assert "2024-03-01.csv was refused" in nvda.reason and "missing close" in nvda.reason
    assert "no prices stored" in nvda.reason
    assert nxt.failed == [nvda]

    fixed = generate(["NVDA"], "2024-02-26", "2024-03-01")
    fixed.to_csv(drop / "2024-03-01-fixed.csv", index=False)
    assert _fetch(engine, drop).outcomes["NVDA"].status == "ok"
    assert _fetch(engine, drop).outcomes["NVDA"].status == "no new data"
