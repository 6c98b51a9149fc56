"""A dated universe (SPEC §2): which tickers were members of the universe on each evening.

The shipped lists (`ldtm_core/universe/*.txt`) are membership as of the day they were written, with no
history: applied to the past they keep today's members in every old evening (survivorship). A history is
loaded from a file in Qlib's instruments format, one span per line:

    TICKER<TAB>START<TAB>END        (YYYY-MM-DD; END empty, or on/after 2099-01-01: still a member)

into `universe_membership` (`ldtm universe import FILE`). `Membership` is the one reader: with no rows
every ticker of the configured universe is a member on every evening (today's behaviour, stated by
`Membership.rule`); with rows, a ticker is a member on day d iff one of its spans has
start <= d <= end (a ticker with no span is never a member). Backtest folds, `predict` (nightly and
replayed evenings) and fillback's unfillable marks read it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sqlalchemy import Engine, delete, insert, select

from ldtm_core.data.universe import validate_ticker
from ldtm_core.db import run_in_transaction
from ldtm_core.errors import InputError
from ldtm_core.schema import universe_membership
from ldtm_core.text_files import read_text_file

# An END on or after this day means "still a member" (Qlib writes 2099-12-31 or similar for today's members).
OPEN_END = dt.date(2099, 1, 1)
# At most this many problems of a file are listed in one error.
MAX_ERRORS = 20
NO_HISTORY = (
    "no membership history (universe_membership is empty): every ticker of the configured universe counts "
    "as a member on every evening, today's list applied to the past (survivorship; load a history with "
    "`ldtm universe import FILE`)"
)


@dataclass(frozen=True)
class Span:
    """One span of membership: `start` .. `end` inclusive; `end` None while still a member."""

    ticker: str
    start: dt.date
    end: dt.date | None = None

    def covers(self, day: dt.date) -> bool:
        return self.start <= day and (self.end is None or day <= self.end)

    def describe(self) -> str:
        return f"{self.start}..{self.end or 'now'}"


def _date(raw: str, what: str) -> dt.date:
    try:
        return dt.date.fromisoformat(raw)
    except ValueError:
        raise InputError(f"{what} {raw!r} is not a date (expected YYYY-MM-DD)") from None


def parse_membership(text: str, source: str) -> list[Span]:
    """The spans of an instruments file's text (`source` names it in errors), oldest first per ticker.

    Blank lines and `#` comments are skipped. Every problem is reported at once, each as
    `source:line: TICKER: what is wrong`: a bad ticker or date, an end before the start, a span that
    overlaps another of the same ticker.
    """
    errors: list[str] = []
    spans: list[tuple[int, Span]] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        item = line.split("#", 1)[0].strip()
        if not item:
            continue
        parts = [p.strip() for p in item.split("\t")] if "\t" in item else item.split()
        where = f"{source}:{line_no}"
        if len(parts) not in (2, 3):
            errors.append(f"{where}: expected TICKER<TAB>START<TAB>END, got {len(parts)} field(s): {item!r}")
            continue
        try:
            ticker = validate_ticker(parts[0])
        except InputError as exc:
            errors.append(f"{where}: {exc}")
            continue
        try:
            start = _date(parts[1], "start")
            end = _date(parts[2], "end") if len(parts) == 3 and parts[2] else None
        except InputError as exc:
            errors.append(f"{where}: {ticker}: {exc}")
            continue
        if end is not None and end >= OPEN_END:
            end = None
        if end is not None and end < start:
            errors.append(f"{where}: {ticker}: end {end} is before start {start}")
            continue
        spans.append((line_no, Span(ticker, start, end)))
    by_ticker: dict[str, list[tuple[int, Span]]] = {}
    for line_no, span in spans:
        by_ticker.setdefault(span.ticker, []).append((line_no, span))
    for ticker, items in by_ticker.items():
        items.sort(key=lambda item: item[1].start)
        for (prev_line, prev), (line_no, span) in zip(items, items[1:], strict=False):
            if prev.end is None or span.start <= prev.end:
                errors.append(
                    f"{source}:{line_no}: {ticker}: span {span.describe()} overlaps its span "
                    f"{prev.describe()} (line {prev_line})"
                )
    if errors:
        more = f"\n... and {len(errors) - MAX_ERRORS} more" if len(errors) > MAX_ERRORS else ""
        raise InputError(
            f"{source}: {len(errors)} problem(s), nothing imported:\n" + "\n".join(errors[:MAX_ERRORS]) + more
        )
    if not spans:
        raise InputError(f"{source}: no membership spans (expected TICKER<TAB>START<TAB>END lines)")
    return sorted((s for _, s in spans), key=lambda s: (s.ticker, s.start))


def read_membership_file(path: str | Path) -> list[Span]:
    return parse_membership(read_text_file(path, "membership file"), str(path))


def write_membership_file(path: str | Path, spans: Iterable[Span], header: str = "") -> Path:
    """Write `spans` in the instruments format (END empty while a member); `header` as `#` lines."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# {h}" for h in header.splitlines()] if header else []
    lines += [
        f"{s.ticker}\t{s.start}\t{s.end or ''}" for s in sorted(spans, key=lambda s: (s.ticker, s.start))
    ]
    p.write_text("\n".join(lines) + "\n")
    return p


def import_membership(engine: Engine, spans: Sequence[Span], source: str) -> int:
    """Replace the whole stored history with `spans` (one transaction): a file is the full history."""
    now = dt.datetime.now(dt.UTC)
    rows = [
        {"ticker": s.ticker, "start_date": s.start, "end_date": s.end, "source": source, "imported_at": now}
        for s in spans
    ]

    def write(conn) -> None:
        conn.execute(delete(universe_membership))
        if rows:
            conn.execute(insert(universe_membership), rows)

    run_in_transaction(engine, write)
    return len(rows)


@dataclass(frozen=True)
class Membership:
    """The stored history, read once: `spans` by ticker (empty: no history, everyone is a member)."""

    spans: dict[str, tuple[Span, ...]] = field(default_factory=dict)
    source: str = ""
    imported_at: dt.datetime | None = None

    @property
    def has_history(self) -> bool:
        return bool(self.spans)

    def is_member(self, ticker: str, day: dt.date) -> bool:
        if not self.spans:
            return True
        return any(s.covers(day) for s in self.spans.get(ticker, ()))

    def members(self, day: dt.date, tickers: Iterable[str]) -> list[str]:
        """Those of `tickers` that were members on `day`, in their order."""
        return [t for t in tickers if self.is_member(t, day)]

    def mask(self, ticker: str, dates) -> np.ndarray:
        """Boolean array: was `ticker` a member on each of `dates` (datetime64 / dates)?"""
        days = np.asarray(dates, dtype="datetime64[D]")
        if not self.spans:
            return np.ones(len(days), dtype=bool)
        out = np.zeros(len(days), dtype=bool)
        for s in self.spans.get(ticker, ()):
            lo = np.datetime64(s.start, "D")
            hi = np.datetime64(s.end, "D") if s.end is not None else np.datetime64("9999-12-31", "D")
            out |= (days >= lo) & (days <= hi)
        return out

    def row_mask(self, tickers, dates) -> np.ndarray:
        """Boolean array, one per (tickers[i], dates[i]) pair: was that ticker a member on that day?"""
        tickers, days = np.asarray(tickers, dtype=object), np.asarray(dates, dtype="datetime64[D]")
        out = np.ones(len(days), dtype=bool)
        if self.spans:
            for t in set(tickers):
                at = tickers == t
                out[at] = self.mask(t, days[at])
        return out

    def why_not(self, ticker: str, day: dt.date) -> str:
        """Why `ticker` is not a member on `day` (for a skipped ticker's reason)."""
        own = self.spans.get(ticker, ())
        if not own:
            return f"{ticker} is not in the membership history (universe_membership): never a member"
        return (
            f"{ticker} was not a member of the universe on {day} (its membership: "
            f"{', '.join(s.describe() for s in own)})"
        )

    def last_end(self, ticker: str) -> dt.date | None:
        """The day `ticker` left for good: the end of its newest span (None: still a member, or no span)."""
        own = self.spans.get(ticker, ())
        return own[-1].end if own else None

    def rule(self) -> str:
        """One sentence for reports: which rule chose the members."""
        if not self.spans:
            return NO_HISTORY
        n = sum(len(v) for v in self.spans.values())
        when = f" on {self.imported_at:%Y-%m-%d}" if self.imported_at else ""
        return (
            f"members as of each evening from universe_membership ({len(self.spans)} tickers, {n} spans, "
            f"imported from {self.source}{when}): a ticker counts only on evenings it was a member"
        )


def load_membership(engine: Engine) -> Membership:
    """The stored history (`Membership()` when there is none)."""
    m = universe_membership.c
    with engine.connect() as conn:
        rows = conn.execute(
            select(m.ticker, m.start_date, m.end_date, m.source, m.imported_at).order_by(
                m.ticker, m.start_date
            )
        ).all()
    spans: dict[str, list[Span]] = {}
    for r in rows:
        spans.setdefault(r.ticker, []).append(Span(r.ticker, r.start_date, r.end_date))
    return Membership(
        {t: tuple(v) for t, v in spans.items()},
        source=rows[0].source if rows else "",
        imported_at=max((r.imported_at for r in rows), default=None),
    )


def members_as_of(engine: Engine, day: dt.date, tickers: Iterable[str]) -> list[str]:
    """Those of `tickers` that were members on `day`: all of them with no stored history (today's
    behaviour, see `Membership.rule`); with a history, those with a span covering `day`."""
    return load_membership(engine).members(day, tickers)
