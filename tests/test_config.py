"""Settings a user types: database URLs, LDTM_HOME, LDTM_UNIVERSE (issue 10, items 7-9)."""

from __future__ import annotations

import re
import uuid

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.config import Settings, engine_url
from ldtm_core.data.universe import load_universe
from ldtm_core.db import get_engine
from ldtm_core.errors import ConfigError, InputError
from ldtm_core.schema import prices

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def one_clean_error_line(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def stored_tickers(url: str) -> dict[str, int]:
    with get_engine(url).connect() as conn:
        return dict(conn.execute(select(prices.c.ticker, func.count()).group_by(prices.c.ticker)).all())


# --------------------------------------------------------------------------------------------------
# Item 7: the database URL as people type it.


def test_bare_postgresql_url_uses_the_installed_driver(pg_url, tmp_path, monkeypatch):
    typed = make_url(pg_url).set(drivername="postgresql").render_as_string(hide_password=False)
    assert typed.startswith("postgresql://")
    assert engine_url(typed).drivername == "postgresql+psycopg2"
    assert engine_url(typed.replace("postgresql://", "postgres://", 1)).drivername == "postgresql+psycopg2"
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LDTM_DATABASE_URL", typed)
    monkeypatch.setenv("LDTM_UNIVERSE", "demo")

    result = invoke(
        "ingest", "synthetic", "--tickers", "AAPL", "--start", "2024-01-02", "--end", "2024-01-31"
    )

    assert result.exit_code == 0, result.output
    assert stored_tickers(pg_url) == {"AAPL": 21}


@pytest.mark.parametrize(
    ("url", "fragments"),
    [
        (
            "mysql://ldtm:s3cret-Tq81-mP93-xw@db.example/ldtm",
            ["mysql is not supported", "mysqlclient", "ldtm:***@"],
        ),
        (
            "postgresql+psycopg://ldtm:s3cret-Tq81-mP93-xw@db.example/ldtm",
            ["needs the Python package psycopg", "***"],
        ),
        ("postgresql+asyncpg://db.example/ldtm", ["needs the Python package asyncpg"]),
        ("foo://db.example/ldtm", ["unknown database kind 'foo'"]),
        ("not a url", ["is not a URL"]),
    ],
)
def test_a_url_that_cannot_be_opened_is_one_clear_line(tmp_path, monkeypatch, url, fragments):
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LDTM_DATABASE_URL", url)
    for command in (["db", "upgrade"], ["leaderboard"]):
        line = one_clean_error_line(invoke(*command), *fragments)
        assert "s3cret" not in line
    with pytest.raises(ConfigError):
        get_engine(url)


# --------------------------------------------------------------------------------------------------
# Item 8: LDTM_HOME that is not a usable directory.


def test_home_that_is_a_regular_file_is_one_clear_line(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.write_text("not a directory")
    monkeypatch.setenv("LDTM_HOME", str(home))
    monkeypatch.delenv("LDTM_DATABASE_URL", raising=False)
    one_clean_error_line(invoke("db", "upgrade"), f"LDTM_HOME {home} is a file, not a directory")
    assert home.read_text() == "not a directory"


def test_home_below_a_regular_file_is_one_clear_line(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "file" / "home"))
    monkeypatch.delenv("LDTM_DATABASE_URL", raising=False)
    one_clean_error_line(invoke("prices", "summary"), "cannot be created", "is a file, not a directory")


def test_home_that_cannot_be_created_is_one_clear_line(monkeypatch):
    # sysfs refuses mkdir even to root, so this holds whoever runs the tests.
    home = f"/sys/ldtm-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("LDTM_HOME", home)
    monkeypatch.delenv("LDTM_DATABASE_URL", raising=False)
    one_clean_error_line(invoke("db", "upgrade"), f"LDTM_HOME {home}", "cannot be created", "read-only")


def test_read_only_home_says_read_only_and_still_serves_reads_of_a_database_elsewhere(
    db_url, tmp_path, monkeypatch
):
    import ldtm_core.config as config

    home = tmp_path / "home"
    Settings.from_env(home=str(home), database_url=db_url).ensure_dirs()
    real_access = config.os.access
    # Root ignores permission bits, so the read-only folder is simulated at the check itself.
    monkeypatch.setattr(
        config.os, "access", lambda p, mode: False if str(p) == str(home) else real_access(p, mode)
    )
    monkeypatch.setenv("LDTM_HOME", str(home))
    monkeypatch.delenv("LDTM_DATABASE_URL", raising=False)
    one_clean_error_line(invoke("leaderboard"), f"LDTM_HOME {home} is read-only")

    # A database outside the read-only home (PostgreSQL, or a SQLite file elsewhere): reading works.
    monkeypatch.setenv("LDTM_DATABASE_URL", db_url)
    result = invoke("leaderboard")
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------------------------------------------
# Item 9: LDTM_UNIVERSE keywords.


@pytest.mark.parametrize(
    ("spec", "size"), [("Full", 103), ("FULL", 103), ("Demo", 7), ("DEMO", 7), (" demo ", 7)]
)
def test_universe_keywords_are_case_insensitive(spec, size):
    tickers = load_universe(spec)
    assert len(tickers) == size and "AAPL" in tickers and spec.strip().upper() not in tickers


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("dmeo", "did you mean 'demo'"),
        ("Fulll", "did you mean 'full'"),
        # Issue 38: `all` (as `--tickers all` says) became the one ticker ALL.
        ("all", "did you mean 'full'"),
        ("All", "did you mean 'full'"),
        ("AAPL;NVDA", "nor a comma list of valid tickers"),
        ("x y", "invalid ticker"),
    ],
)
def test_universe_that_is_no_keyword_file_or_ticker_list_is_refused(spec, fragment):
    with pytest.raises(InputError, match=fragment):
        load_universe(spec)


def test_upper_case_single_ticker_and_lists_still_work():
    assert load_universe("FUL") == ["FUL"]
    assert load_universe("ALL") == ["ALL"]  # Allstate: upper case is a ticker
    assert load_universe("aapl, NVDA") == ["AAPL", "NVDA"]


def test_universe_keyword_in_any_case_ingests_the_real_tickers(ldtm_env, monkeypatch):
    monkeypatch.setenv("LDTM_UNIVERSE", "Full")
    result = invoke("ingest", "synthetic", "--tickers", "2", "--start", "2024-01-02", "--end", "2024-01-31")
    assert result.exit_code == 0, result.output
    assert stored_tickers(ldtm_env["url"]) == {"AAPL": 21, "ABNB": 21}
    monkeypatch.setenv("LDTM_UNIVERSE", "dmeo")
    one_clean_error_line(invoke("universe"), "did you mean 'demo'")


# --- numeric settings (issue 20 item 15) -------------------------------------------------------------

BAD_NUMBERS = [
    ("LDTM_NEUTRAL_BAND_PCT", "abc", "a percent"),
    ("LDTM_NEUTRAL_BAND_PCT", "nan", "a percent"),
    ("LDTM_NEUTRAL_BAND_PCT", "inf", "a percent"),
    ("LDTM_NEUTRAL_BAND_PCT", "-0.5", "a percent"),
    ("LDTM_GATE_MIN_ACCURACY", "0.52", "52 for 52 %"),  # a fraction where a percent is expected
    ("LDTM_GATE_MIN_ACCURACY", "5200", "a percent"),
    ("LDTM_GATE_MAX_ERROR_PCT", "-1", "a percent"),
    ("LDTM_GATE_BEAT_ALWAYS_UP", "150", "percentage points"),
    ("LDTM_GATE_MAX_P_VALUE", "0", "a probability"),
    ("LDTM_GATE_MIN_FOLDS", "2.5", "a whole number"),
    ("LDTM_MAX_DAILY_MOVE_PCT", "nan", "a percent"),
    ("LDTM_GPU_PER_JOB_MIB", "lots", "MiB"),
    ("LDTM_GPU_MAX_SLOTS", "-1", "slots"),
    ("LDTM_SOURCE_ATTEMPTS", "0", "attempts"),
    ("LDTM_YFINANCE_TIMEOUT", "inf", "seconds"),
    ("LDTM_YFINANCE_BATCH", "x", "tickers"),
    ("LDTM_IB_PORT", "70000", "TCP port"),
    ("LDTM_IB_CLIENT_ID", "1e3", "a whole number"),
    ("LDTM_IB_TIMEOUT", "-5", "seconds"),
    ("LDTM_MAX_EPOCHS", "0", "epochs"),
    ("LDTM_PATIENCE", "abc", "epochs"),
    ("LDTM_MAX_WORKERS", "0", "workers"),
]


@pytest.mark.parametrize("var, value, unit", BAD_NUMBERS, ids=[f"{v}={x}" for v, x, _ in BAD_NUMBERS])
def test_a_bad_numeric_setting_is_one_clear_line_naming_it_its_value_and_unit(
    tmp_path, monkeypatch, var, value, unit
):
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LDTM_DATABASE_URL", raising=False)
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError) as err:
        Settings.from_env()
    for fragment in (var, repr(value), unit):
        assert fragment in str(err.value), (fragment, str(err.value))
    one_clean_error_line(invoke("leaderboard"), var, unit)


def test_every_ldtm_setting_the_code_reads_is_classified():
    """A setting the code reads without a row (and so without a kind: a number's range) would escape the
    check."""
    import re
    from pathlib import Path

    from ldtm_core import config

    root = Path(config.__file__).resolve().parents[1]
    named = set()
    for package in ("ldtm_core", "ldtm_dagster", "ldtm_dashboard"):
        for path in (root / package).rglob("*.py"):
            named |= set(re.findall(r"[\"'](LDTM_[A-Z0-9_]+)[\"']", path.read_text()))
    assert named - set(config.SETTINGS) == set()


def test_gate_settings_are_percent_like_the_gate_options(monkeypatch):
    from ldtm_core.accountability.gate.gate import GateThresholds

    monkeypatch.setenv("LDTM_GATE_MIN_ACCURACY", "52")
    monkeypatch.setenv("LDTM_GATE_MAX_ERROR_PCT", "5")
    monkeypatch.setenv("LDTM_GATE_BEAT_ALWAYS_UP", "2")
    t = GateThresholds.from_env()
    assert t.min_direction_accuracy == pytest.approx(0.52)  # stored as a fraction, typed as a percent
    assert t.max_mean_abs_pct_error == 5.0 and t.beat_always_up_margin == pytest.approx(0.02)
    # The CLI option in the same unit gives the same thresholds.
    assert GateThresholds.from_env(min_direction_accuracy=0.52) == t


@pytest.mark.parametrize(
    "args", [["leaderboard"], ["prices", "summary"], ["ingest", "synthetic", "--tickers", "1"]]
)
def test_a_sqlite_url_in_a_missing_folder_is_refused_and_creates_nothing(tmp_path, monkeypatch, args):
    """Issue 20 item 18: `LDTM_DATABASE_URL=sqlite:////nonexistent/dir/x.db` silently created the folder
    and an empty database, even for a command that only reads."""
    missing = tmp_path / "nonexistent" / "dir"
    monkeypatch.setenv("LDTM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LDTM_DATABASE_URL", f"sqlite:///{missing / 'x.db'}")
    monkeypatch.setenv("LDTM_UNIVERSE", "demo")
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    msg = " ".join(r.output.split())
    assert f"the folder {missing} of the SQLite database does not exist" in msg
    assert not (tmp_path / "nonexistent").exists()


@pytest.mark.parametrize(
    ("name", "value", "fragment"),
    [
        ("LDTM_PROFILE", "refrence", "LDTM_PROFILE='refrence': expected one of reference"),
        ("LDTM_AMP", "fp8", "LDTM_AMP='fp8': expected one of auto, fp16, bf16, off"),
        ("LDTM_GATE_POLICY", "strict", "LDTM_GATE_POLICY='strict'"),
        ("LDTM_K8S_STEP_CPU", "two", "LDTM_K8S_STEP_CPU='two': expected a Kubernetes quantity"),
        ("LDTM_K8S_STEP_MEMORY", "2 GB", "LDTM_K8S_STEP_MEMORY='2 GB': expected a Kubernetes quantity"),
    ],
)
def test_a_bad_choice_or_quantity_is_refused_naming_the_variable(monkeypatch, name, value, fragment):
    # Issue 38: LDTM_PROFILE/LDTM_AMP errors named no variable; LDTM_K8S_STEP_CPU/MEMORY were never checked.
    from ldtm_core.config import Settings

    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        Settings.from_env()


@pytest.mark.parametrize(
    ("name", "value", "canonical"),
    [("LDTM_PROFILE", "Reference", "reference"), ("LDTM_AMP", "FP16", "fp16"), ("LDTM_AMP", "bf16", "bf16")],
)
def test_choices_are_read_in_any_case(monkeypatch, name, value, canonical):
    from ldtm_core.config import Settings, setting

    monkeypatch.setenv(name, value)
    Settings.from_env()
    assert setting(name) == canonical


def test_a_comma_list_longer_than_a_file_name_is_a_list_not_a_path():
    # The whole `full` universe written out (601 characters) crashed with OSError: File name too long.
    full = load_universe("full")
    assert load_universe(",".join(full)) == full
    assert load_universe("BRK.B,AAPL") == ["BRK.B", "AAPL"]  # a dot in a list is a share class, not a suffix
