"""Purged split, the fit loop, and training from the database to a registered candidate."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest
import torch
from sqlalchemy import insert, select

from ldtm_core.config import Settings
from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.samples import build_samples
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine
from ldtm_core.learning.checkpoints import load_checkpoint, sha256_file
from ldtm_core.learning.gpu_slots import SlotPlan
from ldtm_core.learning.model import get_profile
from ldtm_core.learning.split import purged_split
from ldtm_core.learning.training import train_ticker
from ldtm_core.learning.training_loop import fit
from ldtm_core.learning.training_pool import train_many
from ldtm_core.schema import model_registry, prices, registry_events

START, END = "2022-01-03", "2023-12-29"  # two years: ~470 labeled samples per ticker


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def demo_cfg(**kw):
    return get_profile("demo", max_epochs=kw.pop("max_epochs", 2), **kw)


@pytest.fixture(scope="module")
def two_years():
    return generate(["AAPL", "NVDA", "TSLA"], START, END, seed=3)


def _samples(df, ticker="AAPL", window=30):
    return build_samples(df[df.ticker == ticker].drop(columns="ticker"), window)


# --- purged split ---------------------------------------------------------------------------------


@pytest.mark.parametrize("val_fraction", [0.1, 0.15, 0.3])
def test_purged_split_no_training_target_reaches_validation(two_years, val_fraction):
    s = _samples(two_years)
    train, val = purged_split(s, val_fraction)
    labeled = np.flatnonzero(s.labeled)
    assert len(val) == round(len(labeled) * val_fraction)
    # Validation is the chronologically last labeled rows.
    assert np.array_equal(val, labeled[-len(val) :])
    first_val = s.dates[val[0]]
    assert (s.target_dates[train].max(axis=1) < first_val).all()
    assert (s.dates[train] < first_val).all()
    # Only rows whose targets reach into validation are dropped (~21 sessions of one-month horizon).
    dropped = np.setdiff1d(labeled[: -len(val)], train)
    assert (s.target_dates[dropped].max(axis=1) >= first_val).all()
    assert 15 <= len(dropped) <= 25
    assert s.labeled[train].all() and s.labeled[val].all()


def test_purged_split_ignores_unlabeled_rows(two_years):
    s = _samples(two_years)
    assert (~s.labeled).sum() > 0  # the last month has no one-month target yet
    train, val = purged_split(s, 0.15)
    assert not np.isin(np.flatnonzero(~s.labeled), np.concatenate([train, val])).any()


# --- fit --------------------------------------------------------------------------------------------


def _split(df, ticker="AAPL"):
    s = _samples(df, ticker)
    tr, va = purged_split(s, 0.15)
    return s.subset(tr), s.subset(va)


def test_fit_is_deterministic_on_cpu(two_years):
    tr, va = _split(two_years)
    a = fit(tr, va, demo_cfg(seed=5), device="cpu", threads=1)
    b = fit(tr, va, demo_cfg(seed=5), device="cpu", threads=1)
    c = fit(tr, va, demo_cfg(seed=6), device="cpu", threads=1)
    sa, sb, sc = (r.model.state_dict() for r in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert a.val_loss == b.val_loss
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)
    assert a.device == "cpu" and not a.model.training
    assert next(a.model.parameters()).device.type == "cpu"


def test_fit_learns_a_learnable_signal():
    # Targets are a fixed function of the window: a model that learns must beat the mean predictor.
    from ldtm_core.data.samples import SampleSet

    rng = np.random.default_rng(0)
    n, w, f = 1200, 30, 11
    x = rng.random((n, w, f), dtype=np.float32)
    y = np.stack([x[:, -1, 3], x[:, -5:, 3].mean(1), 0.5 * x[:, -1, 0] + 0.25], axis=1).astype(np.float32)
    dates = np.datetime64("2000-01-01") + np.arange(n).astype("timedelta64[D]")

    def mk(idx):
        k = len(idx)
        return SampleSet(
            x=x[idx],
            y=y[idx],
            close_min=np.zeros(k),
            close_max=np.ones(k),
            close=np.ones(k),
            prev_close=np.ones(k),
            dates=dates[idx],
            target_dates=np.stack([dates[idx]] * 3, 1),
            target_close=y[idx].astype(np.float64),
        )

    tr, va = mk(np.arange(1000)), mk(np.arange(1000, n))
    baseline = float(((y[1000:] - y[:1000].mean(0)) ** 2).mean())
    res = fit(tr, va, get_profile("demo", max_epochs=12, patience=12), device="cpu", threads=1)
    assert res.val_loss < 0.5 * baseline
    first_val = res.history[0][1]
    assert res.val_loss < first_val
    assert res.history[-1][0] < res.history[0][0]  # training loss went down too
    assert res.best_epoch == 1 + int(np.argmin([v for _, v in res.history]))


def test_fit_early_stops_and_keeps_best_weights(two_years):
    tr, va = _split(two_years)
    res = fit(tr, va, demo_cfg(max_epochs=40, patience=2, lr=0.05), device="cpu", threads=1)
    vals = [v for _, v in res.history]
    assert res.epochs == len(vals)
    assert res.val_loss == min(vals)
    if res.epochs < 40:  # stopped early: exactly `patience` epochs without improvement
        assert res.epochs - res.best_epoch == 2
    # The returned weights are the best epoch's: re-evaluating them gives the best val loss.
    with torch.no_grad():
        pred = res.model(torch.from_numpy(va.x))
    assert float(((pred - torch.from_numpy(va.y)) ** 2).mean()) == pytest.approx(res.val_loss, rel=1e-5)


# --- train_ticker / train_many ----------------------------------------------------------------------


def _settings(tmp_path, url):
    return Settings.from_env(home=tmp_path / "home", database_url=url)


def _registry_rows(engine):
    with engine.connect() as conn:
        return conn.execute(select(model_registry)).mappings().all()


def test_train_ticker_end_to_end(db_url, tmp_path, two_years):
    engine = get_engine(db_url)
    ingest_frame(engine, two_years, "synthetic")
    settings = _settings(tmp_path, db_url)
    cfg = demo_cfg()
    as_of = dt.date(2023, 10, 31)
    out = train_ticker(engine, settings, "aapl", cfg, "demo", as_of=as_of)
    assert out.status == "trained", out.reason
    assert out.ticker == "AAPL" and out.epochs == 2 and out.device == "cpu"

    (row,) = _registry_rows(engine)
    assert row["id"] == out.model_id and row["status"] == "candidate" and row["ticker"] == "AAPL"
    assert row["profile"] == "demo" and row["arch_signature"] == cfg.signature
    assert json.loads(row["config_json"]) == cfg.to_dict()
    assert row["val_loss"] == pytest.approx(out.val_loss)
    # trained_on_date: the last date whose price any training or early-stopping row used. The last
    # validation sample (~21 sessions before as_of) has its one-month target on as_of itself, a session.
    s = _samples(two_years[pd_date_le(two_years, as_of)])
    labeled_dates = s.dates[s.labeled]
    assert row["trained_on_date"] == as_of == dt.date(2023, 10, 31)
    assert row["trained_on_date"] > dt.date.fromisoformat(str(labeled_dates.max()))

    path = settings.checkpoint_dir / "candidates" / "AAPL"
    files = list(path.iterdir())
    assert [str(f) for f in files] == [row["checkpoint_path"]] == [out.checkpoint_path]
    assert files[0].name.startswith(f"AAPL_{row['trained_on_date']}_{cfg.signature}_")
    assert sha256_file(files[0]) == row["checkpoint_sha256"]
    ckpt = load_checkpoint(files[0], expected_sha256=row["checkpoint_sha256"], ticker="AAPL")
    assert ckpt.trained_on_date == row["trained_on_date"] and ckpt.config == cfg
    assert ckpt.val_loss == pytest.approx(out.val_loss)
    with engine.connect() as conn:
        events = conn.execute(select(registry_events)).mappings().all()
    assert [(e["model_id"], e["to_status"]) for e in events] == [(out.model_id, "candidate")]


def pd_date_le(df, day):
    import pandas as pd

    return pd.to_datetime(df["date"]).dt.date <= day


def test_the_bigger_batch_recipe_turns_away_no_ticker_the_seed_recipe_trained(db_url, tmp_path, two_years):
    # 220 sessions: 130 labeled rows, 107 to train on after the purged split -- less than one of the
    # reference profile's 128-row batches, enough for the seed recipe's minimums (128 labeled, 32 to train).
    engine = get_engine(db_url)
    ingest_frame(engine, two_years[two_years.ticker == "AAPL"].head(220), "synthetic")
    cfg = get_profile("reference", hidden_size=8, head_hidden=4, max_epochs=1, amp="off")
    out = train_ticker(engine, _settings(tmp_path, db_url), "AAPL", cfg, "reference")
    assert out.status == "trained", out.reason


def test_too_little_history_is_skipped(db_url, tmp_path, two_years):
    engine = get_engine(db_url)
    ingest_frame(engine, two_years[two_years.ticker == "AAPL"].head(120), "synthetic")
    settings = _settings(tmp_path, db_url)
    out = train_ticker(engine, settings, "AAPL", demo_cfg(), "demo")
    assert out.status == "skipped" and "too little history" in out.reason
    missing = train_ticker(engine, settings, "NVDA", demo_cfg(), "demo")
    assert missing.status == "skipped" and "no prices" in missing.reason
    assert _registry_rows(engine) == []
    assert not (settings.checkpoint_dir / "candidates").exists()


def test_a_ticker_outside_the_universe_on_the_training_day_is_not_trained(db_url, tmp_path, two_years):
    """With a membership history, a ticker is trained only while it is a member on the training day
    (`as_of`, else the exchange's today): one that left is skipped with the reason, nothing written."""
    from ldtm_core.data.membership import Span, import_membership

    engine = get_engine(db_url)
    ingest_frame(engine, two_years[two_years.ticker.isin(["AAPL", "NVDA"])], "synthetic")
    left = dt.date(2023, 6, 30)
    import_membership(
        engine, [Span("AAPL", dt.date(2020, 1, 2)), Span("NVDA", dt.date(2020, 1, 2), left)], "t"
    )
    settings = _settings(tmp_path, db_url)
    gone = train_ticker(engine, settings, "NVDA", demo_cfg(max_epochs=1), "demo")
    assert gone.status == "skipped" and "was not a member of the universe on" in gone.reason
    assert f"..{left}" in gone.reason
    then = train_ticker(engine, settings, "NVDA", demo_cfg(max_epochs=1), "demo", as_of=dt.date(2023, 6, 1))
    assert then.status == "trained", then.reason  # a member on its training day
    assert [r.ticker for r in _registry_rows(engine)] == ["NVDA"]


def test_failure_leaves_no_file_and_no_row(sqlite_url, tmp_path, two_years, monkeypatch):
    engine = get_engine(sqlite_url)
    ingest_frame(engine, two_years[two_years.ticker == "AAPL"], "synthetic")
    settings = _settings(tmp_path, sqlite_url)

    def refuse(*a, **k):
        raise RuntimeError("registry unavailable")

    monkeypatch.setattr("ldtm_core.learning.registry.register_candidate", refuse)
    out = train_ticker(engine, settings, "AAPL", demo_cfg(), "demo")
    assert out.status == "failed" and "registry unavailable" in out.reason
    assert _registry_rows(engine) == []
    assert list((settings.checkpoint_dir / "candidates" / "AAPL").iterdir()) == []


def _insert_corrupt(engine, df, ticker):
    # Bypasses ingest validation on purpose: a stored zero close is what a broken source could leave.
    rows = df[df.ticker == "AAPL"].assign(ticker=ticker).copy()
    rows.loc[rows.index[200], "close"] = 0.0
    now = dt.datetime.now(dt.UTC)
    recs = [
        {
            **r,
            "date": r["date"] if isinstance(r["date"], dt.date) else r["date"].date(),
            "volume": int(r["volume"]),
            "source": "broken",
            "ingested_at": now,
        }
        for r in rows.to_dict("records")
    ]
    with engine.begin() as conn:
        conn.execute(insert(prices), recs)


def test_train_many_two_workers_one_failing(db_url, tmp_path, two_years):
    engine = get_engine(db_url)
    ingest_frame(engine, two_years[two_years.ticker.isin(["AAPL", "NVDA"])], "synthetic")
    _insert_corrupt(engine, two_years, "TSLA")
    settings = _settings(tmp_path, db_url)
    plan = SlotPlan(per_gpu=[], total=2, kind="cpu", reason="test")
    outs = train_many(
        settings, ["AAPL", "TSLA", "NVDA"], "demo", overrides={"max_epochs": 2}, plan=plan, max_workers=2
    )
    assert [o.ticker for o in outs] == ["AAPL", "TSLA", "NVDA"]
    assert [o.status for o in outs] == ["trained", "failed", "trained"]
    assert "TSLA" in outs[1].reason and "non-finite" in outs[1].reason
    rows = _registry_rows(engine)
    assert sorted(r["ticker"] for r in rows) == ["AAPL", "NVDA"]
    assert {r["id"] for r in rows} == {outs[0].model_id, outs[2].model_id}
    assert not (settings.checkpoint_dir / "candidates" / "TSLA").exists()
    for o in (outs[0], outs[2]):
        assert load_checkpoint(o.checkpoint_path, ticker=o.ticker).config.max_epochs == 2


def test_train_many_refuses_bad_overrides_before_work(tmp_path, sqlite_url):
    from ldtm_core.errors import InputError

    with pytest.raises(InputError, match="hidden_size"):
        train_many(_settings(tmp_path, sqlite_url), ["AAPL"], "demo", overrides={"hidden_size": 0})
    with pytest.raises(InputError, match="unknown profile"):
        train_many(_settings(tmp_path, sqlite_url), ["AAPL"], "tiny")


def test_worker_devices_follow_the_plan():
    from ldtm_core.learning.training_pool import worker_devices as _devices_for

    plan = SlotPlan(per_gpu=[(0, 9000, 2), (1, 5000, 1)], total=3, kind="cuda", reason="test")
    got = _devices_for(plan, 3)
    if torch.cuda.is_available():
        assert got == ["cuda:0", "cuda:1", "cuda:0"]
    else:  # NVML may see a GPU that a CPU-only torch build cannot use
        assert got == ["cpu"] * 3
    assert _devices_for(SlotPlan(total=2), 2) == ["cpu", "cpu"]


def test_warm_start_fine_tunes_the_active_model_only_when_the_architecture_matches(
    db_url, tmp_path, two_years
):
    from ldtm_core.learning.registry import promote

    engine = get_engine(db_url)
    ingest_frame(engine, two_years, "synthetic")
    settings = _settings(tmp_path, db_url)
    cfg = demo_cfg(max_epochs=1)
    first = train_ticker(engine, settings, "AAPL", cfg, "demo", as_of=dt.date(2023, 10, 31))
    promote(engine, first.model_id, "test", settings)
    warm = train_ticker(engine, settings, "AAPL", cfg, "demo", warm_start=True)
    cold = train_ticker(engine, settings, "AAPL", cfg, "demo", warm_start=False)
    other = train_ticker(
        engine, settings, "AAPL", demo_cfg(max_epochs=1, hidden_size=16), "demo", warm_start=True
    )
    assert all(o.status == "trained" for o in (warm, cold, other))
    meta = {
        name: load_checkpoint(o.checkpoint_path).metrics
        for name, o in (("w", warm), ("c", cold), ("o", other))
    }
    assert meta["w"]["warm_start_from"] == first.model_id
    assert meta["c"]["warm_start_from"] is None and meta["o"]["warm_start_from"] is None  # other architecture
    # Starting weights differ: the warm fit did not begin from the seeded initialisation.
    w, c = (load_checkpoint(o.checkpoint_path).model.state_dict() for o in (warm, cold))
    assert not all(torch.equal(w[k], c[k]) for k in w)
