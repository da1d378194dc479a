"""The background pass that reclaims history below the retention horizon, on real Spark and Redis."""

from __future__ import annotations

from horizon_broker.compaction.reclaim import ReclaimSettings, reclaim
from horizon_broker.compaction.run import Compactor
from horizon_broker.ingest.job import IngestJob
from tests.compaction.history import (
    assert_every_snapshot_answers_the_replay,
    churn,
    churned,
    fragmented_table,
)
from tests.ingest.conftest import (
    Change,
    broker_view,
    replay,
    segment_rows,
    visible_at,
)


def test_history_of_segments_that_stopped_changing_is_reclaimed_in_bounded_steps(
    spark, server, follower, tmp_path
):
    table = fragmented_table(tmp_path)
    client = server("s1")
    job = IngestJob(spark, table, client).start()
    log: list = []
    churn(job, spark, log, rounds=6)  # then the table stops receiving changes
    view = broker_view(follower, client, "accounts")
    horizon = view.lwm
    client.report_retention_horizon("accounts", horizon)
    before = segment_rows(spark, view.visible_segments)
    dead_before = [r for r in before if r["validUntil"] is not None and r["validUntil"] <= horizon]
    assert dead_before, "the churn should leave closed versions behind"

    compactor = Compactor(spark, table, server("reclaimer"))
    first = reclaim(compactor, ReclaimSettings(max_rows_per_step=6), max_steps=1)
    assert first.candidates > 1 and len(first.steps) == 1
    assert first.steps[0].outcome == "published" and first.rows_reclaimed > 0
    rest = reclaim(compactor, ReclaimSettings(max_rows_per_step=6))
    assert len(rest.steps) > 1, "a small step budget must take several steps"
    assert all(step.outcome == "published" for step in rest.steps)
    assert first.rows_reclaimed + rest.rows_reclaimed == len(dead_before)
    assert rest.bytes_after < rest.bytes_before

    after = segment_rows(spark, broker_view(follower, client, "accounts").visible_segments)
    assert not [r for r in after if r["validUntil"] is not None and r["validUntil"] <= horizon]
    rows = visible_at(after, horizon)
    assert {row["user_id"]: Change(**row) for row in rows} == replay(log, horizon)
    assert reclaim(compactor).steps == ()  # nothing left to reclaim


def test_reclaiming_keeps_every_permitted_snapshot_exact(spark, server, follower, tmp_path):
    table, client, _job, log = churned(spark, server, tmp_path, rounds=5)
    horizon = sorted(ts for ts, _ in log)[len(log) // 2]
    client.report_retention_horizon("accounts", horizon)
    report = reclaim(Compactor(spark, table, server("reclaimer")))
    assert report.rows_reclaimed > 0
    permitted = [entry for entry in log if entry[0] >= horizon]
    assert permitted
    assert_every_snapshot_answers_the_replay(
        spark, follower, client, [(ts, c) for ts, c in log], since=horizon
    )
