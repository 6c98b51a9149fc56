"""The audit's chain and anchor checks (`audit.verify` runs them in order; its module doc says what each
proves): a walk along each ticker's chain, row by row, and the comparison of the recorded chain heads
(anchors) with the rows the walk saw."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import select

from ldtm_core.accountability.ledger import audit_anchor
from ldtm_core.accountability.ledger.chain import Anchor, row_hash
from ldtm_core.schema import snapshots
from ldtm_core.scoring.baselines import decode_calls, recorded_close_calls, registry


@dataclass
class AuditProblem:
    ticker: str
    run_date: dt.date | str | None
    model_version: str
    what: str
    kind: str = "chain"  # chain / anchor / actual


@dataclass
class ChainWalk:
    """Each ticker's chain, row by row in id order: the link, the hash (keyed where the chain is), the
    v3 baseline calls and the chain version; one problem per wrong row, continuing from its stored hash."""

    key: bytes | None
    unkeyed_until: dict[str, int]  # per ticker: rows up to this id were written before the key was set
    rows: int = 0
    problems: list[AuditProblem] = field(default_factory=list)
    by_ticker: dict[str, dict[int, tuple]] = field(default_factory=lambda: defaultdict(dict))
    expected_prev: dict[str, str] = field(default_factory=dict)
    keyed_from: dict[str, int] = field(default_factory=dict)  # per ticker: the first row hashed under the key
    newest_version: dict[str, int] = field(default_factory=dict)

    def continue_from(self, base: audit_anchor.Verified, heads: Mapping, anchors: dict[str, list]) -> None:
        """Start each ticker from the head a passing audit verified: its hash covers every row before it,
        and it is compared like an anchor (it must still be there, unchanged)."""
        for t, h in heads.items():
            self.expected_prev[t] = h.row_hash
            self.newest_version[t] = h.version
            if h.keyed:
                self.keyed_from[t] = h.id
            source = f"the verified chain head of the audit of {base.verified_at:%Y-%m-%d %H:%M} UTC (run {base.run_id})"
            anchors.setdefault(t, []).append(Anchor(source, h.id, h.row_hash, None, "-"))

    def check(self, r: Mapping) -> None:
        self.rows += 1
        t = r["ticker"]
        self.by_ticker[t][r["id"]] = (r["row_hash"], r["run_date"], r["model_version"])
        if r["prev_hash"] != (prev := self.expected_prev.get(t, "")):
            self._problem(r, _broken_link(prev))
        if (wrong := self._hash_wrong(r)) is not None:
            self._problem(r, wrong)
        self.expected_prev[t] = r["row_hash"]
        version = int(r["chain_version"] or 1)
        if version >= 3 and (wrong := calls_off_their_closes(r)):
            self._problem(r, wrong)
        # Versions only go up along a chain: a row relabelled as older would escape what v2 hashes.
        if version < self.newest_version.get(t, 1):
            self._problem(
                r,
                f"chain version went back: row {r['id']} says version {version} after a row of version "
                f"{self.newest_version[t]} (relabelled to escape the fields the newer version hashes)",
            )
        self.newest_version[t] = max(version, self.newest_version.get(t, 1))

    def _hash_wrong(self, r: Mapping) -> str | None:
        t = r["ticker"]
        if row_hash(r["prev_hash"], r, self.key) == r["row_hash"]:
            self.keyed_from.setdefault(t, r["id"])
            return None
        unkeyed_hash = self.key is not None and row_hash(r["prev_hash"], r) == r["row_hash"]
        if unkeyed_hash and t not in self.keyed_from and r["id"] <= self.unkeyed_until.get(t, r["id"]):
            return None  # written before the key was set: the ticker's chain is not keyed yet
        if unkeyed_hash:
            return (
                "hash not keyed: computed without LDTM_AUDIT_KEY where the ticker's chain is keyed "
                "(recomputed by someone without the key)"
            )
        return "prediction changed: row_hash mismatch"

    def _problem(self, r: Mapping, what: str) -> None:
        self.problems.append(AuditProblem(r["ticker"], r["run_date"], r["model_version"], what))

    def heads(self) -> dict[str, audit_anchor.Head]:
        """The newest row of each ticker the walk saw: what the next incremental audit starts from."""
        return {
            t: audit_anchor.Head(
                max(ids),
                self.expected_prev[t],
                self.key is not None and t in self.keyed_from,
                self.newest_version[t],
            )
            for t, ids in self.by_ticker.items()
        }


def _broken_link(prev: str) -> str:
    if prev == "":
        return "chain broken: first row of the ticker does not start the chain (rows before it were deleted)"
    return (
        "chain broken: prev_hash does not match the previous row (a row was deleted, inserted or re-hashed)"
    )


def calls_off_their_closes(row: Mapping) -> str | None:
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


def with_given(
    anchors: Mapping[str, list[Anchor]],
    given: Mapping[str, Anchor | Sequence[Anchor]] | None,
    wanted: list[str] | None,
    base_heads: Mapping | None,
) -> dict[str, list[Anchor]]:
    """The recorded anchors plus those the caller gives (e.g. Dagster's materialization metadata). After a
    verified head (`base_heads`, an incremental audit), older given anchors are covered by it; the newest
    one is still compared: it is what catches a verified anchor forged in the app database."""
    out = {t: list(v) for t, v in anchors.items()}
    for t, a in (given or {}).items():
        if wanted is None or t in wanted:
            items = list(a) if isinstance(a, list | tuple) else [a]
            if base_heads is not None and items:
                newest = max(x.id for x in items)
                floor = base_heads[t].id if t in base_heads else 0
                items = [x for x in items if x.id >= floor or x.id == newest]
            out.setdefault(t, []).extend(items)
    return out


def load_anchored_rows(
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


def unkeyed_until(anchors: Mapping[str, list[Anchor]]) -> dict[str, int]:
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


def check_anchors(
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
                what = (
                    f"anchored chain head missing: row {a.id} recorded by {a.source} is gone "
                    "(the newest rows were deleted or the table truncated)"
                )
                problems.append(AuditProblem(t, a.run_date, a.model_version, what, "anchor"))
            elif stored[0] != a.row_hash:
                what = (
                    f"anchored chain head changed: row {a.id} no longer has the hash recorded by "
                    f"{a.source} (the chain was rewritten)"
                )
                problems.append(AuditProblem(t, stored[1], stored[2], what, "anchor"))
        newest = max(a.id for a in anchors[t])
        for i, (_, run_date, version) in sorted(rows.items()):
            if i > newest:
                what = (
                    f"row {i} follows the newest anchored chain head ({newest}): "
                    "not written by a recorded predict run"
                )
                problems.append(AuditProblem(t, run_date, version, what, "anchor"))
    return problems, checked
