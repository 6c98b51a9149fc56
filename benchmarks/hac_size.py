"""Benchmark: the false rate and power of the overlap-aware tests (IC, quintile spread, Diebold-Mariano).

    .venv/bin/python benchmarks/hac_size.py            # 2,000 records per cell
    .venv/bin/python benchmarks/hac_size.py --quick    # a smoke run (seconds)
    .venv/bin/python benchmarks/hac_size.py --edge 0.05 --reps 500   # power on a planted edge

A record is `n` evenings of a universe of `names` tickers. Realised returns are h-session sums of
i.i.d. daily returns, so consecutive evenings' targets overlap by h - 1 sessions. Predictions are an
AR(1) per ticker with coefficient `phi` (0: fresh every evening; 0.9: as persistent as the models').
No skill: predictions independent of the future. Planted edge: predictions load `edge` on the first
session of the target (the IC at one session is about `edge`).
  IC      the evening's Spearman IC (`signals.ic.ic_series`), its mean tested two-sided at 5 %;
  spread  top-minus-bottom quintile return (`signals.ic.quintile_returns`), two-sided at 5 %;
  DM      two equal predictors of one ticker (errors = target + AR(1) noise each), |error| differential,
          one-sided "challenger worse" at 5 % (`scoring.paired.dm_test`).
Each is read by the project's test (`scoring.hac.mean_test` through its callers) and by the rule main
had before (Newey-West lag h - 1 against the normal for IC and spread; lag max(h - 1, 1.3 sqrt(T)) with
HLN against t(T - 1) for DM), recomputed here with statsmodels. "short" marks cells the project does
not test (fewer than 10 independent target periods: no p-value, so no false rejection either).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import statsmodels.api as sm  # noqa: E402
from scipy.stats import t as student_t  # noqa: E402

from ldtm_core.accountability.gate import sim as gate_sim  # noqa: E402
from ldtm_core.accountability.signals import ic as signal_ic  # noqa: E402
from ldtm_core.learning.precision import describe_cpu  # noqa: E402
from ldtm_core.scoring import hac, paired  # noqa: E402

HORIZONS = {"next_day": 1, "next_monday": 5, "one_month": 21}
ALPHA = 0.05


def ar1(rng, shape, phi: float) -> np.ndarray:
    """Stationary AR(1) along axis 0 with unit variance."""
    e = rng.standard_normal(shape)
    out = np.empty(shape)
    out[0] = e[0]
    scale = np.sqrt(1 - phi * phi)
    for t in range(1, shape[0]):
        out[t] = phi * out[t - 1] + scale * e[t]
    return out


def record(rng, n: int, h: int, phi: float, names: int, edge: float) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, realised) evenings x names; realised[t] = sum of daily returns t+1..t+h."""
    daily = rng.standard_normal((n + h, names))
    realised = np.lib.stride_tricks.sliding_window_view(daily[1:], h, axis=0)[:n].sum(axis=-1)
    pred = ar1(rng, (n, names), phi)
    if edge:
        pred = np.sqrt(1 - edge * edge) * pred + edge * daily[1 : n + 1]
    return pred, realised


def rows_frame(pred: np.ndarray, real: np.ndarray, horizon: str) -> pd.DataFrame:
    """The long rows frame `signals.ic` reads (one row per evening and ticker)."""
    n, names = pred.shape
    days = np.repeat(np.arange(n), names)
    tick = np.tile(np.arange(names), n)
    return pd.DataFrame(
        {
            "run_date": pd.Timestamp("2020-01-01") + pd.to_timedelta(days, "D"),
            "ticker": [f"T{i:03d}" for i in tick],
            "day_code": days,
            "name_code": tick,
            f"pred_{horizon}": pred.ravel(),
            f"real_{horizon}": real.ravel(),
        }
    )


def main_rule_p(y: np.ndarray, h: int) -> float:
    """main's IC/spread p: Newey-West lag h - 1, normal reference (two-sided)."""
    y = y[np.isfinite(y)]
    fit = sm.OLS(y, np.ones(len(y))).fit(cov_type="HAC", cov_kwds={"maxlags": h - 1, "use_correction": True})
    return float(fit.pvalues[0])


def main_rule_dm(d: np.ndarray, h: int) -> float:
    """main's DM p (challenger worse): lag max(h - 1, ceil(1.3 sqrt(n))), HLN, t(n - 1)."""
    n = len(d)
    lag = int(min(max(h - 1, int(np.ceil(1.3 * np.sqrt(n)))), n - 2))
    fit = sm.OLS(d, np.ones(n)).fit(cov_type="HAC", cov_kwds={"maxlags": lag, "use_correction": True})
    stat = d.mean() / fit.bse[0] * np.sqrt(max(n + 1 - 2 * h + h * (h - 1) / n, 1.0) / n)
    return float(student_t.sf(stat, n - 1))


def rejects(p: float) -> bool:
    return bool(np.isfinite(p) and p <= ALPHA)


def cell(rng, n: int, horizon: str, phi: float, reps: int, names: int, edge: float) -> dict:
    h = HORIZONS[horizon]
    counts = dict.fromkeys(["ic_main", "ic_new", "spread_main", "spread_new", "dm_main", "dm_new"], 0)
    for _ in range(reps):
        pred, real = record(rng, n, h, phi, names, edge)
        rows = rows_frame(pred, real, horizon)
        ic = signal_ic.ic_series(rows, horizon)["ic"].to_numpy(float)
        spread = signal_ic.quintile_returns(rows, horizon)["spread"].to_numpy(float)
        counts["ic_main"] += rejects(main_rule_p(ic, h))
        counts["ic_new"] += rejects(hac.mean_test(ic, h).p_two_sided)
        counts["spread_main"] += rejects(main_rule_p(spread, h))
        counts["spread_new"] += rejects(hac.mean_test(spread, h).p_two_sided)
        # DM: one ticker, two equal predictors whose errors share the target and carry their own noise.
        target = real[:, 0]
        e1 = target + ar1(rng, (n,), phi)
        e2 = target + ar1(rng, (n,), phi) * (1.0 - edge)  # edge: the champion's noise is smaller
        d = np.abs(e1) - np.abs(e2)
        counts["dm_main"] += rejects(main_rule_dm(d, h))
        counts["dm_new"] += rejects(paired.dm_test(d, h).p_greater)
    short = hac.independent_periods(n, h) < hac.MIN_INDEPENDENT_PERIODS
    out = {"evenings": n, "horizon": horizon, "phi": phi, "dof at most": hac.ewc_dof(n, h)}
    for k, v in counts.items():
        out[k] = "short" if short and k.endswith("_new") else f"{100 * v / reps:.1f}"
    return out


def gate_table(reps: int) -> pd.DataFrame:
    """The gate's |error| test on its own simulation (`gate.sim`: AR(1) phi 0.95 biases, MA(h - 1)
    answers, 189 rows): equal predictors called worse, a doubled bias found, an equal refresh refused."""
    out = []
    for h in (1, 5, 21):
        size = gate_sim.error_test_size(reps, h, seed=h)
        power = gate_sim.error_test_size(max(reps // 2, 10), h, ratio=2.0, seed=100 + h)
        out.append({"h": h, "equal called worse %": 100 * size.dm, "doubled bias found %": 100 * power.dm})
    # One decision over the horizons tested (the one-month test is too short at 189 rows and is left
    # out of Holm's family); beside it the rule before, which counted it with p = 1.
    n = max(reps * 3 // 4, 10)
    for every, label in (
        (False, "all (Holm over the tested)"),
        (True, "all (Holm, untested counted: before)"),
    ):
        size, _ = gate_sim.equal_refresh_refusal_rate(n, seed=4, every_horizon_in_holm=every)
        power, _ = gate_sim.equal_refresh_refusal_rate(
            n, seed=5, next_day_ratio=2.0, every_horizon_in_holm=every
        )
        out.append({"h": label, "equal called worse %": 100 * size, "doubled bias found %": 100 * power})
    return pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 20 records per cell")
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--names", type=int, default=50)
    parser.add_argument("--edge", type=float, default=0.0, help="planted loading (0: the null)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    reps = 20 if args.quick else args.reps
    rng = np.random.default_rng(args.seed)
    table = [
        cell(rng, n, horizon, phi, reps, args.names, args.edge)
        for n in (60, 190, 750)
        for horizon in HORIZONS
        for phi in (0.0, 0.9)
    ]
    kind = "no skill" if not args.edge else f"planted edge {args.edge:g}"
    print(f"# Overlap-aware tests, {kind}: % of {reps} records rejecting at 5 % ({describe_cpu()})\n")
    print(pd.DataFrame(table).to_markdown(index=False))
    if not args.edge:
        print(
            f"\n# The gate's |error| test, 189 rows, 5 % ({400 if not args.quick else 20} records per cell)\n"
        )
        print(gate_table(20 if args.quick else 400).to_markdown(index=False, floatfmt=".1f"))


if __name__ == "__main__":
    main()
