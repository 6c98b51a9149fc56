"""Benchmark: what the receipts' tree heads and checkpoints cost per evening after a year of evenings.

    .venv/bin/python benchmarks/checkpoints.py                       # 103 and 1,000 tickers, 252 evenings
    .venv/bin/python benchmarks/checkpoints.py --sizes 103 --evenings 20

No database: a year of evenings' receipt rows (N tickers each) is made in memory. Timed, side by side:
the issuer's extra work each evening (extend the tree from the last receipt's frontier, its root: median
and max over the year) beside the receipt's own Merkle root of the evening's rows, which receipts already
computed; then, once, what `verify-record --checkpoint` adds after the year: the tree over every
receipted row (`record_checkpoint.build`, from the leaf hashes the receipts' Merkle check made) and the
consistency proof from the previous evening's checkpoint and from the first evening's, with its check.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ldtm_core.accountability.ledger import merkle  # noqa: E402
from ldtm_core.accountability.ledger import receipts as rc  # noqa: E402
from ldtm_core.accountability.ledger import record_checkpoint as cp  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402


def year(n: int, evenings: int) -> dict[str, float]:
    tree, good, extend, own_root = merkle.Frontier(), [], [], []
    for e in range(evenings):
        day = f"2024-{1 + e // 21 % 12:02d}-{1 + e % 21:02d}"
        rows = [
            [e * n + i + 1, f"T{i:04d}", day, f"{e * n + i:064x}", f"{e * n + i + 7:064x}"] for i in range(n)
        ]
        t0 = time.perf_counter()
        rc.merkle_root(rows)
        own_root.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        tree = merkle.Frontier.from_json(tree.to_json())  # as the issuer reads it from the last receipt
        for r in rows:
            tree.append(merkle.leaf(r))
        head = {"tree_size": tree.size, "tree_root": tree.root().hex(), "frontier": tree.to_json()}
        extend.append(time.perf_counter() - t0)
        body = {"kind": "evening", "seq": e + 1, "run_date": day, "rows": rows, **head}
        good.append(rc.Receipt(Path(f"{e + 1:08d}"), body, "", f"{e:064x}"))
    found: list = []
    hashes = {
        r.seq: [merkle.leaf(e) for e in r.body["rows"]] for r in good
    }  # the Merkle check's, already paid
    t0 = time.perf_counter()
    built = cp.build(good, hashes, lambda *f: found.append(f))
    build_s = time.perf_counter() - t0
    assert not found, found[:3]
    proofs = {}
    for label, at in (("previous evening", evenings - 2), ("first evening", 0)):
        size = (at + 1) * n
        kept = cp.Checkpoint(at + 1, good[at].sha256, "", size, merkle.root(built.leaves[:size]).hex())
        t0 = time.perf_counter()
        length = cp.compare(kept, built, good, lambda *f: found.append(f))
        proofs[label] = (time.perf_counter() - t0, length)
    assert not found, found[:3]
    return {
        "rows": len(built.leaves),
        "own_root_ms": statistics.median(own_root) * 1e3,
        "extend_ms": statistics.median(extend) * 1e3,
        "extend_max_ms": max(extend) * 1e3,
        "build_s": build_s,
        "proof_prev_s": proofs["previous evening"][0],
        "proof_prev_len": proofs["previous evening"][1],
        "proof_first_s": proofs["first evening"][0],
        "proof_first_len": proofs["first evening"][1],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="103,1000", help="tickers per evening")
    ap.add_argument("--evenings", type=int, default=252)
    args = ap.parse_args()
    print(f"CPU: {describe_cpu()}; {args.evenings} evenings\n")
    print(
        "| tickers | rows | evening's own Merkle root ms | tree extended per evening ms (max) "
        "| verifier: the tree over the year, from the Merkle check's leaf hashes s | proof from the previous evening s (hashes) | from the first s (hashes) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in args.sizes.split(",")):
        m = year(n, args.evenings)
        print(
            f"| {n:,} | {m['rows']:,} | {m['own_root_ms']:.1f} | {m['extend_ms']:.1f} ({m['extend_max_ms']:.1f}) "
            f"| {m['build_s']:.2f} | {m['proof_prev_s']:.2f} ({m['proof_prev_len']}) "
            f"| {m['proof_first_s']:.2f} ({m['proof_first_len']}) |"
        )


if __name__ == "__main__":
    main()
