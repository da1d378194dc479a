"""The updater merges a batch's small segments into the rewrites next to them, through real
ingestion, Spark and Redis (:mod:`horizon_broker.ingest.rewrite_groups`).

Each table gets the same churn (inserts, updates, deletes over twelve keys in three key
partitions) with its segments merged (the default) and rewritten alone, on the driver's updater
and on Spark's; the merged one keeps fewer segments, each merged rewrite in one open file, and
every snapshot answers as the replayed changelog says. With two servers, one's updater never
takes in the other's segments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.partitioning import partitions_of
from tests.compaction.history import batch, churn
from tests.ingest.conftest import (
    Change,
    accounts_table,
    assert_every_snapshot_answers_the_replay,
    broker_view,
)


@pytest.mark.parametrize("driver_batch_rows", [10_000, 0], ids=["driver", "spark"])
def test_batches_small_segments_are_merged_into_the_rewrites_and_every_snapshot_answers(
    spark: Any, server: Any, follower: Any, tmp_path: Path, driver_batch_rows: int
) -> None:
    kinds = {"merged": {}, "alone": {"rewrite_target_rows": 0}}
    views = {}
    for kind, overrides in kinds.items():
        name = f"{kind}_{driver_batch_rows}"
        table = accounts_table(
            tmp_path / kind, name=name, key_partitions=3, driver_batch_rows=driver_batch_rows,
            **overrides,
        )  # fmt: skip
        client = server(f"s-{name}")
        job = IngestJob(spark, table, client).start()
        log: list = []
        churn(job, spark, log, rounds=5)
        assert assert_every_snapshot_answers_the_replay(spark, follower, client, log, table=name)
        views[kind] = broker_view(follower, client, name).visible_segments
    merged, alone = views["merged"], views["alone"]
    assert len(merged) < len(alone)
    assert all(s.root_end - s.root_start == 1 for s in alone)
    wide = [s for s in merged if s.root_end - s.root_start > 1]
    assert wide and all(s.minor_version >= 1 for s in wide)
    # A merge's open versions are one file (one task on Spark, one sort on the driver).
    assert all(len(s.open_files) == 1 for s in wide)
    if driver_batch_rows == 0:
        # On Spark a small rewrite is read whole by one task, merged or not: one open file, at
        # most one closed one (the driver keeps a few closed files as they were, by design).
        assert all(len(s.location) <= 2 for s in [*wide, *alone])


def test_an_updater_never_merges_another_servers_segments(
    spark: Any, server: Any, follower: Any, tmp_path: Path
) -> None:
    table = accounts_table(tmp_path / "store", name="two_servers", key_partitions=2)
    keys = [f"user{i}" for i in range(8)]
    numbers = partitions_of(spark, [(k,) for k in keys], ["user_id"], 2, "user_id string")
    owned_by = dict(zip(keys, numbers, strict=True))
    assert set(owned_by.values()) == {0, 1}
    s1 = IngestJob(spark, table, server("merge-s1"), partitions=[0]).start()
    s2 = IngestJob(spark, table, server("merge-s2"), partitions=[1]).start()
    log: list = []
    for number in range(3):
        for job, partition in ((s1, 0), (s2, 1)):
            changes = [
                Change(k, 10 * number + i, number + 1)
                for i, k in enumerate(keys)
                if owned_by[k] == partition
            ]
            batch(job, spark, changes, log)
    segments = broker_view(follower, s1.client, "two_servers").visible_segments
    roots_of = {
        server_id: {
            root
            for s in segments
            if s.server == server_id
            for root in range(s.root_start, s.root_end)  # type: ignore[arg-type]
        }
        for server_id in ("merge-s1", "merge-s2")
    }
    # Each server's roots are its own key partition's (kp mod 2): nothing of the other's.
    assert roots_of["merge-s1"] and all(root % 2 == 0 for root in roots_of["merge-s1"])
    assert roots_of["merge-s2"] and all(root % 2 == 1 for root in roots_of["merge-s2"])
    assert_every_snapshot_answers_the_replay(spark, follower, s1.client, log, table="two_servers")
