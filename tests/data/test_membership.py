"""A dated universe (issue 40): the instruments file, its validation, the stored history and the one reader."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from ldtm_core.data.membership import (
    NO_HISTORY,
    Span,
    import_membership,
    load_membership,
    members_as_of,
    parse_membership,
    read_membership_file,
    write_membership_file,
)
from ldtm_core.data.synthetic_market import LATE_LISTINGS, generate, membership_spans
from ldtm_core.data.universe import load_universe, stated_as_of
from ldtm_core.errors import InputError

D = dt.date

HISTORY = "\n".join(
    [
        "# NASDAQ-100, a few names",
        "AAPL\t2001-01-02\t",
        "OLDCO\t2001-01-02\t2010-06-30",
        "OLDCO\t2015-01-02\t2099-12-31",  # a far END: still a member
        "NEWCO\t2020-03-02\t2022-12-30",
        "",
    ]
)


def test_the_instruments_format_is_read_with_open_ends_and_comments():
    spans = parse_membership(HISTORY, "h.txt")
    assert spans == [
        Span("AAPL", D(2001, 1, 2), None),
        Span("NEWCO", D(2020, 3, 2), D(2022, 12, 30)),
        Span("OLDCO", D(2001, 1, 2), D(2010, 6, 30)),
        Span("OLDCO", D(2015, 1, 2), None),
    ]
    # Whitespace instead of tabs, and a two-field line (no END), are read too.
    assert parse_membership("aapl 2001-01-02\n", "x") == [Span("AAPL", D(2001, 1, 2), None)]


@pytest.mark.parametrize(
    "text, said",
    [
        ("AAPL\t2001-13-02\t\n", "m.txt:1: AAPL: start '2001-13-02' is not a date"),
        ("AAPL\t2001-01-02\tsoon\n", "m.txt:1: AAPL: end 'soon' is not a date"),
        ("\nAAPL\t2005-01-03\t2004-01-02\n", "m.txt:2: AAPL: end 2004-01-02 is before start 2005-01-03"),
        (
            "AAPL\t2001-01-02\t2005-01-03\nAAPL\t2004-06-01\t\n",
            "m.txt:2: AAPL: span 2004-06-01..now overlaps its span 2001-01-02..2005-01-03 (line 1)",
        ),
        ("AAPL\t2001-01-02\t\nAAPL\t2004-06-01\t\n", "m.txt:2: AAPL: span 2004-06-01..now overlaps"),
        ("../x\t2001-01-02\t\n", "m.txt:1: invalid ticker"),
        ("AAPL\n", "m.txt:1: expected TICKER<TAB>START<TAB>END"),
        ("# only a comment\n", "m.txt: no membership spans"),
    ],
)
def test_a_bad_file_names_the_file_the_line_and_the_ticker(text, said):
    with pytest.raises(InputError) as err:
        parse_membership(text, "m.txt")
    assert said in str(err.value)


def test_every_problem_is_listed_at_once(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("AAPL\t2001-13-02\t\nNVDA\t2005-01-03\t2004-01-02\nQQQ\t2001-01-02\t\n")
    with pytest.raises(InputError) as err:
        read_membership_file(path)
    message = str(err.value)
    assert message.startswith(f"{path}: 2 problem(s), nothing imported")
    assert f"{path}:1: AAPL" in message and f"{path}:2: NVDA" in message
    with pytest.raises(InputError, match="does not exist"):
        read_membership_file(tmp_path / "missing.txt")


def test_without_rows_everyone_is_a_member_and_the_rule_says_so(engine):
    membership = load_membership(engine)
    assert not membership.has_history and membership.rule() == NO_HISTORY
    assert members_as_of(engine, D(1999, 1, 4), ["AAPL", "ZZZ"]) == ["AAPL", "ZZZ"]
    assert membership.mask("AAPL", np.array(["2000-01-03"], dtype="datetime64[D]")).all()


def test_with_rows_a_ticker_is_a_member_only_inside_a_span(engine):
    n = import_membership(engine, parse_membership(HISTORY, "h.txt"), "h.txt")
    assert n == 4
    tickers = ["AAPL", "OLDCO", "NEWCO", "NEVER"]
    assert members_as_of(engine, D(2000, 12, 29), tickers) == []
    assert members_as_of(engine, D(2010, 6, 30), tickers) == ["AAPL", "OLDCO"]  # the end is inclusive
    assert members_as_of(engine, D(2010, 7, 1), tickers) == ["AAPL"]
    assert members_as_of(engine, D(2021, 5, 3), tickers) == ["AAPL", "OLDCO", "NEWCO"]
    assert members_as_of(engine, D(2026, 1, 5), tickers) == ["AAPL", "OLDCO"]
    m = load_membership(engine)
    assert "3 tickers, 4 spans, imported from h.txt" in m.rule()
    assert "was not a member of the universe on 2012-01-03" in m.why_not("OLDCO", D(2012, 1, 3))
    assert "not in the membership history" in m.why_not("NEVER", D(2012, 1, 3))
    days = np.array(["2010-06-30", "2012-01-03", "2015-01-02"], dtype="datetime64[D]")
    assert m.mask("OLDCO", days).tolist() == [True, False, True]
    assert m.last_end("NEWCO") == D(2022, 12, 30) and m.last_end("OLDCO") is None
    # A second import replaces the whole history.
    import_membership(engine, [Span("AAPL", D(2020, 1, 2))], "again.txt")
    assert members_as_of(engine, D(2021, 5, 3), tickers) == ["AAPL"]


def test_the_shipped_lists_state_their_date_and_that_they_have_no_history():
    assert stated_as_of("full") == stated_as_of("demo") == "2026-11-21"
    assert stated_as_of("AAPL,NVDA") is None
    assert len(load_universe("full")) == 103 and len(load_universe("demo")) == 7  # the comments read as none


def test_the_synthetic_market_delists_on_request_and_writes_its_history(tmp_path):
    base = generate(["AAPL", "NVDA"], "2024-01-02", "2024-03-28", seed=3)
    gone = generate(["AAPL", "NVDA"], "2024-01-02", "2024-03-28", seed=3, delistings={"NVDA": "2024-02-15"})
    nvda = gone[gone["ticker"] == "NVDA"]
    assert nvda["date"].max() == D(2024, 2, 15)
    # The bars before the delisting, and the other ticker, are the same prices.
    kept = base[(base["ticker"] == "AAPL") | (base["date"] <= D(2024, 2, 15))].reset_index(drop=True)
    assert kept.equals(gone.reset_index(drop=True))
    spans = membership_spans(["AAPL", "NVDA", "FER"], "2023-01-03", {"NVDA": "2024-02-15"})
    assert spans == [
        Span("AAPL", D(2023, 1, 3)),
        Span("NVDA", D(2023, 1, 3), D(2024, 2, 15)),
        Span("FER", D.fromisoformat(LATE_LISTINGS["FER"])),
    ]
    path = write_membership_file(tmp_path / "m.txt", spans, header="synthetic")
    assert read_membership_file(path) == sorted(spans, key=lambda s: (s.ticker, s.start))
