"""A publish that ran in Redis although its caller saw it fail never loses the files of what is
announced: a compaction whose reply was lost, an update abandoned after its replace ran.

The real redis-server sits behind :class:`chaos.proxy.Proxy`: the script
really runs, the compactor sees a connection error. After each failure, every segment the
timeline shows as visible has its files, and every snapshot still answers as the changelog says.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.proxy import Proxy, script_sha
from horizon_broker._core.errors import Unavailable
from horizon_broker.compaction.collect import collect_replaced, sweep_unpublished_runs
from horizon_broker.compaction.run import CompactionKilled, Compactor
from horizon_broker.ingest.job import IngestJob, SimulatedCrash
from horizon_broker.ingest.storage import Storage
from horizon_broker.locks import scripts as lock_scripts
from horizon_broker.locks.client import JobLocks, LockClient
from horizon_broker.locks.rules import BATCH_INGESTION_PRIORITY
from horizon_broker.watermark import scripts as store_scripts
from tests.compaction.history import (
    assert_every_snapshot_answers_the_replay,
    batch,
    churn,
    churned,
    fragmented_table,
)
from tests.ingest.conftest import (
    Change,
    assert_broker_sees,
    broker_view,
    segment_rows,
    visible_at,
)

PUBLISH = script_sha(store_scripts.SEGMENTS)
RELEASE = script_sha(lock_scripts.RELEASE)


@pytest.fixture
def proxy(redis_server: Any) -> Iterator[Proxy]:
    instance = Proxy(redis_server.port)
    yield instance
    instance.close()


def compactor_behind(proxy: Proxy, make_server: Any, spark: Any, table: Any) -> Compactor:
    """A compactor whose every call to the state store goes through the proxy (its retries give
    up after 0.3 s, so a reply lost on every try ends in UNAVAILABLE quickly)."""
    client = make_server(proxy.url, "compactor", retry_timeout_s=0.3)
    return Compactor(spark, table, client)


def assert_readable(spark: Any, follower: Any, client: Any, log: list) -> list:
    """Every visible segment has its files, and every snapshot answers the replay."""
    storage = Storage(spark)
    visible = broker_view(follower, client, "accounts").visible_segments
    missing = [path for s in visible for path in s.location if not storage.exists(path)]
    assert not missing, f"visible segments without files: {missing[:3]}"
    assert_every_snapshot_answers_the_replay(spark, follower, client, log)
    return visible


def test_a_replace_whose_reply_is_lost_on_every_try_is_read_back_and_kept(
    spark, server, follower, make_server, proxy, tmp_path
):
    table, client, _job, log = churned(spark, server, tmp_path, rounds=4)
    compactor = compactor_behind(proxy, make_server, spark, table)
    proxy.lose_replies(PUBLISH, times=1000)

    report = compactor.compact()

    assert proxy.dropped >= 2  # the first try and at least one retry ran, none answered
    assert report.outcome == "published", report.message  # read back: it took effect
    visible = assert_readable(spark, follower, client, log)
    assert {s.id for s in report.outputs} <= {s.id for s in visible}


def test_a_retry_refused_for_a_lost_lock_after_the_replace_ran_keeps_the_outputs(
    spark, server, follower, make_server, proxy, redis_server, tmp_path
):
    table, client, _job, log = churned(spark, server, tmp_path, rounds=4)
    compactor = compactor_behind(proxy, make_server, spark, table)
    chunks = sorted({t.interval for t in compactor.plan()})
    preemptor = JobLocks(
        LockClient(redis_server.url), "accounts", "batch-x", BATCH_INGESTION_PRIORITY
    )

    def preempt() -> None:  # between the script and the retry: the retry is refused (LockLost)
        for chunk in chunks:
            preemptor.lock_time_chunk(chunk)

    proxy.lose_replies(PUBLISH, on_drop=preempt)
    try:
        report = compactor.compact()
    finally:
        preemptor.release()

    assert proxy.dropped == 1
    assert report.outcome == "published", report.message
    assert_readable(spark, follower, client, log)


def test_a_major_announce_whose_reply_is_lost_keeps_the_new_version_readable(
    spark, server, follower, make_server, proxy, tmp_path
):
    table, client, _job, log = churned(spark, server, tmp_path, rounds=4)
    compactor = compactor_behind(proxy, make_server, spark, table)
    proxy.lose_replies(PUBLISH, times=1000)

    report = compactor.compact_major()

    assert proxy.dropped >= 2
    assert report.outcome == "published", report.message
    visible = assert_readable(spark, follower, client, log)
    assert {s.id for s in report.outputs} <= {s.id for s in visible}


def test_when_the_store_is_unreachable_after_a_lost_reply_no_file_is_deleted(
    spark, server, follower, make_server, proxy, tmp_path
):
    table, client, _job, log = churned(spark, server, tmp_path, rounds=4)
    compactor = compactor_behind(proxy, make_server, spark, table)
    proxy.lose_replies(PUBLISH, blackout=True)  # the script runs, then Redis is out of reach

    with pytest.raises(Unavailable):
        compactor.compact()

    proxy.reachable()
    outputs = [
        s for s in client.announced_segments("accounts") if s.server.startswith("compactor-")
    ]
    assert outputs, "the replace should have run in Redis"
    assert_readable(spark, follower, client, log)


def test_a_failed_compaction_record_keeps_the_announced_outputs(
    spark, server, follower, make_server, proxy, tmp_path
):
    table, client, _job, log = churned(spark, server, tmp_path, rounds=4)
    compactor = compactor_behind(proxy, make_server, spark, table)
    Path(table.table_root, "_compaction").write_text("not a directory")  # the record cannot go

    with pytest.raises(OSError):
        compactor.compact()

    assert any(s.server.startswith("compactor-") for s in client.announced_segments("accounts"))
    assert_readable(spark, follower, client, log)
    # Its locks are released and no record names it, but it is announced: the sweep keeps it.
    Path(table.table_root, "_compaction").unlink()
    assert sweep_unpublished_runs(compactor.storage, client, "accounts", compactor.root) == 0
    assert_readable(spark, follower, client, log)


def test_a_lost_reply_to_the_lock_release_after_the_publish_keeps_the_outputs(
    spark, server, follower, make_server, proxy, redis_server, tmp_path
):
    table, client, _job, log = churned(spark, server, tmp_path, rounds=4)
    compactor = compactor_behind(proxy, make_server, spark, table)
    proxy.lose_replies(RELEASE)  # the locks are released; the retry finds nothing to release

    report = compactor.compact()

    assert proxy.dropped == 1
    assert report.outcome == "published", report.message
    assert LockClient(redis_server.url).listing(["accounts"]).locks == ()
    assert_readable(spark, follower, client, log)


def test_an_abandoned_update_whose_replace_ran_keeps_the_rewrites_a_compaction_took_in(
    spark, server, follower, tmp_path
):
    """The updater's replace ran (its server died before finishing, as after a lost reply); a
    compaction then took its rewrites in. The restart abandons the update, but its rewrites stay
    announced (overshadowed, the compaction's fallback) and so keep their files."""
    table = fragmented_table(tmp_path)
    client = server("s1")
    log: list = []
    churn(IngestJob(spark, table, client).start(), spark, log, rounds=4)
    crashing = IngestJob(spark, table, client, fail_at="update_after_replace")
    changes = [Change(f"k{i:02d}", 900 + i, 10) for i in range(0, 12, 2)]  # updates only
    with pytest.raises(SimulatedCrash):
        batch(crashing, spark, changes, [])
    log.extend((max(ts for ts, _ in log) + 1 + i, c) for i, c in enumerate(changes))
    rewrites = [s for s in client.announced_segments("accounts") if "/u0" in s.location[0]]
    assert rewrites, "the update's replace should have run"
    report = Compactor(spark, table, server("compactor")).compact()
    assert report.outcome == "published"
    assert {s.id for s in rewrites} & {s.id for s in report.inputs}

    restarted = IngestJob(spark, table, server("s1")).start()
    kinds = [r.body.get("kind") for r in restarted.manifest.records() if r.phase == "commit"]
    assert "abandon" in kinds, "the update should have been abandoned"
    storage = Storage(spark)
    announced = client.announced_segments("accounts")
    missing = [path for s in announced for path in s.location if not storage.exists(path)]
    assert not missing, f"announced segments without files: {missing[:3]}"
    restarted.flush_updates()
    assert_broker_sees(spark, follower, client, "accounts", log, exact_ts=False)


def test_a_killed_runs_directory_is_swept_once_its_locks_ran_out(spark, server, follower, tmp_path):
    table, client, _job, log = churned(spark, server, tmp_path, rounds=3)
    killed = Compactor(spark, table, server("compactor"), lease_s=1.0, fail_at="after_files")
    with pytest.raises(CompactionKilled):
        killed.compact()
    runs = [p for p in Path(table.table_root, "segments").iterdir() if p.name.startswith("comp")]
    assert len(runs) == 1 and any(runs[0].rglob("*.parquet"))
    announced = {s.id for s in client.announced_segments("accounts")}

    # Its locks are alive: it could still publish, so its directory stays.
    assert sweep_unpublished_runs(killed.storage, client, "accounts", killed.root) == 0
    assert runs[0].exists()
    locks = LockClient(client.redis, prefix=client.prefix)
    deadline = time.monotonic() + 30
    while locks.listing(["accounts"]).locks and time.monotonic() < deadline:
        time.sleep(0.1)

    collected = collect_replaced(
        killed.storage, client, "accounts", killed.root,
        grace_ms=table.gc_grace_ms, now_ms=time.time_ns() // 1_000_000,
    )  # fmt: skip
    assert collected.unpublished_runs == 1 and not runs[0].exists()
    assert {s.id for s in client.announced_segments("accounts")} == announced
    assert_readable(spark, follower, client, log)


def test_a_batch_whose_announce_failed_is_rolled_forward_before_the_next_batch(
    spark, server, follower, make_server, proxy, tmp_path
):
    """Redis never ran the announce (the request was lost on every try): the batch is committed
    but not announced. The next batch must announce it first: otherwise the updater closes the
    old versions of its keys while its new ones stay unannounced, and neither is readable."""
    table = fragmented_table(tmp_path)
    client = server("s1")
    job = IngestJob(spark, table, make_server(proxy.url, "s1", retry_timeout_s=0.3)).start()
    log: list = []
    churn(job, spark, log, rounds=2)
    lost = [Change(f"k{i:02d}", 7000 + i, 50) for i in range(5, 9)]  # not in the next batch
    proxy.lose_replies(PUBLISH, times=1000, requests=True)
    with pytest.raises(Unavailable):
        batch(job, spark, lost, [])
    assert proxy.dropped >= 2
    proxy.reachable()

    churn(job, spark, [], rounds=1, start=2)  # the next batch of the same job
    job.flush_updates()
    stored = segment_rows(spark, broker_view(follower, client, "accounts").visible_segments)
    latest = {row["user_id"]: row["balance"] for row in visible_at(stored, 2**62)}
    assert {c.user_id: latest.get(c.user_id) for c in lost} == {c.user_id: c.balance for c in lost}
