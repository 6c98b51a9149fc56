"""`ldtm verify-record` on input it cannot use: exit 2 with one line naming the file and why, never a
traceback (0 ok, 1 findings, 2 unusable input). Each case starts from a copy of a signed record."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from accountability_helpers import ingest, make_model, make_settings
from typer.testing import CliRunner

from ldtm_core.accountability.ledger import receipts as rc
from ldtm_core.accountability.ledger.fillback import fillback
from ldtm_core.accountability.ledger.record_export import MANIFEST, export_record
from ldtm_core.accountability.ledger.snapshots import predict
from ldtm_core.cli import app
from ldtm_core.errors import LDTMError


@pytest.fixture
def signed(engine, db_url, tmp_path, monkeypatch, keys) -> tuple[Path, Path, Path]:
    """(export, receipts, public key) of four signed evenings of one ticker, filled back."""
    monkeypatch.setenv(rc.DIR_ENV, str(tmp_path / "receipts"))
    monkeypatch.setenv(rc.KEY_ENV, str(keys[0]))
    settings = make_settings(tmp_path, db_url)
    df = ingest(engine, ["AAPL"])
    make_model(engine, settings, "AAPL")
    for day in sorted(df["date"].unique())[-30:-26]:
        predict(engine, settings, run_date=day)
    fillback(engine)
    export_record(engine, tmp_path / "export")
    return tmp_path / "export", tmp_path / "receipts", keys[1]


# --- how a case breaks its copy ------------------------------------------------------------------------


def _rewrite(export: Path, name: str, data: bytes) -> None:
    """Replace an export file and give the manifest its new hash: only the content is wrong."""
    (export / name).write_bytes(data)
    manifest = json.loads((export / MANIFEST).read_text())
    manifest["files"][name]["sha256"] = hashlib.sha256(data).hexdigest()
    (export / MANIFEST).write_text(json.dumps(manifest))


def _table(name: str, change: Callable[[pd.DataFrame], pd.DataFrame]):
    def apply(export: Path, _receipts: Path) -> None:
        buf = io.BytesIO()
        change(pd.read_parquet(export / name)).to_parquet(buf, index=False)
        _rewrite(export, name, buf.getvalue())

    return apply


def _manifest(change: Callable[[dict], object]):
    def apply(export: Path, _receipts: Path) -> None:
        (export / MANIFEST).write_text(json.dumps(change(json.loads((export / MANIFEST).read_text()))))

    return apply


def _receipt(change: Callable[[dict], object], which: int = 1):
    def apply(_export: Path, receipts: Path) -> None:
        path = sorted(receipts.glob(f"*{rc.SUFFIX}"))[which]
        path.write_text(json.dumps(change(json.loads(path.read_text()))))

    return apply


def _body(**fields):
    return _receipt(lambda doc: {**doc, "body": {**doc["body"], **fields}})


def _without(field: str):
    return _receipt(lambda doc: {**doc, "body": {k: v for k, v in doc["body"].items() if k != field}})


def _bytes(name: str, data: bytes):
    return lambda export, _receipts: _rewrite(export, name, data)


def _first_receipt_name(receipts: Path) -> str:
    return sorted(receipts.glob(f"*{rc.SUFFIX}"))[1].name


def _empty_record(export: Path, receipts: Path) -> None:
    _table("snapshots.parquet", lambda f: f.iloc[0:0])(export, receipts)
    for p in receipts.glob("*"):
        p.unlink()


def _replace_with_folder(relative: str):
    def apply(export: Path, receipts: Path) -> None:
        path = export.parent / relative
        path.unlink()
        path.mkdir()

    return apply


def _second_receipt_is_a_folder(_export: Path, receipts: Path) -> None:
    path = sorted(receipts.glob(f"*{rc.SUFFIX}"))[1]
    path.unlink()
    path.mkdir()


def _file_instead_of(folder: str):
    def apply(export: Path, receipts: Path) -> None:
        path = export if folder == "export" else receipts
        shutil.rmtree(path)
        path.write_text("not a folder\n")

    return apply


def _gone(folder: str):
    def apply(export: Path, receipts: Path) -> None:
        shutil.rmtree(export if folder == "export" else receipts)

    return apply


def _write_public(data: bytes):
    def apply(export: Path, _receipts: Path) -> None:
        (export.parent / "public.pem").write_bytes(data)

    return apply


# (name, what it breaks, what the one-line error must name); "RECEIPT" stands for the broken receipt's name.
CASES: list[tuple[str, Callable, str]] = [
    ("export folder missing", _gone("export"), "no such folder"),
    ("export is a file", _file_instead_of("export"), "not a folder"),
    ("receipts folder missing", _gone("receipts"), "no such folder"),
    ("receipts is a file", _file_instead_of("receipts"), "not a folder"),
    ("manifest not JSON", lambda e, r: (e / MANIFEST).write_text("{nope"), MANIFEST),
    ("manifest a list", _manifest(lambda m: [m]), MANIFEST),
    ("manifest without files", _manifest(lambda m: {"tickers": 1}), MANIFEST),
    ("manifest files a list", _manifest(lambda m: {**m, "files": list(m["files"])}), MANIFEST),
    (
        "manifest sha256 an integer",
        _manifest(lambda m: {**m, "files": {**m["files"], "prices.parquet": {"rows": 1, "sha256": 7}}}),
        MANIFEST,
    ),
    (
        "manifest without prices",
        _manifest(lambda m: {**m, "files": {k: v for k, v in m["files"].items() if k != "prices.parquet"}}),
        "prices.parquet",
    ),
    ("snapshots not Parquet", _bytes("snapshots.parquet", b"PAR1 but not really"), "snapshots.parquet"),
    ("prices not Parquet", _bytes("prices.parquet", b"\x00" * 64), "prices.parquet"),
    ("corporate actions empty", _bytes("corporate_actions.parquet", b""), "corporate_actions.parquet"),
    ("snapshots a folder", _replace_with_folder("export/snapshots.parquet"), "snapshots.parquet"),
    (
        "snapshots without row_hash",
        _table("snapshots.parquet", lambda f: f.drop(columns="row_hash")),
        "row_hash",
    ),
    ("snapshots without mode", _table("snapshots.parquet", lambda f: f.drop(columns="mode")), "mode"),
    ("prices without close", _table("prices.parquet", lambda f: f.drop(columns="close")), "close"),
    (
        "corporate actions without factor",
        _table("corporate_actions.parquet", lambda f: f.drop(columns="factor")),
        "factor",
    ),
    ("snapshot ids text", _table("snapshots.parquet", lambda f: f.assign(id="x")), "snapshots.parquet"),
    (
        "snapshot ids repeated",
        _table("snapshots.parquet", lambda f: f.assign(id=1)),
        "snapshots.parquet",
    ),
    ("closes text", _table("prices.parquet", lambda f: f.assign(close="abc")), "prices.parquet"),
    (
        "run dates not dates",
        _table("snapshots.parquet", lambda f: f.assign(run_date="not a date")),
        "snapshots.parquet",
    ),
    ("receipt not JSON", lambda e, r: _receipt_text(r, "{{"), "RECEIPT"),
    ("receipt a list", _receipt(lambda d: [d]), "RECEIPT"),
    ("receipt body a list", _receipt(lambda d: {**d, "body": [d["body"]]}), "RECEIPT"),
    ("receipt without seq", _without("seq"), "RECEIPT"),
    ("seq text", _body(seq="abc"), "RECEIPT"),
    ("seq a boolean", _body(seq=True), "RECEIPT"),
    ("seq zero", _body(seq=0), "RECEIPT"),
    ("seq a fraction", _body(seq=1.5), "RECEIPT"),
    ("signature an integer", _receipt(lambda d: {**d, "signature": 12345}), "RECEIPT"),
    ("kind unknown", _body(kind="weekly"), "RECEIPT"),
    ("rows a mapping", _body(rows={"1": "x"}), "RECEIPT"),
    ("a row of three", _body(rows=[[1, "AAPL", "2024-05-01"]]), "RECEIPT"),
    ("a row id a fraction", _body(rows=[[1.5, "AAPL", "2024-05-01", "a" * 64, "b" * 64]]), "RECEIPT"),
    ("first id text", _body(first_id="x"), "RECEIPT"),
    ("issued at not a time", _body(issued_at="yesterday"), "RECEIPT"),
    ("merkle root an integer", _body(merkle_root=0), "RECEIPT"),
    ("a key receipt's key not base64", _body(kind="key", new_public_key="!!!", new_key_id="x"), "RECEIPT"),
    ("receipt a folder", _second_receipt_is_a_folder, "RECEIPT"),
    ("public key garbage", _write_public(b"-----BEGIN PUBLIC KEY-----\nAAAA\n"), "public.pem"),
    ("nothing to verify", _empty_record, "nothing to verify"),
]


def _receipt_text(receipts: Path, text: str) -> None:
    sorted(receipts.glob(f"*{rc.SUFFIX}"))[1].write_text(text)


def test_every_unusable_input_exits_2_naming_the_file_never_a_traceback(signed, tmp_path):
    export, receipts, public = signed
    assert len(CASES) >= 30
    failed = []
    for i, (name, breaks, names) in enumerate(CASES):
        case = tmp_path / f"case{i}"
        shutil.copytree(export, case / "export")
        shutil.copytree(receipts, case / "receipts")
        shutil.copy(public, case / "public.pem")
        names = names.replace("RECEIPT", _first_receipt_name(case / "receipts"))
        breaks(case / "export", case / "receipts")
        args = ["verify-record", str(case / "export"), str(case / "receipts"), "--public-key"]
        out = CliRunner().invoke(app, [*args, str(case / "public.pem")])
        text = " ".join(out.output.split())  # rich wraps long paths
        if out.exit_code != 2 or names not in text or not isinstance(out.exception, SystemExit | None):
            failed.append(f"{name}: exit {out.exit_code}, {out.exception!r}, {text[-300:]}")
    assert not failed, "\n".join(failed)


def test_a_folder_that_is_not_there_is_named_not_counted_as_findings(signed, tmp_path):
    export, receipts, public = signed
    out = CliRunner().invoke(
        app, ["verify-record", str(export), str(tmp_path / "recipts"), "--public-key", str(public)]
    )
    assert out.exit_code == 2 and "no such folder" in out.output and "finding" not in out.output, out.output
    ok = CliRunner().invoke(app, ["verify-record", str(export), str(receipts), "--public-key", str(public)])
    assert ok.exit_code == 0 and "verify-record ok" in ok.output, ok.output


@pytest.mark.parametrize("target", ["a file", "a fifo", "a dangling symlink", "a full disk"])
def test_an_export_that_cannot_be_written_says_where_and_leaves_nothing(
    engine, signed, tmp_path, monkeypatch, target
):
    export, _, _ = signed
    out = tmp_path / "new_export"
    if target == "a file":
        out.write_text("mine\n")
    elif target == "a fifo":
        os.mkfifo(out)
    elif target == "a dangling symlink":
        out.symlink_to(tmp_path / "nowhere")
    else:
        real = pd.DataFrame.to_parquet

        def disk_full_at_prices(frame, path, *a, **kw):
            if "prices" in str(path):
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(frame, path, *a, **kw)

        monkeypatch.setattr(pd.DataFrame, "to_parquet", disk_full_at_prices)
    with pytest.raises(LDTMError, match=re.escape(str(out))):
        export_record(engine, out)
    left = sorted(p.name for p in tmp_path.iterdir() if "new_export" in p.name)
    assert left == ([] if target == "a full disk" else ["new_export"]), "a half-written export was left"
    if target == "a full disk":
        monkeypatch.undo()
        export_record(engine, out)  # the retry is not refused as "not empty"
        assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in export.iterdir())
