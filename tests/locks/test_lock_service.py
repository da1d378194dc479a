"""The lock service in a real Redis, checked against the pure rules as a reference model."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from horizon_broker._core.errors import LockConflict, LockLost, PartitionNotOwned
from horizon_broker.locks.client import JobLocks, LockClient
from horizon_broker.locks.rules import (
    COMPACTION_PRIORITY,
    STREAMING_INGESTION_PRIORITY,
    Granularity,
    HeldLock,
    LockRequest,
    Mode,
    decide,
)
from horizon_broker.locks.stats import STATS
from horizon_broker.timeline.interval import Interval
from tests.watermark.conftest import segment, table_descriptor

HOUR = 3_600_000


@pytest.fixture
def lock_client(redis_url):
    client = LockClient(redis_url)
    yield client
    client.close()


requests = st.builds(
    lambda job, granularity, chunk, length, priority, shared, version, partitions: LockRequest(
        table="t",
        job=job,
        granularity=granularity,
        interval=Interval(chunk * HOUR, (chunk + length) * HOUR),
        priority=priority,
        mode=Mode.SHARED if shared else Mode.EXCLUSIVE,
        version=version if granularity == Granularity.SEGMENT else "",
        partitions=frozenset(partitions) if granularity == Granularity.SEGMENT else frozenset(),
    ),
    job=st.sampled_from(["j1", "j2", "j3", "j4"]),
    granularity=st.sampled_from(list(Granularity)),
    chunk=st.integers(0, 3),
    length=st.integers(1, 2),
    priority=st.sampled_from([25, 50, 75]),
    shared=st.booleans(),
    version=st.sampled_from(["v1", "v2"]),
    partitions=st.sets(st.integers(0, 4), min_size=1, max_size=3),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), requests, st.sampled_from([60_000, 0])),
        st.tuples(st.just("release"), st.sampled_from(["j1", "j2", "j3", "j4"])),
        st.tuples(st.just("renew"), st.sampled_from(["j1", "j2", "j3", "j4"])),
    ),
    max_size=25,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=operations)
def test_grants_preemptions_and_refusals_match_the_reference_model(lock_client, redis_client, ops):
    """Every acquire is granted, preempts or is refused exactly as :func:`horizon_broker.locks.rules.decide`
    says, and the locks left holding are the model's (leases of 0 ms model dead jobs)."""
    redis_client.delete("horizon:t:t:locks")
    model: dict[str, HeldLock] = {}
    for number, op in enumerate(ops):
        if op[0] == "acquire":
            _, request, lease = op
            lock_id = f"{request.job}#{number}"
            now = _redis_ms(redis_client)
            expected = decide(request, model.values(), now)
            lock, blockers = lock_client.try_acquire(request, lock_id, lease)
            assert (lock is not None) == expected.granted, (request, list(model.values()))
            if lock is None:
                assert {b.lock_id for b in blockers} == {b.lock_id for b in expected.blockers}
                continue
            for victim in expected.revoke:
                model[victim.lock_id] = HeldLock(
                    victim.lock_id, victim.request, 0, victim.expires_ms, request.job, now
                )
            model[lock_id] = HeldLock(lock_id, request, now, lock.expires_ms)
        elif op[0] == "release":
            ids = [i for i, lock in model.items() if lock.request.job == op[1]]
            lock_client.release("t", op[1], ids)
            for lock_id in ids:
                del model[lock_id]
        else:
            ids = [i for i, lock in model.items() if lock.request.job == op[1]]
            statuses = lock_client.renew("t", op[1], ids, 60)
            for lock_id in ids:
                lock = model[lock_id]
                if lock.revoked_by is not None:
                    assert statuses[lock_id].startswith("REVOKED")
                elif lock.expires_ms <= _redis_ms(redis_client):
                    assert statuses[lock_id] in {"EXPIRED", "MISSING"}
                    del model[lock_id]
                else:
                    assert statuses[lock_id] == "OK"
    now = _redis_ms(redis_client)
    listed = {lock.lock_id for lock in lock_client.listing(["t"]).locks if lock.holds_at(now)}
    assert listed == {i for i, lock in model.items() if lock.holds_at(now)}


def _redis_ms(client) -> int:
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


def test_a_waiting_request_gets_the_lock_once_the_holder_releases(lock_client):
    holder = JobLocks(lock_client, "t", "ingest-1", STREAMING_INGESTION_PRIORITY)
    holder.lock_time_chunk(Interval(0, HOUR))
    waiter = JobLocks(lock_client, "t", "ingest-2", STREAMING_INGESTION_PRIORITY, wait_s=5)
    threading.Timer(0.3, holder.release).start()
    before = STATS.snapshot()
    started = time.monotonic()
    waiter.lock_time_chunk(Interval(0, HOUR))
    assert time.monotonic() - started >= 0.25
    waiter.release()
    after = STATS.snapshot()  # what the process's metrics serve (horizon_locks_*)
    assert after["acquired"] == before["acquired"] + 1
    assert after["waited_s"] - before["waited_s"] >= 0.25


def test_a_refused_request_names_the_holder_and_its_priority(lock_client):
    with JobLocks(lock_client, "t", "ingest-1", STREAMING_INGESTION_PRIORITY) as holder:
        holder.lock_segments(Interval(0, HOUR), "v1", [3])
        compactor = JobLocks(lock_client, "t", "compact-1", COMPACTION_PRIORITY)
        conflicts = STATS.snapshot()["conflicts"]
        with pytest.raises(LockConflict, match=r"ingest-1 \(priority 75\)"):
            compactor.lock_time_chunk(Interval(0, 2 * HOUR))
        assert STATS.snapshot()["conflicts"] == conflicts + 1


def test_a_preempted_job_learns_it_lost_its_lock_and_cannot_publish(
    lock_client, redis_url, make_server
):
    server = make_server(redis_url, "compactor")
    server.register_table(table_descriptor())
    target = segment(partition=0)
    compactor = JobLocks(lock_client, "accounts", "compact-1", COMPACTION_PRIORITY)
    compactor.lock_covering([target])
    server.announce([target], guard=compactor.guard([target]))  # holds: published
    ingest = JobLocks(lock_client, "accounts", "ingest-1", STREAMING_INGESTION_PRIORITY)
    before = STATS.snapshot()
    ingest.lock_time_chunk(target.interval)
    with pytest.raises(LockLost, match="REVOKED by job ingest-1"):
        compactor.check()
    after = STATS.snapshot()
    assert after["preempted"] == before["preempted"] + 1
    assert after["lost"] == before["lost"] + 1
    late = segment(partition=1)
    with pytest.raises(LockLost, match="compact-1 cannot publish"):
        server.announce([late], guard=compactor.guard([late, target]))
    assert [s.partition for s in server.announced_segments("accounts")] == [0]
    ingest.release()
    compactor.release()


def test_a_lock_whose_lease_ran_out_protects_nothing(lock_client, redis_url, make_server):
    server = make_server(redis_url, "s1")
    server.register_table(table_descriptor())
    dead = JobLocks(lock_client, "accounts", "dead-job", COMPACTION_PRIORITY, lease_s=0.2)
    dead.lock_covering([segment()])
    dead._stop.set()  # the job died: nobody renews its lease
    time.sleep(0.3)
    with pytest.raises(LockLost, match=r"expired|no lock"):
        server.announce([segment()], guard=dead.guard([segment()]))
    later = JobLocks(lock_client, "accounts", "later-job", COMPACTION_PRIORITY)
    later.lock_covering([segment()])  # a later run gets it, whatever the dead job's priority
    server.announce([segment()], guard=later.guard([segment()]))
    later.release()


def test_a_server_whose_partition_was_handed_over_cannot_announce_for_it(
    lock_client, redis_url, make_server
):
    old, new = make_server(redis_url, "s1"), make_server(redis_url, "s2")
    for server in (old, new):
        server.register()
    old.register_table(table_descriptor())
    old.claim_partitions("accounts", [0, 1])
    old.hand_over("accounts", 1, "s2")
    job = JobLocks(lock_client, "accounts", "s1-batch", STREAMING_INGESTION_PRIORITY)
    job.lock_covering([segment(partition=5)])
    old.announce([segment(partition=5)], guard=job.guard([segment(partition=5)], [("accounts", 0)]))
    with pytest.raises(PartitionNotOwned, match="owned by server s2"):
        old.announce(
            [segment(partition=5), segment(partition=6)],
            guard=job.guard([segment(partition=5)], [("accounts", 1)]),
        )
    assert [s.partition for s in old.announced_segments("accounts")] == [5]
    job.release()


def test_the_listing_shows_holder_priority_kind_and_lease(lock_client):
    with JobLocks(lock_client, "t", "compact-9", COMPACTION_PRIORITY, lease_s=20) as job:
        job.lock_segments(Interval(0, HOUR), "v1", [0, 1])
        listing = lock_client.listing(["t"])
        [lock] = listing.locks
        assert (lock.request.job, lock.request.priority, lock.request.granularity) == (
            "compact-9",
            25,
            Granularity.SEGMENT,
        )
        assert 19_000 <= lock.expires_ms - listing.now_ms <= 20_000
    assert lock_client.listing(["t"]).locks == ()
