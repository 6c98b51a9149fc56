"""Rendering helpers for asset metadata: tables, Markdown, and a PNG embedded in Markdown."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence

from dagster import MetadataValue, TableColumn, TableRecord, TableSchema


def _cell(value):
    if value is None:
        return None
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 6)
    if hasattr(value, "item"):  # numpy scalars
        return _cell(value.item())
    return str(value)


def _type(values: Sequence) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return "bool"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "int"
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return "float"
    return "string"


def records_table(rows: Sequence[dict]) -> MetadataValue:
    """A Dagster table from a list of dicts (columns in first-seen order; missing cells are empty)."""
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    cleaned = [{c: _cell(row.get(c)) for c in columns} for row in rows]
    schema = TableSchema(columns=[TableColumn(c, _type([r[c] for r in cleaned])) for c in columns])
    records = [TableRecord(r) for r in cleaned]
    return MetadataValue.table(records=records, schema=schema)


def png_markdown(fig, alt: str) -> str:
    """A Matplotlib figure as a base64 `data:image/png` image inside Markdown (renders in the UI)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    return f"![{alt}](data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()})"
