"""RFC 9162 Merkle trees over every receipted row: tree heads and consistency proofs.

Leaves are `0x00 || entry`, nodes `0x01 || left || right`, SHA-256 (RFC 9162 §2.1.1; the receipts' own
Merkle root has the same shape). A `Frontier` holds the roots of the perfect subtrees a tree of n
leaves splits into (at most log2 n of them), so an evening extends the tree without rereading every
earlier row. `consistency_proof` / `verify_consistency` are §2.1.4's: a tree of `first` leaves is a
prefix of one of `second` leaves, i.e. nothing before `first` was removed or changed.
"""

from __future__ import annotations

import hashlib
import json


def leaf(entry) -> bytes:
    return hashlib.sha256(
        b"\x00" + json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
    ).digest()


def node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def root(leaves: list[bytes]) -> bytes:
    """MTH(D[n]) of §2.1.1 (the hash of nothing for no leaves)."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = _split(len(leaves))
    return node(root(leaves[:k]), root(leaves[k:]))


def _split(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


class Frontier:
    """The perfect subtrees of a tree, largest first: [(leaves, root)]."""

    def __init__(self, parts: list[tuple[int, bytes]] | None = None):
        self.parts = list(parts or [])

    @property
    def size(self) -> int:
        return sum(n for n, _ in self.parts)

    def append(self, leaf_hash: bytes) -> None:
        size, h = 1, leaf_hash
        while (
            self.parts and self.parts[-1][0] == size
        ):  # two equal subtrees merge, as a binary counter carries
            size, h = size * 2, node(self.parts.pop()[1], h)
        self.parts.append((size, h))

    def root(self) -> bytes:
        if not self.parts:
            return hashlib.sha256(b"").digest()
        h = self.parts[-1][1]
        for _, left in reversed(self.parts[:-1]):
            h = node(left, h)
        return h

    def to_json(self) -> list[list]:
        return [[n, h.hex()] for n, h in self.parts]

    @classmethod
    def from_json(cls, parts: list[list]) -> Frontier:
        return cls([(int(n), bytes.fromhex(h)) for n, h in parts])


def consistency_proof(first: int, leaves: list[bytes]) -> list[bytes]:
    """PROOF(first, D[n]) of §2.1.4.1, for 0 < first <= n."""

    def sub(m: int, d: list[bytes], whole: bool) -> list[bytes]:
        n = len(d)
        if m == n:
            return [] if whole else [root(d)]
        k = _split(n)
        if m <= k:
            return [*sub(m, d[:k], whole), root(d[k:])]
        return [*sub(m - k, d[k:], False), root(d[:k])]

    return sub(first, leaves, True)


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, proof: list[bytes]
) -> bool:
    """§2.1.4.2: does the tree of `second` leaves with `second_root` extend the one of `first` leaves?"""
    if first == second:
        return not proof and first_root == second_root
    if not 0 < first < second or not proof:
        return False
    path = [first_root, *proof] if first & (first - 1) == 0 else list(proof)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node(c, fr), node(c, sr)
            if not fn & 1:
                while not (fn & 1 or fn == 0):
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return fr == first_root and sr == second_root and sn == 0
