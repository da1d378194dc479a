"""The fallback bounds that ingestion, the updater and compaction write are sound: wherever they
let a broker read the fallback for a lost segment, it answers exactly as the table's history."""

from __future__ import annotations

from horizon_broker.compaction.run import Compactor
from horizon_broker.timeline.fallback import fallback_problem
from horizon_broker.timeline.timeline import Timeline
from tests.compaction.history import churn, churned
from tests.ingest.conftest import Change, broker_view, replay, segment_rows, visible_at


def test_every_fallback_the_bounds_allow_answers_exactly_at_that_snapshot(
    spark, server, follower, tmp_path
):
    table, client, job, log = churned(spark, server, tmp_path, rounds=5)
    assert Compactor(spark, table, server("compactor")).compact().outcome == "published"
    churn(job, spark, log, rounds=3, start=5)  # the updater rewrites compacted segments too
    broker_view(follower, client, "accounts")
    announced = client.announced_segments("accounts")
    timeline = Timeline("accounts")
    timeline.add_all(announced)
    visible = timeline.visible_segments()
    stored = {segment.id: segment_rows(spark, [segment]) for segment in announced}
    snapshots = sorted({ts for ts, _ in log})
    allowed = refused = 0
    for lost in visible:
        fallen = Timeline("accounts")
        fallen.add_all(announced)
        fallen.remove_unreadable(lost)
        after = fallen.visible_segments()
        for snapshot in snapshots:
            if fallback_problem([lost], visible, after, snapshot) is not None:
                refused += 1
                continue
            allowed += 1
            rows = visible_at([row for s in after for row in stored[s.id]], snapshot)
            keys = [row["user_id"] for row in rows]
            assert len(keys) == len(set(keys)), f"without {lost.id}, a key twice at {snapshot}"
            answer = {row["user_id"]: Change(**row) for row in rows}
            assert answer == replay(log, snapshot), f"without {lost.id} at {snapshot}"
    assert allowed > 0 and refused > 0, (allowed, refused)
