"""Settings a user types: database URLs, LDTM_HOME, LDTM_UNIVERSE (issue 10, items 7-9)."""

from __future__ import annotations

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
        ("mysql://ldtm:s3cret@db.example/ldtm", ["mysql is not supported", "mysqlclient", "ldtm:***@"]),
        ("postgresql+psycopg://ldtm:s3cret@db.example/ldtm", ["needs the Python package psycopg", "***"]),
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
    ("spec", "size"), [("Full", 103), ("FULL", 103), ("Demo", 6), ("DEMO", 6), (" demo ", 6)]
)
def test_universe_keywords_are_case_insensitive(spec, size):
    tickers = load_universe(spec)
    assert len(tickers) == size and "AAPL" in tickers and spec.strip().upper() not in tickers


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("dmeo", "did you mean 'demo'"),
        ("Fulll", "did you mean 'full'"),
        ("AAPL;NVDA", "nor a comma list of valid tickers"),
        ("x y", "invalid ticker"),
    ],
)
def test_universe_that_is_no_keyword_file_or_ticker_list_is_refused(spec, fragment):
    with pytest.raises(InputError, match=fragment):
        load_universe(spec)


def test_upper_case_single_ticker_and_lists_still_work():
    assert load_universe("FUL") == ["FUL"]
    assert load_universe("aapl, NVDA") == ["AAPL", "NVDA"]


def test_universe_keyword_in_any_case_ingests_the_real_tickers(ldtm_env, monkeypatch):
    monkeypatch.setenv("LDTM_UNIVERSE", "Full")
    result = invoke("ingest", "synthetic", "--tickers", "2", "--start", "2024-01-02", "--end", "2024-01-31")
    assert result.exit_code == 0, result.output
    assert stored_tickers(ldtm_env["url"]) == {"AAPL": 21, "ABNB": 21}
    monkeypatch.setenv("LDTM_UNIVERSE", "dmeo")
    one_clean_error_line(invoke("universe"), "did you mean 'demo'")


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
