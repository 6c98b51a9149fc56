"""RFC 9162 tree heads and consistency proofs, against pymerkle (an RFC 9162 implementation) for the
roots, and exhaustively for the proofs: every valid pair verifies, every altered one fails."""

from __future__ import annotations

import warnings

import pytest

from ldtm_core.accountability.ledger import merkle

pymerkle = pytest.importorskip("pymerkle")  # a test dependency: the reference the roots are held to


def _tree(n: int):
    entries = [[i, "AAPL", "2024-05-01", f"{i:064x}", f"{i + 1:064x}"] for i in range(n)]
    return entries, [merkle.leaf(e) for e in entries]


def test_roots_and_the_frontier_agree_with_pymerkle():
    entries, leaves = _tree(70)
    reference = pymerkle.InmemoryTree(algorithm="sha256")
    frontier = merkle.Frontier()
    for i, e in enumerate(entries, start=1):
        reference.append_entry(merkle.json.dumps(e, sort_keys=True, separators=(",", ":")).encode())
        frontier.append(leaves[i - 1])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            want = reference.get_root(i)
        assert merkle.root(leaves[:i]) == want == frontier.root(), i
        assert merkle.Frontier.from_json(frontier.to_json()).root() == want
        assert len(frontier.parts) == bin(i).count("1")  # log-sized: one subtree per set bit


def test_every_consistency_proof_verifies_and_every_altered_one_fails():
    _, leaves = _tree(33)
    for second in range(1, 34):
        new = merkle.root(leaves[:second])
        for first in range(1, second + 1):
            old = merkle.root(leaves[:first])
            proof = merkle.consistency_proof(first, leaves[:second])
            assert merkle.verify_consistency(first, second, old, new, proof), (first, second)
            if first == second:
                continue
            assert not merkle.verify_consistency(first, second, old[::-1], new, proof)  # another old head
            assert not merkle.verify_consistency(first, second, old, new[::-1], proof)  # another new head
            for i in range(len(proof)):  # any proof hash changed
                bad = [*proof[:i], proof[i][::-1], *proof[i + 1 :]]
                assert not merkle.verify_consistency(first, second, old, new, bad)
    # A tree whose early leaf changed is no extension, whatever proof is offered.
    changed = [leaves[0][::-1], *leaves[1:20]]
    proof = merkle.consistency_proof(5, changed)
    assert not merkle.verify_consistency(5, 20, merkle.root(leaves[:5]), merkle.root(changed), proof)
