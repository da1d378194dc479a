"""Flight SQL benchmark: the same queries through ExecuteQuery and through Flight SQL, side by side.

Writes a table once with Spark (1M rows, or 200k with ``--quick``), publishes it, starts one broker
(its gRPC API and its Flight SQL endpoint), then runs each query through the Python client
(``ExecuteQuery``) and through the ADBC Flight SQL driver (DB-API ``execute`` +
``fetch_arrow_table``), interleaved so both see the same machine load:

* the whole table as one result (1M rows): rows/s each way and the ratio Flight / native
  (target >= 0.9x); the same through pyarrow.flight's generic client, which decodes nothing in
  Python, as a reference;
* a point query by key (a new key each time, the result cache bypassed on both sides, as the
  three ways of asking run the same key one after another): p50/p99 each way and what Flight
  adds at p50 (target <= 2 ms); DB-API prepares every statement it runs (CreatePreparedStatement,
  GetFlightInfo, DoGet, ClosePreparedStatement), so the same lookup is also timed as one prepared
  statement with the key bound as a ``?`` parameter each time (DoPut, GetFlightInfo, DoGet);
* a repeated dashboard query (1,000 rows) answered from the result cache: p50 each way;
* the driver's own floor: the same two ADBC calls against a Flight SQL server that answers at
  once with one canned row (no query, no Horizon), so what Flight adds can be split into the
  driver's round trips and Horizon's work.

The large result and the point queries bypass the result cache on both sides (every sample is a
Spark or file read, never a cached answer).

    .venv/bin/python -m bench.flight [--quick]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.broker import TABLE, publish, write_dataset
from bench.report import print_table, summarize, write_results

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

FULL_SQL = f"SELECT * FROM {TABLE}"
DASHBOARD_SQL = f"SELECT id, owner, balance FROM {TABLE} WHERE id BETWEEN 5000 AND 5999 ORDER BY id"


def timed(run: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    answer = run()
    return (time.perf_counter() - started) * 1000, answer


def adbc_query(connection: Any, sql: str) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetch_arrow_table()


def flight_query(client: Any, sql: str, options: Any = None) -> Any:
    """pyarrow.flight's generic client: GetFlightInfo + DoGet, no driver in between."""
    import pyarrow.flight as fl

    from horizon_broker.broker._proto.arrow.flight.protocol.sql import flight_sql_pb2
    from horizon_broker.broker.flight.commands import pack

    descriptor = fl.FlightDescriptor.for_command(
        pack(flight_sql_pb2.CommandStatementQuery(query=sql))
    )
    info = client.get_flight_info(descriptor, options)
    return client.do_get(info.endpoints[0].ticket, options).read_all()


def canned_flight_sql_server() -> Any:
    """A Flight SQL server that answers every query at once with one canned row: what the ADBC
    driver costs by itself (its round trips, cgo, DB-API), with no query behind it."""
    import pyarrow as pa
    import pyarrow.flight as fl

    from horizon_broker.broker._proto.arrow.flight.protocol.sql import flight_sql_pb2 as sql
    from horizon_broker.broker.flight.commands import pack, unpack
    from horizon_broker.broker.flight.sql_info import server_info, sql_info_table

    answer = pa.table({"id": [1], "owner": ["o"], "balance": [1]})
    info = sql_info_table(server_info(statement_ttl_s=60, max_sql_length=100_000))

    class Canned(fl.FlightServerBase):  # type: ignore[misc]
        def list_actions(self, context: Any) -> list[Any]:
            return []

        def do_action(self, context: Any, action: Any) -> list[Any]:
            if action.type != "CreatePreparedStatement":
                return []
            result = sql.ActionCreatePreparedStatementResult(
                prepared_statement_handle=b"canned",
                dataset_schema=answer.schema.serialize().to_pybytes(),
            )
            return [fl.Result(pa.py_buffer(pack(result)))]

        def do_put(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
            reader.read_all()
            done = sql.DoPutPreparedStatementResult(prepared_statement_handle=b"canned")
            writer.write(pa.py_buffer(done.SerializeToString()))

        def get_flight_info(self, context: Any, descriptor: Any) -> Any:
            is_info = isinstance(unpack(descriptor.command, "command"), sql.CommandGetSqlInfo)
            table = info if is_info else answer
            ticket = b"info" if is_info else b"answer"
            return fl.FlightInfo(table.schema, descriptor, [fl.FlightEndpoint(ticket, [])], -1, -1)

        def do_get(self, context: Any, ticket: Any) -> Any:
            return fl.RecordBatchStream(info if ticket.ticket == b"info" else answer)

    return Canned("grpc://127.0.0.1:0")


def driver_floor(rounds: int) -> dict[str, list[float]]:
    """The point query's two ADBC forms against :func:`canned_flight_sql_server`."""
    import adbc_driver_flightsql.dbapi as flight_sql

    canned = canned_flight_sql_server()
    samples: dict[str, list[float]] = {"adbc_ms": [], "adbc_bound_ms": []}
    try:
        with flight_sql.connect(f"grpc://127.0.0.1:{canned.port}") as connection:
            bound = connection.cursor()
            for key in range(-5, rounds):
                sql = f"SELECT * FROM {TABLE} WHERE id = {key}"
                new_cursor, _ = timed(lambda s=sql: adbc_query(connection, s))
                one_statement, _ = timed(
                    lambda k=key: (
                        bound.execute(f"SELECT * FROM {TABLE} WHERE id = ?", (k,)),
                        bound.fetch_arrow_table(),
                    )
                )
                if key >= 0:  # the first five warm the connection up
                    samples["adbc_ms"].append(new_cursor)
                    samples["adbc_bound_ms"].append(one_statement)
            bound.close()
    finally:
        canned.shutdown()
    return samples


def warm_up(native: Any, adbc: Any, lookups: Any, rng: random.Random, rows: int) -> None:
    """JIT, views, code generation and connections, before anything is measured."""
    for _ in range(3):
        key = rng.randrange(rows)
        native.query(f"SELECT * FROM {TABLE} WHERE id = {key}")
        adbc_query(adbc, f"SELECT * FROM {TABLE} WHERE id = {key}")
    native.query(FULL_SQL, cache=False)
    adbc_query(lookups, FULL_SQL)


def large_results(
    native: Any, lookups: Any, generic: Any, bypass: Any, rows: int, rounds: int
) -> dict[str, list[float]]:
    """The whole table through ExecuteQuery, ADBC and a generic Flight client, interleaved."""
    big: dict[str, list[float]] = {"native_ms": [], "adbc_ms": [], "generic_ms": []}
    for _ in range(rounds):
        elapsed, answer = timed(lambda: native.query(FULL_SQL, cache=False))
        assert answer.num_rows == rows, answer.num_rows
        big["native_ms"].append(elapsed)
        elapsed, answer = timed(lambda: adbc_query(lookups, FULL_SQL))
        assert answer.num_rows == rows, answer.num_rows
        assert answer.schema.metadata[b"horizon.cache"] != b"hit"
        big["adbc_ms"].append(elapsed)
        elapsed, answer = timed(lambda: flight_query(generic, FULL_SQL, bypass))
        assert answer.num_rows == rows, answer.num_rows
        big["generic_ms"].append(elapsed)
    return big


def point_queries(
    native: Any, lookups: Any, rng: random.Random, rows: int, rounds: int
) -> dict[str, list[float]]:
    """One key at a time through ExecuteQuery, ADBC, and ADBC binding ``?`` on one statement
    prepared once; each answer checked against ExecuteQuery's."""
    point: dict[str, list[float]] = {"native_ms": [], "adbc_ms": [], "adbc_bound_ms": []}
    bound = lookups.cursor()  # one statement prepared once, a new value bound each time
    for _ in range(rounds):
        key = rng.randrange(rows)
        sql = f"SELECT * FROM {TABLE} WHERE id = {key}"
        elapsed, expected = timed(lambda s=sql: native.query(s, cache=False))
        point["native_ms"].append(elapsed)
        elapsed, answer = timed(lambda s=sql: adbc_query(lookups, s))
        point["adbc_ms"].append(elapsed)
        assert answer.to_pylist() == expected.to_pylist(), (answer, expected)
        elapsed, answer = timed(
            lambda k=key: (
                bound.execute(f"SELECT * FROM {TABLE} WHERE id = ?", (k,)),
                bound.fetch_arrow_table(),
            )[1]
        )
        point["adbc_bound_ms"].append(elapsed)
        assert answer.to_pylist() == expected.to_pylist(), (answer, expected)
    bound.close()
    return point


def cache_hits(native: Any, adbc: Any, rounds: int) -> dict[str, list[float]]:
    """The dashboard query answered from the result cache, through both doors."""
    native.query(DASHBOARD_SQL)  # fill the cache
    cache: dict[str, list[float]] = {"native_ms": [], "adbc_ms": []}
    for _ in range(rounds):
        elapsed, result = timed(lambda: native.execute(DASHBOARD_SQL))
        assert result.metadata.cache == "hit", result.metadata.cache
        cache["native_ms"].append(elapsed)
        elapsed, answer = timed(lambda: adbc_query(adbc, DASHBOARD_SQL))
        assert answer.schema.metadata[b"horizon.cache"] == b"hit"
        cache["adbc_ms"].append(elapsed)
    return cache


def report(
    rows: int,
    big: dict[str, list[float]],
    point: dict[str, list[float]],
    cache: dict[str, list[float]],
    floor: dict[str, Any],
    big_rounds: int,
    point_rounds: int,
) -> dict[str, Any]:
    """The run's figures against their targets, printed as one table."""

    def rows_per_s(samples: list[float]) -> float:
        return rows / (statistics.median(samples) / 1000)

    native_rate, adbc_rate = rows_per_s(big["native_ms"]), rows_per_s(big["adbc_ms"])
    generic_rate = rows_per_s(big["generic_ms"])
    point_stats = {name: summarize(values) for name, values in point.items()}
    cache_stats = {name: summarize(values) for name, values in cache.items()}
    results: dict[str, Any] = {
        "rows": rows,
        "large_result": {
            **{name: summarize(values) for name, values in big.items()},
            "native_rows_per_s": round(native_rate),
            "adbc_rows_per_s": round(adbc_rate),
            "generic_flight_rows_per_s": round(generic_rate),
            "adbc_over_native": round(adbc_rate / native_rate, 2),
            "generic_over_native": round(generic_rate / native_rate, 2),
            "target_adbc_over_native": 0.9,
        },
        "point_query": {
            **point_stats,
            "flight_adds_p50_ms": round(point_stats["adbc_ms"]["p50"] - point_stats["native_ms"]["p50"], 2),
            "bound_flight_adds_p50_ms": round(point_stats["adbc_bound_ms"]["p50"] - point_stats["native_ms"]["p50"], 2),
            "target_flight_adds_p50_ms": 2.0,
        },
        "cache_hit": cache_stats,
        "adbc_driver_floor": floor,
    }  # fmt: skip
    print_table(
        f"ExecuteQuery vs Flight SQL (ADBC), one broker, {rows:,}-row table, interleaved",
        ("query", "ExecuteQuery", "Flight SQL (ADBC)", "Flight / native", "target"),
        [
            (
                f"{rows:,}-row result, rows/s (median of {big_rounds})",
                f"{native_rate:,.0f}",
                f"{adbc_rate:,.0f}",
                f"{adbc_rate / native_rate:.2f}x",
                ">= 0.9x",
            ),
            (
                "  same, pyarrow.flight generic client",
                "",
                f"{generic_rate:,.0f}",
                f"{generic_rate / native_rate:.2f}x",
                "-",
            ),
            (
                f"point query p50 / p99 ms ({point_rounds} keys)",
                f"{point_stats['native_ms']['p50']:.2f} / {point_stats['native_ms']['p99']:.2f}",
                f"{point_stats['adbc_ms']['p50']:.2f} / {point_stats['adbc_ms']['p99']:.2f}",
                f"+{results['point_query']['flight_adds_p50_ms']:.2f} ms at p50",
                "<= +2 ms",
            ),
            (
                "  same, ? bound on one prepared statement",
                "",
                f"{point_stats['adbc_bound_ms']['p50']:.2f} / {point_stats['adbc_bound_ms']['p99']:.2f}",
                f"+{results['point_query']['bound_flight_adds_p50_ms']:.2f} ms at p50",
                "-",
            ),
            (
                "  ADBC driver alone (a canned one-row server), p50 / p99 ms",
                "",
                f"{floor['adbc_ms']['p50']:.2f} / {floor['adbc_ms']['p99']:.2f}",
                f"bound: {floor['adbc_bound_ms']['p50']:.2f} / {floor['adbc_bound_ms']['p99']:.2f}",
                "-",
            ),
            (
                "dashboard query (1,000 rows), cache hit p50 / p99 ms",
                f"{cache_stats['native_ms']['p50']:.2f} / {cache_stats['native_ms']['p99']:.2f}",
                f"{cache_stats['adbc_ms']['p50']:.2f} / {cache_stats['adbc_ms']['p99']:.2f}",
                f"+{cache_stats['adbc_ms']['p50'] - cache_stats['native_ms']['p50']:.2f} ms at p50",
                "-",
            ),
        ],
    )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200k rows, fewer iterations")
    args = parser.parse_args(argv)
    rows = 200_000 if args.quick else 1_000_000
    files = 4
    big_rounds = 3 if args.quick else 7
    point_rounds = 40 if args.quick else 300
    cache_rounds = 20 if args.quick else 100

    import adbc_driver_flightsql.dbapi as flight_sql
    import pyarrow.flight as fl

    from horizon_broker._core.spark_session import create_spark_session
    from horizon_broker.broker.api.server import BrokerServer
    from horizon_broker.broker.config import config_from_mapping
    from horizon_broker.client import connect
    from tests.processes import RedisProcess

    workdir = Path(tempfile.mkdtemp(prefix="horizon-bench-flight-"))
    redis = RedisProcess().start()
    spark = create_spark_session(app_name="horizon-bench-flight")
    server = None
    try:
        paths = write_dataset(spark, workdir / TABLE, rows, files)
        server_client = publish(redis.url, paths, rows)
        config = config_from_mapping(
            {
                "server": {"listen": "127.0.0.1:0"},
                "state": {"redis_url": redis.url},
                "limits": {"max_result_rows": rows},
            }
        )
        server = BrokerServer(config, spark=spark).start()
        rng = random.Random(11)
        uncached = {"adbc.flight.sql.rpc.call_header.x-horizon-bypass-cache": "true"}
        with (
            connect(server.target) as native,
            flight_sql.connect(f"grpc://{server.flight_target}") as adbc,
            flight_sql.connect(f"grpc://{server.flight_target}", db_kwargs=uncached) as lookups,
        ):
            generic = fl.connect(f"grpc://{server.flight_target}")
            bypass = fl.FlightCallOptions(headers=[(b"x-horizon-bypass-cache", b"true")])
            warm_up(native, adbc, lookups, rng, rows)

            big = large_results(native, lookups, generic, bypass, rows, big_rounds)
            point = point_queries(native, lookups, rng, rows, point_rounds)
            cache = cache_hits(native, adbc, cache_rounds)
            generic.close()
        server_client.close()
        floor = {name: summarize(values) for name, values in driver_floor(point_rounds).items()}
    finally:
        if server is not None:
            server.stop(0)
            server.follower.stop()
        spark.stop()
        redis.close()
        shutil.rmtree(workdir, ignore_errors=True)

    results = report(rows, big, point, cache, floor, big_rounds, point_rounds)
    path = write_results("flight", results)
    print(f"results in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
