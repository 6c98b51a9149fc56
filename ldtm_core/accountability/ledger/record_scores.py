"""The outsider's scores: closes held to what the receipts signed, revised answers apart, and the board's
rows only (`record_verify` calls these on the rows that passed its checks).

- Every evening's `run_date_close` is signed (it is in each row's prediction hash). An exported close on
  that date that differs from the signed one changed after publication: a finding naming ticker, date
  and both values, unless a logged re-fill (`fill_revisions`) of an answer with that target explains it.
- Answers re-filled after they were first published are counted apart, and the next-day accuracy is
  given on the original answers beside the revised ones.
- The board counts what the leaderboard counts by default: an evening's first published row (shadows
  never), live, out of sample, by a gated (active) model; replay, in-sample and ungated rows are
  counted apart, as hindsight or unvetted.
"""

from __future__ import annotations

import math

import pandas as pd

from ldtm_core.accountability.ledger.chain import IN_SAMPLE
from ldtm_core.accountability.ledger.fillback import direction_hit
from ldtm_core.horizons import DIRECTION

GROUPS = ("board", "replay", "in-sample", "ungated")  # the board first; the others counted apart


def _day(value):
    return None if value is None else pd.Timestamp(value).date()


def group(row: dict) -> str:
    """Which count a row falls in: the board's, or the one it is kept apart in."""
    if row["mode"] == "replay":
        return "replay"
    if row.get(IN_SAMPLE):
        return "in-sample"
    if row.get("model_status") not in (None, "active"):
        return "ungated"
    return "board"


def first_published(rows: list[dict]) -> list[dict]:
    """Each (ticker, evening)'s first row that is not a shadow's: the one the board scores."""
    first: dict[tuple, dict] = {}
    for r in sorted(rows, key=lambda r: int(r["id"])):
        if r.get("model_status") != "shadow":
            first.setdefault((r["ticker"], _day(r["run_date"])), r)
    return list(first.values())


def revised_targets(revisions: pd.DataFrame, by_id: dict[int, dict]) -> set[tuple[str, object]]:
    """(ticker, target date) of every logged re-fill: the closes a revision explains."""
    out = set()
    for sid, horizon in revisions[["snapshot_id", "horizon"]].itertuples(index=False):
        row = by_id.get(int(sid))
        if row is not None:
            out.add((row["ticker"], _day(row.get(f"{horizon}_date"))))
    return out


def changed_closes(rows: list[dict], prices: pd.DataFrame, explained: set) -> tuple[list[tuple], int]:
    """([(row, exported close)] of signed closes the export contradicts unexplained, how many a logged
    re-fill explains)."""
    closes = {
        (t, _day(d)): float(c) for t, d, c in prices[["ticker", "date", "close"]].itertuples(index=False)
    }
    wrong, revised, seen = [], 0, set()
    for r in rows:
        key = (r["ticker"], _day(r["run_date"]))
        signed, exported = r.get("run_date_close"), closes.get(key)
        if key in seen or signed is None or exported is None:
            continue
        seen.add(key)
        if not math.isclose(exported, float(signed), rel_tol=1e-9, abs_tol=1e-12):
            if key in explained:
                revised += 1
            else:
                wrong.append((r, exported))
    return wrong, revised


def original_answers(revisions: pd.DataFrame) -> dict[tuple[int, str], float]:
    """{(snapshot id, horizon): the actual first published} for every re-filled answer."""
    first: dict[tuple[int, str], float] = {}
    for sid, horizon, old in revisions.sort_values("revised_at")[
        ["snapshot_id", "horizon", "old_actual"]
    ].itertuples(index=False):
        first.setdefault((int(sid), str(horizon)), float(old))
    return first


def board(rows: list[dict], originals: dict[tuple[int, str], float]) -> pd.DataFrame:
    """Per group and ticker: rows, their first and last evening, next-day calls decided, right, accuracy;
    and the same on the answers first published (`right_original`, `accuracy_original`: they differ only
    where a re-fill changed one)."""
    col = DIRECTION.col("direction_correct")
    records = []
    for r in first_published(rows):
        hit = r[col]
        old = originals.get((int(r["id"]), DIRECTION.name))
        first_hit = (
            hit
            if old is None
            else direction_hit(r[DIRECTION.col("pred")], old, r["run_date_close"], r.get("direction_pred"))
        )
        records.append((group(r), r["ticker"], _day(r["run_date"]), hit, first_hit))
    frame = pd.DataFrame(records, columns=["group", "ticker", "evening", "correct", "correct_original"])
    out = []
    for (g, t), part in frame.groupby(["group", "ticker"], sort=False):
        decided, first = part["correct"].dropna(), part["correct_original"].dropna()
        out.append(
            {
                "group": g,
                "ticker": t,
                "rows": len(part),
                "first": part["evening"].min(),
                "last": part["evening"].max(),
                "decided": len(decided),
                "right": int(decided.sum()),
                "accuracy": decided.mean() if len(decided) else float("nan"),
                "right_original": int(first.sum()),
                "accuracy_original": first.mean() if len(first) else float("nan"),
            }
        )
    cols = [
        "group",
        "ticker",
        "rows",
        "first",
        "last",
        "decided",
        "right",
        "accuracy",
        "right_original",
        "accuracy_original",
    ]
    result = pd.DataFrame(out, columns=cols)
    order = {g: i for i, g in enumerate(GROUPS)}
    return result.sort_values(["group", "ticker"], key=lambda s: s.map(order) if s.name == "group" else s)


def revision_counts(rows: list[dict], originals: dict[tuple[int, str], float]) -> tuple[int, int]:
    """(answers revised after publication, next-day directions that the revision changed)."""
    by_id = {int(r["id"]): r for r in rows}
    revised = sum(1 for sid, _ in originals if sid in by_id)
    changed = 0
    for (sid, horizon), old in originals.items():
        r = by_id.get(sid)
        if r is not None and horizon == DIRECTION.name:
            before = direction_hit(
                r[DIRECTION.col("pred")], old, r["run_date_close"], r.get("direction_pred")
            )
            changed += before != r[DIRECTION.col("direction_correct")]
    return revised, changed
