"""`ldtm audit verify`: recompute the snapshot chain, compare it with its anchors, re-derive the actuals.

Three independent checks, each reported per ticker and date:
- the chain: every row's hash matches its prediction (HMAC under `LDTM_AUDIT_KEY` when set) and links
  to the previous row of its ticker (`chain.row_hash` is the one definition writer and checker use);
- the anchors: every chain head recorded after a predict run (run_log, or given by the caller, e.g.
  from Dagster materialization metadata) still exists with the same hash, and no row follows the
  newest anchor: deleting or truncating the newest rows, or rewriting the chain, is reported;
- the actuals: every filled actual equals the close in `prices` on its target date (on the run date's
  basis: divided by the factors of corporate actions between the two dates), and the derived
  pct errors and next-day direction flags are recomputed from that close (outside the hash, but they
  are what the leaderboard scores). An actual that today's prices contradict for a recorded reason (a
  revised bar, a late corporate action: `refill.find_stale`) is not a problem but `stale`: the next
  fillback re-fills it (`refill`); the re-fills done so far are listed in `revisions` (old values kept).

With `LDTM_AUDIT_KEY` set, a ticker's chain is keyed from its first row hashed under the key on: rows
before it (written before the key was set) verify unkeyed, every row after it must be keyed. Rewriting an
early row still shows, since the first keyed row's hash covers its predecessor's.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Engine, or_, select

from ldtm_core.accountability.ledger import audit_anchor
from ldtm_core.accountability.ledger.audit_chain import (
    AuditProblem,
    ChainWalk,
    check_anchors,
    load_anchored_rows,
    unkeyed_until,
    with_given,
)
from ldtm_core.accountability.ledger.chain import (
    HASHED_COLUMNS,
    HASHED_V2,
    HASHED_V3,
    IN_SAMPLE,
    Anchor,
    audit_key,
    canonical,
    load_anchors,
    row_hash,
)
from ldtm_core.accountability.ledger.fillback import (
    LEGACY_NEUTRAL_BAND_PCT,
    direction_hit,
    pct_error,
    row_band,
)
from ldtm_core.accountability.ledger.refill import StaleActual, find_stale, revisions
from ldtm_core.accountability.ledger.target_prices import target_prices
from ldtm_core.data.corporate_actions import basis_factor, load_actions
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import InputError
from ldtm_core.horizons import DIRECTION
from ldtm_core.horizons import NAMES as HORIZONS
from ldtm_core.schema import snapshots

__all__ = ["HASHED_COLUMNS", "AuditProblem", "AuditReport", "canonical", "row_hash", "verify"]

MODES = ("full", "incremental", "auto")
# `auto` runs the full audit when the last one passed this long ago (the nightly's weekly full check).
FULL_EVERY = dt.timedelta(days=7)
# The incremental audit re-checks actuals filled this long before the last verified audit started: a
# fillback that took its timestamp before that audit began but committed after it is not missed (a
# fillback of 1,000 x 250 rows commits within seconds: docs/performance.md).
FILL_MARGIN = dt.timedelta(hours=1)
# pct errors and directions are recomputed here in Python; the database computed them in SQL.
REL_TOL = 1e-9


@dataclass
class AuditReport:
    ok: bool
    rows_checked: int
    tickers_checked: int
    problems: list[AuditProblem] = field(default_factory=list)
    anchors_checked: int = 0
    actuals_checked: int = 0
    # Tickers asked for by name that have no snapshot rows at all.
    tickers_without_rows: list[str] = field(default_factory=list)
    # Actuals contradicted by today's prices for a recorded reason: re-filled by the next fillback.
    stale: list[StaleActual] = field(default_factory=list)
    # fill_revisions rows: every re-fill so far, with the old value.
    revisions: list[dict] = field(default_factory=list)
    # "full", or "incremental": from the chain heads verified by the audit that started at `since`.
    mode: str = "full"
    since: dt.datetime | None = None

    @property
    def bad_tickers(self) -> list[str]:
        return sorted({p.ticker for p in self.problems})


def verify(
    engine: Engine,
    tickers: Sequence[str] | None = None,
    *,
    extra_anchors: Mapping[str, Anchor | Sequence[Anchor]] | None = None,
    neutral_band_pct: float | None = None,
    mode: str = "full",
    record: bool = False,
    now: dt.datetime | None = None,
    full_every: dt.timedelta = FULL_EVERY,
) -> AuditReport:
    """Check the chain, the anchors and the filled actuals (module doc); every problem is listed.

    A changed prediction shows as a hash mismatch on that row. A deleted middle row shows as a
    broken link on the next row; a deleted newest row as a missing anchored head. The check continues
    from the stored hash, so one edit is reported once, not on every later row.

    `mode`: "full" checks every row; "incremental" starts from the last verified anchor (`audit_anchor`:
    the heads a passing audit recorded) and checks those heads, the rows after them, the anchors
    recorded since and the actuals filled since (full when there is no anchor yet); "auto" is
    incremental unless the last full audit passed `full_every` ago or longer. `record`: a whole-store
    audit writes its run_log row, and when it passes, the anchor the next incremental audit starts from.
    """
    if mode not in MODES:
        raise InputError(f"audit mode {mode!r}: expected one of {', '.join(MODES)}")
    key = audit_key()
    wanted = [validate_ticker(t) for t in tickers] if tickers else None
    # Each row is judged with its own stored band; this is only the band of rows stored without one.
    band = LEGACY_NEUTRAL_BAND_PCT if neutral_band_pct is None else float(neutral_band_pct)
    started = dt.datetime.now(dt.UTC)
    with engine.connect() as conn:
        base = _base(conn, mode, now or started, full_every)
        max_id, run_log_from = audit_anchor.read_bounds(conn, started)
        anchors, keyed, unreadable = load_anchors(conn, wanted, base.run_log_from if base else None)
        base_heads = {t: h for t, h in (base.heads if base else {}).items() if wanted is None or t in wanted}
        if (keyed or any(h.keyed for h in base_heads.values())) and key is None:
            raise InputError(
                "the snapshot chain is keyed (written with LDTM_AUDIT_KEY): set LDTM_AUDIT_KEY to verify it"
            )
        walk = ChainWalk(key, unkeyed_until(anchors) if key is not None else {})
        if base is not None:
            walk.continue_from(base, base_heads, anchors)
        for r in conn.execute(_chain_rows(wanted, base, max_id)).mappings():
            walk.check(r)
        all_anchors = with_given(anchors, extra_anchors, wanted, base_heads if base else None)
        if base is not None:
            load_anchored_rows(conn, all_anchors, walk.by_ticker)
        actual_problems, actuals_checked, stale = _actuals(conn, wanted, band, base, max_id)
        fill_log = revisions(conn, wanted)
    problems = walk.problems + [
        AuditProblem("-", None, "-", f"chain anchor of {run_id} in run_log is unreadable", "anchor")
        for run_id in unreadable
    ]
    anchor_problems, anchors_checked = check_anchors(all_anchors, walk.by_ticker)
    problems += anchor_problems + actual_problems
    report = AuditReport(
        ok=not problems,
        rows_checked=walk.rows,
        tickers_checked=len(set(walk.by_ticker) | set(base_heads)),
        problems=problems,
        anchors_checked=anchors_checked,
        actuals_checked=actuals_checked,
        tickers_without_rows=[
            t for t in dict.fromkeys(wanted or []) if t not in walk.by_ticker and t not in base_heads
        ],
        stale=stale,
        revisions=fill_log,
        mode="full" if base is None else "incremental",
        since=base.verified_at if base else None,
    )
    new_heads = walk.heads()
    # An empty store has no heads to anchor: its audit writes nothing (read commands stay no-ops).
    if record and wanted is None and (max_id or base_heads or new_heads):
        audit_anchor.record(
            engine,
            full=base is None,
            ok=report.ok,
            started=started,
            max_id=max_id,
            run_log_from=run_log_from,
            heads={**base_heads, **new_heads},
            previous=base,
            rows_checked=walk.rows,
            problems=len(problems),
        )
    return report


def _base(conn, mode: str, now: dt.datetime, full_every: dt.timedelta) -> audit_anchor.Verified | None:
    """The passing audit an incremental one starts from: none in "full" mode, when there is none, or in
    "auto" mode when the last full audit is `full_every` old."""
    base = audit_anchor.latest(conn) if mode != "full" else None
    if base is not None and mode == "auto" and now - base.last_full_at >= full_every:
        return None
    return base


def _chain_rows(wanted: list[str] | None, base: audit_anchor.Verified | None, max_id: int):
    """Every hashed column of the rows to walk, per ticker in id order: those up to `max_id` (rows
    committed later are the next audit's), after the verified heads when incremental."""
    s = snapshots.c
    hashed = [*HASHED_COLUMNS, IN_SAMPLE, *HASHED_V2, *HASHED_V3, "chain_version", "prev_hash", "row_hash"]
    stmt = select(s.id, *(s[c] for c in hashed)).where(s.id <= max_id).order_by(s.ticker, s.id)
    if wanted:
        stmt = stmt.where(s.ticker.in_(wanted))
    if base is not None:
        stmt = stmt.where(s.id > base.max_id)
    return stmt


def _actuals(
    conn, wanted: list[str] | None, band: float, base: audit_anchor.Verified | None, max_id: int
) -> tuple[list[AuditProblem], int, list[StaleActual]]:
    """(Actual problems, actuals checked, stale actuals): every filled actual, or when incremental those
    of rows after the verified heads or filled since; an actual stale for a recorded reason is apart."""
    if base is None:
        stale = [st for st in find_stale(conn, wanted) if st.reason is not None]
        return (*_check_actuals(conn, wanted, band, {(st.id, st.horizon) for st in stale}), stale)
    since = (base.max_id, base.verified_at - FILL_MARGIN)
    problems, checked = _check_actuals(conn, wanted, band, set(), since, max_id)
    # Whether a mismatch is explained (stale for a recorded reason) is asked only when there is one.
    bad = sorted({p.ticker for p in problems})
    stale = [st for st in find_stale(conn, bad) if st.reason is not None] if bad else []
    if stale:
        problems, checked = _check_actuals(
            conn, wanted, band, {(st.id, st.horizon) for st in stale}, since, max_id
        )
    return problems, checked, stale


def verified_tickers(engine: Engine) -> set[str] | None:
    """The tickers of the newest passing whole-store audit's heads (None: no such audit, or unreadable):
    those whose external anchors a reader must find before it may stop reading older ones."""
    with engine.connect() as conn:
        base = audit_anchor.latest(conn)
    return None if base is None else set(base.heads)


def _close(a, b) -> bool:
    return a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=1e-9)


def actual_wrongs(r: Mapping, h: str, close: float | None, actions, band: float) -> list[str] | None:
    """What is wrong with row `r`'s filled horizon `h` against `close`, the target date's stored close
    (None: no close), rebased by the ticker's corporate `actions` as fillback rebases it: [] when right,
    None when nothing of it is filled. The one rule of the audit and of the outsider's verifier."""
    actual, err, day = r[f"{h}_actual"], r[f"{h}_pct_error"], r[f"{h}_date"]
    if close is not None:  # the fillback's basis rule: the close on the run date's basis
        close = close / basis_factor(actions, r["run_date"], day)
    flags = h == DIRECTION.name and (
        r["next_day_direction_actual"] is not None or r["next_day_direction_correct"] is not None
    )
    if actual is None and err is None and not flags:
        return None
    wrong: list[str] = []
    if actual is None:
        wrong.append(f"{h} pct error / direction filled without an actual")
    elif close is None:
        wrong.append(f"{h}_actual {actual!r} but prices has no close for {r['ticker']} on {day}")
    elif not _close(actual, close):
        wrong.append(f"{h}_actual {actual!r} != close {close!r} on {day}")
    if close is not None and actual is not None:
        pred = r[f"{h}_pred"]
        want_err = pct_error(pred, close)
        if (want_err is None and err is not None) or (want_err is not None and not _close(err, want_err)):
            wrong.append(f"{h}_pct_error {err!r} != {want_err!r} recomputed from the close")
        if h == DIRECTION.name:
            rdc = r["run_date_close"]
            move = (close - rdc) / rdc * 100.0
            b = row_band(r["neutral_band_pct"], band)
            want_dir = "bullish" if move > b else ("bearish" if move < -b else "neutral")
            if r["next_day_direction_actual"] != want_dir:
                wrong.append(
                    f"next_day_direction_actual {r['next_day_direction_actual']!r} != {want_dir!r} "
                    f"(move {move:+.4f} %, band {b} %)"
                )
            want_hit = direction_hit(pred, close, rdc, r["direction_pred"])  # None: a tie
            got_hit = r["next_day_direction_correct"]
            if (got_hit is None) != (want_hit is None) or (got_hit is not None and bool(got_hit) != want_hit):
                wrong.append(f"next_day_direction_correct {got_hit!r} != {want_hit!r}")
    return wrong


def _check_actuals(
    conn,
    wanted: list[str] | None,
    band: float,
    explained: set[tuple[int, str]],
    since: tuple[int, dt.datetime] | None = None,
    max_id: int | None = None,
) -> tuple[list[AuditProblem], int]:
    """Recompute every filled actual (and its pct error / direction flags) from `prices`; the `explained`
    (snapshot id, horizon) pairs are stale for a recorded reason (reported apart, re-filled by fillback).
    `since` = (max id, time): only rows after that id or filled since that time (the incremental audit)."""
    s = snapshots.c
    frm, px = target_prices("a")
    stmt = select(
        s.id,
        s.ticker,
        s.run_date,
        s.model_version,
        s.run_date_close,
        s.neutral_band_pct,
        s.next_day_direction_actual,
        s.next_day_direction_correct,
        s.direction_pred,
        *(s[f"{h}_{c}"] for h in HORIZONS for c in ("pred", "date", "actual", "pct_error")),
        *(px[h].c.close.label(f"{h}_close") for h in HORIZONS),
    ).select_from(frm)
    # Rows with anything filled (an error or flag without its actual is a mismatch too).
    filled = [s[f"{h}_actual"].is_not(None) for h in HORIZONS] + [
        s[f"{h}_pct_error"].is_not(None) for h in HORIZONS
    ]
    filled += [s.next_day_direction_actual.is_not(None), s.next_day_direction_correct.is_not(None)]
    stmt = stmt.where(or_(*filled))
    if since is not None:
        stmt = stmt.where(or_(s.id > since[0], s.filled_at >= since[1]))
    if max_id is not None:
        stmt = stmt.where(s.id <= max_id)
    if wanted:
        stmt = stmt.where(s.ticker.in_(wanted))
    problems: list[AuditProblem] = []
    checked = 0
    actions = load_actions(conn, wanted or None)
    for r in conn.execute(stmt.order_by(s.ticker, s.run_date, s.id)).mappings():
        for h in HORIZONS:
            wrong = actual_wrongs(r, h, r[f"{h}_close"], actions.get(r["ticker"], []), band)
            if wrong is None:
                continue
            checked += 1
            if (r["id"], h) in explained:
                continue
            if wrong:
                problems.append(
                    AuditProblem(
                        r["ticker"],
                        r["run_date"],
                        r["model_version"],
                        "actual mismatch: " + "; ".join(wrong),
                        "actual",
                    )
                )
    return problems, checked
