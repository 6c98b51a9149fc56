"""`ldtm audit export`: the record as files an outsider checks without the database (`record_verify`).

Parquet, one file per table: every snapshot row (predictions, chain hashes, fills), the stored closes
the fills read (each exported ticker from its first run date to its last target date), the recorded
corporate actions and the logged re-fills of those rows (`fill_revisions`); `manifest.json` names each file with its SHA-256 and row count. Nothing secret is in
it: no key, no URL with a password.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
from sqlalchemy import Engine, select

from ldtm_core.accountability.ledger.chain import HASHED_COLUMNS
from ldtm_core.errors import ConfigError, InputError, first_line
from ldtm_core.horizons import HORIZONS
from ldtm_core.schema import corporate_actions, fill_revisions, prices, snapshots

FILES = ("snapshots", "prices", "corporate_actions", "fill_revisions")
OPTIONAL = ("fill_revisions",)  # an export made before revisions were exported carries none


@dataclass(frozen=True)
class Export:
    tables: dict[str, pd.DataFrame]
    only_tickers: list[str] | None  # a `--tickers` export's tickers; None: every ticker
    has_revisions: bool  # False for an export from before fill_revisions were exported


MANIFEST = "manifest.json"


def export_record(engine: Engine, out: Path, tickers: list[str] | None = None) -> dict:
    """Write the export to the new folder `out` (never into one that holds files); returns the manifest."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ConfigError(f"{out} is not a folder: an export is written to a new or empty folder only")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty: an export is written to a new or empty folder only")
    with engine.connect() as conn:
        stmt = select(snapshots).order_by(snapshots.c.id)
        if tickers:
            stmt = stmt.where(snapshots.c.ticker.in_(tickers))
        rows = pd.DataFrame(conn.execute(stmt).mappings().all(), columns=list(snapshots.c.keys()))
        if rows.empty:
            raise InputError("no snapshot rows to export" + (f" for {', '.join(tickers)}" if tickers else ""))
        names = sorted(rows["ticker"].unique())
        first = min(rows["run_date"])
        last = max(max(d for d in rows[h.col("date")] if d is not None) for h in HORIZONS)
        bars = pd.DataFrame(
            conn.execute(
                select(prices.c.ticker, prices.c.date, prices.c.close).where(
                    prices.c.ticker.in_(names), prices.c.date >= first, prices.c.date <= last
                )
            ).all(),
            columns=["ticker", "date", "close"],
        )
        actions = pd.DataFrame(
            conn.execute(select(corporate_actions).where(corporate_actions.c.ticker.in_(names)))
            .mappings()
            .all(),
            columns=list(corporate_actions.c.keys()),
        )
        logged = (
            select(fill_revisions).where(fill_revisions.c.ticker.in_(names)).order_by(fill_revisions.c.id)
        )
        revisions = pd.DataFrame(conn.execute(logged).mappings().all(), columns=list(fill_revisions.c.keys()))
    manifest = {"exported_at": dt.datetime.now(dt.UTC).isoformat(), "tickers": len(names), "files": {}}
    if tickers:  # the verifier checks these tickers' rows only, and says so
        manifest["only_tickers"] = names
    # Written beside `out` and renamed into place when complete: a failure leaves no half export.
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    try:
        partial.mkdir(parents=True)
        for name, frame in zip(FILES, (rows, bars, actions, revisions), strict=True):
            path = partial / f"{name}.parquet"
            frame.to_parquet(path, index=False)
            manifest["files"][path.name] = {
                "rows": len(frame),
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            }
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        os.rename(partial, out)  # onto a new name, or over the empty folder given
    except OSError as e:
        shutil.rmtree(partial, ignore_errors=True)
        raise ConfigError(
            f"{out}: the export cannot be written ({e.strerror or e}); nothing was kept"
        ) from None
    return manifest


def _needs() -> dict[str, tuple[str, ...]]:
    """The columns `record_verify` reads of each file (an export without one is unusable input)."""
    fills = [h.col(c) for h in HORIZONS for c in ("date", "pred", "actual", "pct_error")]
    return {
        "snapshots": ("id", "prev_hash", "row_hash", *HASHED_COLUMNS, *fills),
        "prices": ("ticker", "date", "close"),
        "corporate_actions": ("ticker", "ex_date", "factor", "kind"),
        "fill_revisions": ("snapshot_id", "horizon", "old_actual", "new_actual", "revised_at"),
    }


def require_folder(folder: Path, what: str) -> None:
    if not folder.exists():
        raise InputError(f"{folder}: no such folder ({what})")
    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder ({what})")


def _manifest(folder: Path) -> tuple[dict[str, dict], list[str] | None]:
    """The manifest's ({file name: {"rows", "sha256"}}, the tickers a `--tickers` export holds), checked."""
    path = folder / MANIFEST
    if not path.is_file():
        raise InputError(f"{folder}: no {MANIFEST} (not an `ldtm audit export` folder)")
    try:
        manifest = json.loads(path.read_text())
        files, only = manifest["files"], manifest.get("only_tickers")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        raise InputError(f"{path}: not an export manifest (JSON with a files object)") from None
    if not isinstance(files, dict) or not all(
        isinstance(f, dict) and isinstance(f.get("sha256"), str) for f in files.values()
    ):
        raise InputError(f"{path}: its files are not {{name: {{rows, sha256}}}}")
    if only is not None and (not isinstance(only, list) or not all(isinstance(t, str) for t in only)):
        raise InputError(f"{path}: only_tickers is not a list of tickers")
    return files, only


# Per file: (a column of dates, a column of numbers) the verifier converts.
_KINDS = {
    "snapshots": ("run_date", "id"),
    "prices": ("date", "close"),
    "corporate_actions": ("ex_date", "factor"),
    "fill_revisions": ("revised_at", "snapshot_id"),
}


def _typed(path: Path, name: str, frame: pd.DataFrame) -> None:
    """The columns the verifier reads are there, with values of the kind it reads."""
    missing = [c for c in _needs()[name] if c not in frame.columns]
    if missing:
        raise InputError(f"{path}: no column {', '.join(missing)} (an export from another tool?)")
    dates, numbers = _KINDS[name]
    for col, convert, kind in ((dates, pd.to_datetime, "date"), (numbers, pd.to_numeric, "number")):
        try:
            with warnings.catch_warnings():  # a format pandas cannot infer is still checked, value by value
                warnings.simplefilter("ignore", UserWarning)
                convert(frame[col])
        except (ValueError, TypeError) as e:
            raise InputError(
                f"{path}: column {col} holds a value that is not a {kind} ({first_line(e)})"
            ) from None
    if name == "snapshots" and (
        not pd.api.types.is_integer_dtype(frame["id"]) or frame["id"].duplicated().any()
    ):
        raise InputError(f"{path}: its ids are not unique whole numbers")


def read_export(folder: Path) -> Export:
    """The export's tables, each file checked against the manifest and for the columns the verifier reads
    (an InputError names the file and why)."""
    require_folder(folder, "the export")
    files, only = _manifest(folder)
    out = {}
    for name in FILES:
        path = folder / f"{name}.parquet"
        want = files.get(path.name)
        if want is None and name in OPTIONAL:
            continue
        if want is None or not path.is_file():
            raise InputError(f"{folder}: {path.name} is missing")
        if hashlib.sha256(path.read_bytes()).hexdigest() != want["sha256"]:
            raise InputError(f"{path}: its SHA-256 is not the manifest's (changed after the export)")
        try:
            frame = pd.read_parquet(path)
        except (OSError, ValueError, pa.ArrowException) as e:
            raise InputError(f"{path}: not a readable Parquet file ({first_line(e)})") from None
        _typed(path, name, frame)
        out[name] = frame
    has_revisions = "fill_revisions" in out
    out.setdefault("fill_revisions", pd.DataFrame(columns=list(fill_revisions.c.keys())))
    return Export(out, only, has_revisions)
