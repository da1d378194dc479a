"""Reads across schema versions against a reference model (tests/schema_changes/model.py).

Random sequences of upserts and ``horizon table alter`` calls (add a column with or without a
default, widen int/float, drop a column) go through a real ingestion job (the driver road: its
updater rewrites older segments under the newer schema) and, when drawn, a real compaction;
then a real broker answers ``SELECT *`` at the snapshot after every batch, which must equal the
model's rows under the schema of that snapshot, and refuses a column the snapshot lacks.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.cli import main
from horizon_broker.client import HorizonClient, connect
from horizon_broker.compaction.plan import CompactionSettings
from horizon_broker.compaction.run import Compactor
from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.watermark.server import ServerClient
from tests.broker.conftest import ADMIN, broker_config
from tests.ingest.conftest import broker_view
from tests.processes import RedisProcess
from tests.schema_changes.model import BASE, SchemaModel

pytestmark = [pytest.mark.spark, pytest.mark.redis]
KEYS = ["a", "b", "c"]
VALIDITY = ("validFrom", "validUntil")
_tables = itertools.count()


@dataclass
class Env:
    redis: RedisProcess
    broker: BrokerServer
    root: Path
    query: HorizonClient
    clients: list[ServerClient]


@pytest.fixture(scope="module")
def env(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:  # type: ignore[no-untyped-def]
    redis = RedisProcess().start()
    broker = BrokerServer(broker_config(redis.url), spark=spark).start()  # type: ignore[arg-type]
    with connect(broker.target, token=ADMIN) as query:
        built = Env(redis, broker, tmp_path_factory.mktemp("schemas"), query, [])
        yield built
    broker.stop(0)
    broker.follower.stop()
    for client in built.clients:
        client.close()
    redis.close()


def table_definition(root: Path, name: str) -> TableDefinition:
    return TableDefinition.from_dict(
        {
            "name": name,
            "columns": {column: type_ for column, type_, _ in BASE},
            "primary_key": ["k"],
            "comparison": ["seq"],
            "key_partitions": 1,
            "storage_root": str(root),
        }
    )


def row_drawn() -> st.SearchStrategy[tuple[str, int | None, float | None, int | None]]:
    maybe = st.none() | st.integers(-3, 3)
    half = st.none() | st.integers(-4, 4).map(lambda n: n / 2)  # exact as float and double
    return st.tuples(st.sampled_from(KEYS), maybe, half, maybe)


def step() -> st.SearchStrategy[Any]:
    alter = st.sampled_from(["add", "add_default", "widen", "drop"])
    upsert = st.lists(row_drawn(), min_size=1, max_size=3, unique_by=lambda row: row[0])
    return alter | upsert


def comparable(table: Any) -> tuple[list[str], list[tuple]]:
    names = [name for name in table.column_names if name not in VALIDITY]
    return names, sorted(tuple(row[name] for name in names) for row in table.to_pylist())


def refusal_sql(name: str, model: SchemaModel, snapshot: int, every: list[str]) -> str | None:
    """A query naming a column of the table that is not in the schema at ``snapshot``."""
    absent = [column for column in every if column not in model.names]
    return f"SELECT {absent[0]} FROM {name} VERSION AS OF {snapshot}" if absent else None


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(step(), min_size=1, max_size=5), compact=st.booleans())
@example(  # every change once, a batch under each schema, then a compaction across them all
    steps=[
        [("a", 1, 0.5, None), ("b", None, None, None)],
        "add_default",
        [("a", 2, 1.5, None), ("c", 3, None, 4)],
        "widen",
        "drop",
        [("b", 5, -0.5, 6)],
    ],
    compact=True,
)
def test_every_snapshot_reads_its_own_schema_through_ingestion_alters_and_compaction(
    spark: Any, env: Env, steps: list[Any], compact: bool
) -> None:
    name = f"sv{next(_tables)}"
    table = table_definition(env.root, name)
    client = ServerClient(env.redis.url, f"{name}-server")
    env.clients.append(client)
    job = IngestJob(spark, table, client).start()
    model = SchemaModel()
    expected: list[tuple[int, tuple[list[str], list[tuple]], SchemaModel]] = []
    for drawn in [[("a", 0, 0.0, None)], *steps]:
        if isinstance(drawn, str):
            change = model.alter(drawn)
            if change is not None:
                assert main(["table", "alter", name, "--redis", env.redis.url, change]) == 0
            continue
        source = model.upsert(drawn)
        ddl = ", ".join(f"`{n}` {t}" for n, t, _ in model.columns)
        job.run_batch(spark.createDataFrame([tuple(r.values()) for r in source], ddl))
        snapshot = int(broker_view(env.broker.follower, client, name).lwm)
        frozen = SchemaModel(list(model.columns), list(model.dropped), {}, model.added)
        expected.append((snapshot, model.answer(), frozen))
    if compact:
        compacting = ServerClient(env.redis.url, f"{name}-compactor")
        env.clients.append(compacting)
        every_chunk = CompactionSettings(min_small_files=1)  # small files: all compacted
        Compactor(spark, table, compacting, settings=every_chunk).compact()
        broker_view(env.broker.follower, client, name)
    every = model.every_column
    for snapshot, answer, schema in expected:
        got = env.query.query(f"SELECT * FROM {name} VERSION AS OF {snapshot}")
        assert comparable(got) == answer, (snapshot, schema.columns)
    snapshot, _, schema = expected[0]
    refused = refusal_sql(name, schema, snapshot, every)
    if refused is not None:
        with pytest.raises(InvalidArgument, match=f"at snapshot {snapshot}"):
            env.query.query(refused)


def test_grpc_refuses_a_column_dropped_before_or_added_after_the_snapshot(
    spark: Any, env: Env
) -> None:
    name = f"sv{next(_tables)}"
    client = ServerClient(env.redis.url, f"{name}-server")
    env.clients.append(client)
    job = IngestJob(spark, table_definition(env.root, name), client).start()
    ddl = "k string, seq bigint, v int, f float"
    job.run_batch(spark.createDataFrame([("a", 1, 1, 0.5)], ddl))
    before = int(broker_view(env.broker.follower, client, name).lwm)
    alter = ["table", "alter", name, "--redis", env.redis.url]
    assert main([*alter, "--add-column", "tier string default 'basic'", "--drop-column", "f"]) == 0
    job.run_batch(spark.createDataFrame([("b", 2, 2)], "k string, seq bigint, v int"))
    after = int(broker_view(env.broker.follower, client, name).lwm)
    with pytest.raises(
        InvalidArgument,
        match=f"'tier' is not in table {name}'s schema at snapshot {before}: it is added at",
    ):
        env.query.query(f"SELECT k, tier FROM {name} VERSION AS OF {before}")
    with pytest.raises(
        InvalidArgument,
        match=f"'f' is not in table {name}'s schema at snapshot {after}: it was dropped at",
    ):
        env.query.query(f"SELECT f FROM {name} VERSION AS OF {after}")
    got = env.query.query(f"SELECT k, v, tier FROM {name} ORDER BY k").to_pylist()
    assert got == [{"k": "a", "v": 1, "tier": None}, {"k": "b", "v": 2, "tier": "basic"}]
    assert env.query.query(f"SELECT f FROM {name} VERSION AS OF {before}").to_pylist() == [
        {"f": 0.5}
    ]
