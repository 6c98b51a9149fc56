"""The board reads the evenings its windows cover, not the whole record (issue 31 item 2); only the
labels' evidence (accountability.board.record) reads the whole record, by design.

Two stores hold the same recent evenings; one also holds years of OLD evenings, all before the window
and before the SPA's baseline history. The boards (every row and figure), the SPA answer and the hidden
in-sample count must be the same on both databases. The database's work must not grow with the old
evenings: counted on SQLite as VM instructions (a progress handler: deterministic, and SQLite's planner
has no statistics, so a plan that reads every evening shows). PostgreSQL's cost-based planner rightly
scans a table of a few thousand rows whole whatever the SQL allows; its flat cost is measured at scale by
benchmarks/scale.py (docs/performance.md).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import random

import pandas as pd
import pytest
from accountability_helpers import registry_row
from sqlalchemy import event, insert, text, update

from ldtm_core.accountability.board import leaderboard as board
from ldtm_core.accountability.board import reads as board_reads
from ldtm_core.db import get_engine, lift_append_only
from ldtm_core.migrate import upgrade
from ldtm_core.schema import model_registry, snapshots
from ldtm_core.scoring.baselines import encode_calls
from ldtm_core.scoring.board_stats import HISTORY_DAYS

LATEST = dt.date(2025, 6, 27)
RECENT = 130  # evenings back from LATEST: the windows, the SPA's history and some margin
OLD = 900  # evenings of old history, ending well before the SPA's history starts
OLD_END = LATEST - dt.timedelta(days=RECENT + HISTORY_DAYS + 60)


def _model(conn, ticker: str, status: str = "active") -> int:
    return registry_row(conn, ticker, status, trained_on=dt.date(2020, 1, 2))


def _row(rng, ticker, mid, version, d, **kw) -> dict:
    close = 100 + rng.uniform(-5, 5)
    actual = close * (1 + rng.choice([-0.02, -0.01, 0.0, 0.01, 0.02]))
    pred = close * (1 + rng.uniform(-0.02, 0.02))
    sign = lambda v: (v > 0) - (v < 0)  # noqa: E731
    return {
        "ticker": ticker, "run_date": d, "run_date_close": close, "prev_close": close * rng.choice([0.99, 1.01]),
        "model_id": mid, "model_version": version, "model_status": "active", "mode": rng.choice(["live", "replay"]),
        "next_day_pred": pred, "next_monday_pred": pred, "one_month_pred": pred, "direction_pred": "neutral",
        "next_day_date": d + dt.timedelta(days=1), "next_monday_date": d + dt.timedelta(days=3),
        "one_month_date": d + dt.timedelta(days=30), "run_id": "r", "created_at": dt.datetime.now(dt.UTC),
        "prev_hash": f"{ticker}{d}{version}", "row_hash": "h", "in_sample": False,
        "next_day_actual": actual, "next_day_pct_error": (pred - actual) / actual * 100,
        "next_day_direction_correct": None if actual == close else sign(pred - close) == sign(actual - close),
        "next_monday_actual": actual, "next_monday_pct_error": rng.uniform(-8, 8),
        "one_month_actual": actual, "one_month_pct_error": rng.uniform(-12, 12),
    } | _calls(d, close) | kw  # fmt: skip


def _calls(d: dt.date, close: float) -> dict:
    """The recorded calls, varied by evening: the trailing majority up, down, flat (0), no call (null) or
    absent on chain-version-3 rows; a chain-version-2 row's calls are not hashed, so never read."""
    k = d.toordinal() % 7
    if k == 6:
        return {"chain_version": 2, "baseline_calls": encode_calls({"trend": -1.0})}
    if k == 5:
        return {"chain_version": 3, "baseline_calls": encode_calls({"always_up": 1.0})}
    trend = (1.0, -1.0, 0.0, float("nan"), 1.0)[k]
    return {"chain_version": 3, "baseline_calls": encode_calls({"always_up": 1.0, "trend": trend})}


def _store(url: str, old: bool):
    """Three tickers with an active model (GONE's evenings stopped before the window: a stale row), a
    re-prediction by a second model, in-sample and ungated evenings, the newest month's targets unfilled;
    with `old`, OLD more evenings per ticker far back."""
    upgrade(url)
    engine = get_engine(url)
    rng = random.Random(7)
    rows = []
    with engine.begin() as conn:
        ids = {t: _model(conn, t) for t in ("AAA", "BBB", "GONE")}
        v2 = _model(conn, "AAA", status="retired")
        recent = [LATEST - dt.timedelta(days=k) for k in range(RECENT)]
        for t in ("AAA", "BBB"):
            for k, d in enumerate(recent):
                r = _row(rng, t, ids[t], "v1", d, in_sample=k % 11 == 5)
                if k % 13 == 3:
                    r["model_status"] = "candidate"  # ungated evening
                if k < 25:  # the newest month's one-month targets are not known yet
                    r["one_month_actual"] = r["one_month_pct_error"] = None
                rows.append(r)
            rows.append(_row(rng, t, ids[t], "v1", LATEST + dt.timedelta(days=1), next_day_actual=None))
        rows += [_row(rng, "AAA", v2, "v2", d) for d in recent[2:9]]  # re-predicted: not scored twice
        rows += [_row(rng, "GONE", ids["GONE"], "v1", d) for d in recent[60:]]
        if old:
            for t in ("AAA", "BBB", "GONE"):
                rows += [_row(rng, t, ids[t], "v1", OLD_END - dt.timedelta(days=k)) for k in range(OLD)]
        rng.shuffle(rows)  # ids in no date order: the first row of an evening is still its first
        # ... except the re-prediction, whose evenings must be predicted first by v1 (published first).
        rows.sort(key=lambda r: r["model_version"])
        conn.execute(insert(snapshots), rows)
    return engine


class _Work:
    """SQLite VM instructions run on `engine` while active, in hundreds (a progress handler on every
    connection checked out: the rows a statement streams are fetched after it returns)."""

    def __init__(self, engine):
        self.engine, self.count = engine, 0

    def checkout(self, dbapi_conn, record, proxy):
        dbapi_conn.set_progress_handler(self._tick, 100)

    def checkin(self, dbapi_conn, record):
        dbapi_conn.set_progress_handler(None, 0)

    def _tick(self) -> int:
        self.count += 1
        return 0  # go on

    def __enter__(self):
        event.listen(self.engine, "checkout", self.checkout)
        event.listen(self.engine, "checkin", self.checkin)
        return self

    def __exit__(self, *exc):
        event.remove(self.engine, "checkout", self.checkout)
        event.remove(self.engine, "checkin", self.checkin)


def _everything(engine, **flags):
    sqlite = engine.dialect.name == "sqlite"
    with _Work(engine) if sqlite else contextlib.nullcontext() as work:
        # The window's figures; the record's evidence reads the whole record by design (below).
        table = board.leaderboard(engine, **flags, with_record=False)
        per_model = board.leaderboard_by_model(engine, **flags, with_record=False)
        hidden = board.hidden_in_sample(engine)
    spa = board.universe(engine, table, **flags)
    return table, per_model, (spa, hidden), work.count if sqlite else None


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    # Mean |error| columns (the view's and the no-change forecast's): a float mean sums in its scan order.
    means = [c for c in a if c.endswith("_mape")]
    pd.testing.assert_frame_equal(a.drop(columns=means), b.drop(columns=means), check_exact=True)
    pd.testing.assert_frame_equal(a[means], b[means], check_exact=False, rtol=1e-12)


@pytest.mark.parametrize("flags", [{}, {"include_in_sample": True, "include_ungated": True}])
def test_old_history_changes_neither_the_board_nor_the_rows_it_reads(db_url, tmp_path, flags):
    if db_url.startswith("sqlite"):
        urls = [f"sqlite:///{tmp_path}/recent.db", f"sqlite:///{tmp_path}/old.db"]
    else:
        urls = [db_url]  # the fixture's database; the second store is built in it after the first
    recent = _store(urls[0], old=False)
    table, per_model, spa, work_recent = _everything(recent, **flags)
    if len(urls) == 1:
        with recent.begin() as conn:
            conn.execute(snapshots.delete())
            conn.execute(model_registry.delete())
    full = _store(urls[-1], old=True)
    table_old, per_model_old, spa_old, work_old = _everything(full, **flags)

    assert len(table) == 3 and table.set_index("ticker").loc["GONE", "stale"]
    assert table["n"].iloc[0] >= 15 and table["next_monday_dates"].iloc[0] > 0  # a real board
    _same(table, table_old)
    _same(per_model, per_model_old)
    assert spa == spa_old
    # The labels' evidence is the whole record: the old evenings count there, and only there.
    whole = board.leaderboard(full, **flags).set_index("ticker")
    assert (whole["record_n"] > table_old.set_index("ticker").loc[whole.index, "n"] + OLD / 2).all()
    if work_recent is not None:
        # 3 x OLD old rows beside ~3 x RECENT recent ones (about 7 times as many): the work stays flat.
        assert work_old <= 1.2 * work_recent + 50, (work_recent, work_old)


def _whole_view(engine, view: str) -> pd.DataFrame:
    with engine.connect() as conn:
        # A fixed view name from the module: no user text.
        rows = conn.execute(text(f"SELECT {', '.join(board.COLUMNS)} FROM {view} WHERE mode = 'all'"))  # noqa: S608
        return board._typed(pd.DataFrame(rows.all(), columns=board.COLUMNS))


@pytest.mark.parametrize("unscored", [0, 20, 80])
def test_a_window_below_the_newest_filled_evenings_is_read_whole(sqlite_url, unscored):
    """The newest `unscored` evenings are all in-sample: the default board's windows end below the newest
    filled dates (a second, wider read, or the whole view when they lie below the first read's bound),
    and the rows equal the whole view's either way."""
    engine = _store(sqlite_url, old=True)
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(
            update(snapshots)
            .where(snapshots.c.run_date > LATEST - dt.timedelta(days=unscored))
            .values(in_sample=True)
        )
    got, bounds = board._read(engine, board_reads.TICKER_VIEW, board.COLUMNS, "all")
    assert (bounds is None) == (unscored == 80)  # 80 days is below the first read: the whole view
    if bounds is not None:
        assert got["window_end"].max() == LATEST - dt.timedelta(days=max(unscored, 0))
    key = ["ticker"]
    want = _whole_view(engine, board_reads.TICKER_VIEW)
    _same(got.sort_values(key).reset_index(drop=True), want.sort_values(key).reset_index(drop=True))


PLOTTED = ["AAA", "BBB", "GONE"]


def _plotted(engine):
    sqlite = engine.dialect.name == "sqlite"
    with _Work(engine) if sqlite else contextlib.nullcontext() as work:
        rows = board_reads.recent_next_day(engine, PLOTTED)
    return rows, work.count if sqlite else None


def test_the_plots_recent_evenings_ignore_old_history(db_url, tmp_path):
    """recent_next_day (the board's plot): the same rows with years of old evenings stored, read flat.
    GONE stopped before the others' window: it is completed from its own newest evening, not whole."""
    urls = (
        [f"sqlite:///{tmp_path}/recent.db", f"sqlite:///{tmp_path}/old.db"]
        if "sqlite" in db_url
        else [db_url]
    )
    recent = _store(urls[0], old=False)
    rows, work_recent = _plotted(recent)
    if len(urls) == 1:
        with recent.begin() as conn:
            conn.execute(snapshots.delete())
            conn.execute(model_registry.delete())
    rows_old, work_old = _plotted(_store(urls[-1], old=True))

    assert rows["ticker"].value_counts().to_dict() == dict.fromkeys(PLOTTED, 30)
    assert rows.groupby("ticker")["run_date"].max()["GONE"] == LATEST - dt.timedelta(days=60)
    pd.testing.assert_frame_equal(rows, rows_old, check_exact=True)
    if work_recent is not None:
        assert work_old <= 1.2 * work_recent + 50, (work_recent, work_old)


def test_a_ticker_scored_only_long_ago_is_plotted_from_its_whole_record(sqlite_url):
    """AAA's newest 120 evenings are in-sample: its last 30 scored evenings reach into the old history,
    and the plot's rows equal an unbounded read's."""
    engine = _store(sqlite_url, old=True)
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(
            update(snapshots)
            .where(snapshots.c.ticker == "AAA", snapshots.c.run_date > LATEST - dt.timedelta(days=120))
            .values(in_sample=True)
        )
    got = board_reads.recent_next_day(engine, PLOTTED)
    whole = board_reads._recent_rows(engine, PLOTTED, None, 30)
    pd.testing.assert_frame_equal(got, whole.sort_values(["ticker", "run_date"]).reset_index(drop=True))
    assert got[got["ticker"] == "AAA"]["run_date"].min() <= OLD_END
