"""`ldtm universe`: list the tickers, import a dated membership history, show the members as of a day."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from ldtm_core.cli import app
from ldtm_core.db import get_engine
from ldtm_core.schema import universe_membership

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def stored(url: str) -> int:
    with get_engine(url).connect() as conn:
        return conn.execute(select(func.count()).select_from(universe_membership)).scalar()


@pytest.mark.parametrize("args", [["universe"], ["universe", "import"], ["universe", "show"]])
def test_every_universe_command_has_help(args):
    result = invoke(*args, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_universe_lists_the_tickers_as_before(ldtm_env):
    assert invoke("universe").stdout.startswith("7 tickers: AAPL NVDA")
    assert invoke("universe", "--universe", "AAPL,QQQ").stdout.startswith("2 tickers: AAPL QQQ")


def test_import_then_show_as_of(ldtm_env, tmp_path):
    path = tmp_path / "history.txt"
    path.write_text(
        "# demo names\nAAPL\t2001-01-02\t\nNVDA\t2001-01-02\t2020-06-30\nTSLA\t2010-06-29\t2099-12-31\n"
        "QQQ\t1999-03-10\t\nSQQQ\t2010-02-11\t\nFER\t2024-05-09\t\nSYNEDGE\t2001-01-02\t\nOLDCO\t1995-01-03\t2005-12-30\n"
    )
    before = invoke("universe", "show", "--as-of", "2004-01-02")
    assert before.exit_code == 0, before.output
    out = " ".join(before.stdout.split())
    assert "no membership history" in out and "membership as of 2026-11-21, no history" in out
    assert "7 members on 2004-01-02" in out  # today's list applied to the past, said as such

    dry = invoke("universe", "import", str(path), "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "8 spans for 8 tickers" in dry.stdout and "nothing was stored" in dry.stdout
    assert stored(ldtm_env["url"]) == 0

    real = invoke("universe", "import", str(path))
    assert real.exit_code == 0, real.output
    assert "stored 8 spans" in real.stdout and stored(ldtm_env["url"]) == 8

    then = invoke("universe", "show", "--as-of", "2004-01-02")
    out = " ".join(then.stdout.split())
    assert "members as of each evening from universe_membership" in out
    assert "5 members on 2004-01-02: AAPL NVDA OLDCO QQQ SYNEDGE" in out
    assert "outside LDTM_UNIVERSE=demo (not served): OLDCO" in out
    later = " ".join(invoke("universe", "show", "--as-of", "2024-06-03").stdout.split())
    assert "6 members on 2024-06-03: AAPL FER QQQ SQQQ SYNEDGE TSLA" in later


def test_a_bad_file_is_refused_naming_file_line_and_ticker_and_stores_nothing(ldtm_env, tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("AAPL\t2001-01-02\t\nNVDA\t2005-01-03\t2004-01-02\nAAPL\t2003-01-02\t\n")
    result = invoke("universe", "import", str(path))
    assert result.exit_code == 2
    err = " ".join(result.stderr.split())
    assert f"{path}:2: NVDA: end 2004-01-02 is before start 2005-01-03" in err
    assert f"{path}:3: AAPL: span 2003-01-02..now overlaps its span 2001-01-02..now (line 1)" in err
    assert stored(ldtm_env["url"]) == 0


def test_a_history_that_leaves_out_a_served_ticker_is_refused_unless_allowed(ldtm_env, tmp_path):
    """It replaced the stored history anyway (exit 0, one warning): six served tickers then counted as
    members on no evening. Now nothing is stored unless --allow-missing says so."""
    path = tmp_path / "h.txt"
    path.write_text("AAPL\t2001-01-02\t\n")
    for args in ([], ["--dry-run"]):
        result = invoke("universe", "import", str(path), *args)
        err = " ".join(result.stderr.split())
        assert result.exit_code == 2, result.output
        assert "6 ticker(s) of LDTM_UNIVERSE=demo have no span" in err and "NVDA" in err
        assert "Nothing stored" in err and "--allow-missing" in err and stored(ldtm_env["url"]) == 0
    result = invoke("universe", "import", str(path), "--allow-missing")
    assert result.exit_code == 0, result.output
    assert "6 ticker(s) of LDTM_UNIVERSE=demo have no span" in " ".join(result.stderr.split())
    assert stored(ldtm_env["url"]) == 1


def test_a_folder_pipe_or_non_utf8_file_is_named_for_what_it_is(ldtm_env, tmp_path, monkeypatch):
    """A folder or FIFO was "does not exist"; a UTF-16 or binary file ended in a UnicodeDecodeError
    traceback. Each is one line naming the file and what it is, for both files a user names."""
    import os

    (tmp_path / "dir.txt").mkdir()
    os.mkfifo(tmp_path / "fifo.txt")  # never opened: reading it would block
    (tmp_path / "utf16.txt").write_text("AAPL\t2001-01-02\t\n", encoding="utf-16")
    (tmp_path / "bin.txt").write_bytes(b"AAPL\x00\x9c\xff\x00")
    (tmp_path / "nul.txt").write_bytes(b"AAPL\x00\n")
    said = {
        "dir.txt": "is a folder, not a file",
        "fifo.txt": "is not a regular file",
        "utf16.txt": "is UTF-16 text: save it as UTF-8",
        "bin.txt": "is not UTF-8 text (byte 5 is 0x9c)",
        "nul.txt": "is not a text file (it holds NUL bytes)",
        "absent.txt": "does not exist",
    }
    for name, why in said.items():
        path = tmp_path / name
        result = invoke("universe", "import", str(path))
        assert result.exit_code == 2 and f"membership file {path} {why}" in " ".join(result.stderr.split())
        assert "Traceback" not in result.output
        monkeypatch.setenv("LDTM_UNIVERSE", str(path))
        result = invoke("universe")
        assert result.exit_code == 2 and f"universe file {path} {why}" in " ".join(result.stderr.split()), (
            result.output
        )


def test_today_is_the_exchange_date_not_the_machines(ldtm_env, tmp_path, monkeypatch):
    # 03:00 UTC on 2 January is still 1 January in New York: the exchange's clock decides "today".
    from ldtm_core.data import calendar

    monkeypatch.setattr(calendar, "now", lambda: dt.datetime(2030, 1, 2, 3, 0, tzinfo=dt.UTC))
    shown = invoke("universe", "show")
    assert shown.exit_code == 0, shown.output
    assert "members on 2030-01-01" in shown.stdout
    path = tmp_path / "history.txt"
    path.write_text("AAPL\t2001-01-02\t2030-01-01\nNVDA\t2030-01-02\t\n")
    dry = " ".join(invoke("universe", "import", str(path), "--dry-run").stdout.split())
    assert "1 members on 2030-01-01" in dry
