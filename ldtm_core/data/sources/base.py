"""The price-source interface: "daily OHLCV for these tickers from A to B".

A source answers with one raw frame per ticker (columns date, open, high, low, close, volume and,
when it has one, adj_close) and a named reason for every ticker it could not serve. It never
writes anything: `ldtm_core.data.price_fetch` validates each ticker with the ingest rules and stores the
good ones, so one bad or missing ticker never blocks the others.

Network sources retry transient failures (timeouts, connection errors, HTTP 5xx, rate limits) with
exponential backoff; `sleep` is injectable so tests run without waiting.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import pandas as pd
from sqlalchemy import Engine

log = logging.getLogger("ldtm.sources")
T = TypeVar("T")

RAW_COLUMNS = ["date", "open", "high", "low", "close", "adj_close", "volume"]


class TransientSourceError(Exception):
    """A failure a later attempt may not see (timeout, dropped connection, HTTP 5xx, rate limit)."""


@dataclass
class FileReceipt:
    """One dropped file seen by the files source; recorded with its prices in one transaction."""

    path: str
    sha256: str
    size_bytes: int
    tickers: list[str] = field(default_factory=list)
    rows: int = 0
    error: str | None = None  # the file as a whole could not be read or validated


@dataclass
class SourceAnswer:
    """What a source returned for one request."""

    frames: dict[str, pd.DataFrame] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # ticker -> named reason
    transient: set[str] = field(default_factory=set)  # failed tickers a retry may cure
    receipts: list[FileReceipt] = field(default_factory=list)  # files source only
    # Style-1 sources (raw closes + events): the splits/dividends they reported (corporate_actions.Action).
    actions: list = field(default_factory=list)

    def fail(self, ticker: str, reason: str, transient: bool = False) -> None:
        self.frames.pop(ticker, None)
        self.failures[ticker] = reason
        if transient:
            self.transient.add(ticker)
        else:
            self.transient.discard(ticker)

    def merge(self, other: SourceAnswer) -> None:
        for ticker, frame in other.frames.items():
            self.frames[ticker] = frame
            self.failures.pop(ticker, None)
            self.transient.discard(ticker)
        for ticker, reason in other.failures.items():
            self.fail(ticker, reason, ticker in other.transient)
        self.receipts.extend(other.receipts)
        self.actions.extend(other.actions)


class PriceSource(ABC):
    """Daily OHLCV for tickers over [start, end] (both inclusive, exchange dates)."""

    name: str = "source"  # how LDTM_PRICE_SOURCE names it; a module of this package with a named
    # source is found by `make_source` with no other edit
    argument: str | None = None  # e.g. "<dir>" for `files:<dir>`; None: the spec is the name alone
    # False for sources whose answer does not depend on the range asked (a folder of dropped files):
    # the caller then asks once instead of once per start date.
    incremental: bool = True
    # Tickers per request where the API takes several at once.
    batch_size: int = 50

    def prepare(self, engine: Engine, *, reread: bool = False) -> None:  # noqa: B027 - optional hook
        """Called once before fetching, with the application database (the files source reads its ledger).
        `reread` (--force / --refetch): offer again what an earlier run refused."""

    def refusal(self, ticker: str) -> str | None:
        """Why the newest data this source offered for `ticker` was refused, while nothing newer came."""
        return None

    @abstractmethod
    def fetch(self, tickers: Sequence[str], start: dt.date, end: dt.date) -> SourceAnswer: ...

    def answers(self, tickers: Sequence[str], start: dt.date, end: dt.date) -> Iterator[SourceAnswer]:
        """The answer in units that are stored one transaction each (one per dropped file for `files`)."""
        yield self.fetch(tickers, start, end)

    def describe(self) -> str:
        return self.name

    @classmethod
    def from_spec(cls, arg: str, *, seed: int) -> PriceSource:
        """The source a spec's argument names (`arg` is "" for a source that takes none), its other
        settings from the environment."""
        return cls()


def with_retries(
    call: Callable[[], T],
    *,
    what: str,
    attempts: int = 3,
    base_delay: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
    transient: tuple[type[BaseException], ...] = (TransientSourceError, TimeoutError, ConnectionError),
) -> T:
    """`call()`, retried on transient errors with delays base_delay, 2*base_delay, ...; the last error
    is raised as TransientSourceError naming `what` and the number of attempts."""
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except transient as exc:
            if attempt == attempts:
                raise TransientSourceError(
                    f"{what}: failed after {attempts} attempts: {first_line(exc)}"
                ) from exc
            delay = base_delay * 2 ** (attempt - 1)
            log.warning(
                "%s: attempt %d/%d failed (%s); retrying in %.1fs",
                what,
                attempt,
                attempts,
                first_line(exc),
                delay,
            )
            sleep(delay)
    raise AssertionError("unreachable")


def first_line(exc: BaseException | str) -> str:
    text = str(exc).strip() or (type(exc).__name__ if isinstance(exc, BaseException) else "")
    return text.splitlines()[0] if text else ""
