"""Checkpoints: the tree head an outsider keeps between two checks of the record.

Every evening receipt signs the RFC 9162 tree head (size and root) over every receipted row since the
first (`merkle`). A check without a checkpoint cannot tell a record from one whose newest evenings were
removed with their receipts; `verify-record --checkpoint FILE` can: today's receipts must still hold the
kept receipt, unchanged, and today's tree must extend the kept one (a consistency proof), or the check
fails. The new head is then written to FILE for the next check (a witness may keep a copy too).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ldtm_core.accountability.ledger import merkle
from ldtm_core.accountability.ledger import receipts as rc
from ldtm_core.errors import ConfigError, InputError

VERSION = 1


@dataclass(frozen=True)
class Checkpoint:
    seq: int  # the newest evening receipt's number
    receipt_sha256: str  # its file's SHA-256: pins it, and every receipt before it through their links
    run_date: str
    tree_size: int  # rows receipted up to it
    tree_root: str  # their RFC 9162 root (hex)


@dataclass
class Tree:
    leaves: list[bytes]
    head: Checkpoint | None  # None: no evening receipt


def build(good: list[rc.Receipt], hashes: dict[int, list[bytes]], add) -> Tree:
    """The tree over the verified receipts' rows, in order, from {seq: the rows' leaf hashes} (the
    receipts' own Merkle check made them); a signed head that is not its rows' is a finding
    (`add(kind, ticker, run_date, detail)`)."""
    tree, leaves, head = merkle.Frontier(), [], None
    for r in good:
        if r.body["kind"] != "evening":
            continue
        for h in hashes[r.seq]:
            tree.append(h)
            leaves.append(h)
        root = tree.root().hex()
        signed = (r.body.get("tree_size"), r.body.get("tree_root"))
        if signed != (None, None) and signed != (tree.size, root):
            add("receipt", "", r.body["run_date"], f"receipt {r.seq}: its tree head is not the rows' so far")
        head = Checkpoint(r.seq, r.sha256, r.body["run_date"], tree.size, root)
    return Tree(leaves, head)


def read(path: Path) -> Checkpoint | None:
    """The kept checkpoint (None: no file yet); an InputError names a file that is not one."""
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
        cp = Checkpoint(**{k: doc[k] for k in Checkpoint.__dataclass_fields__})
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise InputError(
            f"{path}: not a verify-record checkpoint (JSON with seq, tree_size, tree_root ...)"
        ) from None
    if type(cp.seq) is not int or type(cp.tree_size) is not int or cp.tree_size < 1:
        raise InputError(f"{path}: its seq and tree_size are not whole numbers")
    try:
        bytes.fromhex(cp.tree_root)
    except (TypeError, ValueError):
        raise InputError(f"{path}: its tree_root is not hex") from None
    return cp


def write(path: Path, cp: Checkpoint) -> None:
    """Replace the checkpoint file in one step (a crash leaves the old one or the new one)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps({"version": VERSION, **asdict(cp)}, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        raise ConfigError(f"{path}: the checkpoint cannot be written ({e.strerror or e})") from None


def compare(kept: Checkpoint, tree: Tree, good: list[rc.Receipt], add) -> int:
    """Findings unless today's record extends the kept one; returns the consistency proof's length."""
    now = len(tree.leaves)
    where = f"the checkpoint kept at receipt {kept.seq} ({kept.run_date}, {kept.tree_size} rows)"
    if kept.tree_size > now:
        add(
            "checkpoint",
            "",
            kept.run_date,
            f"{where}: today's receipts cover {now} rows; evenings were removed",
        )
        return 0
    same = [r for r in good if r.seq == kept.seq]
    if not same or same[0].sha256 != kept.receipt_sha256:
        add("checkpoint", "", kept.run_date, f"{where}: that receipt is no longer in the record as it was")
        return 0
    proof = merkle.consistency_proof(kept.tree_size, tree.leaves)
    root = bytes.fromhex(tree.head.tree_root)
    if not merkle.verify_consistency(kept.tree_size, now, bytes.fromhex(kept.tree_root), root, proof):
        add(
            "checkpoint",
            "",
            kept.run_date,
            f"{where}: today's rows do not extend it (rows before it changed)",
        )
    return len(proof)
