"""Benchmark: the survivorship bias of today's member list applied backwards, and the dated universe.

    .venv/bin/python benchmarks/survivorship.py            # 60 members + 20 candidates, 2021-2023, 5 seeds
    .venv/bin/python benchmarks/survivorship.py --quick    # a smoke run (seconds)

An index on the synthetic market (`synthetic_market.generate`) whose changes depend on performance, as
real ones do: at each quarter end the worst member by trailing two-quarter return is removed if it lost
more than a quarter of its value (its bars stop there: `generate(..., delistings=)`), and the candidate
outside the index that rose most over the same span replaces it from the next session. The changes are
read off the prices themselves: generated once without delistings to see the paths, then again with them.
The history is `membership_spans` for the founding members plus one `Span` per replacement (which
`membership_spans` cannot express: it knows only a start date or LATE_LISTINGS).

Three equal-weight benchmarks over the same evenings:
  today's list  a SQLite store holding only the members at the end (the whole history a user who ingests
                today's list gets, replacements' rise before they joined included), no membership rows;
  dated         a store holding every name ever a member (removed names' bars up to their removal) and
                the history, `import_membership`;
  truth         the mean return over the names that were members that evening, computed here from the
                generated frame and the spans (plain numpy: the reference).
The two stores are read through the signal report's own functions: `execution.load_bars` +
`execution.benchmark` (next_close, the report's default rule) and `rows.benchmark_returns` (same_close);
each reads the stored membership (`load_membership`). Figures are the report's (`stats.annual_return`,
`stats.sharpe_annual`). It prints a Markdown table and the CPU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from ldtm_core.accountability.signals import stats  # noqa: E402
from ldtm_core.accountability.signals.execution import benchmark, load_bars  # noqa: E402
from ldtm_core.accountability.signals.rows import benchmark_returns  # noqa: E402
from ldtm_core.data.ingest import ingest_frame  # noqa: E402
from ldtm_core.data.membership import Span, import_membership, load_membership  # noqa: E402
from ldtm_core.data.synthetic_market import generate, membership_spans  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402
from ldtm_core.migrate import upgrade  # noqa: E402

LOOKBACK = 126  # sessions of trailing return a change is judged on (two quarters)
DROP = -0.25  # a member is removed only if its trailing return is below this (and the worst)
RULES = ("next_close", "same_close")


def index_changes(closes: pd.DataFrame, members: list[str], pool: list[str]) -> list[tuple]:
    """(removal session, removed, replacement) per quarter end, decided on the undelisted closes."""
    dates = closes.index
    quarter_ends = [i for i in range(1, len(dates) - 1) if dates[i].quarter != dates[i + 1].quarter]
    members, pool, changes = list(members), list(pool), []
    for i in quarter_ends:
        trailing = closes.iloc[i] / closes.iloc[max(0, i - LOOKBACK)] - 1.0
        worst = trailing[members].idxmin()
        if trailing[worst] < DROP:  # only a real loser leaves, as index committees remove fallen names
            best = trailing[pool].idxmax()  # the candidate that rose most joins in its place
            members.remove(worst)
            pool.remove(best)
            members.append(best)
            changes.append((dates[i].date(), worst, best, dates[i + 1].date()))
    return changes


def universe(seed: int, n_members: int, n_pool: int, start: str, end: str):
    """(frame with the removed names' bars stopping, spans, survivors, removals)."""
    members = [f"M{i:03d}" for i in range(n_members)]
    pool = [f"C{i:03d}" for i in range(n_pool)]
    paths = generate(members + pool, start, end, seed=seed)
    closes = paths.pivot(index="date", columns="ticker", values="close")
    closes.index = pd.to_datetime(closes.index)
    changes = index_changes(closes, members, pool)
    gone = {removed: day for day, removed, _, _ in changes}
    joined = {new: first for _, _, new, first in changes}
    ever = members + list(joined)
    frame = generate(ever, start, end, seed=seed, delistings=gone)
    spans = membership_spans(members, start, gone) + [Span(t, d, gone.get(t)) for t, d in joined.items()]
    survivors = [t for t in ever if t not in gone]
    return frame, spans, survivors, changes


def truth(frame: pd.DataFrame, spans: list[Span], evenings: pd.DatetimeIndex) -> dict[str, np.ndarray]:
    """Per rule: the mean held return over the names that were members on each evening."""
    closes = frame.pivot(index="date", columns="ticker", values="close").astype(float)
    closes.index = pd.to_datetime(closes.index)
    c = np.vstack([closes.to_numpy(), np.full((2, closes.shape[1]), np.nan)])
    days = closes.index.to_numpy().astype("datetime64[D]")
    member = np.zeros(c.shape, dtype=bool)  # spans applied by hand, not through Membership.mask
    for s in spans:
        j = closes.columns.get_loc(s.ticker)
        hi = np.datetime64(s.end) if s.end else days[-1]
        member[: len(days), j] |= (days >= np.datetime64(s.start)) & (days <= hi)
    at = closes.index.get_indexer(evenings)
    out = {}
    for rule, (a, b) in {"next_close": (1, 2), "same_close": (0, 1)}.items():
        with np.errstate(invalid="ignore"):
            ret = c[at + b] / c[at + a] - 1.0
        ok = np.isfinite(ret) & member[at]
        out[rule] = np.where(ok, ret, 0.0).sum(axis=1) / ok.sum(axis=1)
    return out


def measured(url: str, frame: pd.DataFrame, spans: list[Span] | None, evenings) -> dict[str, np.ndarray]:
    """Per rule: the equal-weight benchmark the signal report reads from a store holding `frame`."""
    engine = upgrade(url)
    ingest_frame(engine, frame, "synthetic")
    if spans is not None:
        import_membership(engine, spans, "synthetic history")
    tickers = sorted(frame["ticker"].unique())
    days = [d.date() for d in evenings]
    bars = load_bars(engine, tickers, days[0], frame["date"].max())
    out = {
        "next_close": benchmark(bars, "next_close", days, load_membership(engine)).to_numpy(),
        "same_close": benchmark_returns(engine, tickers, days).to_numpy(),
    }
    engine.dispose()
    return out


def row(seed: str, rule: str, removed: str, figs: dict) -> str:
    """One table row: each benchmark's CAGR / Sharpe, then each store's bias against the truth."""
    (tr, ts), cells = figs["truth"], [f"{100 * r:+.2f} % / {s:.2f}" for r, s in figs.values()]
    bias = [f"{100 * (figs[k][0] - tr):+.3f} pp / {figs[k][1] - ts:+.3f}" for k in ("today", "dated")]
    return f"| {seed} | {rule} | {removed} | " + " | ".join(cells + bias) + " |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", type=int, default=60, help="names in the index at the start")
    ap.add_argument("--pool", type=int, default=20, help="candidates outside it that may join")
    ap.add_argument("--start", default="2021-01-04")
    ap.add_argument("--end", default="2023-12-29")
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--quick", action="store_true", help="20 members, 8 candidates, 2022-2023, seed 0")
    args = ap.parse_args()
    if args.quick:
        args.members, args.pool, args.start, args.seeds = 20, 8, "2022-01-03", "0"
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.perf_counter()
    print("# Survivorship: today's list against a dated universe\n")
    print(
        f"{args.members} members + {args.pool} candidates, {args.start}..{args.end}; a member is removed at a "
        f"quarter end when it is the worst and down more than {-DROP:.0%} over {LOOKBACK} sessions, and the "
        "best candidate replaces it. Annual return (CAGR) and Sharpe of the equal-weight benchmark; bias = "
        "store - truth.\n"
    )
    cols = ["seed", "rule", "removed", "truth", "today's list", "dated", "bias today's list", "bias dated"]
    print("| " + " | ".join(cols) + " |")
    print("|---|---|---:|" + "---:|" * 5)
    results, worst_gap = {rule: [] for rule in RULES}, 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            frame, spans, survivors, changes = universe(seed, args.members, args.pool, args.start, args.end)
            sessions = pd.DatetimeIndex(sorted(pd.to_datetime(frame["date"].unique())))
            evenings = sessions[:-2]  # next_close exits two sessions later
            ref = truth(frame, spans, evenings)
            today = measured(
                f"sqlite:///{tmp}/today_{seed}.db", frame[frame["ticker"].isin(survivors)], None, evenings
            )
            dated = measured(f"sqlite:///{tmp}/dated_{seed}.db", frame, spans, evenings)
            for rule in RULES:
                series = {"truth": ref[rule], "today": today[rule], "dated": dated[rule]}
                worst_gap = max(worst_gap, float(np.max(np.abs(dated[rule] - ref[rule]))))
                figs = {k: (stats.annual_return(v), stats.sharpe_annual(v)) for k, v in series.items()}
                results[rule].append(figs)
                print(row(str(seed), rule, str(len(changes)), figs))
    for rule in RULES:
        mean = {k: tuple(np.mean([f[k] for f in results[rule]], axis=0)) for k in ("truth", "today", "dated")}
        print(row("mean", rule, "", mean))
    print(f"\nlargest per-evening |dated - truth|: {worst_gap:.1e}")
    print(f"\n{time.perf_counter() - t0:.0f} s on {describe_cpu()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
