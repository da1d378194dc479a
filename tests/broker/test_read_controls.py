"""The read controls through gRPC: commit tokens (read-your-writes), max_staleness, snapshot
pins, the result cache, and monotonic reads across brokers and a broker restart."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

from horizon_broker._core.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from horizon_broker._core.hlc import LOGICAL_BITS
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.cli import main as cli_main
from horizon_broker.client import connect
from horizon_broker.watermark import tokens
from tests.broker.conftest import ADMIN, READER, BrokerEnv, broker_config, publish_table
from tests.broker.data import UpsertTable


@pytest.fixture
def table(broker_env: BrokerEnv, request: pytest.FixtureRequest) -> UpsertTable:
    """A fresh table of this test at LWM 1200 (partition 0; partition 1 is at 1500)."""
    name = "rc_" + request.node.name.split("[")[0][-40:].replace("test_", "")
    made = UpsertTable(name, broker_env.root)
    publish_table(broker_env, made.desc, made.segments)
    return made


def report(env: BrokerEnv, table: UpsertTable, p0: int, p1: int = 10**6) -> None:
    env.server_client.report(table.name, {0: (p0, p0), 1: (p1, p1)})


def wait_lwm(env: BrokerEnv, table: UpsertTable, lwm: int) -> None:
    assert env.broker.follower.wait_for(lambda f: f.view(table.name).lwm == lwm, 10)


def test_a_query_with_a_commit_token_waits_for_the_table_to_reach_it_and_reads_there(
    broker_env, client, table
):
    token = tokens.encode({table.name: 1400})
    timer = threading.Timer(0.5, report, (broker_env, table, 1400))
    timer.start()
    result = client.execute(f"SELECT count(*) AS n FROM {table.name}", min_snapshot=token)
    timer.join()
    assert result.snapshot is not None and result.snapshot >= 1400
    assert result.metadata.waited_ms > 100
    assert tokens.decode(result.metadata.snapshot_token)[table.name] == result.snapshot


def test_a_token_beyond_the_servers_progress_times_out_naming_the_partition_holding_it(
    broker_env, client, table
):
    token = tokens.encode({table.name: 5000})
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded) as caught:
        client.execute(f"SELECT * FROM {table.name}", min_snapshot=token, timeout=2.0)
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert "min_snapshot" in message and "5000" in message
    assert f"table {table.name} partition 0 on server srv-a" in message
    # A token naming only another table is no constraint on this one.
    other = tokens.encode({"somewhere_else": 10**15})
    assert client.execute(f"SELECT * FROM {table.name}", min_snapshot=other).snapshot == 1200


def test_a_corrupt_token_is_refused_as_invalid(client, table):
    with pytest.raises(InvalidArgument, match="not a Horizon snapshot token"):
        client.execute(f"SELECT * FROM {table.name}", min_snapshot="garbage")
    with pytest.raises(InvalidArgument, match="corrupt"):
        client.execute(f"SELECT * FROM {table.name}", min_snapshot="hz1.!!!")


def test_a_read_older_than_max_staleness_is_refused_naming_the_laggard(broker_env, client, table):
    with pytest.raises(Unavailable) as caught:
        client.execute(f"SELECT * FROM {table.name}", max_staleness=60)
    message = str(caught.value)
    assert "max_staleness 60s" in message and "partition 0 on server srv-a" in message
    now = (int(time.time() * 1000) << LOGICAL_BITS) + 5
    report(broker_env, table, now, now + 1)
    wait_lwm(broker_env, table, now)
    fresh = client.execute(f"SELECT count(*) AS n FROM {table.name}", max_staleness=60)
    assert fresh.snapshot == now
    # An explicit snapshot is what the caller asked for: the bound is for default reads.
    client.execute(f"SELECT * FROM {table.name} VERSION AS OF 1200", max_staleness=60)
    with pytest.raises(InvalidArgument, match="max_staleness"):
        client.execute(f"SELECT * FROM {table.name}", max_staleness=-1)


def test_a_pin_reads_one_snapshot_of_every_table_it_holds_until_released(broker_env, client, table):
    sql = f"SELECT id, balance FROM {table.name} ORDER BY id"
    with client.pin([table.name, "accounts"], lease=60) as cut:
        assert cut.snapshot == 1200
        before = cut.execute(sql)
        report(broker_env, table, 1400)
        wait_lwm(broker_env, table, 1400)
        after = cut.execute(sql)
        assert after.snapshot == 1200
        assert after.metadata.snapshot_source == pb.SNAPSHOT_SOURCE_PIN
        assert after.metadata.pin_id == cut.pin_id
        assert after.table.equals(before.table)
        assert client.execute(sql).snapshot == 1400  # without the pin: the LWM
        # The session has now seen 1400: the pin still reads at 1200 (an explicit moment, like
        # VERSION AS OF), and no staleness bound applies to it.
        again = cut.execute(sql, max_staleness=1)
        assert again.snapshot == 1200 and again.metadata.waited_ms == 0
        listed = client.watermarks(table.name).pins
        assert [p.pin_id for p in listed] == [cut.pin_id]
        assert listed[0].owner == "admin" and listed[0].lease_left_seconds > 50
        with pytest.raises(FailedPrecondition, match="not held by snapshot pin"):
            cut.execute("SELECT * FROM big")
        with pytest.raises(FailedPrecondition, match="in the future"):
            cut.execute(f"SELECT * FROM {table.name} VERSION AS OF 1300")
    assert client.watermarks(table.name).pins == []
    with pytest.raises(NotFound, match="not held"):
        client.execute(sql, pin=cut.pin_id)


def test_a_pin_holds_the_retention_horizon_so_its_snapshot_keeps_answering(
    broker_env, client, table
):
    report(broker_env, table, 1400)
    wait_lwm(broker_env, table, 1400)
    pin = client.pin(table.name, snapshot=1100, lease=60, renew=False)
    granted = broker_env.server_client.report_retention_horizon(table.name, 1300)
    assert granted == 1100
    assert broker_env.broker.follower.wait_for(
        lambda f: f.view(table.name).retention_horizon == 1100, 10
    )
    assert pin.execute(f"SELECT count(*) AS n FROM {table.name}").snapshot == 1100
    pin.release()
    assert broker_env.server_client.report_retention_horizon(table.name, 1300) == 1300
    with pytest.raises(FailedPrecondition, match="below the retention horizon 1300"):
        client.pin(table.name, snapshot=1200, lease=60)


def test_an_expired_pin_stops_holding_anything_back(broker_env, client, table):
    pin = client.pin(table.name, lease=1, renew=False)  # [reads].min_pin_lease_s
    time.sleep(1.2)
    assert client.watermarks(table.name).pins == []
    with pytest.raises(NotFound, match="not held"):
        pin.execute(f"SELECT * FROM {table.name}")
    with pytest.raises(NotFound):
        client.renew_pin(pin.pin_id, lease=60)
    assert not client.release_pin(pin.pin_id)


def test_a_context_pin_renews_its_lease_while_held(client, table):
    with client.pin(table.name, lease=1) as cut:  # renewed every third of a second
        time.sleep(2)
        assert cut.renew_error is None
        assert cut.execute(f"SELECT count(*) AS n FROM {table.name}").snapshot == 1200


def test_a_passthrough_plan_can_pin_what_it_lists(broker_env, client, table):
    plan = client.rewrite(f"SELECT * FROM {table.name}", pin_lease=30)
    assert plan.pin.pin_id and plan.pin.snapshot == 1200
    assert [p.pin_id for p in client.watermarks(table.name).pins] == [plan.pin.pin_id]
    assert client.release_pin(plan.pin.pin_id)


def test_pins_are_refused_for_tables_the_caller_may_not_read(broker_env, table):
    with connect(broker_env.target, token=READER) as reader:
        with pytest.raises(PermissionDenied) as ungranted:
            reader.pin(table.name, lease=10)
        with pytest.raises(PermissionDenied) as unknown:
            reader.pin("no_such_table", lease=10)
    # A caller without the grant cannot tell an ungranted table from an unknown one.
    assert str(ungranted.value).replace(table.name, "?") == str(unknown.value).replace(
        "no_such_table", "?"
    )
    with broker_env.client() as admin, pytest.raises(NotFound, match="not registered"):
        admin.pin("no_such_table", lease=10)


def test_a_cache_hit_returns_exactly_the_miss_rows_without_spark(broker_env, client, table):
    sql = f"SELECT id, balance FROM {table.name} VERSION AS OF 1100 WHERE id > 20 ORDER BY id"
    miss = client.execute(sql)
    assert miss.metadata.cache == "miss" and miss.trailer.cache == "miss"
    explained = client.explain(sql)
    assert explained.metadata.cache == "hit"
    hit = client.execute(sql)
    assert hit.metadata.cache == "hit" and hit.trailer.cache == "hit"
    assert hit.trailer.timings.spark_ms == 0
    assert hit.table.equals(miss.table)
    bypassed = client.execute(sql, cache=False)
    assert bypassed.metadata.cache == "bypassed" and bypassed.table.equals(miss.table)


def test_a_changed_timeline_generation_misses_the_cache(broker_env, client, table):
    sql = f"SELECT count(*) AS n FROM {table.name} VERSION AS OF 1100"
    client.execute(sql)
    assert client.execute(sql).metadata.cache == "hit"
    before = broker_env.broker.follower.view(table.name).generation
    broker_env.server_client.unannounce([table.o0])
    broker_env.server_client.announce([table.o0])
    assert broker_env.broker.follower.wait_for(
        lambda f: f.view(table.name).generation >= before + 2, 10
    )
    assert client.execute(sql).metadata.cache == "miss"


def test_a_cache_hit_still_checks_the_callers_grants(broker_env, client):
    sql = "SELECT count(*) AS n FROM secret VERSION AS OF 1100"
    client.execute(sql)
    assert client.execute(sql).metadata.cache == "hit"
    with connect(broker_env.target, token=READER) as reader, pytest.raises(PermissionDenied):
        reader.execute(sql)


def test_non_deterministic_queries_are_never_cached(client, table):
    for sql in (
        f"SELECT id, rand() AS r FROM {table.name} VERSION AS OF 1100",
        f"SELECT count(*) AS n, current_timestamp() AS t FROM {table.name} VERSION AS OF 1100",
    ):
        first = client.execute(sql)
        assert first.metadata.cache.startswith("not cached: it calls")
        assert client.execute(sql).metadata.cache.startswith("not cached")


@pytest.fixture
def second_broker(broker_env: BrokerEnv, spark) -> Iterator[list[BrokerServer]]:  # type: ignore[no-untyped-def]
    """Brokers started by the test on the same state and Spark, stopped after it."""
    started: list[BrokerServer] = []
    yield started
    for broker in started:
        broker.stop(0)
        broker.follower.stop()


def _start_broker(env: BrokerEnv, spark, started: list[BrokerServer], name: str) -> BrokerServer:  # type: ignore[no-untyped-def]
    broker = BrokerServer(broker_config(env.redis.url), spark=spark, view_namespace=name).start()  # type: ignore[arg-type]
    started.append(broker)
    return broker


def test_a_client_moving_between_brokers_one_restarted_never_sees_its_snapshot_go_back(
    broker_env, spark, table, second_broker
):
    report(broker_env, table, 2000)
    wait_lwm(broker_env, table, 2000)
    sql = f"SELECT count(*) AS n FROM {table.name}"
    with broker_env.client() as moving:
        assert moving.execute(sql).snapshot == 2000
        # A server comes back with less progress than it had reported: the served LWM of the
        # running broker holds (a regression), a broker started now would compute 1800.
        report(broker_env, table, 1800)
        assert broker_env.broker.follower.wait_for(
            lambda f: f.watermarks(table.name).computed == 1800, 10
        )
        assert moving.execute(sql).snapshot == 2000
        restarted = _start_broker(broker_env, spark, second_broker, "restarted_")
        moved = connect(restarted.target, token=ADMIN, session_token=moving.session_token)
        with moved, pytest.raises(DeadlineExceeded, match="partition 0 on server srv-a"):
            moved.execute(sql, timeout=1.5)
        with connect(restarted.target, token=ADMIN) as stranger:
            # No token, but the floor the first broker recorded survives into the new one.
            with pytest.raises(DeadlineExceeded, match="already served snapshot 2000"):
                stranger.execute(sql, timeout=1.5)
            report(broker_env, table, 2100)
            assert stranger.execute(sql, timeout=10).snapshot >= 2000


def test_the_cli_pins_queries_at_the_pin_and_releases_it(broker_env, table, capsys):
    base = ["--target", broker_env.target, "--token", ADMIN]
    assert cli_main(["pin", table.name, "--lease", "60", *base, "--json"]) == 0
    pin = json.loads(capsys.readouterr().out)
    assert pin["snapshot"] == 1200 and pin["tables"] == [table.name]
    report(broker_env, table, 1400)
    wait_lwm(broker_env, table, 1400)
    sql = f"SELECT count(*) AS n FROM {table.name}"
    assert cli_main(["query", sql, "--pin", pin["pin_id"], *base, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"]["snapshot"] == 1200
    assert cli_main(["watermarks", table.name, *base]) == 0
    assert pin["pin_id"] in capsys.readouterr().out
    assert cli_main(["pin", "--release", pin["pin_id"], *base]) == 0
    assert "released" in capsys.readouterr().out
    assert cli_main(["query", sql, "--max-staleness", "60", *base, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["code"] == "UNAVAILABLE"
    assert cli_main(["pin", *base]) == 1
