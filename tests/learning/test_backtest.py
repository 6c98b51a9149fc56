"""Walk-forward backtest: fold geometry, the purge, counted leakage, scores against the prices."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from accountability_helpers import ingest, make_model, make_settings
from calendar_oracle import next_session
from sqlalchemy import select
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.errors import InputError, NotFoundError
from ldtm_core.learning import backtest as bt
from ldtm_core.learning import training_loop
from ldtm_core.learning.model import get_profile
from ldtm_core.schema import backtest_folds

CFG = get_profile("demo", max_epochs=2, patience=1)
REAL_FOLD_ROWS = bt.fold_rows


class AlwaysAbove(torch.nn.Module):
    """Predicts twice the window's close range above its minimum: always 'up' unless the window is flat."""

    def forward(self, x):
        return torch.full((x.shape[0], 3), 2.0)


@pytest.fixture
def stub_fit(monkeypatch):
    seen = []

    def fake_fit(train, val, cfg, device=None, threads=None, init_state=None):
        seen.append((train, val))
        return training_loop.FitResult(
            model=AlwaysAbove(),
            val_loss=0.0,
            epochs=1,
            best_epoch=1,
            duration_s=0,
            device="cpu",
            samples_per_s=0,
        )

    monkeypatch.setattr(training_loop, "fit", fake_fit)
    return seen


@pytest.fixture
def world(engine, db_url, tmp_path):
    s = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"], start="2022-01-03", end="2024-06-28")
    mid = make_model(engine, s, "AAPL", cfg=CFG)
    return s, df, mid


def test_folds_purge_and_scores(engine, world, stub_fit):
    s, df, mid = world
    res = bt.run_backtest(engine, s, "AAPL", CFG, folds=3, test_sessions=40)
    assert res.model_id == mid and len(res.folds) == 3 and res.leakage_rows == 0
    closes = df.set_index("date")["close"]
    dates = list(closes.index)
    for f, (train, val) in zip(res.folds, stub_fit, strict=True):
        # Purge: nothing used for fitting has a target after the cutoff.
        for part in (train, val):
            assert part.target_dates.max() <= np.datetime64(f.window.cutoff, "D")
        assert f.window.test_start == next_session(f.window.cutoff) and f.scores.n == 40
        # Scores recomputed from the prices alone: the stub always predicts up.
        i0 = dates.index(f.window.test_start)
        test_days = dates[i0 : i0 + 40]
        assert f.window.test_end == test_days[-1]
        up = [closes[dates[dates.index(d) + 1]] > closes[d] for d in test_days]
        assert f.scores.always_up_accuracy == pytest.approx(np.mean(up))
        assert f.scores.direction_accuracy == pytest.approx(np.mean(up))
        # A model that always says up never disagrees with always-up: no evidence either way.
        assert (f.scores.model_only_hits, f.scores.up_only_hits) == (0, 0)
    assert res.skill.discordant == 0 and res.skill.p_value == 1.0
    assert res.folds[0].window.cutoff < res.folds[1].window.cutoff < res.folds[2].window.cutoff
    # Calendar folds: cutoffs are the last sessions of quarters, each fold tests the next quarter's
    # first sessions; the data ends on 2024-06-28 (Q2 not complete: no next-day answer for its last
    # session), so the newest fold tests Q1 2024 and what follows it is covered live.
    assert [f.window.cutoff for f in res.folds] == [
        pd.Timestamp(d).date() for d in ("2023-06-30", "2023-09-29", "2023-12-29")
    ]
    assert res.live == (dates[dates.index(res.folds[2].window.test_end) + 1], dates[-1])
    with engine.connect() as conn:
        rows = pd.DataFrame(
            conn.execute(select(backtest_folds).order_by(backtest_folds.c.fold)).mappings().all()
        )
    assert rows["fold"].tolist() == [1, 2, 3] and set(rows["backtest_id"]) == {res.backtest_id}
    assert rows["model_id"].tolist() == [mid] * 3
    assert rows["direction_accuracy"].tolist() == pytest.approx(
        [f.scores.direction_accuracy for f in res.folds]
    )
    assert rows["leakage_rows"].tolist() == [0, 0, 0]
    assert rows["model_only_hits"].tolist() == [0, 0, 0] and rows["up_only_hits"].tolist() == [0, 0, 0]


def _plant_leak(monkeypatch, train_sessions: int = 0, test_rows: int = 0) -> None:
    """The test seam: widen the fitting pool past the cutoff, or start the test block before it."""
    real = REAL_FOLD_ROWS

    def leaky(samples, evaluable, labeled, start, block):
        test_idx, cutoff, pool = real(samples, evaluable, labeled, start, block)
        if test_rows:
            test_idx = evaluable[start - test_rows : start + block]
        if train_sessions:
            sessions = samples.dates
            pos = int(np.searchsorted(sessions, cutoff))
            allowed = sessions[min(len(sessions) - 1, pos + train_sessions)]
            pool = labeled[samples.target_dates[labeled].max(axis=1) <= allowed]
        return test_idx, cutoff, pool

    monkeypatch.setattr(bt, "fold_rows", leaky)


def test_leak_switches_are_not_in_the_public_signature():
    import inspect

    assert not [p for p in inspect.signature(bt.run_backtest).parameters if p.startswith("_")]


def test_a_planted_leak_is_counted(engine, world, stub_fit, monkeypatch):
    s, _, _ = world
    _plant_leak(monkeypatch, train_sessions=5)
    res = bt.run_backtest(engine, s, "AAPL", CFG, folds=2, test_sessions=30)
    # Five more sessions of targets past the cutoff were allowed into fitting: five rows per fold.
    assert [f.window.leakage_rows for f in res.folds] == [5, 5]
    for f, (train, val) in zip(res.folds, stub_fit[-2:], strict=True):
        used_late = sum(
            int((p.target_dates.max(axis=1) > np.datetime64(f.window.cutoff, "D")).sum())
            for p in (train, val)
        )
        assert used_late == 5
    _plant_leak(monkeypatch, test_rows=3)
    res2 = bt.run_backtest(engine, s, "AAPL", CFG, folds=2, test_sessions=30)
    assert [f.window.leakage_rows for f in res2.folds] == [3, 3]
    assert all(f.window.test_start <= f.window.cutoff for f in res2.folds)


def test_real_training_runs_and_bad_input(engine, world):
    s, _, mid = world
    torch.set_num_threads(1)
    res = bt.run_backtest(engine, s, "AAPL", None, folds=2, model_id=mid, test_sessions=20)
    assert len(res.folds) == 2 and res.leakage_rows == 0
    for f in res.folds:
        assert 0 <= f.scores.direction_accuracy <= 1 and 0 < f.scores.mean_abs_pct_error < 50
        assert f.window.n_train > 0 and f.window.n_val > 0
    with pytest.raises(InputError, match="cannot hold"):
        bt.run_backtest(engine, s, "AAPL", CFG, folds=50, test_sessions=40)
    with pytest.raises(InputError, match="folds"):
        bt.run_backtest(engine, s, "AAPL", CFG, folds=0)


def test_cli_backtest(engine, world, ldtm_env, stub_fit):
    out = CliRunner().invoke(app, ["backtest", "--ticker", "AAPL", "--folds", "2", "--test-sessions", "25"])
    assert out.exit_code == 0, out.output
    assert "leakage 0" in out.output
    assert "one-sided p = 1.000" in " ".join(out.output.split())  # the skill test beside the accuracy
    flat = " ".join(out.output.split())
    # Each baseline on the same rows, "beats" or not always with its exact p-value (issue 21).
    for label in ("always-up (", "persistence (", "trailing-21 majority ("):
        assert f"beat {label}" in flat or f"beats {label}" in flat, label
    assert flat.count("one-sided exact p = ") == 3
    bad = CliRunner().invoke(app, ["backtest", "--ticker", "ZZZZ"])
    assert bad.exit_code == 2


def test_backtest_before_any_training_is_refused_and_writes_no_folds(engine, db_url, tmp_path, stub_fit):
    """Issue 10: it used to write folds with model_id NULL, which no gate can ever use."""
    s = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL"], start="2022-01-03", end="2024-06-28")
    with pytest.raises(NotFoundError, match=r"AAPL has no candidate model to backtest: train first"):
        bt.run_backtest(engine, s, "AAPL", CFG, folds=2, test_sessions=25)
    assert stub_fit == []  # refused before any fold was trained
    with engine.connect() as conn:
        assert conn.execute(select(backtest_folds)).first() is None


def test_backtest_records_its_config_and_data_range_and_the_gate_checks_it(engine, world, stub_fit):
    from ldtm_core.accountability.gate.gate import GateThresholds, run_gate
    from ldtm_core.errors import InputError as GateRefused
    from ldtm_core.learning.registry import config_signature

    s, df, mid = world
    other = get_profile("demo", max_epochs=7, patience=1)  # what `--profile`/`--set` would pass
    foreign = bt.run_backtest(engine, s, "AAPL", other, folds=2, test_sessions=20)
    assert foreign.model_id == mid and foreign.config_signature == config_signature(other)
    with engine.connect() as conn:
        rows = conn.execute(select(backtest_folds)).mappings().all()
    assert {r["config_signature"] for r in rows} == {config_signature(other)}
    assert {(r["data_start"], r["data_end"]) for r in rows} == {(df["date"].min(), df["date"].max())}
    # 2 folds of 20 rows: the seed's bar, lowered, to judge the config check (the evidence policy's
    # first deployment would also require beating a coin beyond noise).
    easy = GateThresholds(min_direction_accuracy=0.0, max_mean_abs_pct_error=100.0, policy="seed")
    with pytest.raises(GateRefused, match="another config"):
        run_gate(engine, s, "AAPL", thresholds=easy)
    own = bt.run_backtest(engine, s, "AAPL", None, folds=2, test_sessions=20)
    assert own.config_signature == config_signature(CFG)
    report = run_gate(engine, s, "AAPL", thresholds=easy)
    assert report.backtest_id == own.backtest_id and report.passed
    assert (report.data_start, report.data_end) == (df["date"].min(), df["date"].max())


@pytest.fixture
def recording_fit(monkeypatch):
    """Real fits, with each fold's starting weights recorded."""
    starts = []
    real = training_loop.fit

    def spy(train, val, cfg, device=None, threads=None, init_state=None):
        res = real(train, val, cfg, device=device, threads=threads, init_state=init_state)
        starts.append((init_state, {k: v.clone() for k, v in res.model.state_dict().items()}))
        return res

    monkeypatch.setattr(training_loop, "fit", spy)
    return starts


def test_warm_folds_start_from_the_previous_fold_and_stay_leak_free(engine, world, recording_fit):
    s, _, _ = world
    torch.set_num_threads(1)
    res = bt.run_backtest(engine, s, "AAPL", CFG, folds=3, test_sessions=30, warm_start=True)
    assert [f.fit.warm_start for f in res.folds] == [False, True, True]
    assert recording_fit[0][0] is None  # fold 1 is always cold
    for (init, _), (_, prev_best) in zip(recording_fit[1:], recording_fit[:-1], strict=True):
        assert all(torch.equal(init[k], prev_best[k]) for k in prev_best)
    assert res.leakage_rows == 0 and [f.window.leakage_rows for f in res.folds] == [0, 0, 0]
    cold = bt.run_backtest(engine, s, "AAPL", CFG, folds=3, test_sessions=30, warm_start=False)
    assert [f.fit.warm_start for f in cold.folds] == [False, False, False] and cold.leakage_rows == 0


def _start_fold_one_from(monkeypatch, trained_through):
    """The test seam: fold 1 starts from weights trained on every labeled row up to `trained_through`."""

    def start(samples, labeled):
        seen = labeled[samples.dates[labeled] <= np.datetime64(trained_through, "D")]
        return {"w": torch.zeros(1)}, seen

    monkeypatch.setattr(bt, "fold_one_start", start)


def test_fold_one_starting_from_weights_that_saw_the_future_is_counted(engine, world, stub_fit, monkeypatch):
    s, df, _ = world
    _start_fold_one_from(monkeypatch, df["date"].max())
    res = bt.run_backtest(engine, s, "AAPL", CFG, folds=2, test_sessions=30)
    samples = bt.build_samples(df.drop(columns="ticker", errors="ignore"), CFG.window)
    # Every labeled row the starting weights saw whose targets lie past fold 1's cutoff is a leak.
    cutoff = np.datetime64(res.folds[0].window.cutoff, "D")
    labeled = samples.labeled
    expected = int((labeled & (samples.target_dates.max(axis=1) > cutoff)).sum())
    assert res.folds[0].window.leakage_rows == expected > 0
    # Weights trained only on rows whose targets end before fold 1's cutoff are not a leak.
    _start_fold_one_from(monkeypatch, res.folds[0].window.train_end - pd.Timedelta(days=60))
    clean = bt.run_backtest(engine, s, "AAPL", CFG, folds=2, test_sessions=30)
    assert clean.folds[0].window.leakage_rows == 0


def test_fold_one_starts_cold_by_default(engine, world, recording_fit):
    s, _, _ = world
    bt.run_backtest(engine, s, "AAPL", CFG, folds=2, test_sessions=30, warm_start=True)
    assert recording_fit[0][0] is None  # not the active model, not anything else


def test_backtest_many_runs_each_candidate_in_its_own_worker_process(engine, db_url, tmp_path):
    """The weekly loop's backtests run within the slot plan like training: one single-threaded worker
    per slot, outcomes in the order asked, a ticker without a candidate or with too little history
    reported as such while the others are backtested."""
    from ldtm_core.accountability.gate.backtest_pool import backtest_many
    from ldtm_core.learning.gpu_slots import SlotPlan

    s = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL", "NVDA", "TSLA"], start="2022-01-03", end="2024-06-28")
    ingest(engine, ["QQQ"], start="2024-05-01", end="2024-06-28")
    ids = {t: make_model(engine, s, t, cfg=CFG) for t in ("AAPL", "NVDA", "QQQ")}
    finished = []
    outcomes = backtest_many(
        s, ["NVDA", "TSLA", "QQQ", "AAPL"], folds=2, plan=SlotPlan(total=2), on_outcome=finished.append
    )
    assert [o.ticker for o in outcomes] == ["NVDA", "TSLA", "QQQ", "AAPL"]
    assert [o.status for o in outcomes] == ["ok", "no candidate", "failed", "ok"]
    assert sorted(o.ticker for o in finished) == ["AAPL", "NVDA", "QQQ", "TSLA"]
    assert "QQQ" in outcomes[2].reason and "cannot hold 2 folds" in outcomes[2].reason
    with engine.connect() as conn:
        rows = conn.execute(select(backtest_folds.c.ticker, backtest_folds.c.model_id)).all()
    assert sorted(rows) == sorted([("AAPL", ids["AAPL"])] * 2 + [("NVDA", ids["NVDA"])] * 2)
    for o in (outcomes[0], outcomes[3]):
        assert o.result.model_id == ids[o.ticker] and len(o.result.folds) == 2
        assert o.result.leakage_rows == 0 and o.row()["n"] == o.result.n > 0


def test_cli_backtest_many_tickers(engine, world, ldtm_env, stub_fit):
    out = CliRunner().invoke(app, ["backtest", "--tickers", "AAPL", "--folds", "2"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "1 ok, 0 no candidate, 0 failed; leakage rows 0" in text
    assert len(stub_fit) == 2  # two folds trained
    both = CliRunner().invoke(app, ["backtest", "--ticker", "AAPL", "--tickers", "AAPL"])
    assert both.exit_code == 2 and "exactly one of --ticker" in both.output
    single_only = CliRunner().invoke(app, ["backtest", "--tickers", "AAPL", "--model-id", "1"])
    assert single_only.exit_code == 2 and "go with --ticker" in single_only.output


def test_cli_backtest_many_prints_a_q_value_over_the_tickers_beside_each_p(engine, world, ldtm_env, stub_fit):
    """Read across the universe, per-ticker p-values are a family: each row's Benjamini-Hochberg q over
    every ticker backtested is printed beside its p (and the family named)."""
    from ldtm_core.accountability.gate.backtest_pool import backtest_q_values
    from ldtm_core.scoring.board_stats import bh_qvalues

    s, _, _ = world
    ingest(engine, ["NVDA", "TSLA"], start="2022-01-03", end="2024-06-28")
    for t in ("NVDA", "TSLA"):
        make_model(engine, s, t, cfg=CFG)
    out = CliRunner().invoke(app, ["backtest", "--tickers", "AAPL,NVDA,TSLA", "--folds", "2"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "q (BH over 3)" in text
    from ldtm_core.accountability.gate.backtest_pool import BacktestOutcome

    fake = [
        BacktestOutcome("A", "ok", result=type("R", (), {"skill": type("S", (), {"p_value": 0.01})()})()),
        BacktestOutcome("B", "ok", result=type("R", (), {"skill": type("S", (), {"p_value": 0.04})()})()),
        BacktestOutcome("C", "ok", result=type("R", (), {"skill": None})()),
        BacktestOutcome("D", "no candidate"),
        BacktestOutcome("E", "ok", result=type("R", (), {"skill": type("S", (), {"p_value": 0.30})()})()),
    ]
    q = backtest_q_values(fake)
    assert list(q) == ["A", "B", "E"]
    assert [q[t] for t in ("A", "B", "E")] == pytest.approx(list(bh_qvalues([0.01, 0.04, 0.30])))


def test_backtest_scores_persistence_and_the_trailing_majority_on_its_rows(engine, world, stub_fit):
    """Issue 21: every fold stores persistence and the no-hindsight trailing majority on the same rows."""
    from ldtm_core.accountability.gate.gate import with_fold_baselines
    from ldtm_core.scoring import baselines

    s, df, _ = world
    res = bt.run_backtest(engine, s, "AAPL", CFG, folds=2, test_sessions=20)
    with engine.connect() as conn:  # each fold with its backtest_fold_baselines rows, as the gate reads them
        rows = with_fold_baselines(
            conn,
            [
                dict(r)
                for r in conn.execute(select(backtest_folds).order_by(backtest_folds.c.fold)).mappings()
            ],
        )
    for row in rows:  # revision 0031: the baselines are rows of their own table, no longer columns
        assert row["trend_hits"] is None and set(row["baselines"]) == {"persistence", "trend"}
        row["trend_hits"] = row["baselines"]["trend"]["hits"]
        row["persistence_only"] = row["baselines"]["persistence"]["base_only"]
    closes = df.set_index("date")["close"]
    dates = list(closes.index)
    for f, row in zip(res.folds, rows, strict=True):
        assert row["trend_hits"] == f.scores.baselines["trend"].hits and row["persistence_only"] is not None
        # Recomputed by hand from the price column: the trend of each test row's last 21 moves.
        test = [d for d in dates if f.window.test_start <= d <= f.window.test_end]
        ups = 0
        for d in test:
            i = dates.index(d)
            moves = np.sign(np.diff(closes.iloc[max(0, i - baselines.TREND_SESSIONS) : i + 1].to_numpy()))
            said = -1 if moves.sum() < 0 else 1
            ups += int(np.sign(closes.iloc[i + 1] - closes.iloc[i]) == said)
        assert row["trend_hits"] == ups
        # Hits minus baseline hits = model-only minus baseline-only rows, for every baseline.
        for name in ("always_up", "persistence", "trend"):
            b = f.scores.baselines[name]
            assert f.scores.hits - b.hits == b.model_only - b.base_only, name
    pooled = baselines.pooled(rows)
    assert pooled["trend"].hits == sum(r["trend_hits"] for r in rows)
    assert pooled["always_up"].hits == sum(f.scores.up_hits for f in res.folds)
