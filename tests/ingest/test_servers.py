"""Several servers writing one table: independent progress, one consistent snapshot, handovers."""

from __future__ import annotations

from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.partitioning import partitions_of
from tests.ingest.conftest import Change, accounts_table, assert_broker_sees, write_changelog


def test_two_servers_with_different_progress_then_a_handover_stay_consistent(
    spark, server, follower, tmp_path
):
    table = accounts_table(tmp_path / "store", key_partitions=4)
    keys = [f"user{i}" for i in range(12)]
    numbers = partitions_of(spark, [(k,) for k in keys], ["user_id"], 4, "user_id string")
    partition = dict(zip(keys, numbers, strict=True))
    assert set(partition.values()) == {0, 1, 2, 3}
    source = tmp_path / "changelog"
    first = [Change(k, 10, 1) for k in keys]
    second = [Change(k, 20, 2) for k in keys] + [Change(keys[0], 5, 0)]
    third = [Change(k, 30, 3) for k in keys[::2]] + [
        Change(k, 0, 4, deleted=True) for k in keys[1::4]
    ]
    write_changelog(source, "001.json", first)

    s1 = IngestJob(spark, table, server("s1"), partitions=[0, 1])
    s2 = IngestJob(spark, table, server("s2"), partitions=[2, 3])
    history = []

    def ingest(job: IngestJob, changes: list[Change]) -> None:
        result = job.run_directory(str(source), "json")
        owned = set(job.partitions)
        history.extend(
            (result.base + i, c) for i, c in enumerate(changes) if partition[c.user_id] in owned
        )

    ingest(s1, first)
    ingest(s2, first)
    assert_broker_sees(spark, follower, s1.client, "accounts", history)
    write_changelog(source, "002.json", second)
    ingest(s1, second)  # s2 lags one file behind: the LWM is held by s2
    lwm = assert_broker_sees(spark, follower, s1.client, "accounts", history).lwm
    assert lwm < max(ts for ts, _ in history)

    # s1 hands key partition 1 to s2: pending updates first, then ownership and progress.
    s1.hand_over(1, "s2")
    s2.claim([1])
    before = s2.client.partition_progress("accounts")[1]
    assert before.owner == "s2"
    ingest(s2, second)  # s2 catches up on 002 for partitions 2, 3 only (s1 did partition 1)
    write_changelog(source, "003.json", third)
    ingest(s2, third)  # now for 1, 2, 3
    ingest(s1, third)  # partition 0 only
    progress = s2.client.partition_progress("accounts")
    assert progress[1].owner == "s2"
    assert progress[1].ingested > before.ingested  # the clock continued above the handover
    assert [ts for ts, c in history if partition[c.user_id] == 1] == sorted(
        ts for ts, c in history if partition[c.user_id] == 1
    )
    assert_broker_sees(spark, follower, s1.client, "accounts", history)
