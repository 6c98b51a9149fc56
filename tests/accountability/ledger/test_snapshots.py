"""predict: windows from the database, batched forward, chained rows, idempotent reruns, skips, run_log."""

from __future__ import annotations

import datetime as dt
import json
import threading

import numpy as np
import pandas as pd
import pytest
import torch
from accountability_helpers import ingest, make_model, make_settings
from calendar_oracle import next_monday_session, next_session
from sqlalchemy import event, select, text

from ldtm_core.accountability.ledger import snapshots as snapshots_mod
from ldtm_core.accountability.ledger.audit import verify
from ldtm_core.accountability.ledger.chain import canonical
from ldtm_core.accountability.ledger.snapshots import classify_direction, predict
from ldtm_core.data.calendar import sessions_after
from ldtm_core.data.features import compute_features
from ldtm_core.data.samples import build_samples
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import lift_append_only
from ldtm_core.errors import InputError
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning import registry
from ldtm_core.learning.inference import batched_forward
from ldtm_core.learning.model import LDTM, get_profile
from ldtm_core.learning.price_windows import features_batch
from ldtm_core.schema import run_log, snapshots

TICKERS = ["AAPL", "NVDA", "QQQ"]


@pytest.fixture
def world(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, TICKERS)
    ids = {t: make_model(engine, settings, t, seed=i) for i, t in enumerate(TICKERS)}
    return settings, df, ids


def _rows(engine):
    with engine.connect() as conn:
        return pd.DataFrame(conn.execute(select(snapshots).order_by(snapshots.c.id)).mappings().all())


def test_classify_direction_band_is_inclusive():
    close = np.array([100.0] * 5)
    pred = np.array([100.26, 100.25, 100.0, 99.75, 99.74])
    assert list(classify_direction(pred, close, 0.25)) == [
        "bullish",
        "neutral",
        "neutral",
        "neutral",
        "bearish",
    ]


def test_batched_forward_matches_each_module():
    torch.set_num_threads(1)
    for cfg in (get_profile("demo"), get_profile("demo", num_layers=2, hidden_size=8)):
        models = []
        for s in range(5):
            torch.manual_seed(s)
            models.append(LDTM(cfg).eval())
        x = torch.rand(5, cfg.window, cfg.input_size)
        got = batched_forward(models, x)
        with torch.no_grad():
            want = torch.cat([m(x[i : i + 1]) for i, m in enumerate(models)])
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_batched_forward_runs_on_the_inputs_device():
    """The GPU check runs the batched pass on a card: every state tensor must live on x's device. The
    meta device stands in for CUDA on a CPU machine (it fails the same way on a CPU-only tensor)."""
    cfg = get_profile("demo", num_layers=2, hidden_size=8)
    models = [LDTM(cfg).eval() for _ in range(3)]
    x = torch.rand(3, cfg.window, cfg.input_size, device="meta")
    got = batched_forward(models, x)
    assert got.device.type == "meta" and tuple(got.shape) == (3, len(cfg.horizons))


def test_predict_writes_one_row_per_ticker_matching_the_model(engine, world):
    settings, df, ids = world
    res = predict(engine, settings)
    last = max(df["date"])
    assert res.run_date == last and res.mode == "live"
    assert res.rows_written == 3 and res.rows_existing == 0 and res.tickers_predicted == sorted(TICKERS)
    assert res.used_candidate == sorted(TICKERS)
    assert set(res.phases) == {"load", "features", "forward", "write"}
    rows = _rows(engine)
    # All three are candidates: production's cohort is empty, the ungated one counts them.
    assert len(rows) == 3 and sum(res.cohort.values()) == 0 and sum(res.cohort_ungated.values()) == 3
    # Recompute AAPL's prediction independently: build_samples on its full history, the module forward.
    aapl = df[df.ticker == "AAPL"].drop(columns="ticker")
    samples = build_samples(aapl, 30)
    ck = registry.get_model(engine, ids["AAPL"])
    from ldtm_core.learning.checkpoints import load_checkpoint

    model = load_checkpoint(ck.checkpoint_path).model
    with torch.no_grad():
        y = model(torch.from_numpy(samples.x[-1:])).numpy()
    want = samples.subset(slice(-1, None)).denormalise(y)[0]
    r = rows[rows.ticker == "AAPL"].iloc[0]
    assert r.run_date_close == pytest.approx(samples.close[-1])
    assert r.prev_close == pytest.approx(samples.prev_close[-1])
    np.testing.assert_allclose([r[h.col("pred")] for h in HORIZONS], want, rtol=1e-5)
    assert r.direction_pred == classify_direction(r.next_day_pred, r.run_date_close, 0.25)
    assert r.next_day_date == next_session(last)
    assert r.next_monday_date == next_monday_session(last)
    assert r.one_month_date == sessions_after(last, 21)
    assert r.model_version == f"cand-{ids['AAPL']}" and r.model_status == "candidate"
    assert r.prev_hash == "" and len(r.row_hash) == 64
    assert set(rows.run_id) == {res.run_id}
    with engine.connect() as conn:
        log = conn.execute(select(run_log).where(run_log.c.run_id == res.run_id)).mappings().one()
    assert log["status"] == "ok" and log["n_rows"] == 3 and log["finished_at"] is not None
    assert set(json.loads(log["phases_json"])) == {"load", "features", "forward", "write"}
    assert json.loads(log["summary_json"])["cohort"] == res.cohort


def test_statements_do_not_grow_with_the_tickers(engine, db_url, tmp_path):
    """Every read and the write are set-based: 2 and 6 tickers cost as many statements (issue 31: one
    statement per ticker would be 1,000 round trips an evening)."""
    settings = make_settings(tmp_path, db_url)
    tickers = [*TICKERS, "MSFT", "AMZN", "META"]
    days = sorted(ingest(engine, tickers)["date"].unique())
    for i, t in enumerate(tickers):
        make_model(engine, settings, t, seed=i)
    counts = []
    for day, subset in ((days[-20], tickers[:2]), (days[-19], tickers)):
        seen = []

        def count(*_args, seen=seen):
            seen.append(1)

        event.listen(engine, "before_cursor_execute", count)
        try:
            res = predict(engine, settings, run_date=day, tickers=subset)
        finally:
            event.remove(engine, "before_cursor_execute", count)
        assert res.tickers_predicted == sorted(subset) and res.rows_written == len(subset)
        counts.append(len(seen))
    assert counts[0] == counts[1], counts


def test_rerun_is_a_noop_and_replay_mode_and_chain(engine, world):
    settings, df, _ = world
    dates = sorted(df["date"].unique())
    past = dates[-5]
    first = predict(engine, settings, run_date=past)
    assert first.mode == "replay" and first.rows_written == 3
    before = _rows(engine)
    again = predict(engine, settings, run_date=past)
    assert again.rows_written == 0 and again.rows_existing == 3
    after = _rows(engine)
    pd.testing.assert_frame_equal(before, after)  # no duplicate, no overwrite
    live = predict(engine, settings)
    assert live.mode == "live" and live.rows_written == 3
    rows = _rows(engine)
    for t in TICKERS:
        r = rows[rows.ticker == t].sort_values("id")
        assert r.iloc[1].prev_hash == r.iloc[0].row_hash  # chained per ticker
    assert verify(engine).ok
    n_before = len(_rows(engine))
    # --mode live on an evening whose outcome is already in the prices is refused, nothing written
    with pytest.raises(InputError, match=r"--mode live refused for .*prices up to"):
        predict(engine, settings, run_date=dates[-3], mode="live")
    assert len(_rows(engine)) == n_before
    assert predict(engine, settings, run_date=dates[-3], mode="replay").mode == "replay"


def test_promoted_model_version_and_candidate_fallback(engine, world):
    settings, _, ids = world
    registry.promote(engine, ids["NVDA"], "test", settings)
    res = predict(engine, settings, tickers=["NVDA", "QQQ"])
    rows = _rows(engine).set_index("ticker")
    assert rows.loc["NVDA", "model_version"] == "v1.2024-01-02"
    assert rows.loc["NVDA", "model_status"] == "active"
    assert rows.loc["QQQ", "model_status"] == "candidate"
    assert res.used_candidate == ["QQQ"]


def test_skips_with_reasons_and_others_carry_on(engine, world, db_url):
    settings, df, ids = world
    # Corrupt AAPL's checkpoint; delete NVDA's price on the run date; ask for a ticker with no model.
    path = registry.get_model(engine, ids["AAPL"]).checkpoint_path
    with open(path, "r+b") as fh:
        fh.seek(100)
        fh.write(b"garbage")
    last = max(df["date"])
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM prices WHERE ticker = 'NVDA' AND date = :d"), {"d": last})
    res = predict(engine, settings, run_date=last, tickers=["AAPL", "NVDA", "QQQ", "TSLA"])
    assert res.tickers_predicted == ["QQQ"]
    assert "AAPL" in res.skipped["AAPL"] and path in res.skipped["AAPL"] and "sha256" in res.skipped["AAPL"]
    assert "no price for NVDA" in res.skipped["NVDA"]
    assert "no active or candidate model" in res.skipped["TSLA"]
    with engine.connect() as conn:
        status = conn.execute(select(run_log.c.status).where(run_log.c.run_id == res.run_id)).scalar_one()
    assert status == "partial"


def test_missing_checkpoint_and_short_history(engine, db_url, tmp_path):
    settings = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL"], start="2024-01-02", end="2024-03-28")  # ~60 sessions: enough
    ingest(engine, ["TSLA"], start="2024-03-01", end="2024-03-28")  # ~20 sessions: too short
    a = make_model(engine, settings, "AAPL")
    make_model(engine, settings, "TSLA")
    import os

    os.remove(registry.get_model(engine, a).checkpoint_path)
    res = predict(engine, settings, run_date=dt.date(2024, 3, 28))
    assert res.tickers_predicted == []
    assert "missing" in res.skipped["AAPL"] and "AAPL" in res.skipped["AAPL"]
    assert "window needs" in res.skipped["TSLA"]


def test_run_date_not_a_session_is_a_clear_error(engine, world):
    settings, _, _ = world
    with pytest.raises(InputError, match="not an XNYS trading session"):
        predict(engine, settings, run_date=dt.date(2024, 6, 29))  # a Saturday
    with pytest.raises(InputError, match="mode"):
        predict(engine, settings, mode="evening")


def test_neutral_band_setting_changes_direction(engine, world):
    settings, _, _ = world
    res = predict(engine, settings, neutral_band_pct=100.0)
    assert res.cohort_ungated == {"bullish": 0, "neutral": 3, "bearish": 0}


def test_concurrent_predicts_never_fork_the_chain(engine, world):
    settings, df, _ = world
    dates = sorted(df["date"].unique())[-6:]
    errors: list[BaseException] = []

    def run(d):
        try:
            predict(engine, settings, run_date=d)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(d,)) for d in dates]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    rows = _rows(engine)
    assert len(rows) == 6 * 3
    report = verify(engine)
    assert report.ok and report.rows_checked == 18
    for _, g in rows.groupby("ticker"):
        assert g.prev_hash.nunique() == len(g)  # a chain, not a tree


def test_window_is_the_features_ending_at_run_date(engine, world):
    """A price after D must not influence a prediction for D (no look-ahead)."""
    settings, df, _ = world
    dates = sorted(df["date"].unique())
    d = dates[-10]
    predict(engine, settings, run_date=d, tickers=["AAPL"])
    first = _rows(engine).iloc[0]
    lift_append_only(engine)  # rewrites the record on purpose: SQLite's append-only triggers off
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE prices SET close = close * 2 WHERE ticker = 'AAPL' AND date > :d"), {"d": d}
        )
        conn.execute(text("DELETE FROM snapshots"))
    predict(engine, settings, run_date=d, tickers=["AAPL"])
    second = _rows(engine).iloc[0]
    assert first.next_day_pred == second.next_day_pred
    # Every hashed prediction field is the same (the v2 hash also covers run_id / created_at, which differ).
    assert canonical({**first.to_dict(), "chain_version": 1}) == canonical(
        {**second.to_dict(), "chain_version": 1}
    )
    feats = compute_features(df[(df.ticker == "AAPL") & (df.date <= d)].drop(columns="ticker"))
    assert first.run_date_close == pytest.approx(feats["close"].iloc[-1])


def test_features_batch_equals_compute_features():
    df = generate(["AAPL", "NVDA", "SQQQ"], "2023-01-03", "2024-03-28", seed=3)
    frames = [g.drop(columns="ticker").reset_index(drop=True) for _, g in df.groupby("ticker")]
    n = min(len(f) for f in frames)
    frames = [f.iloc[-n:].reset_index(drop=True) for f in frames]
    # a flat stretch (no gains, no losses) exercises the RSI special cases
    frames[0].loc[100:130, ["open", "high", "low", "close"]] = 50.0
    arrays = [
        np.stack([f[c].to_numpy(np.float64) for f in frames])
        for c in ("open", "high", "low", "close", "volume")
    ]
    got = features_batch(*arrays)
    for i, f in enumerate(frames):
        want = compute_features(f).to_numpy()
        assert got[i].shape == want.shape
        np.testing.assert_allclose(got[i], want, rtol=1e-12, atol=1e-12)


def test_predict_input_equals_the_training_sample(engine, db_url, tmp_path, monkeypatch):
    """Train/serve consistency: predict's window equals build_samples' row on the full history."""
    settings = make_settings(tmp_path, db_url)
    # AAPL: long history (the batched feature path); NVDA: ~120 rows only (the per-ticker path).
    df = pd.concat(
        [
            ingest(engine, ["AAPL"], start="2021-01-04", end="2024-06-28"),
            ingest(engine, ["NVDA"], start="2024-01-02", end="2024-06-28"),
        ]
    )
    make_model(engine, settings, "AAPL")
    make_model(engine, settings, "NVDA")
    seen = {}
    real = snapshots_mod.batched_forward

    def spy(models, x):
        seen["x"] = x.clone()
        return real(models, x)

    monkeypatch.setattr(snapshots_mod, "batched_forward", spy)
    d = sorted(df["date"].unique())[-30]
    res = predict(engine, settings, run_date=d)
    assert res.tickers_predicted == ["AAPL", "NVDA"], res.skipped
    for i, t in enumerate(["AAPL", "NVDA"]):
        hist = df[(df.ticker == t) & (df.date <= d)].drop(columns="ticker")
        want = build_samples(hist, 30).x[-1]
        np.testing.assert_allclose(seen["x"][i].numpy(), want, atol=2e-6)


def test_in_sample_replays_are_flagged_and_left_off_the_leaderboard(engine, db_url, tmp_path):
    """A model whose data cutoff is 2024-06-21 replays 06-18..06-24: the evenings whose next-day target
    is on or before the cutoff are in-sample; 06-21 (target 06-24) and later are out of sample."""
    from ldtm_core.accountability.board.leaderboard import leaderboard
    from ldtm_core.accountability.ledger.fillback import fillback

    settings = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL"])
    registry.promote(
        engine, make_model(engine, settings, "AAPL", trained_on=dt.date(2024, 6, 21)), "t", settings
    )
    evenings = [dt.date(2024, 6, 18), dt.date(2024, 6, 20), dt.date(2024, 6, 21), dt.date(2024, 6, 24)]
    results = [predict(engine, settings, run_date=d) for d in evenings]
    assert [r.in_sample for r in results] == [["AAPL"], ["AAPL"], [], []]
    rows = _rows(engine)
    assert rows[["run_date", "next_day_date", "in_sample"]].values.tolist() == [
        [dt.date(2024, 6, 18), dt.date(2024, 6, 20), True],  # 06-19 is Juneteenth
        [dt.date(2024, 6, 20), dt.date(2024, 6, 21), True],
        [dt.date(2024, 6, 21), dt.date(2024, 6, 24), False],
        [dt.date(2024, 6, 24), dt.date(2024, 6, 25), False],
    ]
    assert verify(engine).ok  # the flag is hashed; the chain is intact
    with engine.connect() as conn:
        summary = json.loads(
            conn.execute(
                select(run_log.c.summary_json).where(run_log.c.run_id == results[0].run_id)
            ).scalar_one()
        )
    assert summary["in_sample"] == ["AAPL"]
    fillback(engine)
    board = leaderboard(engine).iloc[0]
    assert board["n"] == 2 and board["window_start"] == dt.date(2024, 6, 21)
    assert leaderboard(engine, include_in_sample=True).iloc[0]["n"] == 4
