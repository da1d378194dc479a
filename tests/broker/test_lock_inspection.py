"""Lock inspection through the real broker: ListLocks, ``horizon locks``, and the timeline (its
response and picture) marking the chunks a job holds locks on."""

from __future__ import annotations

import json

import pytest

from horizon_broker._core.errors import HorizonError
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.cli import main as cli_main
from horizon_broker.locks.client import JobLocks, LockClient
from horizon_broker.locks.rules import Mode
from tests.broker.conftest import ADMIN, NO_INSPECT, READER, BrokerEnv
from tests.broker.data import CHUNK, VERSION


@pytest.fixture
def lock_client(broker_env: BrokerEnv):  # type: ignore[no-untyped-def]
    client = LockClient(broker_env.redis.url)
    yield client
    client.close()


def _job(lock_client: LockClient, table: str, job: str, priority: int) -> JobLocks:
    return JobLocks(lock_client, table, job, priority, lease_s=20.0, wait_s=0.0)


def test_list_locks_names_holder_priority_kind_and_lease_and_shows_a_revocation(
    broker_env, client, lock_client
):
    compaction = _job(lock_client, "accounts", "compact-run-1", 25)
    ingestion = _job(lock_client, "secret", "srv-b", 75)
    try:
        compaction.lock_time_chunk(CHUNK)
        ingestion.lock_segments(CHUNK, VERSION, [0, 1, 2], mode=Mode.SHARED)

        listed = client.locks("accounts")
        (lock,) = listed.locks
        assert lock.table == "accounts" and lock.job == "compact-run-1" and lock.priority == 25
        assert lock.granularity == pb.LOCK_GRANULARITY_TIME_CHUNK
        assert lock.mode == pb.LOCK_MODE_EXCLUSIVE
        assert (lock.interval.start_ms, lock.interval.end_ms) == (CHUNK.start_ms, CHUNK.end_ms)
        assert 0 < lock.lease_left_seconds <= 20 and not lock.revoked
        assert lock.expires_ms - lock.acquired_ms == 20_000 and listed.now_ms >= lock.acquired_ms

        everything = client.locks()
        assert {(lock.table, lock.job) for lock in everything.locks} == {
            ("accounts", "compact-run-1"),
            ("secret", "srv-b"),
        }
        (segment_lock,) = client.locks("SECRET").locks
        assert segment_lock.granularity == pb.LOCK_GRANULARITY_SEGMENT
        assert segment_lock.mode == pb.LOCK_MODE_SHARED
        assert segment_lock.version == VERSION and list(segment_lock.partitions) == [0, 1, 2]

        # A streaming ingestion preempts the compaction: the lock shows as revoked, by whom.
        preempting = _job(lock_client, "accounts", "srv-stream", 75)
        preempting.lock_time_chunk(CHUNK)
        try:
            states = {lock.job: lock for lock in client.locks("accounts").locks}
            assert states["compact-run-1"].revoked
            assert states["compact-run-1"].revoked_by == "srv-stream"
            assert not states["srv-stream"].revoked
        finally:
            preempting.release()
    finally:
        compaction.release()
        ingestion.release()
    assert list(client.locks("accounts").locks) == []
    assert list(client.locks().locks) == []


def test_list_locks_refuses_unknown_tables_and_callers_without_the_grant(broker_env, lock_client):
    job = _job(lock_client, "secret", "srv-c", 50)
    job.lock_time_chunk(CHUNK)
    try:
        with broker_env.client() as admin, pytest.raises(HorizonError) as missing:
            admin.locks("nosuch")
        assert missing.value.code.value == "NOT_FOUND" and "nosuch" in str(missing.value)
        with broker_env.client(READER) as reader:
            with pytest.raises(HorizonError) as denied:
                reader.locks("secret")
            assert denied.value.code.value == "PERMISSION_DENIED"
            # Every table the reader may inspect: the secret table's lock is not among them.
            assert [lock.table for lock in reader.locks().locks] == []
        with broker_env.client(NO_INSPECT) as blind, pytest.raises(HorizonError) as refused:
            blind.locks()
        assert refused.value.code.value == "PERMISSION_DENIED"
    finally:
        job.release()


def test_timeline_marks_the_chunks_under_a_lock_in_its_response_table_and_picture(
    broker_env, client, lock_client, tmp_path, capsys
):
    job = _job(lock_client, "accounts", "compact-run-2", 25)
    job.lock_segments(CHUNK, VERSION, [0, 1])
    try:
        timeline = client.timeline("accounts")
        assert [lock.job for lock in timeline.locks] == ["compact-run-2"]
        assert timeline.locks_error == ""

        base = ["--target", broker_env.target, "--token", ADMIN]
        picture = tmp_path / "locked.svg"
        assert cli_main(["timeline", "accounts", *base, "--picture", str(picture)]) == 0
        printed = capsys.readouterr().out
        assert "compact-run-2" in printed and "priority 25" in printed
        svg = picture.read_text()
        assert "(locked)" in svg and "compact-run-2" in svg

        assert cli_main(["locks", "accounts", *base]) == 0
        printed = capsys.readouterr().out
        assert "compact-run-2" in printed and "segments 0,1" in printed
        assert cli_main(["locks", *base, "--json"]) == 0
        (listed,) = json.loads(capsys.readouterr().out)["locks"]
        assert listed["job"] == "compact-run-2" and listed["partitions"] == [0, 1]
    finally:
        job.release()
    assert list(client.timeline("accounts").locks) == []
    assert cli_main(["locks", "accounts", "--target", broker_env.target, "--token", ADMIN]) == 0
    assert "no locks held on accounts" in capsys.readouterr().out
