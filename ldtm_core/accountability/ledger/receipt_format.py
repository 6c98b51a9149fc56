"""What a receipt file must hold before anything reads it: a verifier fed a broken or hostile file says
which file and which field (an InputError, exit 2), never a traceback."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from pathlib import Path

from ldtm_core.errors import InputError

KINDS = ("evening", "key")
ROW_FIELDS = (int, str, str, str, str)  # id, ticker, run date, content hash, chain hash


def _fail(path: Path, why: str):
    raise InputError(f"{path}: not a usable receipt: {why}")


def _int(path: Path, body: dict, name: str, least: int = 1) -> None:
    v = body.get(name)
    if type(v) is not int or v < least:  # noqa: E721 - bool is an int, and not a number here
        _fail(path, f"{name} is {v!r}, not a whole number ≥ {least}")


def _text(path: Path, body: dict, name: str) -> str:
    v = body.get(name)
    if not isinstance(v, str):
        _fail(path, f"{name} is {type(v).__name__}, not text")
    return v


def _date(path: Path, value, name: str) -> None:
    try:
        dt.date.fromisoformat(value)
    except (TypeError, ValueError):
        _fail(path, f"{name} {value!r} is not a date (YYYY-MM-DD)")


def _row(path: Path, i: int, entry) -> None:
    if not isinstance(entry, list) or len(entry) != len(ROW_FIELDS):
        _fail(path, f"rows[{i}] is not [id, ticker, run date, content hash, chain hash]")
    for value, kind in zip(entry, ROW_FIELDS, strict=True):
        if type(value) is not kind:  # noqa: E721 - exact: True is not an id
            _fail(path, f"rows[{i}] holds {value!r} where a {kind.__name__} belongs")
    _date(path, entry[2], f"rows[{i}]'s run date")


def checked(path: Path, doc) -> tuple[dict, str]:
    """(body, signature) of a parsed receipt file, every field the verifier reads of the type it reads."""
    if not isinstance(doc, dict) or not isinstance(doc.get("body"), dict):
        _fail(path, "no body object")
    body, signature = doc["body"], doc.get("signature")
    if not isinstance(signature, str):
        _fail(path, f"its signature is {type(signature).__name__}, not hex text")
    _int(path, body, "seq")
    for name in ("previous", "key_id"):
        _text(path, body, name)
    try:
        dt.datetime.fromisoformat(_text(path, body, "issued_at"))
    except ValueError:
        _fail(path, f"issued_at {body['issued_at']!r} is not an ISO 8601 time")
    if body.get("kind") not in KINDS:
        _fail(path, f"kind {body.get('kind')!r} is none of {', '.join(KINDS)}")
    if body["kind"] == "key":
        _text(path, body, "new_key_id")
        try:
            raw = base64.b64decode(_text(path, body, "new_public_key"), validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            _fail(path, "new_public_key is not a base64 Ed25519 public key (32 bytes)")
        return body, signature
    _date(path, _text(path, body, "run_date"), "run_date")
    _int(path, body, "first_id")
    _int(path, body, "last_id", least=0)
    _text(path, body, "merkle_root")
    if not isinstance(body.get("rows"), list):
        _fail(path, "rows is not a list")
    for i, entry in enumerate(body["rows"]):
        _row(path, i, entry)
    if "tree_size" in body:  # receipts from before tree heads carry none
        _int(path, body, "tree_size")
        _text(path, body, "tree_root")
        parts = body.get("frontier")
        if not isinstance(parts, list) or not all(
            isinstance(p, list) and len(p) == 2 and type(p[0]) is int and _hex64(p[1]) for p in parts
        ):
            _fail(path, "frontier is not a list of [leaves, SHA-256 hex]")
    return body, signature


def _hex64(value) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
