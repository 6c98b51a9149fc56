"""A submitted model judged on its live record (it has no backtest): anytime-valid evidence (scoring.evidence)
against a coin, each board baseline and the published champion on the same evenings, and the promotion
that evidence allows.

Per ticker, the model's live, out-of-sample rows with a filled next-day answer (ties scored by no one):
- against a coin: a win is a right call;
- against each board baseline (its call recorded with the row): the evenings they disagree, a win is the
  model right and the baseline wrong;
- against the champion: the evenings the ticker's published row (another model's) is filled too, the same
  discordant rule.
`skill` is the smallest of the coin's and the baselines' e-values (beating every one of them). Across the
model's tickers, e-BH at the model's level finds the tickers where it is shown: level = trials.spend(alpha,
k), k = the model's place among the submitted models registered for any of those tickers, so trying
submitted models one after another errs at most alpha over the whole search (the gate's trials rule). A
ticker is promoted when its skill is shown and, where a champion published on its evenings, its e-value
against the champion is shown too (e-BH at the same level). The e-values are valid read on any evening.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from sqlalchemy import Engine, select

from ldtm_core.accountability.gate.ledger import spend
from ldtm_core.accountability.submissions.external import names, require
from ldtm_core.data.membership import load_membership
from ldtm_core.learning import registry
from ldtm_core.learning.registry import UNPUBLISHED
from ldtm_core.schema import snapshots
from ldtm_core.scoring import baselines
from ldtm_core.scoring.evidence import ALPHA, COIN, detectable, e_bh, e_value

CHAMPION = "champion"
RULE = (
    "promote a ticker when the submitted model's live record beats a coin and every board baseline, and the "
    "champion on the same evenings where one published, by anytime-valid e-values found by e-BH across its "
    "tickers at trials.spend(alpha, k) (k: its place among the submitted models of those tickers)"
)


@dataclass
class Judgement:
    name: str
    level: float  # the e-BH level its tickers are judged at
    trial: int  # k: its place among the submitted models of its tickers
    table: pd.DataFrame  # one row per ticker: n, hits, wins/losses and e per comparison, shown, promote
    detectable: str  # what a record of this many tickers can show, and when
    models: dict[str, registry.ModelRecord]  # {ticker: its registry row} as judged

    @property
    def shown(self) -> list[str]:
        return sorted(self.table.index[self.table["shown"]]) if len(self.table) else []

    @property
    def promotable(self) -> list[str]:
        return sorted(self.table.index[self.table["promote"]]) if len(self.table) else []


def _rows(engine: Engine, tickers: list[str]) -> pd.DataFrame:
    s = snapshots.c
    cols = [
        s.id, s.ticker, s.run_date, s.model_id, s.model_status, s.mode, s.in_sample, s.run_date_close,
        s.next_day_actual, s.next_day_direction_correct, s.baseline_calls,
    ]  # fmt: skip
    stmt = select(*cols).where(s.ticker.in_(tickers), s.next_day_actual.is_not(None)).order_by(s.id)
    with engine.connect() as conn:
        return pd.DataFrame(conn.execute(stmt).mappings().all(), columns=[c.name for c in cols])


def _counts(right: np.ndarray, other: np.ndarray, has: np.ndarray) -> tuple[int, int]:
    """(wins, losses): the rows both call where exactly one is right."""
    return int((right & ~other & has).sum()), int((~right & other & has).sum())


def trial_of(engine: Engine, name: str, tickers: list[str]) -> int:
    """k: the place of `name` among the submitted models registered for any of `tickers`."""
    order = names(engine, tickers)
    return order.index(name) + 1 if name in order else len(order) + 1


def judge(engine: Engine, name: str, alpha: float = ALPHA) -> Judgement:
    """The submitted model's live record per ticker, its e-values and what they show (module doc)."""
    models = require(engine, name)
    tickers = sorted(models)
    ids = {m.id for m in models.values()}
    rows = _rows(engine, tickers)
    membership = load_membership(engine)
    which = [b.name for b in baselines.board_baselines()]
    comparisons = [COIN, *which, CHAMPION]
    out = []
    for t in tickers:
        mine = rows[(rows["ticker"] == t) & rows["model_id"].isin(ids)]
        mine = mine[(mine["mode"] == "live") & ~mine["in_sample"].astype(bool)]
        mine = mine[np.array([membership.is_member(t, d) for d in mine["run_date"]], dtype=bool)]
        mine = mine[mine["next_day_actual"] != mine["run_date_close"]].drop_duplicates("run_date")
        up = (mine["next_day_actual"] > mine["run_date_close"]).to_numpy()
        right = mine["next_day_direction_correct"].fillna(False).astype(bool).to_numpy()
        rec: dict = {"ticker": t, "n": len(mine), "hits": int(right.sum())}
        rec[f"{COIN}_wins"], rec[f"{COIN}_losses"] = int(right.sum()), int((~right).sum())
        calls = [baselines.decode_calls(c) for c in mine["baseline_calls"]]
        for b in which:
            call = np.array([c.get(b, np.nan) for c in calls], dtype=float)
            has = ~np.isnan(call)
            base_right = np.where(call > 0, up, np.where(call < 0, ~up, False))
            rec[f"{b}_wins"], rec[f"{b}_losses"] = _counts(right, base_right, has)
        published = rows[(rows["ticker"] == t) & ~rows["model_status"].isin(UNPUBLISHED)]
        published = published.drop_duplicates("run_date", keep="first")
        published = published[~published["model_id"].isin(ids) & ~published["in_sample"].astype(bool)]
        both = (
            mine[["run_date"]]
            .assign(right=right)
            .merge(published[["run_date", "next_day_direction_correct"]], on="run_date")
        )
        champ_right = both["next_day_direction_correct"].fillna(False).astype(bool).to_numpy()
        rec["champion_n"] = len(both)
        rec[f"{CHAMPION}_wins"], rec[f"{CHAMPION}_losses"] = _counts(
            both["right"].to_numpy(dtype=bool), champ_right, np.ones(len(both), dtype=bool)
        )
        out.append(rec)
    table = pd.DataFrame(out).set_index("ticker") if out else pd.DataFrame()
    trial = trial_of(engine, name, tickers)
    level = spend(alpha, trial)
    if len(table):
        for c in comparisons:
            table[f"{c}_e"] = e_value(table[f"{c}_wins"], table[f"{c}_losses"])
        table["skill_e"] = table[[f"{c}_e" for c in (COIN, *which)]].min(axis=1)
        table["shown"] = e_bh(table["skill_e"].to_numpy(), level) & (table["n"] > 0)
        # No champion on its evenings: nothing to beat there (e = 1 would never be found).
        beats = e_bh(table[f"{CHAMPION}_e"].to_numpy(), level)
        table["beats_champion"] = beats
        table["promote"] = table["shown"] & (beats | (table["champion_n"] == 0))
    return Judgement(name, level, trial, table, detectable(max(len(tickers), 1), alpha=level), models)


@dataclass
class Promotion:
    ticker: str
    model_id: int
    version: str
    replaced: int | None


def promote(engine: Engine, name: str, alpha: float = ALPHA) -> list[Promotion]:
    """Promote submitted model `name` on each ticker its live record shows (`judge`): it publishes there
    from its next submission; the previous champion is retired (and publishes again on an evening its
    submission is missing)."""
    verdict = judge(engine, name, alpha)
    done = []
    for t in verdict.promotable:
        rec = verdict.models[t]
        if rec.status != "candidate":
            continue
        row = verdict.table.loc[t]
        reason = (
            f"submitted model {name}: live record of {int(row['n'])} evenings shown at e-BH level "
            f"{verdict.level:.4g} (trial {verdict.trial}; skill e = {row['skill_e']:.3g}, vs champion e = "
            f"{row[f'{CHAMPION}_e']:.3g} on {int(row['champion_n'])} evenings)"
        )
        result = registry.promote(engine, rec.id, reason)
        done.append(Promotion(t, rec.id, result.version, result.retired_model_id))
    return done


def live_records(engine: Engine, alpha: float = ALPHA) -> pd.DataFrame:
    """Every submitted model's live record, one row per (model, ticker), as `judge` reads it: its status
    (candidate: never published, so never on the accuracy board; active: published there too), n, accuracy,
    the e-values against a coin, each board baseline and the champion, whether it is shown and promotable,
    and what its record could detect. Empty with the columns when nothing is registered."""
    rows = []
    for name in names(engine):
        verdict = judge(engine, name, alpha)
        for t, row in verdict.table.iterrows():
            rows.append(
                {
                    "model": name,
                    "ticker": t,
                    "status": verdict.models[t].status,
                    "n": int(row["n"]),
                    "accuracy": row["hits"] / row["n"] if row["n"] else np.nan,
                    **{c: float(row[c]) for c in row.index if c.endswith("_e")},
                    "shown": bool(row["shown"]),
                    "promote": bool(row["promote"]),
                    "level": verdict.level,
                    "detectable": verdict.detectable,
                }
            )
    cols = ["model", "ticker", "status", "n", "accuracy", "shown", "promote", "level", "detectable"]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=cols)
