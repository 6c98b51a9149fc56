"""Receipts: the record's witness outside the database.

After each evening's predictions one receipt is written to a sink the database role cannot touch (a
directory, optionally a git repository with a commit per receipt). A receipt lists every snapshot row
written since the previous receipt: its id, ticker, run date, the SHA-256 of its prediction as the chain
hashes it (`chain.canonical`, no key needed to recompute it) and its chain hash; their Merkle root; the
SHA-256 of the previous receipt's file (receipts chain too); the time it was issued. It is signed with an
Ed25519 key whose private half only the application holds: a PEM file (`LDTM_RECEIPT_KEY_FILE`), or a
secret seed in the environment (`LDTM_RECEIPT_KEY`, as the compose deployment's `.env` carries it).

Whoever holds the database, even with `LDTM_AUDIT_KEY`, can then delete or rewrite rows and their
anchors, but cannot make the receipts agree: `record_verify` checks an export against them with the
public key alone. A key is rotated by a receipt, signed by the old key, that introduces the new one.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from sqlalchemy import Engine, func, select

from ldtm_core.accountability.ledger import merkle, receipt_format, timestamps
from ldtm_core.accountability.ledger.chain import canonical
from ldtm_core.accountability.ledger.receipt_sink import (  # the sink's names, as callers know them
    DIR_ENV,
    SUFFIX,
    ReceiptError,
    Sink,
)
from ldtm_core.config import env_text
from ldtm_core.errors import ConfigError, InputError
from ldtm_core.schema import snapshots

VERSION = 1
KEY_ENV, SEED_ENV = "LDTM_RECEIPT_KEY_FILE", "LDTM_RECEIPT_KEY"
MIN_SEED_CHARS = 32
MIN_SEED_DISTINCT = 10  # token_urlsafe(24) has about 26 different characters


# --- what a receipt commits to ---------------------------------------------------------------------


def content_hash(row) -> str:
    """SHA-256 of a snapshot row's prediction as the chain hashes it: recomputable without any key."""
    return hashlib.sha256(canonical(row).encode()).hexdigest()


def row_entry(row) -> list:
    """A row as a receipt lists it: [id, ticker, run date, content hash, chain hash]."""
    return [
        int(row["id"]),
        str(row["ticker"]),
        _day(row["run_date"]),
        content_hash(row),
        str(row["row_hash"]),
    ]


def merkle_root(entries: list[list]) -> str:
    """The Merkle root of the entries (RFC 9162's tree, `merkle.root`: the same tree the receipts' tree
    head spans); the root of no entries is the hash of nothing."""
    return merkle.root([merkle.leaf(e) for e in entries]).hex()


def _canonical_json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _day(value) -> str:
    return value.isoformat() if isinstance(value, dt.date) else str(value)[:10]


# --- keys ----------------------------------------------------------------------------------------------


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def public_pem(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def keygen(private_path: Path, public_path: Path) -> str:
    """A new Ed25519 key: the private half to `private_path` (mode 0600), the public half to
    `public_path`. Never overwrites a file; on failure leaves neither half behind. Returns the key id."""
    if private_path.resolve() == public_path.resolve():
        raise ConfigError(f"--private and --public are the same file {private_path}: give each half its own")
    for path in (private_path, public_path):
        if path.exists() or path.is_symlink():
            raise ConfigError(f"{path} exists: a key is never overwritten; choose another path")
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    created: list[Path] = []
    for path, data, mode in (
        (private_path, private, 0o600),
        (public_path, public_pem(key.public_key()), 0o644),
    ):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            created.append(path)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except OSError as e:
            for done in created:  # all or nothing: the same command can be run again
                done.unlink(missing_ok=True)
            raise ConfigError(f"{path}: cannot be written ({e.strerror or e}); no key was kept") from None
    return key_id(key.public_key())


def load_private_key(path: Path, setting: str = KEY_ENV) -> Ed25519PrivateKey:
    """The signing key from its file; refused when others may read it (a secret stays the owner's).
    `setting`: what named the file (the variable, or `receipts rotate --new-key`), for the errors."""
    if not path.is_file():
        raise ConfigError(f"{setting} {path}: no such file (create one with `ldtm receipts keygen`)")
    if path.stat().st_mode & 0o077:
        raise ConfigError(f"{setting} {path}: readable by group or others; `chmod 600 {path}` first")
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{setting} {path}: not an unencrypted PEM private key ({e})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{setting} {path}: not an Ed25519 key")
    return key


def key_from_seed(seed: str, setting: str = SEED_ENV) -> Ed25519PrivateKey:
    """The Ed25519 key of a secret seed: an Ed25519 private key is any 32 bytes, here SHA-256 of the seed.
    A seed of blanks, or of a few characters repeated, is refused: it is no secret."""
    if len(seed.strip()) < MIN_SEED_CHARS or len(set(seed)) < MIN_SEED_DISTINCT:
        raise ConfigError(
            f"{setting}: {MIN_SEED_CHARS} characters or more of random text (at least {MIN_SEED_DISTINCT} "
            "different ones, not blanks), e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(24))'"
        )
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(seed.encode()).digest())


def signing_key() -> Ed25519PrivateKey | None:
    """The configured signing key: `LDTM_RECEIPT_KEY_FILE`'s, or `LDTM_RECEIPT_KEY`'s seed; None without."""
    path, seed = env_text(KEY_ENV), env_text(SEED_ENV)
    if path and seed:
        raise ConfigError(f"set {KEY_ENV} or {SEED_ENV}, not both: which key signs would be ambiguous")
    if path:
        return load_private_key(Path(path).expanduser())
    return key_from_seed(seed) if seed else None


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except (OSError, ValueError, UnsupportedAlgorithm) as e:
        raise ConfigError(f"public key {path}: cannot be read as a PEM public key ({e})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"public key {path}: not an Ed25519 key")
    return key


# --- the sink ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Receipt:
    path: Path
    body: dict
    signature: str
    sha256: str  # of the file's bytes: what the next receipt names as its previous

    @property
    def seq(self) -> int:
        return int(self.body["seq"])

    def verifies(self, public: Ed25519PublicKey) -> bool:
        try:
            public.verify(bytes.fromhex(self.signature), _canonical_json(self.body).encode())
        except (InvalidSignature, ValueError):
            return False
        return True


def _read(path: Path) -> Receipt:
    """A receipt file, its fields checked (an InputError names the file and the field)."""
    try:
        raw = path.read_bytes()
        doc = json.loads(raw)
    except OSError as e:
        raise InputError(f"{path}: cannot be read ({e.strerror or e})") from None
    except ValueError:
        raise InputError(f"{path}: not a receipt (unreadable JSON)") from None
    body, signature = receipt_format.checked(path, doc)
    return Receipt(path, body, signature, hashlib.sha256(raw).hexdigest())


def _paths(directory: Path) -> list[Path]:
    """The receipt files, oldest first: names start with the zero-padded sequence number."""
    return sorted(Path(directory).glob(f"*{SUFFIX}")) if Path(directory).is_dir() else []


def read_receipts(directory: Path) -> list[Receipt]:
    """Every receipt in `directory`, in sequence order. A file that is not a receipt is an error naming it."""
    return sorted((_read(p) for p in _paths(directory)), key=lambda r: r.seq)


def newest(directory: Path) -> tuple[Receipt | None, Receipt | None]:
    """(the newest receipt, the newest evening receipt), read from the newest file back to the first
    evening receipt: an evening's issue never reads the whole folder."""
    last = None
    for path in reversed(_paths(directory)):
        receipt = _read(path)
        last = last or receipt
        if receipt.body["kind"] == "evening":
            return last, receipt
    return last, None


def tree_after(directory: Path, evening: Receipt | None) -> merkle.Frontier:
    """The tree over every receipted row up to `evening` (the newest evening receipt): from its frontier,
    or, for a chain begun before receipts carried one, rebuilt once from every receipt's rows."""
    if evening is None:
        return merkle.Frontier()
    if "frontier" in evening.body:
        return merkle.Frontier.from_json(evening.body["frontier"])
    tree = merkle.Frontier()
    for r in read_receipts(directory):
        if r.body["kind"] == "evening" and r.seq <= evening.seq:
            for entry in r.body["rows"]:
                tree.append(merkle.leaf(entry))
    return tree


def _write(sink: Sink, body: dict, key: Ed25519PrivateKey) -> Receipt:
    """Sign `body` and write it as a new file (never over another); commit it when the sink is git."""
    signature = key.sign(_canonical_json(body).encode()).hex()
    text = json.dumps({"body": body, "signature": signature}, sort_keys=True, indent=1) + "\n"
    name = f"{body['seq']:08d}_{body['kind']}_{body.get('run_date') or 'key'}{SUFFIX}"
    message = f"receipt {body['seq']}: {body['kind']} {body.get('run_date', '')}".strip()
    path = sink.put(name, text.encode(), message)
    return Receipt(path, body, signature, hashlib.sha256(text.encode()).hexdigest())


# --- issuing -------------------------------------------------------------------------------------------


def current_key_id(newest_receipt: Receipt | None) -> str | None:
    """The key that signs the chain's next receipt: the newest receipt's, or the one it introduced."""
    if newest_receipt is None:
        return None
    body = newest_receipt.body
    return body["new_key_id"] if body["kind"] == "key" else body["key_id"]


def _check_current(newest_receipt: Receipt | None, key: Ed25519PrivateKey) -> None:
    """Only the chain's current key signs: another would break the chain for every later check."""
    current, mine = current_key_id(newest_receipt), key_id(key.public_key())
    if current is not None and current != mine:
        raise ConfigError(
            f"the configured signing key is {mine}, not the chain's current key {current} (receipt "
            f"{newest_receipt.seq}); only `ldtm receipts rotate`, signed by the current key, changes it"
        )


@dataclass(frozen=True)
class Ready:
    """The receipt settings, every one checked before an evening writes a row."""

    sink: Sink
    key: Ed25519PrivateKey
    tsa_url: str | None


def ready() -> Ready | None:
    """The checked receipt settings (None with no sink): a ConfigError names the first wrong one, raised
    before the evening writes anything, so no row is left uncovered by a setting's mistake."""
    sink = Sink.configured()
    if sink is None:
        return None
    key = signing_key()
    if key is None:
        raise ConfigError(f"{DIR_ENV} is set but neither {KEY_ENV} nor {SEED_ENV}: no key to sign with")
    url = timestamps.configured_url()
    _check_current(newest(sink.directory)[0], key)
    return Ready(sink, key, url)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _base(previous: Receipt | None, key: Ed25519PrivateKey, kind: str) -> dict:
    return {
        "version": VERSION,
        "kind": kind,
        "seq": previous.seq + 1 if previous else 1,
        "previous": previous.sha256 if previous else "",
        "issued_at": _now(),
        "key_id": key_id(key.public_key()),
    }


def issue(engine: Engine, sink: Sink, key: Ed25519PrivateKey) -> Receipt | None:
    """A receipt for every snapshot row not covered by the sink's receipts yet (None when there is none):
    an evening whose receipt failed is covered by the next one."""
    previous, evening = newest(sink.directory)
    after = int(evening.body["last_id"]) if evening else 0
    _check_current(previous, key)
    with engine.connect() as conn:
        upto = conn.execute(select(func.max(snapshots.c.id))).scalar() or 0
        if upto <= after:
            return None
        rows = conn.execute(
            select(snapshots).where(snapshots.c.id > after, snapshots.c.id <= upto).order_by(snapshots.c.id)
        ).mappings()
        entries = [row_entry(r) for r in rows]
    dates = sorted({e[2] for e in entries})
    tree = tree_after(sink.directory, evening)
    for e in entries:
        tree.append(merkle.leaf(e))
    body = _base(previous, key, "evening") | {
        "run_date": dates[-1],
        "run_dates": dates,
        "first_id": after + 1,
        "last_id": upto,
        "rows": entries,
        "merkle_root": merkle_root(entries),
        # The signed tree head over every receipted row since the first (RFC 9162's shape): what a
        # verifier's checkpoint keeps; the frontier lets the next evening extend it without rereading.
        "tree_size": tree.size,
        "tree_root": tree.root().hex(),
        "frontier": tree.to_json(),
    }
    return _write(sink, body, key)


def rotate(sink: Sink, old: Ed25519PrivateKey, new_public: Ed25519PublicKey) -> Receipt:
    """A receipt, signed by the current key, that introduces the next one: later receipts are signed by it."""
    previous = newest(sink.directory)[0]
    _check_current(previous, old)
    body = _base(previous, old, "key") | {
        "new_key_id": key_id(new_public),
        "new_public_key": base64.b64encode(
            new_public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        ).decode(),
    }
    return _write(sink, body, old)


def stamp(sink: Sink, receipt: Receipt, url: str) -> Path:
    """Ask the timestamp authority at `url` to timestamp the receipt's file; keep its token beside it."""
    data = receipt.path.read_bytes()
    if hashlib.sha256(data).hexdigest() != receipt.sha256:
        raise ReceiptError(f"{receipt.path}: changed since it was written; not timestamped")
    token = timestamps.fetch(url, data)
    name = timestamps.token_path(receipt.path).name
    return sink.put(name, token, f"timestamp of receipt {receipt.seq}")


def unstamped(receipts: list[Receipt]) -> list[Receipt]:
    return [r for r in receipts if not timestamps.token_path(r.path).exists()]


def after_predict(engine: Engine, settings: Ready | None) -> Receipt | None:
    """The nightly's receipt with the settings `ready()` checked before the evening (None: no sink),
    timestamped when a TSA is configured: a ReceiptError (the run fails, the alert says why) when either
    cannot be had."""
    if settings is None:
        return None
    sink, key, url = settings.sink, settings.key, settings.tsa_url
    try:
        receipt = issue(engine, sink, key)
    except (ConfigError, InputError) as e:  # the chain moved on meanwhile, or a receipt that cannot be read
        raise ReceiptError(str(e)) from None
    newest_receipt = receipt or newest(sink.directory)[0]
    if url and newest_receipt and unstamped([newest_receipt]):
        try:
            stamp(sink, newest_receipt, url)
        except timestamps.TimestampError as e:
            raise ReceiptError(
                f"receipt {newest_receipt.seq} is written but not timestamped ({e}); "
                "`ldtm receipts stamp` asks again"
            ) from None
    return receipt
