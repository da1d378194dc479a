"""End to end through the client: results equal the visibility oracle; explain, passthrough and
execute agree; metadata says what was read; segment views are reused until the timeline moves."""

from __future__ import annotations

import pyarrow as pa
import pytest

from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.api import arrow_ipc
from tests.broker.conftest import LWM, BrokerEnv
from tests.broker.data import as_rows, oracle


def test_default_snapshot_query_returns_exactly_the_rows_visible_at_the_lwm(broker_env, client):
    table = broker_env.tables["accounts"]
    result = client.execute("SELECT * FROM accounts")
    assert result.snapshot == LWM
    assert result.metadata.snapshot_source == pb.SNAPSHOT_SOURCE_LWM
    assert as_rows(result.table) == oracle(table.rows_visible_at(LWM))
    ids = result.table.column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 100, "one version per key"


@pytest.mark.parametrize("snapshot", [499, 500, 700, 999, 1000, 1200])
def test_time_travel_reads_the_versions_valid_at_that_snapshot(broker_env, client, snapshot):
    table = broker_env.tables["accounts"]
    result = client.query(f"SELECT id, owner, balance FROM accounts VERSION AS OF {snapshot}")
    assert as_rows(result) == oracle(table.rows_visible_at(snapshot))


def test_self_join_compares_one_snapshot_with_itself(broker_env, client):
    result = client.query(
        "SELECT a.id, a.balance - b.balance AS diff FROM accounts a "
        "JOIN accounts b ON a.id = b.id WHERE a.balance <> b.balance"
    )
    assert result.num_rows == 0


def test_aggregate_and_filter_match_the_oracle(broker_env, client):
    rows = broker_env.tables["accounts"].rows_visible_at(LWM)
    result = client.query(
        "SELECT count(*) AS n, sum(balance) AS total FROM accounts WHERE id <= 10"
    ).to_pylist()
    expected = [row["balance"] for row in rows if row["id"] <= 10]
    assert result == [{"n": len(expected), "total": sum(expected)}]


def test_query_metadata_names_the_view_generation_and_segments_read(broker_env, client):
    result = client.execute("SELECT id FROM accounts WHERE id = 3")
    (read,) = result.metadata.tables
    view = broker_env.broker.follower.view("accounts")
    assert read.table == "accounts"
    assert read.timeline_generation == view.generation
    assert read.view == f"__horizon_accounts_g{view.generation}"
    assert read.segment_count == 2 and read.file_count == 2
    assert read.laggard.server == "srv-a" and read.laggard.watermark == LWM
    assert result.trailer.row_count == 1
    assert result.trailer.timings.total_ms >= result.trailer.timings.spark_ms > 0


def test_empty_visible_set_still_has_the_table_schema(client):
    result = client.query("SELECT * FROM empty_t")
    assert result.num_rows == 0
    assert result.schema.names == ["id", "owner", "balance", "validFrom", "validUntil"]
    assert result.schema.field("balance").type == pa.int64()


def test_explain_shows_the_sql_that_execute_runs_and_why_each_segment(broker_env, client):
    sql = "SELECT owner FROM accounts WHERE id BETWEEN 5 AND 15"
    explain = client.explain(sql, include_spark_plan=True)
    (table,) = explain.tables
    chosen = {segment.segment.partition for segment in table.segments}
    assert chosen == {32_768, 1}, "the overwrite replaces partition 0"
    assert all(segment.reason for segment in table.segments)
    assert "validFrom <= 1200" in explain.rewritten_sql
    assert explain.spark_plan
    executed = client.execute(sql)
    assert executed.metadata.snapshot == explain.metadata.snapshot
    assert executed.metadata.tables[0].view == table.read.view


def test_passthrough_on_the_clients_own_spark_returns_the_same_rows(broker_env, client, spark):
    own_session = spark.newSession()
    sql = "SELECT id, owner, balance FROM accounts VERSION AS OF 700 WHERE id < 30"
    rewritten = client.rewrite(sql)
    (substituted,) = rewritten.tables
    assert substituted.snapshot == 700
    assert sorted(substituted.files) == sorted(
        path for segment in substituted.segments for path in segment.location
    )
    frame = client.passthrough(own_session, sql)
    passthrough_rows = sorted(tuple(row) for row in frame.collect())
    assert passthrough_rows == as_rows(client.query(sql))


def test_segment_views_are_reused_until_the_timeline_changes(broker_env: BrokerEnv, client):
    views = broker_env.broker.engine.views
    client.query("SELECT count(*) FROM accounts")
    builds, layouts = views.builds, views.layouts_computed
    for _ in range(3):
        client.query("SELECT count(*) FROM accounts")
    assert views.builds == builds, "no view rebuilt while nothing changed"
    assert views.layouts_computed == layouts, "no layout derived again while nothing changed"

    table = broker_env.tables["accounts"]
    follower = broker_env.broker.follower
    before = follower.view("accounts").generation
    broker_env.server_client.unannounce([table.o0])
    broker_env.server_client.announce([table.o0])
    assert follower.wait_for(lambda f: f.view("accounts").generation >= before + 2, 10)
    result = client.execute("SELECT * FROM accounts")
    assert views.builds == builds + 1
    assert views.layouts_computed == layouts + 1, "the moved table's layout, derived once"
    assert result.metadata.tables[0].timeline_generation >= before + 2
    assert as_rows(result.table) == oracle(table.rows_visible_at(LWM))
    live = [name for name in views.names() if name.startswith("__horizon_accounts_")]
    assert live == [result.metadata.tables[0].view], "older generations are dropped"


def test_arrow_framing_splits_big_results_into_bounded_messages():
    table = pa.table({"id": list(range(10_000)), "text": ["x" * 100] * 10_000})
    messages = list(arrow_ipc.encode_batches(table, 64 * 1024))
    assert len(messages) > 10
    assert all(len(data) < 200 * 1024 for data, _ in messages)
    assert sum(rows for _, rows in messages) == 10_000
    schema = arrow_ipc.decode_schema(arrow_ipc.encode_schema(table.schema))
    assert arrow_ipc.decode_batches(schema, [data for data, _ in messages]).equals(table)


def test_a_comma_join_is_planned_as_the_inner_join_plain_spark_makes_of_it(client):
    """An Inner join keeps Spark's runtime filters and partition pruning; a Cross one loses them."""
    explain = client.explain(
        "SELECT a.owner FROM accounts a, accounts b WHERE a.id = b.id AND b.balance > 0",
        include_spark_plan=True,
    )
    assert "INNER JOIN" in explain.rewritten_sql
    joins = [line for line in explain.spark_plan.splitlines() if "Join" in line]
    assert joins and all("Cross" not in line for line in joins), explain.spark_plan
    assert any("Inner" in line for line in joins), explain.spark_plan
