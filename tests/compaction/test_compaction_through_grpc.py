"""Queries through the real gRPC broker while compactions replace segments underneath them."""

from __future__ import annotations

import threading
import time

from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.client import connect
from horizon_broker.compaction.plan import CompactionSettings
from horizon_broker.compaction.run import Compactor
from tests.broker.conftest import ADMIN, broker_config
from tests.compaction.history import churned
from tests.ingest.conftest import replay, reported_lwm


def _answer(horizon, snapshot: int) -> set[tuple]:
    table = horizon.query(f"SELECT user_id, balance, seq FROM accounts VERSION AS OF {snapshot}")
    return set(zip(*(table.column(name).to_pylist() for name in table.column_names), strict=True))


def _expected(log, snapshot: int) -> set[tuple]:
    return {(key, change.balance, change.seq) for key, change in replay(log, snapshot).items()}


def _visible_segments(horizon) -> int:
    [info] = [t for t in horizon.tables() if t.name == "accounts"]
    return info.visible_segments


def test_queries_answer_as_the_uncompacted_table_while_minor_and_major_compactions_run(
    spark, server, redis_server, tmp_path
):
    table, client, _job, log = churned(spark, server, tmp_path, rounds=5)
    lwm = reported_lwm(client, "accounts")
    times = sorted({ts for ts, _ in log})
    snapshots = [*times[:: max(1, len(times) // 5)], lwm]
    broker = BrokerServer(broker_config(redis_server.url), spark=spark).start()  # type: ignore[arg-type]
    try:
        with connect(broker.target, token=ADMIN) as horizon:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and horizon.watermarks("accounts").lwm != lwm:
                time.sleep(0.05)
            segments_before = _visible_segments(horizon)
            for snapshot in snapshots:
                assert _answer(horizon, snapshot) == _expected(log, snapshot)

            outcomes: list[str] = []

            def compact() -> None:
                small = CompactionSettings(target_rows=12)  # several outputs: major has work too
                compactor = Compactor(spark, table, server("compactor"), settings=small)
                outcomes.append(compactor.compact().outcome)
                outcomes.append(compactor.compact_major().outcome)

            worker = threading.Thread(target=compact)
            worker.start()
            rounds = 0
            while worker.is_alive() or rounds == 0:
                for snapshot in snapshots:
                    assert _answer(horizon, snapshot) == _expected(log, snapshot), snapshot
                duplicates = horizon.query(
                    "SELECT count(*) - count(DISTINCT user_id) AS extra FROM accounts"
                )
                assert duplicates.column("extra").to_pylist() == [0]
                rounds += 1
            worker.join()
            assert outcomes == ["published", "published"]
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and _visible_segments(horizon) >= segments_before:
                time.sleep(0.05)
            assert _visible_segments(horizon) < segments_before
            for snapshot in snapshots:
                assert _answer(horizon, snapshot) == _expected(log, snapshot)
    finally:
        broker.stop(0)
        broker.follower.stop()
