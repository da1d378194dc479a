"""A broker answering through a failover that lost the last acknowledged batch (rules F5 and F6
of docs/design/contract/failover.md), one short test on the session's Spark: the lost batch is an
overwrite that closes ten keys' old versions; without the hold the timeline would fall back to
the segment it replaced and show those keys twice at the snapshot already served. No answer sees
the snapshot go back or a key twice, the hold shows in the answers' metadata, the watermarks and
the metrics while it lasts, and the server's re-publish ends it."""

from __future__ import annotations

from typing import Any

from chaos.sentinel_group import SentinelGroup
from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.client import connect
from horizon_broker.watermark.server import ServerClient
from tests.broker.conftest import ADMIN, broker_config
from tests.broker.data import UpsertTable
from tests.failover.test_store_failover import _failover_metrics

SQL = "SELECT count(*) AS n, count(DISTINCT id) AS k FROM ledger"


def test_answers_through_a_failover_never_go_back_nor_show_a_key_twice(
    spark: Any, group: SentinelGroup, tmp_path
):
    table = UpsertTable("ledger", tmp_path)
    server = ServerClient(group.url, "srv")
    server.register()
    server.register_table(table.desc)
    server.announce([table.p0, table.p1])
    server.report("ledger", {0: (999, 999), 1: (999, 999)})
    config = broker_config(
        group.url, state={"max_staleness_s": 120.0, "heartbeat_timeout_s": 120.0}
    )
    broker = BrokerServer(config, spark=spark, view_namespace="failover_").start()  # type: ignore[arg-type]
    follower = broker.follower
    answers: list[tuple[int, int, int]] = []
    held: list[tuple[int, int]] = []  # what each answer's metadata and the watermarks said

    def ask() -> None:
        with connect(broker.target, token=ADMIN) as horizon:
            result = horizon.execute(SQL)
            watermarks = horizon.watermarks("ledger")
        row = result.table.to_pylist()[0]
        answers.append((result.snapshot, row["n"], row["k"]))
        held.append((result.metadata.tables[0].held_segments, watermarks.held_segments))

    try:
        ask()
        group.cut_replication()
        server.announce([table.o0])  # closes ids 1..10 at 1000: on the primary alone
        server.report("ledger", {0: (1200, 1200), 1: (1200, 1200)})
        assert follower.wait_for(lambda f: f.view("ledger").lwm == 1200, 10)
        ask()
        group.fail_over()
        assert follower.wait_for(lambda f: f.held() == {"ledger": 1}, 30)
        assert _failover_metrics(follower)["horizon_state_store_held_tables"] == 1
        ask()  # held: the served snapshot, with the overwrite the store lost
        server.heartbeat()  # the server re-publishes before anything else
        assert follower.wait_for(lambda f: not f.held(), 10)
        ask()
    finally:
        broker.stop(0)
        follower.stop()
        server.close()
    snapshots = [snapshot for snapshot, _, _ in answers]
    assert snapshots == sorted(snapshots) and snapshots[1:] == [1200, 1200, 1200], answers
    assert all(n == k == 100 for _, n, k in answers), answers
    assert held == [(0, 0), (0, 0), (1, 1), (0, 0)]  # the hold named while it lasted
