"""`ldtm verify-record EXPORT RECEIPTS --public-key KEY`: an outsider's check of the record, with no
database and no secret.

1. The receipts: each signed by the key in force (the one given, or one a `key` receipt signed by it
   introduced), numbered without a gap, each naming the SHA-256 of the one before, the evening ones
   covering snapshot ids without a gap, each Merkle root equal to its rows'.
2. Every row a receipt lists is in the export unchanged: same ticker and evening, the same prediction
   (its SHA-256 recomputed from the exported columns) and chain hash. A row gone is "removed", a row
   whose prediction or hash differs is "edited"; each names the ticker and evening.
3. Each covered live row's receipt was issued before the close of its next-day target date; a later
   one is reported (the row is then not shown to be a forecast). Replay rows (`mode` replay) were
   recorded after their targets by design and are counted apart. With the TSA's certificates
   (`--tsa-certs`), each receipt's RFC 3161 token is checked, and the rows whose TSA time precedes
   their target's close are counted: their time rests on the TSA's clock, not the issuer's.
4. The chain in the export links (each row's prev_hash is the row before's hash; its hashes themselves
   may be HMACs, which only the key recomputes: the receipts vouch for them). Rows no receipt covers
   are reported: nothing outside the database vouches for them.
5. Every filled actual, its error and direction flags are recomputed from the exported closes and
   corporate actions (`audit.actual_wrongs`, the audit's own rule), and the board's next-day accuracy is
   recomputed from the rows that passed.

What it does not prove: that the receipts' clock was right where no TSA token vouches for it (the
issuer signs its own time), nor that the exported closes are the market's (compare them with any price
source).
"""

from __future__ import annotations

import base64
import datetime as dt
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import cryptography.x509
import pandas as pd
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ldtm_core.accountability.ledger import merkle
from ldtm_core.accountability.ledger import receipts as rc
from ldtm_core.accountability.ledger import record_checkpoint as cp
from ldtm_core.accountability.ledger import record_scores as scores
from ldtm_core.accountability.ledger import timestamps as ts
from ldtm_core.accountability.ledger.audit import actual_wrongs
from ldtm_core.accountability.ledger.fillback import LEGACY_NEUTRAL_BAND_PCT
from ldtm_core.accountability.ledger.record_export import read_export, require_folder
from ldtm_core.data.calendar import session_close
from ldtm_core.data.corporate_actions import Action
from ldtm_core.errors import InputError, summary
from ldtm_core.horizons import DIRECTION, HORIZONS


@dataclass(frozen=True)
class Finding:
    kind: (
        str  # removed | edited | late | uncovered | chain | actual | close | receipt | timestamp | checkpoint
    )
    ticker: str
    run_date: str
    detail: str


@dataclass
class VerifyReport:
    rows: int = 0
    covered: int = 0
    replay: int = 0  # covered rows recorded as replays (mode 'replay'): not checked for being early
    receipts: int = 0
    stamped: int = 0  # receipts whose TSA token verified
    unchecked_tokens: int = 0  # tokens present, no TSA certificates given to check them
    tsa_early: int = 0  # covered live rows the TSA's time shows were written before their target's close
    keys: list[str] = field(default_factory=list)
    only_tickers: list[str] | None = None  # a `--tickers` export's tickers: the others' rows are not checked
    not_exported: int = 0  # receipted rows of tickers such an export leaves out
    kept: cp.Checkpoint | None = None  # the checkpoint the outsider kept from an earlier check
    head: cp.Checkpoint | None = None  # today's: what to keep for the next check
    proof_hashes: int = 0  # the consistency proof's length, from the kept head to today's
    has_revisions: bool = True  # the export carries the logged re-fills (an older one does not)
    revised_closes: int = 0  # signed closes the export contradicts, each explained by a logged re-fill
    revised_answers: int = 0  # answers re-filled after they were published
    directions_changed: int = 0  # next-day calls a re-fill turned from right to wrong or back
    findings: list[Finding] = field(default_factory=list)
    board: pd.DataFrame | None = None

    @property
    def ok(self) -> bool:
        return not self.findings

    def add(self, kind: str, ticker: str, run_date, detail: str) -> None:
        self.findings.append(Finding(kind, ticker, str(run_date)[:10], detail))


def _value(v):
    """A parquet cell as the chain's canonical form reads it (NaN/NaT: None)."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NaT:
        return None
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime()
    return v


def _records(frame: pd.DataFrame) -> list[dict]:
    return [{k: _value(v) for k, v in r.items()} for r in frame.to_dict("records")]


def check_receipts(
    receipts: list[rc.Receipt], public: Ed25519PublicKey, report: VerifyReport
) -> tuple[list[rc.Receipt], dict[int, list[bytes]]]:
    """(The receipts whose signature, number, link and Merkle root hold, {their seq: their rows' leaf
    hashes}, which the tree head reuses); the others are findings. Follows rotations."""
    key, good, leaves, previous, last_id = public, [], {}, None, 0
    report.keys.append(rc.key_id(public))
    for r in receipts:
        where = f"receipt {r.seq} ({r.path.name})"
        if not r.verifies(key):
            report.add(
                "receipt", "", r.body.get("run_date", ""), f"{where}: not signed by key {rc.key_id(key)}"
            )
            continue
        expect_seq = previous.seq + 1 if previous else 1
        if r.seq != expect_seq or r.body.get("previous", "") != (previous.sha256 if previous else ""):
            report.add(
                "receipt",
                "",
                r.body.get("run_date", ""),
                f"{where}: a receipt before it is missing or changed",
            )
        previous = r
        if r.body["kind"] == "key":
            key = Ed25519PublicKey.from_public_bytes(base64.b64decode(r.body["new_public_key"]))
            report.keys.append(rc.key_id(key))
            continue
        if int(r.body["first_id"]) != last_id + 1:
            report.add(
                "receipt",
                "",
                r.body["run_date"],
                f"{where}: covers ids from {r.body['first_id']}, after {last_id}",
            )
        last_id = int(r.body["last_id"])
        hashes = [merkle.leaf(e) for e in r.body["rows"]]
        if merkle.root(hashes).hex() != r.body["merkle_root"]:
            report.add("receipt", "", r.body["run_date"], f"{where}: its Merkle root is not its rows'")
            continue
        good.append(r)
        leaves[r.seq] = hashes
    report.receipts = len(good)
    return good, leaves


def tsa_time(receipt: rc.Receipt, chain: list | None, report: VerifyReport) -> dt.datetime | None:
    """The TSA's time for a receipt when its token verifies against `chain`; a finding when it does not."""
    token = ts.token_path(receipt.path)
    if not token.exists():
        return None
    if chain is None:
        report.unchecked_tokens += 1
        return None
    try:
        when = ts.verify(token.read_bytes(), receipt.path.read_bytes(), chain)
    except ts.TimestampError as e:
        report.add("timestamp", "", receipt.body.get("run_date", ""), f"receipt {receipt.seq}'s token: {e}")
        return None
    report.stamped += 1
    return when


def verify_record(
    export: Path,
    receipts_dir: Path,
    public: Ed25519PublicKey,
    tsa_chain: list[cryptography.x509.Certificate] | None = None,
    checkpoint: cp.Checkpoint | None = None,
) -> VerifyReport:
    """The report of `export` against the receipts in `receipts_dir`; an InputError (exit 2) names the
    file when either cannot be used, or when there is nothing to verify."""
    exported = read_export(export)
    tables, only = exported.tables, exported.only_tickers
    require_folder(receipts_dir, "the receipts")
    report = VerifyReport(only_tickers=only, has_revisions=exported.has_revisions, kept=checkpoint)
    rows = _records(tables["snapshots"])
    report.rows = len(rows)
    receipts = rc.read_receipts(receipts_dir)
    if not rows and not receipts:
        raise InputError(f"nothing to verify: {export} holds no rows and {receipts_dir} no receipts")
    try:
        return _verify(rows, tables, receipts, public, tsa_chain, report)
    except (KeyError, ValueError, TypeError, AttributeError) as e:  # a cell of a kind no export writes
        raise InputError(f"{export / 'snapshots.parquet'}: a row cannot be checked ({summary(e)})") from None


def _verify(rows, tables, receipts, public, tsa_chain, report: VerifyReport) -> VerifyReport:
    by_id = {int(r["id"]): r for r in rows}
    good, leaves = check_receipts(receipts, public, report)
    tree = cp.build(good, leaves, report.add)
    report.head = tree.head
    if report.kept is not None:
        report.proof_hashes = cp.compare(report.kept, tree, good, report.add)
    bad_ids: set[int] = set()
    covered: set[int] = set()
    for r in good:
        issued = pd.Timestamp(r.body["issued_at"]).to_pydatetime()
        stamped_at = tsa_time(r, tsa_chain, report)
        for entry in r.body["rows"]:
            rid, ticker, day, content, chained = entry
            if report.only_tickers is not None and ticker not in report.only_tickers:
                report.not_exported += 1  # a `--tickers` export: another ticker's row, not checked
                continue
            row = by_id.get(int(rid))
            if row is None:
                report.add("removed", ticker, day, f"row {rid} (receipt {r.seq}) is not in the export")
                continue
            covered.add(int(rid))
            if (row["ticker"], str(row["run_date"])[:10]) != (ticker, day):
                report.add("edited", ticker, day, f"row {rid} now reads {row['ticker']} {row['run_date']}")
                bad_ids.add(int(rid))
            elif rc.content_hash(row) != content or row["row_hash"] != chained:
                report.add(
                    "edited", ticker, day, f"row {rid}: its prediction or hash differs from receipt {r.seq}'s"
                )
                bad_ids.add(int(rid))
            elif row["mode"] == "replay":
                report.replay += 1  # recorded after its targets by design: proves no forecast
            elif late(row, issued):
                report.add(
                    "late",
                    ticker,
                    day,
                    f"row {rid}: receipt {r.seq} issued {r.body['issued_at']}, after its target's close",
                )
            elif stamped_at is not None and not late(row, stamped_at):
                report.tsa_early += 1
    report.covered = len(covered - bad_ids)
    uncovered = [r for r in rows if int(r["id"]) not in covered]
    for (ticker, day), n in sorted(_count(uncovered).items()):
        report.add(
            "uncovered",
            ticker,
            day,
            f"{n} row(s) no receipt covers: nothing outside the database vouches for them",
        )
    _check_chains(rows, report)
    _check_actuals(rows, tables, report)
    passed = [r for r in rows if int(r["id"]) in covered and int(r["id"]) not in bad_ids]
    _check_scores(passed, by_id, tables, report)
    return report


def _check_scores(
    passed: list[dict], by_id: dict, tables: dict[str, pd.DataFrame], report: VerifyReport
) -> None:
    """Closes against the signed ones, revised answers apart, the board's rows (`record_scores`)."""
    revisions = tables["fill_revisions"]
    wrong, report.revised_closes = scores.changed_closes(
        passed, tables["prices"], scores.revised_targets(revisions, by_id)
    )
    for r, exported in wrong:
        report.add(
            "close",
            r["ticker"],
            r["run_date"],
            f"the exported close {exported!r} is not the {r['run_date_close']!r} receipt-signed for this "
            f"evening (row {r['id']}), and no logged re-fill explains it",
        )
    originals = scores.original_answers(revisions)
    report.revised_answers, report.directions_changed = scores.revision_counts(passed, originals)
    report.board = scores.board(passed, originals)


def _checkpoint_findings(report: VerifyReport) -> list[Finding]:
    return [f for f in report.findings if f.kind == "checkpoint"]


def late(row: dict, issued: dt.datetime) -> bool:
    """Was the receipt issued at or after the close of the row's next-day target (the first answer)?"""
    return issued >= session_close(pd.Timestamp(row[DIRECTION.col("date")]).date())


def _count(rows: list[dict]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = defaultdict(int)
    for r in rows:
        out[(r["ticker"], str(r["run_date"])[:10])] += 1
    return out


def _check_chains(rows: list[dict], report: VerifyReport) -> None:
    last: dict[str, str] = {}
    for r in sorted(rows, key=lambda r: int(r["id"])):
        t = r["ticker"]
        if r["prev_hash"] != last.get(t, ""):
            report.add(
                "chain",
                t,
                r["run_date"],
                f"row {r['id']}: prev_hash is not the hash of the ticker's row before it",
            )
        last[t] = r["row_hash"]


def _check_actuals(rows: list[dict], tables: dict[str, pd.DataFrame], report: VerifyReport) -> None:
    closes = {
        (t, pd.Timestamp(d).date()): float(c)
        for t, d, c in tables["prices"][["ticker", "date", "close"]].itertuples(index=False)
    }
    actions: dict[str, list[Action]] = defaultdict(list)
    for a in tables["corporate_actions"].itertuples(index=False):
        actions[a.ticker].append(Action(a.ticker, pd.Timestamp(a.ex_date).date(), float(a.factor), a.kind))
    for r in rows:
        r = {**r, "run_date": pd.Timestamp(r["run_date"]).date()}
        for h in HORIZONS:
            day = r[h.col("date")]
            day = pd.Timestamp(day).date() if day is not None else None
            r[h.col("date")] = day
            wrong = actual_wrongs(
                r, h.name, closes.get((r["ticker"], day)), actions[r["ticker"]], LEGACY_NEUTRAL_BAND_PCT
            )
            if wrong:
                report.add("actual", r["ticker"], r["run_date"], "; ".join(wrong))


def assurance(report: VerifyReport) -> list[str]:
    """What the check proved, in words, and what it could not."""
    lines = [
        f"{report.covered} of {report.rows} exported rows are covered by {report.receipts} signed receipt(s) "
        f"(keys {', '.join(report.keys)}) and unchanged since.",
    ]
    if report.only_tickers is not None:
        lines.append(
            f"This export holds only {', '.join(report.only_tickers)} (`ldtm audit export --tickers`): the "
            f"receipts' {report.not_exported} row(s) of other tickers were not checked."
        )
    if report.replay:
        lines.append(
            f"{report.replay} of them are replays, recorded after their targets by design: they show the "
            "model's calls, not forecasts made in advance."
        )
    live = report.covered - report.replay
    if report.stamped:
        lines.append(
            f"{report.tsa_early} of the {live} covered forecasts carry an RFC 3161 timestamp from before "
            f"their target's close ({report.stamped} receipt(s) timestamped): for them the time rests on "
            "the timestamp authority's clock, not the issuer's."
        )
    if report.unchecked_tokens:
        lines.append(
            f"{report.unchecked_tokens} receipt(s) carry RFC 3161 tokens, not checked: pass --tsa-certs "
            "(the timestamp authority's certificate chain) to check them."
        )
    lines.append(
        "The board counts each evening's first published row, live, out of sample, by a gated model (as the "
        "leaderboard does by default); replay, in-sample and ungated rows are counted apart."
    )
    if report.revised_answers:
        lines.append(
            f"Answers revised after publication: {report.revised_answers}; next-day directions changed: "
            f"{report.directions_changed} ({report.revised_closes} signed close(s) differ from the export, "
            "each explained by a logged re-fill): the board gives accuracy on the original answers beside "
            "the revised ones."
        )
    if not report.has_revisions:
        lines.append(
            "This export carries no fill revisions (made before they were exported): a revised close "
            "cannot be told from a changed one, and is reported as changed."
        )
    if report.kept is not None and report.head is not None and not _checkpoint_findings(report):
        lines.append(
            f"Today's record extends the checkpoint kept at receipt {report.kept.seq} ({report.kept.run_date}, "
            f"{report.kept.tree_size} rows): nothing up to it was removed or changed (RFC 9162 consistency "
            f"proof, {report.proof_hashes} hashes)."
        )
    if report.head is not None:
        lines.append(
            f"Not ruled out: evenings after receipt {report.head.seq} ({report.head.run_date}) removed together "
            "with their receipts. Keep today's checkpoint (--checkpoint FILE) and pass it next time: from "
            "then on, a removal up to it fails the check."
        )
    if not report.receipts:
        lines.append(
            "No receipt verified: the export's chain links are all that was checked. Nothing outside the "
            "database shows when the rows were written or that none were removed."
        )
    lines.append(
        "Not proved: the receipts' times, where no timestamp vouches for them, are the issuer's own clock; "
        "the exported closes of dates no evening signed (targets after the last evening) are the store's "
        "(check them against another price source)."
    )
    return lines
