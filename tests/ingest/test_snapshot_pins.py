"""Snapshot pins on a real job: while a pin is held, retention stops at its snapshot and the
files of segments the updater replaces stay on disk, so the pinned snapshot keeps answering the
same; once it is released both move on. Commit tokens: a batch's token names its commit."""

from __future__ import annotations

from pathlib import Path

from horizon_broker.ingest.job import IngestJob
from horizon_broker.pins.store import PinStore
from horizon_broker.watermark import tokens
from tests.ingest.conftest import (
    Change,
    accounts_table,
    broker_view,
    reported_lwm,
    visible_rows,
    write_changelog,
)


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda row: row["user_id"])


def test_a_pinned_snapshot_keeps_its_history_and_files_until_released(
    spark, server, follower, redis_server, tmp_path
):
    store = tmp_path / "store"
    source = tmp_path / "changelog"
    table = accounts_table(store, key_partitions=1, retention_ms=1, gc_grace_ms=0)
    job = IngestJob(spark, table, server("s1"))
    pins = PinStore(redis_server.url)

    def land(round_: int) -> None:
        changes = [Change(f"k{i}", 100 * round_ + i, round_) for i in range(4)]
        write_changelog(source, f"{round_:03d}.json", changes)
        job.run_directory(str(source), "json")

    land(0)
    pinned = reported_lwm(job.client, "accounts")
    pin = pins.pin(["accounts"], pinned, lease_s=60, owner="test")
    before = broker_view(follower, job.client, "accounts")
    files = {loc for seg in before.visible_segments for loc in seg.location}
    expected = _sorted(visible_rows(spark, before.visible_segments, pinned))
    assert len(expected) == 4

    for round_ in (1, 2):
        land(round_)
        view = broker_view(follower, job.client, "accounts")
        assert job.client.retention_horizon("accounts") <= pinned
        assert view.retention_horizon <= pinned
        assert all(Path(loc.removeprefix("file:")).exists() for loc in files), "a file went"
        assert set(files) - {loc for seg in view.visible_segments for loc in seg.location}
        assert _sorted(visible_rows(spark, view.visible_segments, pinned)) == expected

    assert pins.release(pin.pin_id, owner="test")
    land(3)
    view = broker_view(follower, job.client, "accounts")
    assert job.client.retention_horizon("accounts") > pinned
    replaced = files - {loc for seg in view.visible_segments for loc in seg.location}
    assert replaced and not any(Path(loc.removeprefix("file:")).exists() for loc in replaced)
    pins.close()


def test_a_batch_token_names_its_commit_and_is_reached_by_the_lwm(spark, server, tmp_path):
    table = accounts_table(tmp_path / "store", key_partitions=1)
    job = IngestJob(spark, table, server("s1"))
    source = tmp_path / "changelog"
    write_changelog(source, "000.json", [Change("k0", 1, 0), Change("k1", 2, 0)])
    result = job.run_directory(str(source), "json")
    assert tokens.decode(result.token) == {"accounts": result.high}
    assert job.last_result is not None and job.last_result.token == result.token
    assert reported_lwm(job.client, "accounts") >= result.high
    again = job.run_directory(str(source), "json")  # nothing new: a tick, still a token
    assert tokens.decode(again.token)["accounts"] >= result.high
