"""Horizons as one definition (ldtm_core.horizons) and the accuracy views from one builder
(ldtm_core.accuracy_views): the restructuring changed no stored value.

The pinned values below were computed on the code before the restructuring (commit 056c805): a row
hash, the model's signatures and a fold key for fixed inputs, and the views every migration creates at
each revision, on SQLite and PostgreSQL. A change to any of them invalidates stored chains, registry
signatures, stored folds or a database's objects: it must be a decision, not a side effect.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from alembic import command
from sqlalchemy import text

from ldtm_core import horizons
from ldtm_core.accountability.ledger import chain
from ldtm_core.data.calendar import target_dates
from ldtm_core.db import get_engine
from ldtm_core.learning import fold_cache
from ldtm_core.learning.model import ModelConfig
from ldtm_core.learning.registry import config_signature
from ldtm_core.migrate import alembic_config, upgrade

ROOT = Path(__file__).resolve().parents[1]

ROW = dict(
    ticker="AAPL",
    run_date=dt.date(2024, 3, 1),
    run_date_close=181.5,
    prev_close=180.25,
    model_id=7,
    model_version="1.2",
    mode="live",
    next_day_pred=182.125,
    next_monday_pred=183.0,
    one_month_pred=190.5,
    direction_pred="up",
    next_day_date=dt.date(2024, 3, 4),
    next_monday_date=dt.date(2024, 3, 4),
    one_month_date=dt.date(2024, 4, 1),
)
ROW_V2 = dict(
    ROW,
    chain_version=2,
    created_at=dt.datetime(2024, 3, 1, 21, 5, 7, 123456, tzinfo=dt.UTC),
    run_id="run-1",
    model_status="active",
    in_sample=True,
)

# Computed on 056c805 (before the restructuring) by the same calls.
PINNED = {
    "row_hash_v1": "a232b51809a5e0aacdb38559a373205b74ade175186126039d094a2183f05fb3",
    "row_hash_v2": "651a5aa77b57b6267c861b2667af4cddc88d4f166e25025e872bd8c63c158af0",
    "row_hash_v2_key": "47637b36098981910f6e707141bd7d24e9ba3ea2c8a58ed5f30c6459d8a0656f",
    "model_signature": "09ebdec752abebea",
    "config_signature": "94d76e91755cec3f9515303d25cb96b5ba061d9ab95587f67f169e9c74ecdf55",
    "fold_key": "e59ed4c62bf3e1b767de0c1b9b00a1742c87de73bcaf3ff222f7c43522c57aff",
}
# sha256 of the JSON list of [view name, stored definition] at each revision (sqlite_master / pg_views).
VIEWS_PINNED = {
    ("sqlite", "0017"): "f042c4bae916e4c787e2d1500a6037a4a31c1f1cb21bf4e4ec07812a404b405a",
    ("postgres", "0017"): "41caa9ccf014adc1a10b2963bf79d6dde03140c322a1f94292b19e01c8fc1eb5",
    ("sqlite", "0021"): "0624d3d48b76b8355762570c106b48864cd7fcc1453c47a89d7f1a006f49b0d9",
    ("postgres", "0021"): "a37fe77ebeffa0f13822fe398ec7017aa9a8c7f55ab115affcfb40372ff98439",
    ("sqlite", "0024"): "75a5fed53086580ae72a50d0f5e7ebeb6b5d2b48c59cfa19817353bbd623f017",
    ("postgres", "0024"): "6627036f5ee7b600637c02267a3eed3bfef9b3b8a61de96cb4b61a2daaca1141",
    ("sqlite", "0026"): "b4f17f7ed9d5ce33a3b977ca9926227031763744ae3d1b9a0ac090d86c5f4013",
    ("postgres", "0026"): "77a5f39a989db1a1b07505cb59aee3d61026ca961b972013275d52ef92fd3673",
}


def test_stored_hashes_signatures_and_fold_keys_are_unchanged():
    got = {
        "row_hash_v1": chain.row_hash("0" * 64, ROW),
        "row_hash_v2": chain.row_hash("ab" * 32, ROW_V2),
        "row_hash_v2_key": chain.row_hash("ab" * 32, ROW_V2, key=b"k"),
        "model_signature": ModelConfig().signature,
        "config_signature": config_signature(ModelConfig()),
        "fold_key": fold_cache.fold_key(
            "sig", "fp", dt.date(2024, 1, 31), 3, None, fold_cache.Runtime("fp32", "cpu", "2.5", "c" * 64)
        ),
    }
    assert got == PINNED


def test_the_chain_hashes_every_horizons_prediction_and_target_date():
    # A horizon the current chain version does not hash could be rewritten unnoticed: a new horizon is
    # a chain decision (a new CHAIN_VERSION), this test says so.
    row = dict(ROW_V2, chain_version=chain.CHAIN_VERSION)
    for h in horizons.HORIZONS:
        row.setdefault(h.col("pred"), 100.0)
        row.setdefault(h.col("date"), dt.date(2024, 3, 8))
    base = chain.row_hash("", row)
    for h in horizons.HORIZONS:
        assert chain.row_hash("", {**row, h.col("pred"): row[h.col("pred")] + 0.5}) != base, h.name
        assert chain.row_hash("", {**row, h.col("date"): dt.date(2030, 1, 2)}) != base, h.name


def test_target_dates_has_one_array_per_horizon_in_order():
    days = np.array(["2024-06-14", "2024-11-27"], dtype="datetime64[D]")
    t = target_dates(days)
    assert list(t) == list(horizons.NAMES)
    assert all(a.shape == days.shape for a in t.values())
    assert [str(d) for d in t["next_day"]] == ["2024-06-17", "2024-11-29"]
    assert [str(d) for d in t["next_monday"]] == ["2024-06-17", "2024-12-02"]


def test_a_stored_fold_of_another_width_is_refused_not_reshaped():
    n = len(horizons.HORIZONS)
    assert fold_cache._pred_array([[1.0] * n] * 4, "k").shape == (4, n)
    assert fold_cache._pred_array([], "k").shape == (0, n)
    with pytest.raises(ValueError, match=rf"expected \[n, {n}\]"):
        fold_cache._pred_array([[1.0] * (n + 1)] * 3, "k" * 16)


def test_horizons_are_declared_in_one_place():
    """No module but ldtm_core/horizons.py spells the horizon tuple (the migrations of 0021-0026 name
    the columns of their time through accuracy_views.HORIZONS_0021)."""
    literal = re.compile(r"""\(\s*["']next_day["'],\s*["']next_monday["'],\s*["']one_month["']""")
    short = re.compile(r"""\(\s*["']1d["'],\s*["']monday["'],\s*["']month["']""")
    allowed = {"ldtm_core/horizons.py", "ldtm_core/accuracy_views.py"}
    found = []
    for package in ("ldtm_core", "ldtm_dagster", "ldtm_dashboard", "tests"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if rel in allowed or rel == "tests/test_horizons.py":
                continue
            source = path.read_text()
            if literal.search(source) or short.search(source):
                found.append(rel)
    assert found == []


def _views(engine) -> str:
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            q = "SELECT viewname, definition FROM pg_views WHERE schemaname = 'public' ORDER BY viewname"
        else:
            q = "SELECT name, sql FROM sqlite_master WHERE type = 'view' ORDER BY name"
        rows = conn.execute(text(q)).all()
    return hashlib.sha256(json.dumps([list(r) for r in rows]).encode()).hexdigest()


def _downgrade(url: str, revision: str) -> None:
    with get_engine(url).begin() as conn:
        cfg = alembic_config(url)
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def test_every_migration_creates_the_same_views_as_before(db_url):
    """Down from head through 0026's, 0024's and 0021's downgrades, then up through each upgrade: the
    views at every revision are exactly those the migrations created before accuracy_views existed."""
    kind = "postgres" if db_url.startswith("postgresql") else "sqlite"
    engine = get_engine(db_url)
    try:
        for rev in ("0024", "0021", "0017"):
            _downgrade(db_url, rev)
            assert _views(engine) == VIEWS_PINNED[(kind, rev)], f"views after downgrading to {rev}"
        for rev in ("0021", "0024", "0026"):
            upgrade(db_url, rev)
            assert _views(engine) == VIEWS_PINNED[(kind, rev)], f"views after upgrading to {rev}"
    finally:
        upgrade(db_url)
