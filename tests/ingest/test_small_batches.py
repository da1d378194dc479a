"""Small batches on the driver store exactly what the Spark path stores.

Two tables take the same changelog, batch by batch: one lets small batches run on the driver
(the default), the other runs every batch on Spark (``driver_batch_rows = 0``). After every batch
both hold the same versions with the same validity, up to where each table's clock put its
commit timestamps (compared as batch number and position in the batch), and the updater's
rewrites and the key index levels leave them the same.
"""

from __future__ import annotations

import random
from typing import Any

from ingest import key_index
from ingest.job import IngestJob
from tests.ingest.conftest import (
    Change,
    accounts_table,
    broker_view,
    replay,
    segment_rows,
    stamp,
    visible_at,
)
from tests.ingest.test_pipeline import frame


def _changelog(seed: int, batches: int) -> list[list[Change]]:
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(12)]
    return [
        [
            Change(rng.choice(keys), rng.randrange(1000), rng.choice([None, *range(1, 7)]),
                   rng.random() < 0.15)
            for _ in range(rng.randrange(1, 9))
        ]
        for _ in range(batches)
    ]  # fmt: skip


def _normalized(rows: list[dict[str, Any]], bases: list[tuple[int, int]]) -> list[tuple[Any, ...]]:
    """Rows with their commit timestamps as (batch number, position in the batch)."""

    def position(ts: int | None) -> tuple[int, int] | None:
        if ts is None:
            return None
        for number, (base, high) in enumerate(bases):
            if base <= ts <= high:
                return number, ts - base
        raise AssertionError(f"timestamp {ts} is in no batch")

    return sorted(
        (
            (row["user_id"], row["balance"], row["seq"], row["deleted"],
             position(row["validFrom"]), position(row["validUntil"]))
            for row in rows
        ),
        key=repr,
    )  # fmt: skip


def test_small_batches_on_the_driver_store_what_spark_stores(
    spark: Any, server: Any, follower: Any, tmp_path: Any
) -> None:
    on_driver = IngestJob(
        spark, accounts_table(tmp_path / "d", name="on_driver"), server("small-driver")
    ).start()
    on_spark = IngestJob(
        spark, accounts_table(tmp_path / "s", name="on_spark", driver_batch_rows=0),
        server("small-spark"),
    ).start()  # fmt: skip
    bases: dict[str, list[tuple[int, int]]] = {"on_driver": [], "on_spark": []}
    log: list[tuple[int, Change]] = []
    for number, changes in enumerate(_changelog(seed=7, batches=2 * key_index.MAX_INDEX_LEVELS)):
        for job in (on_driver, on_spark):
            result = job.run_batch(frame(spark, changes))
            bases[job.table.name].append((result.base, result.high))
            actions = set(job.action_seconds)
            if job is on_driver:
                assert "collect small batch" in actions and "read and count" not in actions
                log.extend(stamp(changes, result.base))
            else:
                assert "read and count" in actions, actions
        seen = {}
        for job in (on_driver, on_spark):
            view = broker_view(follower, job.client, job.table.name)
            stored = segment_rows(spark, view.visible_segments)
            seen[job.table.name] = _normalized(stored, bases[job.table.name])
            if job is on_driver:
                rows = visible_at(stored, view.lwm)
                assert {row["user_id"]: Change(**row) for row in rows} == replay(log, view.lwm)
        assert seen["on_driver"] == seen["on_spark"], f"after batch {number}"
    # Folded: a small batch's level replaces the small levels under it.
    for version in on_driver.state.key_index.values():
        assert len(version.levels) == 1
    assert not on_driver.state.pending and not on_spark.state.pending
