"""The IB adapter against a fake ib_async client exposing the same methods (no gateway, no network).

The answers are what ib_async returns: `reqHistoricalData` -> a list of `BarData(date=datetime.date,
open, high, low, close, volume, average, barCount)` for daily bars, an EMPTY list on timeout, IB's
errors on `errorEvent(reqId, errorCode, errorString, contract)`, and `qualifyContracts` returning
None in the position of a symbol IB does not know (ib_async 2.x).
"""

import datetime as dt
from dataclasses import dataclass

import pytest

from ldtm_core.data.corporate_actions import load_actions
from ldtm_core.data.price_fetch import fetch_prices
from ldtm_core.data.prices import load_prices
from ldtm_core.data.sources.ib import IBSource, duration_for


@dataclass
class BarData:  # field for field ib_async.objects.BarData
    date: dt.date
    open: float = 0.0
    high: float = 0.0
    low: float = 0.0
    close: float = 0.0
    volume: float = 0
    average: float = 0.0
    barCount: int = 0


@dataclass
class Stock:
    symbol: str
    exchange: str = "SMART"
    currency: str = "USD"
    conId: int = 0


class Event:
    """ib_async's Event: `+=` connects, `-=` disconnects, emit calls the handlers."""

    def __init__(self):
        self.handlers = []

    def __iadd__(self, handler):
        self.handlers.append(handler)
        return self

    def __isub__(self, handler):
        self.handlers.remove(handler)
        return self

    def emit(self, *args):
        for h in list(self.handlers):
            h(*args)


DAYS = [dt.date(2024, 6, d) for d in (3, 4, 5, 6, 7)]
NVDA = [
    (1136.41, 1150.00, 1106.93, 1150.00, 370142.0),
    (1157.51, 1169.69, 1138.82, 1164.37, 402192.0),
    (1182.37, 1224.40, 1180.61, 1224.40, 518989.0),
    (1224.09, 1255.87, 1183.10, 1209.98, 609879.0),
    (1197.70, 1216.92, 1180.22, 1208.88, 412386.0),
]


class FakeIB:
    """The ib_async.IB methods the adapter uses, with scripted answers."""

    def __init__(self, script, connect_failures=0):
        self.script, self.connect_failures = script, connect_failures
        self.errorEvent = Event()
        self.requests, self.connected, self.disconnected = [], None, False

    def connect(self, host, port, clientId, timeout=4, readonly=False):
        if self.connect_failures:
            self.connect_failures -= 1
            raise ConnectionRefusedError(111, "Connect call failed")
        self.connected = (host, port, clientId, readonly)

    def disconnect(self):
        self.disconnected = True

    def qualifyContracts(self, *contracts):
        out = []
        for i, c in enumerate(contracts):
            if c.symbol == "ZZZZ":
                self.errorEvent.emit(i, 200, "No security definition has been found for the request", c)
                out.append(None)
            else:
                c.conId = 1000 + i
                out.append(c)
        return out

    def reqHistoricalData(
        self,
        contract,
        endDateTime,
        durationStr,
        barSizeSetting,
        whatToShow,
        useRTH,
        formatDate=1,
        keepUpToDate=False,
        chartOptions=(),
        timeout=60,
    ):
        self.requests.append((contract.symbol, endDateTime, durationStr, barSizeSetting, whatToShow, useRTH))
        answer = self.script[contract.symbol]
        step = answer.pop(0) if isinstance(answer, list) and answer and isinstance(answer[0], str) else answer
        if step == "timeout":
            return []
        if step == "no data":
            self.errorEvent.emit(
                7, 162, "Historical Market Data Service error message:HMDS query returned no data", contract
            )
            return []
        return [
            BarData(d, *bar[:4], volume=bar[4], average=bar[3], barCount=1000)
            for d, bar in zip(DAYS, step, strict=True)
        ]


def make_source(fake, **kw):
    return IBSource(
        client_factory=lambda: fake,
        contract_factory=lambda s: Stock(s),
        sleep=kw.pop("sleep", lambda s: None),
        today=lambda: dt.date(2024, 6, 7),
        **kw,
    )


def test_bars_are_stored_and_unknown_empty_timeout_are_named(engine):
    gappy = [(10.0, 10.5, 9.8, 10.2, 1.0)] * 4 + [(10.0, 9.0, 9.5, 9.6, 1.0)]  # last bar: high < low
    fake = FakeIB({"NVDA": NVDA, "EMPTY": "no data", "SLOW": ["timeout", "timeout", "timeout"], "BAD": gappy})
    source = make_source(fake, host="gw", port=4002, client_id=9)
    tickers = ["NVDA", "ZZZZ", "EMPTY", "SLOW", "BAD"]
    report = fetch_prices(engine, source, tickers, first_start=DAYS[0], end=DAYS[-1], universe=tickers)

    assert fake.connected == ("gw", 4002, 9, True) and fake.disconnected and fake.errorEvent.handlers == []
    out = {t: (o.status, o.reason) for t, o in report.outcomes.items()}
    assert out["NVDA"] == ("ok", None)
    assert out["ZZZZ"][0] == "failed" and out["ZZZZ"][1].startswith("unknown symbol ZZZZ: IB error 200")
    assert out["EMPTY"][1].startswith("empty answer: historical data service returned no data (IB 162")
    assert (
        out["SLOW"][1] == "HTTP/network error: IB request timed out after 60s"
        and report.outcomes["SLOW"].transient
    )
    assert "high 9 < low 9.5" in out["BAD"][1]
    stored = load_prices(engine, tickers)
    assert (
        stored["NVDA"]["close"].tolist() == [b[3] for b in NVDA]
        and stored["NVDA"]["volume"].iloc[0] == 370142
    )
    assert all(stored[t].empty for t in ("ZZZZ", "EMPTY", "SLOW", "BAD"))
    # Daily ADJUSTED_LAST bars (the default) over regular hours; the timed-out ticker was asked three times.
    assert {r[3:] for r in fake.requests} == {("1 day", "ADJUSTED_LAST", True)}
    assert [r[0] for r in fake.requests].count("SLOW") == 3


def test_a_gateway_that_is_down_is_retried_with_backoff_then_every_ticker_named():
    sleeps = []
    fake = FakeIB({"NVDA": NVDA}, connect_failures=5)
    answer = make_source(fake, sleep=sleeps.append, base_delay=1.0).fetch(["NVDA", "AAPL"], DAYS[0], DAYS[-1])
    assert sleeps == [1.0, 2.0]
    assert answer.transient == {"NVDA", "AAPL"}
    assert "failed after 3 attempts" in answer.failures["NVDA"]

    recovering = FakeIB({"NVDA": NVDA}, connect_failures=1)
    assert len(make_source(recovering).fetch(["NVDA"], DAYS[0], DAYS[-1]).frames["NVDA"]) == 5


def test_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("LDTM_IB_HOST", "ib-gateway")
    monkeypatch.setenv("LDTM_IB_PORT", "4001")
    monkeypatch.setenv("LDTM_IB_CLIENT_ID", "42")
    monkeypatch.setenv("LDTM_IB_WHAT_TO_SHOW", "adjusted_last")
    source = IBSource.from_env()
    assert (source.host, source.port, source.client_id, source.what_to_show) == (
        "ib-gateway",
        4001,
        42,
        "ADJUSTED_LAST",
    )
    monkeypatch.setenv("LDTM_IB_PORT", "gateway")
    from ldtm_core.errors import InputError

    with pytest.raises(InputError, match="IB source settings"):
        IBSource.from_env()


def test_duration_strings():
    assert duration_for(dt.date(2024, 6, 3), dt.date(2024, 6, 7)) == "5 D"
    assert duration_for(dt.date(2020, 1, 2), dt.date(2024, 6, 7)) == "5 Y"


def test_the_default_basis_is_adjusted_last_so_actions_are_recorded(engine, monkeypatch, caplog):
    """Issue 20 item 8: the default TRADES delivers raw closes and no corporate-action events, so IB's
    splits were never recorded. ADJUSTED_LAST (style 2) is the default: a split is recognised."""
    monkeypatch.delenv("LDTM_IB_WHAT_TO_SHOW", raising=False)
    assert IBSource.from_env().what_to_show == "ADJUSTED_LAST"
    assert make_source(FakeIB({})).what_to_show == "ADJUSTED_LAST"
    with caplog.at_level("WARNING", logger="ldtm.sources"):
        assert make_source(FakeIB({}), what_to_show="TRADES").what_to_show == "TRADES"
    assert "splits and dividends are not recorded" in caplog.text

    fetch_prices(engine, make_source(FakeIB({"NVDA": NVDA})), ["NVDA"], first_start=DAYS[0], end=DAYS[-2])
    # After a 2:1 split ex on the last day, IB's adjusted history halves every earlier bar.
    split = [(o / 2, h / 2, lo / 2, c / 2, v * 2) for o, h, lo, c, v in NVDA[:-1]] + [NVDA[-1]]
    report = fetch_prices(
        engine, make_source(FakeIB({"NVDA": split})), ["NVDA"], first_start=DAYS[0], end=DAYS[-1]
    )
    assert not report.failed, report.failed[0].reason
    assert [(a.ex_date, a.factor, a.kind) for a in load_actions(engine, ["NVDA"])["NVDA"]] == [
        (DAYS[-1], 0.5, "split")
    ]
