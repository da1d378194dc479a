"""An idle broker builds the views of a table whose timeline moved, so a failover's first query
does not; it builds nothing while a query runs, nor again for a state it has views of, nor tries
again a state whose files are gone."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from horizon_broker.broker.api.view_keeper import refresh_views
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from tests.broker.conftest import BrokerEnv, publish_table
from tests.broker.data import DAY_MS, VERSION, UpsertTable, descriptor, write_rows


def test_an_idle_broker_builds_the_views_of_a_moved_table_before_its_next_query(
    broker_env: BrokerEnv,
):
    engine, follower = broker_env.broker.engine, broker_env.broker.follower
    table = UpsertTable("kept_views", Path(broker_env.root))
    publish_table(broker_env, table.desc, [table.p0, table.p1])
    assert refresh_views(engine, ["kept_views"]) == ["kept_views"]
    assert refresh_views(engine, ["kept_views"]) == [], "views of the newest state are kept"
    generation = follower.view("kept_views").generation
    broker_env.server_client.announce([table.o0])  # the timeline moves: an overwrite
    assert follower.wait_for(lambda f: f.view("kept_views").generation != generation, 10)
    assert refresh_views(engine, ["kept_views"]) == ["kept_views"]
    built = engine.views.builds
    with broker_env.client() as client:
        rows = client.query("SELECT count(*) AS n FROM kept_views", cache=False).to_pylist()
    assert rows == [{"n": 100}]
    assert engine.views.builds == built, "the query found its views built"


def test_the_keeper_builds_nothing_while_a_query_runs_or_once_stopped(broker_env: BrokerEnv):
    engine = broker_env.broker.engine
    engine.views.clear()
    assert refresh_views(engine, ["accounts"], stopped=lambda: True) == []
    engine.queries.begin("view-keeper-test", "view-keeper-test", "tester", "SELECT 1")
    try:
        assert refresh_views(engine, ["accounts"]) == []
    finally:
        engine.queries.end("view-keeper-test", "cancelled", "CANCELLED", "a test's stand-in")
    assert not engine.views.names()
    assert refresh_views(engine, ["accounts", "no_such_table"]) == ["accounts"]


def test_a_state_whose_files_are_gone_is_tried_once_until_the_timeline_moves(
    broker_env: BrokerEnv, caplog: pytest.LogCaptureFixture
):
    engine = broker_env.broker.engine
    desc = descriptor("kept_gone", storage_root=broker_env.root)
    rows = [{"id": 1, "owner": "x", "balance": 1, "validFrom": 500, "validUntil": None}]
    path = write_rows(Path(broker_env.root) / "kept_gone" / "p0.parquet", desc, rows)
    segment = Segment(
        table="kept_gone", interval=Interval(0, DAY_MS), version=VERSION, partition=0,
        core_partitions=1, location=(path,), row_count=1,
    )  # fmt: skip
    publish_table(broker_env, desc, [segment])
    os.remove(path)
    failed: dict[str, int] = {}
    with caplog.at_level(logging.INFO, logger="horizon_broker.broker.api.view_keeper"):
        assert refresh_views(engine, ["kept_gone"], failed=failed) == []
        assert failed == {"kept_gone": int(broker_env.broker.follower.view("kept_gone").generation)}
        assert refresh_views(engine, ["kept_gone"], failed=failed) == []
    assert caplog.text.count("keeping the views of table kept_gone failed") == 1, caplog.text
