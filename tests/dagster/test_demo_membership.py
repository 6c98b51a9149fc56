"""The demo imports the synthetic market's dated universe (issue 40): each ticker a member from its first
bar, written as an instruments file beside the database; with another price source it imports nothing."""

from __future__ import annotations

import datetime as dt

from ldtm_core.data.membership import Span, load_membership, read_membership_file
from ldtm_core.data.synthetic_market import LATE_LISTINGS
from ldtm_dagster import demo
from ldtm_dagster.resources import ArtifactStore


def test_the_demo_imports_the_synthetic_membership(engine, tmp_path, monkeypatch):
    monkeypatch.delenv("LDTM_PRICE_SOURCE", raising=False)
    said: list[str] = []
    store = ArtifactStore(home=str(tmp_path / "home"), universe="demo")
    demo._import_membership(store, engine, ["AAPL", "FER"], "2023-01-03", said.append)
    m = load_membership(engine)
    want = {
        "AAPL": (Span("AAPL", dt.date(2023, 1, 3)),),
        "FER": (Span("FER", dt.date.fromisoformat(LATE_LISTINGS["FER"])),),
    }
    assert m.spans == want
    assert read_membership_file(tmp_path / "home" / "universe_membership.txt") == [
        *want["AAPL"],
        *want["FER"],
    ]
    assert "2 spans imported" in said[0]


def test_with_another_price_source_the_demo_imports_no_history(engine, tmp_path, monkeypatch):
    monkeypatch.setenv("LDTM_PRICE_SOURCE", f"files:{tmp_path}")
    said: list[str] = []
    demo._import_membership(
        ArtifactStore(home=str(tmp_path / "h")), engine, ["AAPL"], "2023-01-03", said.append
    )
    assert not load_membership(engine).has_history and "no history imported" in said[0]
