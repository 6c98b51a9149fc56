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


def partition_keys(context: AssetExecutionContext, step: str) -> list[str]:
    """The run's partition keys, or one Failure saying how to pass them: a partitioned job launched without
    a partition (`dagster job execute -j nightly_job`) otherwise dies on Dagster's "Cannot access
    partition_key for a non-partitioned run" under a traceback."""
    if context.has_partition_key or context.has_partition_key_range:
        return list(context.partition_keys)
    from .partitions import evening_partitions

    job = context.run.job_name
    evening = context.assets_def.partitions_def == evening_partitions
    example = "2024-03-28" if evening else "AAPL"
    what = "an evening (YYYY-MM-DD)" if evening else "a ticker"
    raise Failure(
        f"{step}: job {job} is partitioned by {'evening' if evening else 'ticker'} and was launched without "
        f"a partition: name {what}, e.g. dagster job execute -m ldtm_dagster -j {job} "
        f'--tags \'{{"dagster/partition": "{example}"}}\' (or launch it from the UI with a partition)',
        allow_retries=False,
    )


def for_each_partition(context: AssetExecutionContext, step: str, work: Callable[[str], dict]) -> list[dict]:
    """`work(key)` for every partition key of the run (a single-run backfill has many), in order; one
    metadata row per key. The first core error fails the step as `step: key: message`."""
    rows = []
    for key in partition_keys(context, step):
        with failing_as(f"{step}: {key}"):
            rows.append(work(key))
    return rows
