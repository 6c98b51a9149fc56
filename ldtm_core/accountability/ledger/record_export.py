"""`ldtm audit export`: the record as files an outsider checks without the database (`record_verify`).

Parquet, one file per table: every snapshot row (predictions, chain hashes, fills), the stored closes
the fills read (each exported ticker from its first run date to its last target date) and the recorded
corporate actions; `manifest.json` names each file with its SHA-256 and row count. Nothing secret is in
it: no key, no URL with a password.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

import pandas as pd
from sqlalchemy import Engine, select

from ldtm_core.errors import ConfigError, InputError
from ldtm_core.horizons import HORIZONS
from ldtm_core.schema import corporate_actions, prices, snapshots

FILES = ("snapshots", "prices", "corporate_actions")
MANIFEST = "manifest.json"


def export_record(engine: Engine, out: Path, tickers: list[str] | None = None) -> dict:
    """Write the export to the new folder `out` (never into one that holds files); returns the manifest."""
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
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"exported_at": dt.datetime.now(dt.UTC).isoformat(), "tickers": len(names), "files": {}}
    for name, frame in zip(FILES, (rows, bars, actions), strict=True):
        path = out / f"{name}.parquet"
        frame.to_parquet(path, index=False)
        manifest["files"][path.name] = {
            "rows": len(frame),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def read_export(folder: Path) -> dict[str, pd.DataFrame]:
    """The export's tables, each file checked against the manifest (an error names the file)."""
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise InputError(f"{folder}: no {MANIFEST} (not an `ldtm audit export` folder)")
    manifest = json.loads(manifest_path.read_text())
    out = {}
    for name in FILES:
        path = folder / f"{name}.parquet"
        want = manifest["files"].get(path.name)
        if want is None or not path.is_file():
            raise InputError(f"{folder}: {path.name} is missing")
        if hashlib.sha256(path.read_bytes()).hexdigest() != want["sha256"]:
            raise InputError(f"{path}: its SHA-256 is not the manifest's (changed after the export)")
        out[name] = pd.read_parquet(path)
    return out
