"""Each horizon's answer: `snapshots` outer-joined to `prices` once per horizon on (ticker, target
date). Fill-back, re-fill and the audit read a row's actuals through this one join."""

from __future__ import annotations

from sqlalchemy import and_
from sqlalchemy.orm import aliased

from ldtm_core.horizons import HORIZONS
from ldtm_core.schema import prices, snapshots


def target_prices(prefix: str):
    """(from clause, {horizon name: its `prices` alias}): `snapshots` LEFT JOIN one alias of `prices`
    per horizon, named `{prefix}_{horizon}`, on the row's ticker and that horizon's target date."""
    s = snapshots.c
    px = {h.name: aliased(prices, name=f"{prefix}_{h.name}") for h in HORIZONS}
    frm = snapshots
    for h in HORIZONS:
        p = px[h.name].c
        frm = frm.outerjoin(px[h.name], and_(p.ticker == s.ticker, p.date == s[h.col("date")]))
    return frm, px
