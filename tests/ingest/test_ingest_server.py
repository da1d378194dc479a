"""One ingestion server for many tables, through the public API (``horizon.IngestServer``): real
Redis, the session's Spark, a broker's follower watching."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from horizon_broker import IngestServer, load_server_config, tokens
from horizon_broker._core.errors import InvalidArgument
from horizon_broker.ingest.cli import main_ingest
from horizon_broker.watermark.lwm import IDLE, PARKED
from tests.ingest import tpch_tables


def serve(redis_server, tmp_path: Path, spark, server_id: str = "multi") -> IngestServer:  # type: ignore[no-untyped-def]
    return IngestServer(redis_server.url, server_id, spark, heartbeat_s=0.2)


def test_one_server_ingests_several_tables_its_token_covers_them_and_leaving_parks_them(
    spark, redis_server, redis_client, follower, tmp_path
):
    files = tpch_tables.write_tables(tmp_path, ("region", "nation", "orders"))
    with serve(redis_server, tmp_path, spark) as server:
        for name, path in files.items():
            server.add_table(path, source=str(tmp_path / "landing" / name))
            tpch_tables.write_batch(tmp_path / "landing" / name, name, 1)
        results = server.run_once()
        assert set(results) == set(files) and all(r.rows > 0 for r in results.values())
        token = server.token()
        assert set(tokens.snapshots(token)) == set(files)
        assert tokens.snapshots(token) == {n: r.high for n, r in results.items()}
        assert tokens.snapshots(server.run_directory("orders").token) == {
            "orders": results["orders"].high
        }  # nothing new: no batch, the same token
        for name in files:
            assert follower.wait_for(lambda f, n=name: f.view(n).lwm >= results[n].high, 10)
            states = {row.state for row in follower.watermarks(name).partitions}
            assert states == {IDLE}
    for name in files:
        assert follower.wait_for(
            lambda f, n=name: {r.state for r in f.watermarks(n).partitions} == {PARKED}, 10
        )
        assert follower.watermarks(name).server_status == {"multi": "parked"}
        assert follower.watermarks(name).stale_servers == ()


def test_a_configuration_with_problems_is_refused_naming_each_table_and_problem(tmp_path):
    files = tpch_tables.write_tables(tmp_path, ("region", "nation"))
    (tmp_path / "broken.toml").write_text('name = "broken"\n')
    (tmp_path / "server.toml").write_text(
        'server_id = "s1"\nredis = "redis://127.0.0.1:1/0"\n'
        f'[[tables]]\ndefinition = "{files["region"].name}"\n'
        f'[[tables]]\ndefinition = "{files["region"].name}"\n'
        '[[tables]]\ndefinition = "broken.toml"\n'
        f'[[tables]]\ndefinition = "{files["nation"].name}"\npartitions = [0, 7]\n'
    )
    with pytest.raises(InvalidArgument) as refused:
        load_server_config(tmp_path / "server.toml")
    message = str(refused.value)
    assert "table 'region' is listed 2 times" in message
    assert "file broken.toml" in message and "no columns" in message
    assert "file nation.toml" in message and "[7] are not key partitions" in message


def _sources(path: Path, partitions):  # type: ignore[no-untyped-def]
    from horizon_broker import TableDefinition, TableSource

    definition = TableDefinition.load(path)
    return [TableSource(definition, partitions=None if partitions is None else tuple(partitions))]


def test_tables_another_live_server_owns_are_refused_whole_before_anything_is_written(
    spark, redis_server, redis_client, tmp_path
):
    files = tpch_tables.write_tables(tmp_path, ("region", "nation"))
    other = IngestServer(redis_server.url, "owner", spark)
    other.add_table(files["nation"], partitions=[0])
    try:
        newcomer = IngestServer(redis_server.url, "newcomer", spark)
        with pytest.raises(InvalidArgument, match="owned by live server owner"):
            newcomer.add_tables(
                [*_sources(files["region"], None), *_sources(files["nation"], None)]
            )
        newcomer.close()
        assert redis_client.hget("horizon:servers", "newcomer") is None
        assert redis_client.hget("horizon:tables", "region") is None
    finally:
        other.close()


def test_one_tables_failing_batch_does_not_stop_the_others_and_it_recovers_once_fixed(
    spark, redis_server, redis_client, follower, tmp_path
):
    files = tpch_tables.write_tables(tmp_path, ("region", "nation"))
    landing = tmp_path / "landing"
    with serve(redis_server, tmp_path, spark) as server:
        server.add_table(files["region"], source=str(landing / "region"), format="parquet")
        server.add_table(files["nation"], source=str(landing / "nation"))
        (landing / "region").mkdir(parents=True)
        (landing / "region" / "001.parquet").write_text("not a parquet file")
        tpch_tables.write_batch(landing / "nation", "nation", 1)
        errors: dict[str, Exception] = {}
        results = server.run_once(on_error=errors.__setitem__)
        assert set(errors) == {"region"} and results["region"] is errors["region"]
        assert results["nation"].rows == len(tpch_tables.batch("nation", 1))
        (landing / "region" / "001.parquet").unlink()
        rows = pa.Table.from_pylist(tpch_tables.batch("region", 1))
        pq.write_table(rows, landing / "region" / "002.parquet")
        again = server.run_once()
        assert again["region"].rows == len(tpch_tables.batch("region", 1))
        assert again["nation"].skipped


def test_a_parked_server_used_again_takes_its_partitions_back_above_what_was_served(
    spark, redis_server, redis_client, follower, tmp_path
):
    table = tpch_tables.write_tables(tmp_path, ("region",))["region"]
    server = serve(redis_server, tmp_path, spark)
    try:
        server.add_table(table)
        server.park()
        assert follower.wait_for(
            lambda f: {r.state for r in f.watermarks("region").partitions} == {PARKED}, 10
        )
        start = follower.view("region").lwm
        assert follower.wait_for(lambda f: f.view("region").lwm > start, 10)
        served = follower.view("region").lwm
        frame = spark.createDataFrame(tpch_tables.batch("region", 1))
        result = server.run_batch("region", frame, sources=["batch-1"])
        assert result.base > served
    finally:
        server.close()


def test_the_ingest_command_streams_several_tables_and_parks_them_when_the_streams_end(
    spark, redis_server, redis_client, follower, tmp_path, capsys
):
    files = tpch_tables.write_tables(tmp_path, ("region", "nation"))
    for name in files:
        tpch_tables.write_batch(tmp_path / "landing" / name, name, 1)
    tables = [arg for path in files.values() for arg in ("--table", str(path))]
    argv = [*tables, "--source", str(tmp_path / "landing"), "--server-id", "streamer",
            "--redis", redis_server.url, "--stream", "--available-now",
            "--checkpoint", str(tmp_path / "checkpoints")]  # fmt: skip
    assert main_ingest(argv) == 0
    printed = capsys.readouterr().out
    for name in files:
        assert f"{name}: batch " in printed
        assert (tmp_path / "checkpoints" / name).is_dir()
        assert follower.wait_for(
            lambda f, n=name: {r.state for r in f.watermarks(n).partitions} == {PARKED}, 10
        )


def test_a_session_the_server_creates_runs_without_adaptive_execution_unless_configured():
    from horizon_broker.ingest.server import ingestion_session_conf

    defaults = ingestion_session_conf({})
    assert defaults["spark.sql.adaptive.enabled"] == "false"
    assert defaults["spark.scheduler.mode"] == "FAIR"
    configured = ingestion_session_conf({"spark.sql.adaptive.enabled": "true", "a.b": "c"})
    assert configured["spark.sql.adaptive.enabled"] == "true" and configured["a.b"] == "c"
