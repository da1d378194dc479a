"""Timeline and watermark endpoints follow the state store; an unreadable segment falls back;
concurrent queries; health; the CLI against the live broker."""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from horizon_broker._core.errors import Unavailable
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.cli import main as cli_main
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from tests.broker.conftest import ADMIN, LWM, BrokerEnv, publish_table
from tests.broker.data import CHUNK, VERSION, UpsertTable, as_rows, oracle, write_rows


def _wait(env: BrokerEnv, predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    assert env.broker.follower.wait_for(predicate, timeout), "the broker never saw the change"


def test_timeline_shows_groups_with_their_states_and_follows_announcements(broker_env, client):
    timeline = client.timeline("accounts", include_overshadowed=True)
    (chunk,) = timeline.chunks
    assert chunk.complete and chunk.queried and chunk.core_partitions == 2
    states = {(g.minor_version, g.root_start): g.state for g in chunk.groups}
    assert states == {
        (0, 0): pb.GROUP_STATE_OVERSHADOWED,
        (0, 1): pb.GROUP_STATE_VISIBLE,
        (1, 0): pb.GROUP_STATE_VISIBLE,
    }
    without = client.timeline("accounts")
    assert all(g.state != pb.GROUP_STATE_OVERSHADOWED for c in without.chunks for g in c.groups)

    # A newer, incomplete version of the next day: listed, but not read.
    desc = broker_env.tables["secret"].desc
    day2 = Interval(CHUNK.end_ms, 2 * CHUNK.end_ms)
    newer = Segment(
        table="secret",
        interval=day2,
        version=VERSION,
        partition=0,
        core_partitions=2,
        location=(write_rows(broker_env.root / "secret" / "d2.parquet", desc, []),),
    )
    broker_env.server_client.announce([newer])
    _wait(broker_env, lambda f: len(f.timeline_snapshot("secret").chunks) == 2)
    timeline = client.timeline("secret", interval=day2)
    (chunk,) = timeline.chunks
    assert not chunk.complete and not chunk.queried
    assert chunk.groups[0].segments[0].partition == 0
    broker_env.server_client.unannounce([newer])
    _wait(broker_env, lambda f: len(f.timeline_snapshot("secret").chunks) == 1)
    assert len(client.timeline("secret").chunks) == 1


def test_watermarks_follow_reports_and_never_go_back(broker_env, client):
    marks = client.watermarks("secret")
    assert marks.lwm == LWM
    assert (marks.laggard.server, marks.laggard.partition) == ("srv-a", 0)
    assert {(p.partition, p.watermark) for p in marks.partitions} == {(0, LWM), (1, 1500)}
    assert marks.servers[0].server == "srv-a" and marks.servers[0].live

    broker_env.server_client.report("secret", {0: (1400, 1400)})
    _wait(broker_env, lambda f: f.watermarks("secret").lwm == 1400)
    marks = client.watermarks("secret")
    assert marks.lwm == 1400 and marks.laggard.partition == 0
    assert client.query("SELECT count(*) AS n FROM secret").to_pylist() == [{"n": 100}]
    assert client.execute("SELECT id FROM secret WHERE id = 1").snapshot == 1400

    broker_env.server_client.report("secret", {0: (1300, 1300)})  # a regression
    _wait(broker_env, lambda f: bool(f.watermarks("secret").regressions))
    marks = client.watermarks("secret")
    assert marks.lwm == 1400, "the served LWM never decreases"
    (regression,) = marks.regressions
    assert (regression.from_watermark, regression.to_watermark) == (1400, 1300)
    assert not marks.queries_blocked
    broker_env.server_client.report("secret", {0: (1400, 1400)})


def test_list_tables_reports_schema_lwm_and_visible_segments(client):
    tables = {table.name: table for table in client.tables()}
    accounts = tables["accounts"]
    assert [c.name for c in accounts.columns] == ["id", "owner", "balance"]
    assert list(accounts.primary_key) == ["id"] and accounts.upsert
    assert accounts.lwm == LWM and accounts.visible_segments == 2
    assert not tables["empty_t"].visible_segments


def test_a_deleted_overwrite_file_fails_queries_its_fallback_cannot_answer_and_serves_older_ones(
    broker_env, client
):
    """At the LWM the original ``p0`` would show ids 1..10 open beside their newer versions: the
    query fails with UNAVAILABLE naming the segment and its chunk, never answers with a key
    twice; at a snapshot before the update the fallback answers exactly."""
    table = broker_env.tables["fallback_t"]
    before = client.query("SELECT * FROM fallback_t")
    assert as_rows(before) == oracle(table.rows_visible_at(LWM))
    os.remove(table.o0.location[0])
    for _ in range(2):  # the first read finds the file gone, the second knows it already
        with pytest.raises(Unavailable) as refused:
            client.execute("SELECT * FROM fallback_t", cache=False)
        message = str(refused.value)
        assert str(table.o0.id) in message and str(table.o0.interval) in message
        assert "up to 999" in message and "a key twice" in message
    with pytest.raises(Unavailable):
        client.explain("SELECT * FROM fallback_t")
    with pytest.raises(Unavailable):
        client.rewrite("SELECT * FROM fallback_t")
    at_900 = client.execute("SELECT * FROM fallback_t VERSION AS OF 900")
    assert as_rows(at_900.table) == oracle(table.rows_visible_at(900, overwrite=False))
    explain = client.explain("SELECT * FROM fallback_t VERSION AS OF 900")
    segments = {chosen.segment.partition for chosen in explain.tables[0].segments}
    assert segments == {0, 1}, "the timeline reads the original partition 0"
    (entry,) = client.timeline("fallback_t").unreadable
    assert entry.segment.id == str(table.o0.id) and entry.since_ms > 0
    assert "o0.parquet" in entry.reason


def test_a_segment_whose_file_is_readable_again_is_visible_again(broker_env, client):
    """A transient read error must not hide a segment for good: the broker rechecks it (every
    0.5 s here) and shows why and since when meanwhile."""
    table = UpsertTable("recheck_t", broker_env.root)
    publish_table(broker_env, table.desc, table.segments)
    path = table.o0.location[0]
    aside = f"{path}.aside"
    os.rename(path, aside)
    with pytest.raises(Unavailable):
        client.execute("SELECT * FROM recheck_t")
    (entry,) = client.timeline("recheck_t").unreadable
    assert entry.segment.id == str(table.o0.id) and "o0.parquet" in entry.reason
    assert _eventually(lambda: client.timeline("recheck_t").unreadable[0].checked_ms > 0)
    os.rename(aside, path)
    assert _eventually(lambda: not client.timeline("recheck_t").unreadable)
    result = client.execute("SELECT * FROM recheck_t")
    assert as_rows(result.table) == oracle(table.rows_visible_at(LWM))
    assert not result.metadata.retried


def _eventually(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_concurrent_queries_from_several_threads_all_get_their_own_correct_answer(
    broker_env, client
):
    table = broker_env.tables["accounts"]
    snapshots = [500, 700, 1000, 1200] * 3

    def run(snapshot: int) -> tuple[int, list[tuple]]:
        result = client.query(f"SELECT * FROM accounts VERSION AS OF {snapshot}")
        return snapshot, as_rows(result)

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(run, snapshots))
    for snapshot, rows in results:
        assert rows == oracle(table.rows_visible_at(snapshot)), snapshot
    assert broker_env.broker.engine.admission.stats().running == 0


def test_health_is_answered_for_the_server_and_each_service(broker_env, client):
    assert client.health() == "SERVING"
    assert client.health("horizon.v1.QueryService") == "SERVING"


def test_cli_prints_json_tables_and_writes_a_timeline_picture(broker_env, tmp_path, capsys):
    base = ["--target", broker_env.target, "--token", ADMIN]
    assert (
        cli_main(["query", "SELECT id, balance FROM accounts WHERE id = 3", *base, "--json"]) == 0
    )
    output = json.loads(capsys.readouterr().out)
    assert output["rows"] == [{"id": 3, "balance": 31}]
    assert output["metadata"]["snapshot"] == LWM

    picture = tmp_path / "timeline.svg"
    assert (
        cli_main(["timeline", "accounts", *base, "--overshadowed", "--picture", str(picture)]) == 0
    )
    svg = picture.read_text()
    assert svg.startswith("<svg") and svg.count("<rect") >= 4 and "overshadowed" in svg
    assert "Timeline of accounts" in capsys.readouterr().out

    assert cli_main(["watermarks", "accounts", *base, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["lwm"] == LWM
    assert cli_main(["tables", *base]) == 0
    assert "accounts" in capsys.readouterr().out
    assert cli_main(["explain", "SELECT * FROM accounts", *base]) == 0
    assert "__horizon_accounts_g" in capsys.readouterr().out

    assert cli_main(["query", "SELECT * FROM nosuch", *base, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["code"] == "NOT_FOUND"


def test_one_slow_query_does_not_block_inspection(broker_env, client):
    done = threading.Event()

    def inspect() -> None:
        for _ in range(5):
            client.watermarks("accounts")
            client.timeline("accounts")
        done.set()

    thread = threading.Thread(target=inspect)
    thread.start()
    client.query("SELECT count(*) FROM accounts a JOIN accounts b ON a.id <= b.id")
    thread.join(30)
    assert done.is_set()
