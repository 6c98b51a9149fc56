"""Smoke runs of every benchmark in benchmarks/ at tiny sizes on SQLite, so none can rot unnoticed.

Each test calls the benchmark's own `main()` with the smallest arguments it accepts and checks that it
ran to the end and printed its figures (no timing is asserted: the figures are whatever the box gives).
The modules are loaded from their files under their own names with benchmarks/ on sys.path, so the
ones that spawn worker processes (recipe) can be unpickled there.
"""

from __future__ import annotations

import importlib.util
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sqlalchemy import create_engine, make_url, text

from ldtm_core.data.ingest import ingest_frame
from ldtm_core.data.synthetic_market import generate
from ldtm_core.db import get_engine
from ldtm_core.migrate import upgrade

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
NUMBER = r"[\d,]+(?:\.\d+)?"


def _module(name: str, as_name: str):
    """benchmarks/<name>.py loaded as a module named `as_name`, for calling its functions directly."""
    spec = importlib.util.spec_from_file_location(as_name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bench(monkeypatch, capsys):
    """bench(name, *argv) -> what main() printed; main() must return None or 0."""
    threads = torch.get_num_threads()
    monkeypatch.syspath_prepend(str(BENCH))

    def run(name: str, *argv: str) -> str:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        monkeypatch.setattr(sys, "argv", [f"{name}.py", *argv])
        rc = module.main()
        out = capsys.readouterr().out
        assert rc in (None, 0), out[-2000:]
        return out

    yield run
    torch.set_num_threads(threads)  # some benchmarks pin one thread for their run
    get_engine.cache_clear()


def test_accountability(bench):
    out = bench("accountability", "sqlite://", "--tickers", "2", "--repeat", "1", "--per-ticker", "3")
    assert "setup: 2 tickers" in out
    assert re.search(rf"batched, cold models\s+{NUMBER} ms", out)
    assert re.search(rf"per-ticker seed style\s+{NUMBER} ms", out)
    assert "fillback of 6 pending rows x 3 horizons (2 x 3" in out
    assert re.search(rf"\(a\) batched fillback\s+{NUMBER} ms", out)
    assert re.search(r"rerun \(nothing pending\)\s+\d+ ms\s+filled 0", out)


def test_receipts(bench):
    out = bench("receipts", "sqlite://", "--sizes", "3,5", "--evenings", "2")
    for n in (3, 5):
        assert re.search(rf"^\| {n} \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER}x \|$", out, re.M), out


def test_features(bench, tmp_path):
    url = f"sqlite:///{tmp_path / 'features.db'}"
    engine = upgrade(url)
    df = generate(["AAPL", "MSFT"], "2024-01-02", "2025-06-30", seed=1)
    ingest_frame(engine, df, "synthetic")
    out = bench("features", "--database-url", url, "--repeat", "1")
    assert f"{len(df)} price rows" in out
    assert re.search(r"feature rows: \d+ \(2 tickers\)", out)
    for line in ("table   first build", "parquet build", "no-op rebuild", "CPU ratio table first build"):
        assert line in out
    assert "inference window check + read, 2 tickers" in out


def test_ingest(bench, tmp_path):
    out = bench(
        "ingest",
        "--database-url",
        f"sqlite:///{tmp_path / 'ingest.db'}",
        "--tickers",
        "2",
        "--start",
        "2026-06-01",
        "--baseline-tickers",
        "1",
        "--repeats",
        "1",
    )
    assert "written counts as expected" in out  # 0 on the re-ingest, 20 per ticker on the newer file
    assert "first ingest" in out and "build_samples" in out


def test_levers(bench):
    from ldtm_core.learning.precision import cpu_can_run_bf16

    if not cpu_can_run_bf16():
        pytest.skip("levers.py compares bf16 with fp32; this CPU has no bf16 kernels in oneDNN (AVX2 only)")
    out = bench(
        "levers",
        *("--tickers", "1", "--years", "2", "--max-epochs", "1", "--folds", "2", "--profile", "demo"),
        *("--speed-samples", "128", "--speed-batches", "8", "--speed-rounds", "1"),
    )
    assert re.search(rf"\| 8 \| {NUMBER} \| {NUMBER} \| {NUMBER}x \|", out)
    assert "## quality: bf16 vs fp32" in out and "## warm vs cold" in out
    assert re.search(r"\| all \| [\d.]+ \| [\d.]+ \| [\d.]+/[\d.]+ \([\d.]+x\)", out)  # the backtest summary


def test_levers_without_bf16_kernels_still_compares_warm_and_cold(bench, monkeypatch):
    """An AVX2-only CPU (no oneDNN bf16): the fp32 warm-vs-cold study runs; --speed-only says why not."""
    import ldtm_core.learning.precision as precision

    monkeypatch.setattr(precision, "cpu_can_run_bf16", lambda: False)
    out = bench(
        "levers",
        *("--tickers", "1", "--years", "2", "--max-epochs", "1", "--folds", "2", "--profile", "demo"),
    )
    assert "the speed and quality comparisons are skipped" in out
    assert "## speed" not in out and "## quality" not in out
    assert "## warm vs cold (fp32, as amp=auto picks on this CPU)" in out
    assert re.search(r"\| all \| [\d.]+ \| [\d.]+ \| [\d.]+/[\d.]+ \([\d.]+x\)", out)  # the backtest summary
    with pytest.raises(
        SystemExit, match="--speed-only compares bf16 with fp32, and this CPU .* no bf16 kernels"
    ):
        bench("levers", "--speed-only")


def test_recipe(bench):
    out = bench(
        "recipe",
        *("--tickers", "1", "--years", "2", "--patience", "1", "--folds", "2", "--workers", "1"),
        *("--variant", "a=max_epochs:2,hidden_size:8", "--variant", "b=max_epochs:2,hidden_size:8,amp:off"),
    )
    assert re.search(r"wall \d+ s for 1 tickers", out)
    assert re.search(r"^\| a \| \d+ \|", out, re.M) and re.search(r"^\| b \| 1 \|", out, re.M)


def test_recipe_fits_only(bench):
    out = bench(
        "recipe",
        *("--tickers", "1", "--years", "2", "--patience", "1", "--folds", "0", "--workers", "1"),
        *("--variant", "a=max_epochs:2,hidden_size:8"),
    )
    assert "one candidate fit + 0 folds each" in out
    assert re.search(r"^\| a \| \d+ \| .* \| — \| \+0 \| 0 \|$", out, re.M)


def test_stopping_rules_read_off_recorded_curves(bench, tmp_path):
    curves = tmp_path / "curves.json"
    bench(
        "recipe",
        *("--tickers", "2", "--years", "2", "--patience", "1,2", "--folds", "0", "--workers", "1"),
        *(
            "--variant",
            "a=max_epochs:3,hidden_size:8",
            "--variant",
            "b=max_epochs:6,hidden_size:8,patience:3",
        ),
        *("--json", str(curves)),
    )
    module = _module("stopping", "stopping_rules")
    # With min_delta 0 the offline rule is the trainer's: it stops where recipe.py's hook said.
    for r in json.loads(curves.read_text())["results"]:
        own = r["variants"]["b"]["3"]
        for p in ("1", "2"):
            epochs, _, loss = r["variants"]["b"][p]["candidate"]
            assert module.stop(own["curve"], int(p), 0.0) == (epochs, pytest.approx(loss))
    out = bench("stopping", str(curves), "--baseline", "a", "--recipe", "b", "--speed", "0")
    assert re.search(rf"^\| 3 \| 0 \| {NUMBER}x \| [+-]{NUMBER} % \|", out, re.M)
    assert "chosen on the even tickers" in out and "| odd (confirm): " in out


def test_stopping_rule_counts_only_real_progress():
    stopping = _module("stopping", "stopping_rule")
    curve = [1.0, 0.9, 0.8999, 0.8998, 0.8997, 0.85]
    assert stopping.stop(curve, 3, 0.0) == (6, 0.85)  # every small gain resets the count
    # 0.1 %: the three creeping epochs are no progress, so it stops at epoch 5 keeping its best, 0.8997
    assert stopping.stop(curve, 3, 0.001) == (5, 0.8997)
    assert stopping.stop([1.0, 1.1, 1.2], 2, 0.0) == (3, 1.0)


def test_recipe_variants_are_typed_like_train_set():
    recipe = _module("recipe", "recipe_parse")
    # A bool field written 0 is False (it was bool("0") == True), as `ldtm train --set fast_dropout=0`.
    name, overrides = recipe.parse_variant("old=fast_dropout:0,batch_size:32,lr:0.001,warm_folds:1")
    assert (name, overrides) == (
        "old",
        {"fast_dropout": False, "batch_size": 32, "lr": 0.001, "warm_folds": True},
    )
    with pytest.raises(SystemExit, match="nope"):
        recipe.parse_variant("x=nope:1")


def test_tuning(bench):
    out = bench(
        "tuning",
        *("--tickers", "AAPL", "--start", "2023-06-01", "--end", "2025-06-30", "--trials", "1"),
        *("--folds", "2", "--profile", "demo", "--set", "max_epochs=1", "--set", "window=20"),
        *("--set", "hidden_size=8", "--set", "num_layers=1", "--set", "batch_size=128"),
    )
    assert "AAPL: study" in out and "(held out)" in out
    assert re.search(r"^pooled\s+reference\s+\d+", out, re.M) and re.search(
        r"^pooled\s+tuned\s+\d+", out, re.M
    )


def test_weekly(bench):
    out = bench(
        "weekly",
        *("--tickers", "1", "--years", "2", "--profile", "demo", "--max-epochs", "1", "--folds", "2"),
    )
    assert "train: " in out and "1/1 trained" in out
    assert re.search(r"backtest: [\d.]+ s wall for 1/1 tickers x 2 folds", out)
    assert "leakage 0" in out
    assert re.search(r"weekly loop \(week 1\): [\d.]+ s = train", out)


def test_weekly_next_week_reuses_the_folds_that_did_not_move(bench):
    """--weeks 2: 5 sessions appended inside the same quarter; the second backtest refits nothing."""
    out = bench(
        "weekly",
        *("--tickers", "1", "--years", "2", "--profile", "demo", "--max-epochs", "1", "--folds", "2"),
        *("--weeks", "2", "--end", "2026-11-24"),
    )
    reuse = re.findall(r"folds reused (\d+), refit (\d+)", out)
    assert reuse == [("0", "2"), ("2", "0")], out
    assert re.search(r"week 2: ingest 2026-11-18\.\.2026-11-24", out)


def test_weekly_says_why_when_no_ticker_can_be_backtested(bench):
    """Too few quarters for the folds: one line naming the ticker and the reason (was a StatisticsError)."""
    with pytest.raises(
        SystemExit, match=r"week 1: no ticker could be backtested; AAPL: .*cannot hold 3 folds"
    ):
        bench("weekly", *("--tickers", "1", "--years", "1", "--profile", "demo", "--max-epochs", "1"))


def test_weekly_stopped_with_sigterm_drops_its_server_database(pg_server_url):
    """A weekly run stopped from outside (kill, a CI timeout) leaves no `ldtm_weekly_<pid>` behind."""
    admin = create_engine(make_url(pg_server_url), isolation_level="AUTOCOMMIT")
    argv = ["--tickers", "1", "--years", "4", "--profile", "demo", "--weeks", "30", "--url", pg_server_url]
    run = subprocess.Popen(
        [sys.executable, str(BENCH / "weekly.py"), *argv], stdout=subprocess.PIPE, text=True
    )
    name = f"ldtm_weekly_{run.pid}"

    def exists() -> bool:
        with admin.connect() as conn:
            return bool(
                conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first()
            )

    try:
        # Stopped once it is inside its first week's work (it has said so), not after a fixed delay: a
        # fast host once finished, or the run ended, before a delayed signal came.
        seen = []
        while not any(line.startswith("week 1: ingest") for line in seen):
            line = run.stdout.readline()
            assert line, f"the run ended before its first week's work: {''.join(seen)[-2000:]}"
            seen.append(line)
        assert exists(), f"{name} was not created before the run's first week"
        run.send_signal(signal.SIGTERM)
        out, _ = run.communicate(timeout=120)
        assert run.returncode != 0, out[-2000:]
        assert not exists(), f"{name} left behind by a stopped run"
    finally:
        run.kill()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_gate_policies(bench):
    """Two weekly retrains of one synthetic ticker through both gates (and arch's S&P 500 when installed)."""
    real = ("--real", "sp500") if importlib.util.find_spec("arch") else ()
    out = bench(
        "gate_policies",
        *("--tickers", "1", "--weeks", "2", "--years", "2", "--max-epochs", "1", *real),
    )
    assert "2 weekly retrains" in out
    for policy in ("seed", "evidence"):
        # retrains | promoted | failed | insufficient evidence | other decisions | errors: with this
        # gate (no decision but those three) a retrain is promoted, failed, insufficient or an error
        rows = re.findall(
            rf"^\| {policy} \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| ([^|]+) \| (\d+) \|", out, re.M
        )
        assert len(rows) == (2 if real else 1), out
        for retrains, promoted, failed, insufficient, other, errors in rows:
            assert other.strip() == "0", out
            assert int(retrains) == 2 == int(promoted) + int(failed) + int(insufficient) + int(errors)
        assert f"{policy}: in-sample rows among the served ones: 0" in out
    # 2 x 5 evenings served (by the champion or the ungated candidate), every one filled back
    assert re.search(r"\| [\d.]+% \[[\d.]+, [\d.]+\] \(n=10\) \| [\d.]+% \|$", out, re.M), out


def test_gate_policies_without_arch(bench, monkeypatch):
    # The board imports arch.bootstrap (a runtime dependency) when the benchmark imports it; import it
    # first, so the test does not depend on another test having done so in this worker.
    import ldtm_core.accountability.board.leaderboard  # noqa: F401

    monkeypatch.setitem(sys.modules, "arch", None)  # import arch -> ImportError, as when not installed
    with pytest.raises(SystemExit, match=r"--real needs the PyPI package `arch`.*pip install"):
        bench("gate_policies", "--tickers", "0", "--weeks", "1", "--real", "sp500")


def test_lr_schedule(bench):
    out = bench(
        "lr_schedule",
        *("--tickers", "1", "--years", "2", "--seeds", "0,1", "--folds", "2", "--workers", "1"),
        *("--set", "max_epochs:2", "--set", "hidden_size:8"),
    )
    assert "2 folds (cold)" in out and "anneals over 2 epochs" in out
    for name in ("cosine", "cosine_expected", "plateau"):
        assert re.search(rf"^\| {name} \| \d+ \| \d+ \| \d+ \| {NUMBER} \| {NUMBER}x \|", out, re.M)
    assert re.search(r"noise band \(cosine across seeds \[0, 1\]\): val loss [\d.]+ %", out)


@pytest.mark.slow
def test_null_universe(bench):
    """--quick: every figure of the issue-27 table is printed, through the project's own functions; `--also`
    prints the other nulls' tables after it (here the record's labels read every evening)."""
    out = bench("null_universe", "--quick", "--also", "record")
    assert "machine: " in out and "| case | figure | before | after |" in out
    record = out.split("## record: benchmarks/record_null.py --quick", 1)[1]
    assert "| market (no model has skill) |" in record and "| turning 50 to 40 |" in record
    assert "| planted lone edge (flat market, right ...) |" in record
    with pytest.raises(SystemExit):
        bench("null_universe", "--quick", "--also", "record,nonsense")
    figures = re.findall(r"^\| ([ab]) \| (.+?) \| (.+?) \| \|$", out, re.M)
    names = [f for _, f, _ in figures]
    for wanted in (
        "board: evenings with any null 'beats'",
        "board: null tickers ever shown 'beats' in the year",
        "gate: false first deployments per judgement",
        "gate: null tickers first-deployed within the year",
        "gate: false recipe promotions, k = 20 tries on the same folds",
        "shadow (default design: ",
        "board power: 56% tickers shown 'beats' per evening",
        "gate power: 56% tickers pass a first deployment, per judgement",
    ):
        assert any(n.startswith(wanted) for n in names), out
    assert any(n.startswith("gate: equal refresh refused") for n in names)
    assert sum(n.startswith("decay 55% → 45% mid-year") for n in names) == 2
    assert all(re.fullmatch(rf"{NUMBER} %|{NUMBER}|\d+ of \d+", v) for _, _, v in figures), figures


def test_hac_size(bench):
    """--quick: the size table through the project's tests, "short" where no p-value is printed."""
    out = bench("hac_size", "--quick")
    rows = re.findall(r"^\|\s+(60|190|750) \| (\w+)\s+\|", out, re.M)
    assert len(rows) == 18, out
    assert re.search(r"\|\s+60 \| one_month .*short", out) and "The gate's |error| test" in out


def test_sharpe_null(bench):
    """--quick: both tables through the report's own functions, every cell a share."""
    out = bench("sharpe_null", "--quick")
    rows = re.findall(r"^\| (no skill|edge)[^|]*\|.*$", out, re.M)
    assert len(rows) == 12, out
    assert "P(SR > bench)" in out and re.search(rf"{NUMBER} s on ", out)


def test_signals(bench):
    out = bench(
        "signals", "sqlite://", "--tickers", "3", "--years", "0.3", "--repeat", "1", "--figures", "1",
        "--figure-years", "0.3",
    )  # fmt: skip
    assert re.search(r"nightly signal_performance: 3 tickers x \d+ evenings", out)
    assert re.search(rf"wall \(median of 1\)\s+{NUMBER} ms", out)
    assert "no skill" in out and "planted 0.05" in out


def test_scale(bench):
    out = bench("scale", "--quick", "--url", "sqlite://")
    assert "6 tickers: prices" in out
    for step in (
        "fillback",
        "ingest",
        "features",
        "predict",
        "board",
        "audit full",
        "audit nightly",
        "decay (per 100 tickers)",
    ):
        assert re.search(rf"\| {re.escape(step)} \| {NUMBER} s \|", out), step
    assert "| exp. tickers | exp. years |" in out


def test_batched_forward(bench):
    out = bench("batched_forward", "--models", "3", "--repeat", "1", "--profiles", "demo")
    assert "3 models, median of 1" in out
    assert re.search(rf"\| demo \| batched \| {NUMBER} \| 1\.00x \|", out)
    assert re.search(rf"\| demo \| func_loop \| {NUMBER} \| {NUMBER}x \| ", out)
    assert "| demo | func_vmap |" in out


def test_survivorship(bench):
    """--quick: today's list applied backwards overstates the equal-weight benchmark; the dated universe,
    read through the report's own benchmark functions, gives the truth."""
    out = bench("survivorship", "--quick")
    assert "| seed | rule | removed | truth | today's list | dated | bias today's list | bias dated |" in out
    assert int(re.search(r"^\| 0 \| next_close \| (\d+) \|", out, re.M).group(1)) > 0  # the index changed
    bias = r"([+-][\d.]+) pp / ([+-][\d.]+)"
    means = re.findall(rf"^\| mean \| (next_close|same_close) \|.*\| {bias} \| {bias} \|$", out, re.M)
    assert [m[0] for m in means] == ["next_close", "same_close"], out
    for _, today_return, today_sharpe, dated_return, dated_sharpe in means:
        assert abs(float(dated_return)) < 0.001 and abs(float(dated_sharpe)) < 0.001
        assert float(today_return) > 0.5 and float(today_sharpe) > 0.02  # biased upward
    assert float(re.search(r"largest per-evening \|dated - truth\|: (\S+)", out).group(1)) < 1e-12


def test_edge_lag(bench):
    """--quick: through the report's own functions, an edge only at the evening's close is gone under
    next_close, a persistent one survives it, and next_open keeps the close-only edge's intraday part."""
    out = bench("edge_lag", "--quick")
    assert "| case | rule | Sharpe gross | Sharpe net | turnover | held IC | forecast IC |" in out
    row = r"^\| {} \| {}[^|]* \| ([+-][\d.]+) \| ([+-][\d.]+) \| ([\d.]+) \| ([+-][\d.]+) \| ([+-][\d.]+) \|$"
    got = {}
    for case in ("no skill", "close only", "persistent"):
        for rule in ("same_close", "next_close", "next_open"):
            m = re.search(row.format(case, rule), out, re.M)
            assert m, (case, rule, out)
            keys = ("gross", "net", "turnover", "held", "ic")
            got[(case, rule)] = dict(zip(keys, map(float, m.groups()), strict=True))
    for rule in ("same_close", "next_close", "next_open"):
        assert abs(got[("no skill", rule)]["held"]) < 0.025 and abs(got[("no skill", rule)]["gross"]) < 2.5
        assert got[("no skill", rule)]["net"] < got[("no skill", rule)]["gross"]  # the cost of ~1.2 turnover
    same, lagged, opened = (got[("close only", r)] for r in ("same_close", "next_close", "next_open"))
    assert same["gross"] > lagged["gross"] + 2.5 and abs(lagged["gross"]) < 1.5, (same, lagged)
    assert lagged["ic"] > 0.03 and abs(lagged["held"]) < 0.015  # the forecast is right; the book is late
    assert 0.01 < opened["held"] < same["held"]  # next_open keeps the session's part, not the gap's
    kept = got[("persistent", "next_close")]
    assert kept["gross"] > 1.5 and kept["held"] > 0.02, kept
    assert re.search(r"\d+ s on ", out)


def test_decay_null(bench):
    """A tiny run: the gated models' backtest figure overstates their true 55 %, the shrunk promise does
    not, and the table has a row per promise."""
    out = bench("decay_null", "--reps", "400", "--years", "1", "--after", "1", "--trials", "1")
    assert "| trials | promise | passers | mean promised accuracy |" in out
    got = dict(re.findall(rf"^\| 1 \| (backtest|shrunk|truth) \| \d+ \| ({NUMBER}) % \|", out, re.M))
    assert set(got) == {"backtest", "shrunk", "truth"}, out
    assert float(got["backtest"]) > 57 and float(got["shrunk"]) <= 55 and float(got["truth"]) == 55.0
    assert re.search(r"\d+ s on ", out)


def test_record_null(bench):
    """--quick: read every evening, the record's labels stay off coin-flip boards in every market while
    the window's old rule labels them; the planted-edge table has a row per edge."""
    out = bench("record_null", "--quick")
    pct = r"([\d.]+) %"
    for market in ("flat", "rising", "falling", "turning 56 to 44", "turning 50 to 40"):
        m = re.search(rf"^\| {market} \| " + r" \| ".join([pct] * 8) + r" \|$", out, re.M)
        assert m, (market, out)
        record_any, record_ever, yes_evening, yes_ever, old_any, old_ever, beats_any, beats_ever = map(
            float, m.groups()
        )
        assert record_ever <= 15 and yes_ever <= 15 and beats_ever <= 15, (market, m.groups())
    assert re.search(r"^\| 70% \| [\d,]+ \| [\d.]+ % \|$", out, re.M), out
    assert re.search(r"^\d+ s$", out, re.M)


def test_psi_null(bench):
    """--quick: old and new drift flag on unchanged and planted tickers, through `drift.feature_drift`."""
    out = bench("psi_null", "--quick")
    assert "| kind | case | tickers | old rule: ticker flagged | new rule: ticker flagged |" in out
    rows = re.findall(
        rf"^\| (null|planted) \| ([^|]+) \| 8 \| {NUMBER} % ± {NUMBER} \| ({NUMBER}) % ± {NUMBER} \|",
        out,
        re.M,
    )
    assert [k for k, _, _ in rows] == ["null", "null", "planted", "planted"], out
    assert all(float(share) <= 50 for kind, _, share in rows if kind == "null")
    assert re.search(rf"feature_drift: {NUMBER} ms per ticker", out) and re.search(r"\d+ s on ", out)


@pytest.mark.slow
def test_recipes(bench, tmp_path, capsys):
    """--quick: a row per recipe variant with numbers in every cell, the SYNEDGE columns; then two
    tickers' CSVs through --csv-dir, and a CSV with a bad row refused naming its file and line."""
    out = bench("recipes", "--quick")
    assert "| recipe | fit s (all tickers) | predict ms (1 evening) | fit memory MiB | rows |" in out
    assert "| SYNEDGE direction | SYNEDGE always-up | SYNEDGE p vs always-up |" in out
    p = r"(?:< )?[\d.]+"  # format_p_value: "0.040" or "< 0.001"
    ic = r"-?[\d.]+ \((?:-?[\d.]+|–)\)"  # mean IC (t), "–" when too short to test
    # fit s, predict ms, memory, rows, direction, always-up, coin, p vs always-up, p vs coin
    row = rf"({NUMBER}) \| ({NUMBER}) \| ({NUMBER}) \| ({NUMBER}) \| ([\d.]+) % \| ([\d.]+) % \| 50.0 % \| {p} \| {p} \| "
    synedge = rf"[\d.]+ % \| [\d.]+ % \| {p}"
    # The next-day call at the signal report's default execution (next_close): mean IC (t; ICIR).
    ic_ir = r"-?[\d.]+ \((?:-?[\d.]+|–); -?[\d.]+\)"
    assert "IC 1d at next_close (t; ICIR)" in out and "IC at next_close: the next-day call scored" in out
    # The gate's universe figures against the per-ticker LSTM: difference (one-sided p; detectable).
    verdict = rf"(?:reference|[-+][\d.]+ pts \((?:p {p}; detects [\d.]+|–)\))"
    labels = (
        "lstm, per ticker",
        "global_lstm",
        "ridge, global",
        "ridge, per ticker",
        "lightgbm, global (50 trees)",
        "lightgbm, per ticker (20 trees)",
        "ridge_market, global",
        "lightgbm_market, global (50 trees)",
    )
    scored = set()
    for label in labels:
        line = (
            rf"^\| {re.escape(label)} \| {row}{ic} \| {ic} \| {ic} \| {ic_ir} \| ({verdict}) \| {synedge} \|$"
        )
        m = re.search(line, out, re.M)
        assert m, (label, out)
        scored.add(int(m.group(4).replace(",", "")))
        assert (m.group(7) == "reference") == (label == "lstm, per ticker")
    # The planted families, each a row per recipe: lagged_factor is the market recipes' to find.
    assert "| lagged_factor: next-day direction | lagged_factor: IC 1d (t) |" in out
    assert len(scored) == 1 and scored.pop() > 1000, out  # every variant on the same rows
    assert re.search(r"^per ticker: \d+ ticker-folds fitted, \d+ skipped", out, re.M), out
    assert re.search(r"\d+ s on ", out)

    bars = generate(["AAA", "BBB"], "2023-01-02", "2025-12-31", seed=3)
    for ticker, frame in bars.groupby("ticker"):
        frame.drop(columns=["ticker", "adj_close"]).to_csv(tmp_path / f"{ticker.lower()}.csv", index=False)
    out = bench("recipes", "--quick", "--csv-dir", str(tmp_path))
    assert "CSV bars from" in out and "2 tickers" in out, out
    assert re.search(rf"^\| ridge, per ticker \| {row}", out, re.M), out
    assert "SYNEDGE: 0 rows (not in this data)" in out
    assert "market recipes left out: the market QQQ is not in this data (--market)" in out

    bad = tmp_path / "ccc.csv"
    text = (tmp_path / "aaa.csv").read_text().splitlines()
    fields = text[5].split(",")  # the 5th data row: line 6
    fields[4] = "n/a"  # its close
    text[5] = ",".join(fields)
    bad.write_text("\n".join(text) + "\n")
    module = sys.modules["recipes"]  # as `bench` loaded it (its dataclasses need it registered)
    assert module.main(["--quick", "--csv-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    day = (tmp_path / "aaa.csv").read_text().splitlines()[5].split(",")[0]
    assert f"{bad}: 1 bad line(s): line 6 ({day}): missing close" in err, err


def test_board_baselines(bench, tmp_path):
    """The side-by-side board cost runs on any store (here an empty one) and refuses a non-board name."""
    from ldtm_core.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'b.db'}"
    upgrade(url)
    out = bench("board_baselines", "--url", url, "--runs", "2")
    assert "| as registered |" in out and "| without trend |" in out and re.search(r"ratio: [\d.]+x", out)
    with pytest.raises(SystemExit):
        bench("board_baselines", "--url", url, "--baseline", "nonsense")


def test_universe_null(bench):
    """--quick: every case judged both ways, each cell a share, the detectable difference shrinking with
    more evenings."""
    out = bench("universe_null", "--quick", "--tickers", "20")
    rows = re.findall(
        rf"^\| (63|250) \| (\d) points \| ({NUMBER})% \| ({NUMBER})% \| ({NUMBER}) points \|$", out, re.M
    )
    assert len(rows) == 8, out
    detectable = {e: float(d) for e, edge, _, _, d in rows if edge == "0"}
    assert detectable["250"] < detectable["63"]


def test_checkpoints(bench):
    out = bench("checkpoints", "--sizes", "3,5", "--evenings", "4")
    for n in (3, 5):
        row = rf"^\| {n} \| {4 * n} \| {NUMBER} \| {NUMBER} \({NUMBER}\) \| {NUMBER} \| {NUMBER} \(\d+\) \| {NUMBER} \(\d+\) \|$"
        assert re.search(row, out, re.M), out


def test_recipe_null(bench):
    """One null universe through ridge's whole loop (fit, folds, the universe decision): a row with the
    rate and its bound; on a random walk nothing is deployed."""
    out = bench("recipe_null", "--recipes", "ridge", "--universes", "1", "--folds", "2")
    assert "| recipe | null universes | deployed | rate | 95 % upper bound | one loop (median) |" in out
    assert re.search(rf"^\| ridge \| 1 \| 0 \| 0.0% \| {NUMBER}% \| {NUMBER} s \|$", out, re.M), out


@pytest.mark.slow
def test_recipe_loop():
    """Two tickers through a week of the recipe loop from the schedule and the sensor beside the LSTM's:
    in its own process, since it sets LDTM_UNIVERSE before the Dagster code location loads."""
    out = subprocess.run(
        [sys.executable, str(BENCH / "recipe_loop.py"), "--tickers", "2", "--years", "1.6", "--folds", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(
        r"week 1 decisions: ridge: \d+ promoted; lightgbm: \d+ promoted; serving after", out.stdout
    )
    assert re.search(rf"^\| ratio LSTM loop / recipe loop \| {NUMBER} \|$", out.stdout, re.M), out.stdout


def test_submissions(bench):
    """--cost: one evening of 1,000 tickers through submit; --null: coin-flip submitters and the planted
    model through submit, fillback and judge, a row with the false rate and its bound."""
    out = bench(
        "submissions",
        "--cost",
        "--repeats",
        "1",
        "--null",
        "--models",
        "2",
        "--tickers",
        "1",
        "--evenings",
        "21",
    )
    assert re.search(rf"^\| 1,000 \| 3,000 \| 1 \| {NUMBER} \| {NUMBER} \|$", out, re.M), out
    assert re.search(
        rf"^\| 2 \| [012] \| [012] \| {NUMBER} \| {NUMBER} \| .+ evenings \| shown within .+ \|$", out, re.M
    ), out
