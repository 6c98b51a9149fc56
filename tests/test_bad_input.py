"""Settings and commands that accepted what they should refuse (issue 28, item 13)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.config import Settings
from ldtm_core.errors import ConfigError

runner = CliRunner()
BOOLEANS = (
    "LDTM_BACKTEST_REUSE",
    "LDTM_FORCE_REINGEST",
    "LDTM_YFINANCE_AUTO_ADJUST",
    "LDTM_BF16_PROBE",
    "LDTM_K8S_GPU_PER_STEP",
)


def invoke(*args: str):
    return runner.invoke(app, list(args))


def one_clean_error_line(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture
def clean_env(tmp_path, monkeypatch):
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LDTM_DATABASE_URL", raising=False)
    for name in BOOLEANS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# --- booleans: one vocabulary ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [("1", True), ("true", True), ("YES", True), (" On ", True), ("0", False), ("False", False)]
    + [("no", False), ("OFF", False), ("off", False)],
)
def test_backtest_reuse_reads_the_documented_vocabulary(clean_env, raw, expected):
    clean_env.setenv("LDTM_BACKTEST_REUSE", raw)
    assert Settings.from_env().backtest_reuse is expected


@pytest.mark.parametrize("raw", ["N", "x", "y", "2", "disable"])
def test_a_boolean_outside_the_vocabulary_is_refused_naming_the_variable(clean_env, raw):
    clean_env.setenv("LDTM_BACKTEST_REUSE", raw)
    with pytest.raises(ConfigError) as err:
        Settings.from_env()
    assert "LDTM_BACKTEST_REUSE" in str(err.value) and repr(raw) in str(err.value)
    assert "on/off" in str(err.value)
    one_clean_error_line(invoke("leaderboard"), "LDTM_BACKTEST_REUSE")


@pytest.mark.parametrize("name", BOOLEANS)
def test_every_boolean_setting_uses_the_one_helper(clean_env, name):
    from ldtm_core.config import SETTINGS, Flag, env_flag

    assert isinstance(SETTINGS[name].kind, Flag)
    clean_env.setenv(name, "off")
    assert env_flag(name, True) is False
    clean_env.setenv(name, "maybe")
    with pytest.raises(ConfigError, match=name):
        env_flag(name, True)
    with pytest.raises(ConfigError, match=name):
        Settings.from_env()  # the settings check refuses it before any work


def test_each_boolean_reader_refuses_what_it_used_to_read_as_false_or_true(clean_env):
    from ldtm_core.data.corporate_actions import force_from_env
    from ldtm_core.data.sources.yfinance import _flag
    from ldtm_core.learning.precision import bf16_probe_speedup
    from ldtm_dagster.deployment import gpu_per_step

    clean_env.setenv("LDTM_FORCE_REINGEST", "ON")
    assert force_from_env() is True
    clean_env.setenv("LDTM_FORCE_REINGEST", "x")  # was: "not forced"
    with pytest.raises(ConfigError, match="LDTM_FORCE_REINGEST"):
        force_from_env()
    clean_env.setenv("LDTM_YFINANCE_AUTO_ADJUST", "nope")
    with pytest.raises(ConfigError, match="LDTM_YFINANCE_AUTO_ADJUST"):
        _flag("LDTM_YFINANCE_AUTO_ADJUST", False)
    clean_env.setenv("LDTM_BF16_PROBE", "off")  # was: probe (only "0" switched it off)
    assert bf16_probe_speedup() == 0.0
    clean_env.setenv("LDTM_K8S_GPU_PER_STEP", "No")
    assert gpu_per_step() is False


# --- ranges ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "var, value, fragment",
    [
        ("LDTM_GATE_ALPHA", "1", "below 1"),
        ("LDTM_GATE_ALPHA", "0", "above 0"),
        ("LDTM_DECAY_ARL0", "1", "from 20"),
        ("LDTM_DECAY_ARL0", "19", "from 20"),
    ],
)
def test_a_setting_the_gate_or_the_decay_check_cannot_use_is_refused_by_the_settings_check(
    clean_env, var, value, fragment
):
    clean_env.setenv(var, value)
    with pytest.raises(ConfigError) as err:
        Settings.from_env()
    assert var in str(err.value) and fragment in str(err.value), str(err.value)
    one_clean_error_line(invoke("leaderboard"), var)


def test_the_edges_that_remain_valid(clean_env):
    clean_env.setenv("LDTM_GATE_ALPHA", "0.5")
    clean_env.setenv("LDTM_DECAY_ARL0", "20")
    Settings.from_env()


# --- commands -------------------------------------------------------------------------------------


def _history(engine, ticker):
    from ldtm_core.learning import registry

    return [(e.model_id, e.from_status, e.to_status) for e in registry.history(engine, ticker)]


def test_promoting_the_active_model_again_says_nothing_changed(ldtm_env, tmp_path):
    from accountability_helpers import make_model, make_settings

    from ldtm_core.learning import registry
    from ldtm_core.migrate import upgrade

    engine = upgrade(ldtm_env["url"])
    s = make_settings(tmp_path, ldtm_env["url"])
    a = make_model(engine, s, "AAPL", seed=1)
    registry.promote(engine, a, "first", s)
    before = _history(engine, "AAPL")
    result = invoke("registry", "promote", "AAPL", "--model-id", str(a), "--reason", "again")
    assert result.exit_code == 0, result.output
    assert _history(engine, "AAPL") == before  # nothing written...
    assert "already active" in result.output and "recorded in" not in result.output  # ...nor claimed
    assert "nothing changed" in result.output


def test_shadow_end_refuses_promote_and_retire_together(ldtm_env):
    one_clean_error_line(
        invoke("shadow", "end", "AAPL", "--promote", "--retire", "--reason", "x"), "--promote", "--retire"
    )
    one_clean_error_line(invoke("shadow", "end", "AAPL", "--reason", "x"), "--promote", "--retire")


def test_decay_of_a_ticker_without_a_model_says_so_not_no_decay(ldtm_env):
    from ldtm_core.migrate import upgrade

    upgrade(ldtm_env["url"])
    line = one_clean_error_line(invoke("decay", "--ticker", "ZZZZ"), "ZZZZ", "no model")
    assert "No decay" not in line


def test_decay_names_the_requested_ticker_it_did_not_check(ldtm_env, tmp_path):
    from accountability_helpers import make_model, make_settings

    from ldtm_core.learning import registry
    from ldtm_core.migrate import upgrade

    engine = upgrade(ldtm_env["url"])
    s = make_settings(tmp_path, ldtm_env["url"])
    registry.promote(engine, make_model(engine, s, "AAPL"), "first", s)
    result = invoke("decay", "--ticker", "AAPL", "--ticker", "ZZZZ")
    assert result.exit_code == 0, result.output
    assert "ZZZZ" in result.output and "no model" in result.output


def test_predict_without_tickers_predicts_only_the_universe(ldtm_env, tmp_path):
    from accountability_helpers import ingest, make_model, make_settings
    from sqlalchemy import select

    from ldtm_core.learning import registry
    from ldtm_core.migrate import upgrade
    from ldtm_core.schema import snapshots

    engine = upgrade(ldtm_env["url"])
    s = make_settings(tmp_path, ldtm_env["url"])
    ingest(engine, ["AAPL", "MSFT"], start="2023-06-01", end="2024-03-28")  # MSFT: not in `demo`
    for t in ("AAPL", "MSFT"):
        registry.promote(engine, make_model(engine, s, t), "first", s)
    result = invoke("predict")
    assert result.exit_code == 0, result.output
    with engine.connect() as conn:
        predicted = set(conn.execute(select(snapshots.c.ticker).distinct()).scalars())
    assert predicted == {"AAPL"}
    assert "MSFT" in result.output  # said what was left out, and how to include it
    assert invoke("predict", "--tickers", "MSFT").exit_code == 0  # named explicitly: still allowed


def test_a_universe_file_with_a_byte_order_mark_is_read(tmp_path):
    from ldtm_core.data.universe import load_universe

    path = tmp_path / "universe.txt"
    path.write_bytes("AAPL\nNVDA\n".encode("utf-8-sig"))
    assert load_universe(str(path)) == ["AAPL", "NVDA"]


# --- errors as one line (item 14) ---------------------------------------------------------------------


def test_train_on_a_read_only_home_refuses_before_training_naming_the_path(ldtm_env, monkeypatch):
    import ldtm_core.config as config
    from ldtm_core.learning import training_pool
    from ldtm_core.migrate import upgrade

    upgrade(ldtm_env["url"])
    Settings.from_env().ensure_dirs()
    checkpoints = ldtm_env["home"] / "checkpoints"
    real_access = config.os.access
    # Root ignores permission bits, so the read-only folder is simulated at the check itself.
    monkeypatch.setattr(
        config.os, "access", lambda p, mode: False if str(p) == str(checkpoints) else real_access(p, mode)
    )

    def no_training(*args, **kwargs):
        raise AssertionError("trained although the checkpoints could not be written")

    monkeypatch.setattr(training_pool, "train_many", no_training)
    line = one_clean_error_line(
        invoke("train", "--tickers", "AAPL", "--profile", "demo"), str(checkpoints), "not writable"
    )
    assert "LDTM_HOME" in line


def test_ctrl_c_exits_130_with_a_line_saying_what_was_kept(ldtm_env, monkeypatch):
    from ldtm_core.data import ingest

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ingest, "ingest_synthetic", interrupted)
    result = invoke("ingest", "synthetic", "--tickers", "1", "--start", "2024-01-02", "--end", "2024-02-01")
    assert result.exit_code == 130, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted"), result.output
    assert "ingest synthetic" in lines[0] and "kept" in lines[0]


def test_ctrl_c_inside_promote_leaves_no_orphan_versioned_checkpoint(engine, db_url, tmp_path, monkeypatch):
    from accountability_helpers import make_model, make_settings

    from ldtm_core.learning import registry

    s = make_settings(tmp_path, db_url)
    a = make_model(engine, s, "AAPL", seed=1)
    before = sorted(p.name for p in s.checkpoint_dir.iterdir())
    for point in ("promote.after_copy", "promote.after_retire"):

        def interrupt(name, point=point):
            if name == point:
                raise KeyboardInterrupt

        monkeypatch.setattr(registry, "pause_point", interrupt)
        with pytest.raises(KeyboardInterrupt):
            registry.promote(engine, a, "first", s)
        assert sorted(p.name for p in s.checkpoint_dir.iterdir()) == before, point
        assert registry.get_model(engine, a).status == "candidate"
    monkeypatch.setattr(registry, "pause_point", lambda name: None)
    res = registry.promote(engine, a, "first", s)  # and the next promotion still works
    assert res.changed and (s.checkpoint_dir / f"AAPL_ldtm_{res.version}.pt").is_file()
