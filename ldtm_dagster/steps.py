"""The loop every partitioned asset body runs, in one place: one core call per partition key, and any
LDTMError turned into a Dagster Failure that names the step and the key (no traceback of our own code,
nothing half-reported)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dagster import AssetExecutionContext, Failure

from ldtm_core.errors import LDTMError


@contextmanager
def failing_as(step: str) -> Iterator[None]:
    """A core error inside the block fails the step as `step: message`."""
    try:
        yield
    except LDTMError as exc:
        raise Failure(f"{step}: {exc}") from None


def for_each_partition(context: AssetExecutionContext, step: str, work: Callable[[str], dict]) -> list[dict]:
    """`work(key)` for every partition key of the run (a single-run backfill has many), in order; one
    metadata row per key. The first core error fails the step as `step: key: message`."""
    rows = []
    for key in context.partition_keys:
        with failing_as(f"{step}: {key}"):
            rows.append(work(key))
    return rows
