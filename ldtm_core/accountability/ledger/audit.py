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
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import Engine, or_, select

from ldtm_core.accountability.ledger import audit_anchor
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
from ldtm_core.accountability.ledger.fillback import LEGACY_NEUTRAL_BAND_PCT, direction_hit, row_band
from ldtm_core.accountability.ledger.refill import StaleActual, find_stale, revisions
from ldtm_core.accountability.ledger.target_prices import target_prices
from ldtm_core.data.corporate_actions import basis_factor, load_actions
from ldtm_core.data.universe import validate_ticker
from ldtm_core.errors import InputError
from ldtm_core.horizons import DIRECTION
from ldtm_core.horizons import NAMES as HORIZONS
from ldtm_core.schema import snapshots
from ldtm_core.scoring.baselines import decode_calls, recorded_close_calls, registry

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
class AuditProblem:
    ticker: str
    run_date: dt.date | str | None
    model_version: str
    what: str
    kind: str = "chain"  # chain / anchor / actual


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
    s = snapshots.c
    cols = [
        s.id,
        *(s[c] for c in HASHED_COLUMNS),
        s[IN_SAMPLE],
        *(s[c] for c in HASHED_V2),
        *(s[c] for c in HASHED_V3),
        s.chain_version,
        s.prev_hash,
        s.row_hash,
    ]
    problems: list[AuditProblem] = []
    rows = 0
    by_ticker: dict[str, dict[int, tuple]] = defaultdict(dict)
    expected_prev: dict[str, str] = {}
    keyed_from: dict[str, int] = {}  # per ticker: the first row hashed under the key
    newest_version: dict[str, int] = {}
    with engine.connect() as conn:
        base = audit_anchor.latest(conn) if mode != "full" else None
        if base is not None and mode == "auto" and (now or started) - base.last_full_at >= full_every:
            base = None
        max_id, run_log_from = audit_anchor.read_bounds(conn, started)
        anchors, keyed, unreadable = load_anchors(conn, wanted, base.run_log_from if base else None)
        base_heads = {t: h for t, h in (base.heads if base else {}).items() if wanted is None or t in wanted}
        keyed = keyed or any(h.keyed for h in base_heads.values())
        if keyed and key is None:
            raise InputError(
                "the snapshot chain is keyed (written with LDTM_AUDIT_KEY): set LDTM_AUDIT_KEY to verify it"
            )
        unkeyed_until = _unkeyed_until(anchors) if key is not None else {}
        # Rows committed after the bounds were read are the next audit's (its anchor says where it starts).
        stmt = select(*cols).where(s.id <= max_id).order_by(s.ticker, s.id)
        if wanted:
            stmt = stmt.where(s.ticker.in_(wanted))
        if base is not None:
            stmt = stmt.where(s.id > base.max_id)
            for t, h in base_heads.items():
                # The verified head's hash covers every row before it: continue the chain from it.
                expected_prev[t] = h.row_hash
                newest_version[t] = h.version
                if h.keyed:
                    keyed_from[t] = h.id
                anchors.setdefault(t, []).append(
                    Anchor(
                        f"the verified chain head of the audit of {base.verified_at:%Y-%m-%d %H:%M} UTC "
                        f"(run {base.run_id})",
                        h.id,
                        h.row_hash,
                        None,
                        "-",
                    )
                )
        for r in conn.execute(stmt).mappings():
            rows += 1
            t = r["ticker"]
            by_ticker[t][r["id"]] = (r["row_hash"], r["run_date"], r["model_version"])
            prev = expected_prev.get(t, "")
            if r["prev_hash"] != prev:
                what = (
                    "chain broken: first row of the ticker does not start the chain (rows before it were deleted)"
                    if prev == ""
                    else "chain broken: prev_hash does not match the previous row (a row was deleted, inserted or re-hashed)"
                )
                problems.append(AuditProblem(t, r["run_date"], r["model_version"], what))
            if row_hash(r["prev_hash"], r, key) == r["row_hash"]:
                keyed_from.setdefault(t, r["id"])
            elif (
                key is not None
                and t not in keyed_from
                and r["id"] <= unkeyed_until.get(t, r["id"])
                and row_hash(r["prev_hash"], r) == r["row_hash"]
            ):
                pass  # written before the key was set: the ticker's chain is not keyed yet
            else:
                if key is not None and row_hash(r["prev_hash"], r) == r["row_hash"]:
                    what = (
                        "hash not keyed: computed without LDTM_AUDIT_KEY where the ticker's chain is keyed "
                        "(recomputed by someone without the key)"
                    )
                else:
                    what = "prediction changed: row_hash mismatch"
                problems.append(AuditProblem(t, r["run_date"], r["model_version"], what))
            expected_prev[t] = r["row_hash"]
            if int(r["chain_version"] or 1) >= 3 and (wrong := _calls_off_their_closes(r)):
                problems.append(AuditProblem(t, r["run_date"], r["model_version"], wrong))
            # Versions only go up along a chain: a row relabelled as older would escape what v2 hashes.
            version = int(r["chain_version"] or 1)
            if version < newest_version.get(t, 1):
                problems.append(
                    AuditProblem(
                        t,
                        r["run_date"],
                        r["model_version"],
                        f"chain version went back: row {r['id']} says version {version} after a row of version "
                        f"{newest_version[t]} (relabelled to escape the fields the newer version hashes)",
                    )
                )
            newest_version[t] = max(version, newest_version.get(t, 1))
        new_heads = {
            t: audit_anchor.Head(
                max(ids), expected_prev[t], key is not None and t in keyed_from, newest_version[t]
            )
            for t, ids in by_ticker.items()
        }
        all_anchors = {t: list(v) for t, v in anchors.items()}
        for t, a in (extra_anchors or {}).items():
            if wanted is None or t in wanted:
                given = list(a) if isinstance(a, list | tuple) else [a]
                if base is not None and given:
                    # Older external anchors are covered by the verified head (module doc); the newest one
                    # is still compared: it is what catches a verified anchor forged in the app database.
                    newest = max(x.id for x in given)
                    floor = base_heads[t].id if t in base_heads else 0
                    given = [x for x in given if x.id >= floor or x.id == newest]
                all_anchors.setdefault(t, []).extend(given)
        if base is not None:
            _load_anchored_rows(conn, all_anchors, by_ticker)
            since = (base.max_id, base.verified_at - FILL_MARGIN)
            actual_problems, actuals_checked = _check_actuals(conn, wanted, band, set(), since, max_id)
            # Whether a mismatch is explained (stale for a recorded reason) is asked only when there is one.
            bad = sorted({p.ticker for p in actual_problems})
            stale = [st for st in find_stale(conn, bad) if st.reason is not None] if bad else []
            if stale:
                explained = {(st.id, st.horizon) for st in stale}
                actual_problems, actuals_checked = _check_actuals(
                    conn, wanted, band, explained, since, max_id
                )
        else:
            stale = [st for st in find_stale(conn, wanted) if st.reason is not None]
            actual_problems, actuals_checked = _check_actuals(
                conn, wanted, band, {(st.id, st.horizon) for st in stale}
            )
        fill_log = revisions(conn, wanted)
    for run_id in unreadable:
        problems.append(
            AuditProblem("-", None, "-", f"chain anchor of {run_id} in run_log is unreadable", "anchor")
        )
    anchor_problems, anchors_checked = _check_anchors(all_anchors, by_ticker)
    problems.extend(anchor_problems)
    problems.extend(actual_problems)
    missing = [t for t in dict.fromkeys(wanted or []) if t not in by_ticker and t not in base_heads]
    report = AuditReport(
        ok=not problems,
        rows_checked=rows,
        tickers_checked=len(by_ticker) if base is None else len(set(by_ticker) | set(base_heads)),
        problems=problems,
        anchors_checked=anchors_checked,
        actuals_checked=actuals_checked,
        tickers_without_rows=missing,
        stale=stale,
        revisions=fill_log,
        mode="full" if base is None else "incremental",
        since=base.verified_at if base else None,
    )
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
            rows_checked=rows,
            problems=len(problems),
        )
    return report


def _calls_off_their_closes(row: Mapping) -> str | None:
    """A chain-version-3 row's recorded baseline calls re-derived from its own recorded closes: each
    baseline that reads no more than those two closes must have called what its rule gives on them
    (the hash proves the row is as written; this proves it was written right). None when all agree."""
    try:
        recorded = decode_calls(row["baseline_calls"])
    except (ValueError, TypeError, AttributeError):
        return "baseline calls unreadable: not the JSON object predict records"
    close = np.array([row["run_date_close"]], dtype=float)
    prev = np.array([np.nan if row["prev_close"] is None else row["prev_close"]], dtype=float)
    derived = recorded_close_calls(close, prev, [b for b in registry() if b.sessions <= 2])
    off = [
        f"{name} recorded {recorded[name]:g}, its rule gives {call[0]:g}"
        for name, call in derived.items()
        if name in recorded and not np.array_equal(recorded[name], call[0], equal_nan=True)
    ]
    return "baseline call does not follow from the recorded closes: " + "; ".join(off) if off else None


def verified_tickers(engine: Engine) -> set[str] | None:
    """The tickers of the newest passing whole-store audit's heads (None: no such audit, or unreadable):
    those whose external anchors a reader must find before it may stop reading older ones."""
    with engine.connect() as conn:
        base = audit_anchor.latest(conn)
    return None if base is None else set(base.heads)


def _load_anchored_rows(
    conn, anchors: Mapping[str, list[Anchor]], by_ticker: dict[str, dict[int, tuple]]
) -> None:
    """Add the rows the anchors name that the incremental read did not load (the verified heads, a
    rerun's re-anchored heads), by primary key, so each anchor is compared with its stored row."""
    s = snapshots.c
    loaded = {i for rows in by_ticker.values() for i in rows}
    ids = sorted({a.id for v in anchors.values() for a in v} - loaded)
    for start in range(0, len(ids), 1000):
        chunk = ids[start : start + 1000]
        stmt = select(s.id, s.ticker, s.row_hash, s.run_date, s.model_version).where(s.id.in_(chunk))
        for i, t, h, d, v in conn.execute(stmt):
            by_ticker[t][i] = (h, d, v)


def _unkeyed_until(anchors: Mapping[str, list[Anchor]]) -> dict[str, int]:
    """Per ticker with a keyed predict run: the newest row anchored unkeyed before its first keyed anchor.
    Rows up to it were written before LDTM_AUDIT_KEY was set and verify unkeyed; rows after it must be
    keyed. Tickers with no keyed run yet are absent: all their (old) rows verify unkeyed."""
    out: dict[str, int] = {}
    for t, items in anchors.items():
        keyed = [a.id for a in items if a.keyed]
        if keyed:
            first = min(keyed)
            out[t] = max((a.id for a in items if not a.keyed and a.id <= first), default=0)
    return out


def _check_anchors(
    anchors: Mapping[str, list[Anchor]], by_ticker: Mapping[str, Mapping[int, tuple]]
) -> tuple[list[AuditProblem], int]:
    """Each anchored head must still be there with its hash; no row may follow the newest anchor."""
    problems: list[AuditProblem] = []
    checked = 0
    for t in sorted(anchors):
        rows = by_ticker.get(t, {})
        seen: set[tuple[int, str]] = set()
        for a in anchors[t]:
            if (a.id, a.row_hash) in seen:  # a rerun anchors the same head again
                continue
            seen.add((a.id, a.row_hash))
            checked += 1
            stored = rows.get(a.id)
            if stored is None:
                problems.append(
                    AuditProblem(
                        t,
                        a.run_date,
                        a.model_version,
                        f"anchored chain head missing: row {a.id} recorded by {a.source} is gone "
                        "(the newest rows were deleted or the table truncated)",
                        "anchor",
                    )
                )
            elif stored[0] != a.row_hash:
                problems.append(
                    AuditProblem(
                        t,
                        stored[1],
                        stored[2],
                        f"anchored chain head changed: row {a.id} no longer has the hash recorded by "
                        f"{a.source} (the chain was rewritten)",
                        "anchor",
                    )
                )
        newest = max(a.id for a in anchors[t])
        for i, (_, run_date, version) in sorted(rows.items()):
            if i > newest:
                problems.append(
                    AuditProblem(
                        t,
                        run_date,
                        version,
                        f"row {i} follows the newest anchored chain head ({newest}): "
                        "not written by a recorded predict run",
                        "anchor",
                    )
                )
    return problems, checked


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
        want_err = (r[f"{h}_pred"] - close) / close * 100.0
        if not _close(err, want_err):
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
            want_hit = direction_hit(r[f"{h}_pred"], close, rdc)  # None: a tie
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
