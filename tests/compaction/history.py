"""A table with history for the compaction tests: batches through real ingestion, a replayed
changelog, and the check that every snapshot answers as the replay says (from the ingestion tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.watermark.server import ServerClient
from tests.ingest.conftest import (
    COLUMNS,
    Change,
    accounts_table,
    assert_every_snapshot_answers_the_replay,
    stamp,
)

__all__ = [
    "assert_every_snapshot_answers_the_replay",
    "batch",
    "churn",
    "churned",
    "fragmented_table",
]

SCHEMA = "user_id string, balance bigint, seq bigint, deleted boolean"


def batch(job: IngestJob, spark: Any, changes: list[Change], log: list) -> None:
    frame = spark.createDataFrame([tuple(c.as_row()[k] for k in COLUMNS) for c in changes], SCHEMA)
    result = job.run_batch(frame)
    log.extend(stamp(changes, result.base))


def churn(job: IngestJob, spark: Any, log: list, rounds: int, start: int = 0) -> None:
    """Batches of inserts, updates and a delete over twelve keys (several segments per chunk)."""
    for r in range(start, start + rounds):
        changes = [Change(f"k{(r * 5 + i) % 12:02d}", 100 * r + i, r + 1) for i in range(6)]
        if r % 3 == 2:
            changes.append(Change(f"k{r % 12:02d}", 0, r + 1, deleted=True))
        batch(job, spark, changes, log)


def fragmented_table(root: Path, **overrides: Any) -> TableDefinition:
    """The accounts table whose updater rewrites each segment alone, so that batches leave
    the small segments a compaction merges (merged into the rewrites, a tiny table keeps
    about one segment: :mod:`horizon_broker.ingest.rewrite_groups`)."""
    return accounts_table(root, **{"rewrite_target_rows": 0, **overrides})


def churned(
    spark: Any, server: Any, tmp_path: Path, rounds: int
) -> tuple[TableDefinition, ServerClient, IngestJob, list]:
    """The accounts table after ``rounds`` of :func:`churn` by server ``s1``, and its changelog."""
    table = fragmented_table(tmp_path)
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    log: list = []
    churn(job, spark, log, rounds=rounds)
    return table, client, job, log
