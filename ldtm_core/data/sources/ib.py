"""Interactive Brokers through `ib_async` (optional extra: pip install 'ldtm[ib]'), imported lazily.

Talks to a running IB Gateway / TWS: LDTM_IB_HOST (127.0.0.1), LDTM_IB_PORT (4002, the Gateway's
paper port; 4001 live), LDTM_IB_CLIENT_ID (17), LDTM_IB_WHAT_TO_SHOW (ADJUSTED_LAST, the default =
split/dividend-adjusted history; TRADES = raw prices), LDTM_IB_TIMEOUT (seconds per request).

Corporate actions: IB's corporate-action feed is not wired, so TRADES (raw closes) would store a split
as a -90 % day with nothing recorded. ADJUSTED_LAST is a style-2 source (corporate_actions): each
split or dividend rescales the history IB sends, `reconcile` recognises the rescale in the fetch
overlap and records the action. Hence the default; TRADES is still accepted, with a warning.

IB serves one contract per historical request, so a batch shares one connection and asks ticker
by ticker: `qualifyContracts` first (a symbol IB does not know is named, not requested), then
`reqHistoricalData(..., barSizeSetting="1 day")`, whose answer is a list of `BarData` (date, open,
high, low, close, volume, average, barCount). ib_async returns an EMPTY list on a request timeout
and reports IB's own errors (162 no data, 200 no security definition, ...) on `errorEvent`; both
become a named per-ticker reason. Connecting and timed-out requests are retried with backoff.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Callable, Sequence

import pandas as pd

from ldtm_core.config import setting_choice, setting_float, setting_int, setting_text
from ldtm_core.data.calendar import market_today
from ldtm_core.data.sources.base import (
    PriceSource,
    SourceAnswer,
    TransientSourceError,
    first_line,
    log,
    with_retries,
)
from ldtm_core.errors import ConfigError, InputError

# IB error codes -> (named reason, transient?)
IB_ERRORS = {
    200: ("unknown symbol: no security definition", False),
    162: ("empty answer: historical data service returned no data", False),
    354: ("not subscribed to market data", False),
    10090: ("not subscribed to market data", False),
    366: ("no historical data query found", True),
    1100: ("connectivity between IB and the gateway lost", True),
    502: ("could not connect to TWS/Gateway", True),
    504: ("not connected", True),
}


def duration_for(start: dt.date, today: dt.date) -> str:
    """IB durationStr covering start..today: 'N D' up to a year, else whole years."""
    days = max((today - start).days + 1, 1)
    return f"{days} D" if days <= 365 else f"{math.ceil(days / 365)} Y"


def bars_frame(bars: Sequence, start: dt.date, end: dt.date) -> pd.DataFrame:
    """`BarData` list -> raw frame (date, open, high, low, close, volume) within [start, end]."""
    rows = [
        {
            "date": pd.Timestamp(b.date.date() if isinstance(b.date, dt.datetime) else b.date),
            "open": b.open,
            "high": b.high,
            "low": b.low,
            "close": b.close,
            "volume": b.volume,
        }
        for b in bars
    ]
    df = pd.DataFrame(rows, columns=["date", "open", "high", "low", "close", "volume"])
    if df.empty:
        return df
    keep = (df["date"] >= pd.Timestamp(start)) & (df["date"] <= pd.Timestamp(end))
    return df[keep].reset_index(drop=True)


class IBSource(PriceSource):
    name = "ib"

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 4002,
        client_id: int = 17,
        what_to_show: str = "ADJUSTED_LAST",
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        attempts: int = 3,
        base_delay: float = 2.0,
        batch_size: int = 50,
        sleep: Callable[[float], None] = time.sleep,
        client_factory: Callable[[], object] | None = None,
        contract_factory: Callable[[str], object] | None = None,
        today: Callable[[], dt.date] = market_today,
    ):
        if what_to_show not in ("TRADES", "ADJUSTED_LAST"):
            raise InputError(f"LDTM_IB_WHAT_TO_SHOW must be ADJUSTED_LAST or TRADES, got {what_to_show!r}")
        if what_to_show == "TRADES":
            log.warning(
                "LDTM_IB_WHAT_TO_SHOW=TRADES: raw closes without IB's corporate-action events; splits and "
                "dividends are not recorded (use ADJUSTED_LAST, the default)"
            )
        self.host, self.port, self.client_id = host, port, client_id
        self.what_to_show, self.timeout, self.connect_timeout = what_to_show, timeout, connect_timeout
        self.attempts, self.base_delay, self.batch_size = max(1, attempts), base_delay, batch_size
        self.sleep, self.today = sleep, today
        self._client_factory, self._contract_factory = client_factory, contract_factory

    @classmethod
    def from_spec(cls, arg: str, *, seed: int) -> IBSource:
        return cls.from_env()

    @classmethod
    def from_env(cls) -> IBSource:
        try:
            return cls(
                host=setting_text("LDTM_IB_HOST"),
                port=setting_int("LDTM_IB_PORT"),
                client_id=setting_int("LDTM_IB_CLIENT_ID"),
                what_to_show=setting_choice("LDTM_IB_WHAT_TO_SHOW"),
                timeout=setting_float("LDTM_IB_TIMEOUT"),
                attempts=setting_int("LDTM_SOURCE_ATTEMPTS"),
            )
        except ConfigError as exc:  # the source's settings, named as such (config says which and why)
            raise InputError(f"IB source settings: {exc}") from None

    def describe(self) -> str:
        return f"ib {self.host}:{self.port} client {self.client_id} {self.what_to_show}"

    def _library(self):
        if self._client_factory is None or self._contract_factory is None:
            try:
                import ib_async
            except ImportError:
                raise InputError("price source ib needs its optional extra: pip install 'ldtm[ib]'") from None
            self._client_factory = self._client_factory or ib_async.IB
            self._contract_factory = self._contract_factory or (lambda s: ib_async.Stock(s, "SMART", "USD"))
        return self._client_factory, self._contract_factory

    def _connect(self):
        factory, _ = self._library()

        def attempt():
            ib = factory()
            try:
                ib.connect(
                    self.host, self.port, clientId=self.client_id, timeout=self.connect_timeout, readonly=True
                )
            except (ConnectionError, TimeoutError, OSError) as exc:
                raise TransientSourceError(f"IB gateway {self.host}:{self.port}: {first_line(exc)}") from exc
            return ib

        return with_retries(
            attempt,
            what=f"connect to IB {self.host}:{self.port}",
            attempts=self.attempts,
            base_delay=self.base_delay,
            sleep=self.sleep,
        )

    def fetch(self, tickers: Sequence[str], start: dt.date, end: dt.date) -> SourceAnswer:
        answer = SourceAnswer()
        _, contract_for = self._library()
        try:
            ib = self._connect()
        except TransientSourceError as exc:
            for t in tickers:
                answer.fail(t, f"HTTP/network error: {first_line(exc)}", transient=True)
            return answer
        errors: dict[str, tuple[int, str]] = {}

        def on_error(req_id, code, message, contract=None):
            symbol = getattr(contract, "symbol", None)
            if symbol:
                errors[symbol] = (int(code), str(message))

        ib.errorEvent += on_error
        try:
            contracts = [contract_for(t.replace(".", " ")) for t in tickers]
            qualified = ib.qualifyContracts(*contracts)
            # ib_async 2.x keeps positions (None = not qualified); 1.x returns only the qualified ones.
            known = {c.symbol: c for c in qualified if c is not None and getattr(c, "conId", 0)}
            for ticker in tickers:
                symbol = ticker.replace(".", " ")
                contract = known.get(symbol)
                if contract is None:
                    code, message = errors.get(symbol, (200, "no stock contract on SMART/USD"))
                    answer.fail(ticker, f"unknown symbol {ticker}: IB error {code}: {first_line(message)}")
                    continue
                self._history(ib, ticker, contract, start, end, errors, answer)
        finally:
            ib.errorEvent -= on_error
            ib.disconnect()
        return answer

    def _history(self, ib, ticker, contract, start, end, errors, answer: SourceAnswer) -> None:
        duration = duration_for(start, self.today())
        for attempt in range(1, self.attempts + 1):
            errors.pop(contract.symbol, None)
            bars = ib.reqHistoricalData(
                contract,
                endDateTime="",  # now: ADJUSTED_LAST accepts no other end; bars after `end` are cut below
                durationStr=duration,
                barSizeSetting="1 day",
                whatToShow=self.what_to_show,
                useRTH=True,
                formatDate=1,
                timeout=self.timeout,
            )
            if bars:
                answer.frames[ticker] = bars_frame(bars, start, end)
                if answer.frames[ticker].empty:
                    answer.fail(
                        ticker, f"empty answer: IB returned no bars for {ticker} from {start} to {end}"
                    )
                return
            code, message = errors.get(contract.symbol, (None, ""))
            if code is not None:
                reason, transient = IB_ERRORS.get(code, (f"IB error {code}", False))
                reason = f"{reason} (IB {code}: {first_line(message)})"
            else:
                reason, transient = f"HTTP/network error: IB request timed out after {self.timeout:g}s", True
            if not transient or attempt == self.attempts:
                answer.fail(ticker, reason, transient)
                return
            self.sleep(self.base_delay * 2 ** (attempt - 1))
