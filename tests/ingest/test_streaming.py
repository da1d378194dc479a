"""Structured Streaming: a file source through foreachBatch, restartable from its checkpoint."""

from __future__ import annotations

from horizon_broker.ingest.job import IngestJob
from tests.ingest.conftest import Change, accounts_table, assert_broker_sees, write_changelog


def test_a_streaming_directory_is_ingested_once_across_a_restart(spark, server, follower, tmp_path):
    table = accounts_table(tmp_path / "store")
    source = tmp_path / "changelog"
    checkpoint = str(tmp_path / "checkpoint")
    first = [Change("a", 1, 1), Change("b", 1, 1)]
    second = [Change("a", 2, 2), Change("c", 1, 1), Change("b", 0, 3, deleted=True)]
    write_changelog(source, "001.json", first)

    job = IngestJob(spark, table, server("s1"))
    query = job.run_stream(
        job.stream_directory(str(source), "json"), checkpoint, available_now=True
    )
    query.awaitTermination(180)
    assert query.exception() is None
    history = [(i, c) for i, c in enumerate(first)]
    assert_broker_sees(spark, follower, job.client, "accounts", history, exact_ts=False)

    write_changelog(source, "002.json", second)
    restarted = IngestJob(spark, table, server("s1"))
    query = restarted.run_stream(
        restarted.stream_directory(str(source), "json"), checkpoint, available_now=True
    )
    query.awaitTermination(180)
    assert query.exception() is None
    history += [(10 + i, c) for i, c in enumerate(second)]
    seen = assert_broker_sees(
        spark, follower, restarted.client, "accounts", history, exact_ts=False
    )
    assert len(seen.stored) == 4  # a1, b1, a2, c1: each change once, the delete not at all
