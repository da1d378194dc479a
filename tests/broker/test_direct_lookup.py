"""Plain key lookups answered straight from the segment files give Spark's answer, byte for byte
in types, on multi-version data written by our ingestion, at several snapshots; anything outside
the narrow shape runs on Spark; a missing file still makes the timeline fall back."""

from __future__ import annotations

import gc
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from horizon_broker._core.errors import Unavailable
from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.broker.direct_lookup.direct_read import DirectReader
from horizon_broker.broker.direct_lookup.file_sets import FooterCache
from horizon_broker.broker.direct_lookup.row_group_cache import RowGroupCache
from horizon_broker.broker.direct_lookup.row_groups import (
    RowGroupStats,
    may_be_visible,
    may_contain,
)
from horizon_broker.broker.spark.failures import UnreadableFiles
from horizon_broker.broker.sql.model import KeyLookup, Predicate
from horizon_broker.broker.sql.passes.find_key_lookup import key_lookup_of
from horizon_broker.client import HorizonClient, connect
from horizon_broker.ingest.segments import write_segments
from horizon_broker.ingest.storage import Storage
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from tests.broker.conftest import LWM, BrokerEnv, broker_config, publish_table
from tests.broker.data import (
    ACCOUNT_FILE_SCHEMA,
    DAY_MS,
    VERSION,
    UpsertTable,
    as_rows,
    descriptor,
    oracle,
    visible,
    write_rows,
)

SCHEMA = ACCOUNT_FILE_SCHEMA
SNAPSHOTS = (499, 500, 777, 1000, 1001, LWM)


# -- recognising the shape (pure) ----------------------------------------------------------------


def plan_key_lookup(sql: str, table: str, primary_key: list[str]) -> KeyLookup | None:
    """The key lookup the rewrite finds in ``sql`` (text with backslashes is never one)."""
    if "\\" in sql:
        return None
    try:
        tree = sqlglot.parse_one(sql, dialect="spark")
    except sqlglot.errors.SqlglotError:
        return None
    return key_lookup_of(tree, table, primary_key)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT * FROM t WHERE id = 5", KeyLookup("t", None, (Predicate("id", (5,)),))),
        ("select * from T where -5 = ID", KeyLookup("t", None, (Predicate("id", (-5,)),))),
        (
            "SELECT a.owner AS o, id FROM t VERSION AS OF 900 AS a WHERE (a.id IN (1, 2, 1))",
            KeyLookup("t", ("owner", "id"), (Predicate("id", (1, 2)),)),
        ),
        (
            "SELECT * FROM t WHERE id = 5 AND owner = 'x' LIMIT 1",
            KeyLookup("t", None, (Predicate("id", (5,)), Predicate("owner", ("x",))), 1),
        ),
    ],
)
def test_plain_key_lookups_are_recognised_with_their_literals(sql, expected):
    assert plan_key_lookup(sql, "t", ["id"]) == expected


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM t WHERE owner = 'x'",  # the key is not fixed
        "SELECT * FROM t WHERE id = 5 OR id = 6",
        "SELECT * FROM t WHERE id = '5'",  # parsed, but the reader rejects a string for a bigint
        "SELECT * FROM t WHERE id = 5.0",
        "SELECT * FROM t WHERE id = 5 AND balance > 3",
        "SELECT * FROM t WHERE id = 5 ORDER BY id",
        "SELECT DISTINCT * FROM t WHERE id = 5",
        "SELECT id + 1 FROM t WHERE id = 5",
        "SELECT *, id FROM t WHERE id = 5",
        "SELECT * EXCEPT (owner) FROM t WHERE id = 5",
        "SELECT count(*) FROM t WHERE id = 5",
        "SELECT * FROM t JOIN u ON t.id = u.id WHERE t.id = 5",
        "SELECT * FROM other WHERE id = 5",
        "SELECT * FROM db.t WHERE id = 5",
        "SELECT * FROM t AS a WHERE t.id = 5",  # the alias hides the table's name
        "SELECT * FROM t WHERE id = 5 LIMIT 1 OFFSET 1",
        "SELECT * FROM t WHERE id IN (SELECT 5)",
        "SELECT * FROM t WHERE id NOT IN (5)",
        "SELECT * FROM t WHERE id = 5 AND owner = 'a\\'b'",
        "SELECT * FROM t WHERE id = 99999999999999999999",
        "SELECT * FROM t WHERE id = NULL",
        "SELECT /*+ REPARTITION(4) */ * FROM t WHERE id = 5",
        "SELECT * FROM t TABLESAMPLE (10 PERCENT) WHERE id = 5",
        "not sql at all",
    ],
)
def test_anything_but_a_plain_key_lookup_is_left_to_spark(sql):
    lookup = plan_key_lookup(sql, "t", ["id"])
    if lookup is not None:  # literal types are checked against the files by the reader
        assert sql.endswith("id = '5'")


def test_every_primary_key_column_must_be_fixed():
    assert plan_key_lookup("SELECT * FROM t WHERE a = 1", "t", ["a", "b"]) is None
    assert plan_key_lookup("SELECT * FROM t WHERE b = 'x' AND a = 1", "t", ["a", "b"]) is not None


# -- statistics pruning and the reader against a plain-Python oracle (no Spark) -------------------


def test_statistics_prune_only_what_they_prove_empty():
    unknown = RowGroupStats(None, None, None)
    assert may_contain(RowGroupStats(10, 20, 0), [20]) and not may_contain(
        RowGroupStats(10, 20, 0), [9, 21]
    )
    assert may_contain(unknown, [1])
    open_rows = RowGroupStats(None, None, 3)
    closed = RowGroupStats(600, 900, 0)
    assert not may_be_visible(RowGroupStats(800, 900, 0), open_rows, 700)
    assert may_be_visible(RowGroupStats(500, 900, 0), open_rows, 700)
    assert not may_be_visible(RowGroupStats(500, 900, 0), closed, 900)
    assert may_be_visible(RowGroupStats(500, 900, 0), closed, 899)
    assert may_be_visible(unknown, unknown, 0)


def _versions(rng: random.Random, keys: int, null_keys: bool = False) -> list[dict]:
    """Chains of versions per key (some deleted, some never visible), in a random order; with
    ``null_keys``, a few rows whose key is NULL too."""
    rows = []
    for key in range(keys):
        start = rng.choice([400, 500, 600, 1000])
        for _ in range(rng.randint(1, 3)):
            end = rng.choice([start, start + 1, start + 250, start + 500, None])
            rows.append(
                {"id": key, "owner": f"o{key}", "balance": rng.randrange(100), "validFrom": start,
                 "validUntil": end}
            )  # fmt: skip
            if end is None:
                break
            start = end
    for _ in range(rng.randint(0, 3) if null_keys else 0):  # a NULL key matches no key
        rows.append(
            {"id": None, "owner": "null", "balance": 0, "validFrom": 400, "validUntil": None}
        )
    rng.shuffle(rows)
    return rows


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10_000),
    row_group=st.integers(1, 40),
    sort_by_key=st.booleans(),
    snapshot=st.sampled_from(SNAPSHOTS),
    keys=st.lists(st.integers(-1, 60), min_size=1, max_size=3),
    projection=st.sampled_from([("owner", "id", "validFrom"), ("validUntil", "id"), ("balance",)]),
    kept_from_rows=st.sampled_from([1, 10, 1_000_000]),
    by_pages=st.booleans(),
)
def test_reader_returns_exactly_the_visible_versions_of_the_keys(
    tmp_path, seed, row_group, sort_by_key, snapshot, keys, projection, kept_from_rows, by_pages
):
    rng = random.Random(seed)
    rows = _versions(rng, 60, null_keys=True)
    if sort_by_key:
        rows.sort(key=lambda row: (row["id"] is not None, row["id"] or 0))
    files = []
    for index in range(3):  # the rows split over three files, row groups of ``row_group`` rows
        path = tmp_path / f"{seed}-{row_group}-{sort_by_key}-{index}.parquet"
        part = rows[index::3]
        table = pa.Table.from_pylist(part, schema=SCHEMA)
        pq.write_table(table, path, row_group_size=row_group)
        files.append(str(path))
    lookup = KeyLookup("t", projection, (Predicate("id", tuple(keys)),))
    schema = pa.schema([SCHEMA.field(name) for name in projection])
    # Row groups of ``kept_from_rows`` rows or more are decoded once and kept, or ``by_pages``
    # read by pages (every row group, some of them, or none), so the kept path, the paged path,
    # the two-pass path and their mix all answer.
    reader = DirectReader(
        row_groups=RowGroupCache(min_rows=kept_from_rows, max_whole_bytes=0 if by_pages else None)
    )
    expected = [row for row in visible(rows, snapshot) if row["id"] in keys]
    for _ in range(2):  # the second time from the kept row groups
        answer = reader.read(lookup, files, snapshot, schema)
        assert answer is not None and answer.schema == schema
        assert sorted(answer.to_pylist(), key=str) == sorted(
            ({name: row[name] for name in projection} for row in expected), key=str
        )


def test_reader_declines_what_it_cannot_reproduce_exactly(tmp_path):
    path = tmp_path / "f.parquet"
    pq.write_table(pa.Table.from_pylist([], schema=SCHEMA), path)
    reader = DirectReader(max_rows=10)
    by_id = KeyLookup("t", None, (Predicate("id", (1,)),))
    assert reader.read(by_id, [str(path)], 1000, SCHEMA) is not None
    assert reader.read(by_id, ["s3a://bucket/f.parquet"], 1000, SCHEMA) is None
    as_text = KeyLookup("t", None, (Predicate("id", ("1",)),))
    assert reader.read(as_text, [str(path)], 1000, SCHEMA) is None
    widened = SCHEMA.set(2, pa.field("balance", pa.float64()))
    assert reader.read(by_id, [str(path)], 1000, widened) is None
    no_column = KeyLookup("t", ("nope",), (Predicate("id", (1,)),))
    assert reader.read(no_column, [str(path)], 1000, pa.schema([("nope", pa.int64())])) is None
    big = tmp_path / "big.parquet"
    pq.write_table(
        pa.Table.from_pylist(
            [{"id": 1, "owner": "o", "balance": 1, "validFrom": 1, "validUntil": None}] * 11,
            schema=SCHEMA,
        ),
        big,
    )
    assert reader.read(by_id, [str(big)], 1000, SCHEMA) is None, "more candidate rows than max"


def test_footers_are_read_once_per_file(tmp_path):
    path = tmp_path / "f.parquet"
    pq.write_table(pa.Table.from_pylist(_versions(random.Random(1), 5), schema=SCHEMA), path)
    reader = DirectReader()
    lookup = KeyLookup("t", None, (Predicate("id", (1,)),))
    for _ in range(3):
        reader.read(lookup, [str(path)], 1000, SCHEMA)
    assert reader.footers.reads == 1


def test_footers_of_files_with_the_same_columns_share_their_schema_parts(tmp_path):
    """A broker keeps tens of thousands of footers: their schemas' fields are one object per
    distinct schema, never one per file (a type that differs is a schema of its own)."""
    rows = _versions(random.Random(1), 5)
    paths = [tmp_path / f"f{number}.parquet" for number in range(3)]
    for path in paths[:2]:
        pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    narrow = SCHEMA.set(SCHEMA.get_field_index("balance"), pa.field("balance", pa.int32()))
    pq.write_table(pa.Table.from_pylist(rows, schema=narrow), paths[2])
    first, second, other = (FooterCache().get(str(path)) for path in paths)
    assert first.schema is second.schema and first.fields["balance"].type == pa.int64()
    assert other.schema is not first.schema and other.fields["balance"].type == pa.int32()
    for name in ("id", "validfrom", "validuntil"):
        assert first.column_stats(name).known.all()
    gc.collect()
    assert not gc.is_tracked(first.stats) and not gc.is_tracked(first.stats["id"]), (
        "kept statistics are plain tuples of arrays: no full collection walks them"
    )
    assert first.column_stats("id").minimum.tolist() == [min(row["id"] for row in rows)]


def test_a_large_row_group_is_decoded_once_and_then_answers_every_key_in_it(tmp_path):
    path = tmp_path / "compacted.parquet"
    rows = [
        {"id": key, "owner": f"o{key}", "balance": key, "validFrom": 1, "validUntil": None}
        for key in range(300)
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path, row_group_size=100)
    cache = RowGroupCache(min_rows=100)
    reader = DirectReader(row_groups=cache)
    for key in (5, 7, 150, 5, 299):
        lookup = KeyLookup("t", ("balance",), (Predicate("id", (key,)),))
        answer = reader.read(lookup, [str(path)], 10, pa.schema([SCHEMA.field("balance")]))
        assert answer is not None and answer.to_pylist() == [{"balance": key}]
    assert cache.decodes == 3  # one per row group the keys fall in
    small = RowGroupCache(min_rows=101)  # row groups below the threshold are never kept
    DirectReader(row_groups=small).read(
        KeyLookup("t", None, (Predicate("id", (5,)),)), [str(path)], 10, SCHEMA
    )
    assert small.decodes == 0 and small.bytes == 0


def test_lookups_in_a_kept_row_group_bisect_its_key_positions_built_once(tmp_path):
    path = tmp_path / "compacted.parquet"
    rows = [
        {"id": key % 50, "owner": f"o{key}", "balance": key, "validFrom": key, "validUntil": None}
        for key in range(200)
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    cache = RowGroupCache(min_rows=100)
    reader = DirectReader(row_groups=cache)
    for key in (7, 49, 50, 7):
        lookup = KeyLookup("t", ("owner",), (Predicate("id", (key,)),))
        answer = reader.read(lookup, [str(path)], 120, pa.schema([SCHEMA.field("owner")]))
        expected = [f"o{n}" for n in range(200) if n % 50 == key and n <= 120]
        assert answer is not None and answer.column("owner").to_pylist() == expected
    assert cache.decodes == 1 and cache.indexed == 1


def test_kept_row_groups_stay_within_their_byte_budget(tmp_path):
    path = tmp_path / "compacted.parquet"
    rows = [
        {"id": key, "owner": "o", "balance": key, "validFrom": 1, "validUntil": None}
        for key in range(400)
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path, row_group_size=100)
    one_group = pq.ParquetFile(path).read_row_group(0).nbytes
    cache = RowGroupCache(max_bytes=2 * one_group, min_rows=1, max_whole_bytes=one_group)
    reader = DirectReader(row_groups=cache)
    for key in (0, 100, 200, 300, 0):
        lookup = KeyLookup("t", None, (Predicate("id", (key,)),))
        assert reader.read(lookup, [str(path)], 10, SCHEMA).num_rows == 1
        assert cache.bytes <= 2 * one_group
    assert cache.decodes == 5  # the first row group was dropped before it came back


# -- end to end: the broker's answers equal Spark's -----------------------------------------------


@pytest.fixture(scope="module")
def spark_only(broker_env: BrokerEnv, spark) -> Iterator[tuple[HorizonClient, BrokerServer]]:  # type: ignore[no-untyped-def]
    """A second broker on the same state and Spark that never reads files directly."""
    config = broker_config(broker_env.redis.url, spark={"direct_lookups": False})
    broker = BrokerServer(config, spark=spark, view_namespace="sparkonly_").start()  # type: ignore[arg-type]
    with connect(broker.target, token="admin-token") as client:
        yield client, broker
    broker.stop(0)
    broker.follower.stop()


def _written_segments(
    spark,  # type: ignore[no-untyped-def]
    env: BrokerEnv,
    table: str,
    tagged: list[dict],
    partitions: int,
    *,
    row_count: int,
    max_valid_until: int | None = None,
) -> list[Segment]:
    """``tagged`` rows (with ``_chunk`` and ``_seg``) written by ``horizon_broker.ingest.segments.write_segments``
    into ``partitions`` segments per chunk, and the segments that describe them (their open files
    and closed files' greatest ``validUntil`` too when ``max_valid_until`` is given)."""
    frame = spark.createDataFrame(
        tagged,
        "id bigint, owner string, balance bigint, validFrom bigint, validUntil bigint, "
        "_chunk bigint, _seg int",
    )
    columns = ["id", "owner", "balance", "validFrom", "validUntil"]
    written = write_segments(frame, columns, str(env.root / table), partitions, Storage(spark))
    return [
        Segment(
            table=table,
            interval=Interval(chunk, chunk + DAY_MS),
            version=VERSION,
            partition=partition,
            core_partitions=partitions,
            location=segment.locations,
            row_count=row_count,
            open_files=segment.open_locations if max_valid_until is not None else (),
            max_valid_until=max_valid_until,
        )
        for (chunk, partition), segment in written.items()
    ]


@pytest.fixture(scope="module")
def ingested(broker_env: BrokerEnv, spark, spark_only) -> list[dict]:  # type: ignore[no-untyped-def]
    """A table written by ``horizon_broker.ingest.segments.write_segments``: two time chunks x three key
    partitions, multi-version rows, registered and announced through the server-side client."""
    rows = _versions(random.Random(42), 300)
    tagged = [
        {**row, "_chunk": (row["id"] % 2) * DAY_MS, "_seg": row["id"] * 7919 % 3} for row in rows
    ]
    segments = _written_segments(spark, broker_env, "ingested", tagged, 3, row_count=1)
    assert len(segments) == 6 and all(s.location[0].startswith("file:") for s in segments)
    publish_table(
        broker_env, descriptor("ingested", storage_root=broker_env.root), segments, spark_only[1]
    )
    return rows


def _direct_answers(broker_env: BrokerEnv) -> int:
    return broker_env.broker.engine.direct_answers  # type: ignore[union-attr]


def _same(a: pa.Table, b: pa.Table) -> bool:
    return a.schema == b.schema and sorted(a.to_pylist(), key=str) == sorted(b.to_pylist(), key=str)


@pytest.mark.parametrize("snapshot", SNAPSHOTS)
def test_key_lookups_equal_sparks_answer_on_ingested_multi_version_data(
    broker_env, client, spark_only, ingested, snapshot
):
    keys = sorted({row["id"] for row in ingested})
    probes = [*random.Random(snapshot).sample(keys, 4), 10_000]
    for key in probes:
        sql = f"SELECT * FROM ingested VERSION AS OF {snapshot} WHERE id = {key}"
        before = _direct_answers(broker_env)
        direct = client.query(sql)
        assert _direct_answers(broker_env) == before + 1, sql
        assert _same(direct, spark_only[0].query(sql)), sql
        expected = [row for row in visible(ingested, snapshot) if row["id"] == key]
        assert as_rows(direct) == oracle(expected), sql
    for sql in (
        f"SELECT balance, ingested.id AS key FROM ingested VERSION AS OF {snapshot} "
        f"WHERE id IN ({probes[0]}, {probes[1]}, 10000)",
        f"SELECT * FROM ingested VERSION AS OF {snapshot} AS i WHERE i.id = {probes[2]} "
        f"AND owner = 'o{probes[2]}' LIMIT 5",
    ):
        before = _direct_answers(broker_env)
        direct = client.query(sql)
        assert _direct_answers(broker_env) == before + 1, sql
        assert _same(direct, spark_only[0].query(sql)), sql


def test_a_lookup_of_a_shape_seen_before_never_calls_into_spark(
    broker_env, client, spark_only, ingested
):
    """Spark analyses a lookup shape once (for its result schema); later lookups of that shape,
    whatever their keys, are answered from the files alone with the same types."""
    lookups = broker_env.broker.engine.direct  # type: ignore[union-attr]
    keys = sorted({row["id"] for row in ingested})[:4]
    sql = "SELECT owner, balance AS amount FROM ingested VERSION AS OF 1100 WHERE id = {}"
    client.query(sql.format(keys[0]))
    before = lookups.answers_without_spark
    for key in keys[1:]:
        answer = client.query(sql.format(key))
        assert _same(answer, spark_only[0].query(sql.format(key)))
    assert lookups.answers_without_spark == before + len(keys) - 1
    client.query("SELECT owner AS who FROM ingested VERSION AS OF 1100 WHERE id = 1")
    assert lookups.answers_without_spark == before + len(keys) - 1, "a new shape is analysed"


def test_default_snapshot_lookup_answers_at_the_lwm(broker_env, client, ingested):
    key = next(row["id"] for row in ingested if row["validUntil"] is None)
    before = _direct_answers(broker_env)
    result = client.execute(f"SELECT id, owner, balance FROM ingested WHERE id = {key}")
    assert _direct_answers(broker_env) == before + 1
    assert result.snapshot == LWM
    expected = [row for row in visible(ingested, LWM) if row["id"] == key]
    assert as_rows(result.table) == oracle(expected)
    assert result.trailer.row_count == len(expected)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM ingested WHERE id = '5'",
        "SELECT * FROM ingested WHERE id = 5 ORDER BY validFrom",
        "SELECT id FROM ingested WHERE id = 5 OR id = 6",
        "SELECT id, balance FROM table_changes('ingested', 0, 1200) WHERE id = 5",
    ],
)
def test_other_queries_run_on_spark_with_the_same_answers(
    broker_env, client, spark_only, ingested, sql
):
    before = _direct_answers(broker_env)
    result = client.query(sql)
    assert _direct_answers(broker_env) == before
    assert _same(result, spark_only[0].query(sql))


def test_a_missing_file_found_by_a_lookup_makes_the_timeline_fall_back_where_that_is_exact(
    broker_env: BrokerEnv, client
):
    """The overwrite's file vanishes after its footer was cached: the lookup reports the segment
    unreadable and the timeline falls back to the overwritten segment, which answers lookups at
    snapshots it holds every update for, and refuses (UNAVAILABLE) the LWM, where it would show
    the key twice."""
    table = UpsertTable("direct_fb", Path(broker_env.root))
    publish_table(broker_env, table.desc, table.segments)
    assert broker_env.broker.follower.wait_for(
        lambda f: len(f.view("direct_fb").visible_segments) == 2, 10
    )
    sql = "SELECT * FROM direct_fb WHERE id = 3"
    before = _direct_answers(broker_env)
    first = client.query(sql)
    assert _direct_answers(broker_env) == before + 1
    assert as_rows(first) == oracle(r for r in table.rows_visible_at(LWM) if r["id"] == 3)
    os.remove(table.o0.location[0])
    with pytest.raises(Unavailable) as refused:
        client.execute(sql, cache=False)  # a cached answer would not read the file
    assert str(table.o0.id) in str(refused.value)
    old = client.query("SELECT * FROM direct_fb VERSION AS OF 900 WHERE id = 3")
    fallen_back = table.rows_visible_at(900, overwrite=False)
    assert as_rows(old) == oracle(r for r in fallen_back if r["id"] == 3)


def test_a_file_missing_before_its_footer_was_read_fails_the_query_instead_of_losing_its_rows(
    broker_env, client
):
    desc = descriptor("direct_gone", storage_root=broker_env.root)
    rows = [
        {"id": i, "owner": f"x{i}", "balance": i, "validFrom": 500, "validUntil": None}
        for i in range(5)
    ]
    path = write_rows(Path(broker_env.root) / "direct_gone" / "p0.parquet", desc, rows)
    segment = Segment(
        table="direct_gone",
        interval=Interval(0, DAY_MS),
        version=VERSION,
        partition=0,
        core_partitions=1,
        location=(path,),
        row_count=5,
    )
    publish_table(broker_env, desc, [segment])
    os.remove(path)
    with pytest.raises(Unavailable) as refused:
        client.execute("SELECT * FROM direct_gone WHERE id = 1")
    assert str(segment.id) in str(refused.value)
    assert "no complete data is left for its time chunk" in str(refused.value)


def test_a_missing_file_is_reported_but_a_file_pyarrow_cannot_read_is_left_to_spark(tmp_path):
    reader = DirectReader()
    lookup = KeyLookup("t", None, (Predicate("id", (1,)),))
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"not parquet at all")
    assert reader.read(lookup, [str(garbage)], 1000, SCHEMA) is None
    missing = str(tmp_path / "missing.parquet")
    with pytest.raises(UnreadableFiles) as raised:
        reader.read(lookup, [f"file:{missing}"], 1000, SCHEMA)
    assert raised.value.paths == (f"file:{missing}",)


def test_a_lookup_at_the_lwm_reads_no_footer_of_a_closed_file_it_cannot_need(
    broker_env: BrokerEnv, client, spark
):
    """Closed files whose greatest ``validUntil`` is at or below the snapshot hold nothing
    visible (the closed view is not read there either): a lookup at the LWM leaves them
    unopened, time travel below it reads them."""
    rows = [
        {"id": key, "owner": f"s{key}", "balance": balance, "validFrom": start, "validUntil": end}
        for key in range(40)
        for balance, (start, end) in enumerate(((400, 700), (700, 1100), (1100, None)))
    ]
    tagged = [{**row, "_chunk": 0, "_seg": row["id"] % 2} for row in rows]
    # Every closed version ended by 1100, at or below the LWM (1200).
    segments = _written_segments(
        spark, broker_env, "closed_split", tagged, 2, row_count=40, max_valid_until=1100
    )
    closed = {path for s in segments for path in s.location if path not in s.open_files}
    assert len(closed) == 2
    publish_table(broker_env, descriptor("closed_split", storage_root=broker_env.root), segments)
    footers = broker_env.broker.engine.direct.reader.footers  # type: ignore[union-attr]

    before = _direct_answers(broker_env)
    current = client.query("SELECT * FROM closed_split WHERE id = 7")
    assert _direct_answers(broker_env) == before + 1
    assert as_rows(current) == oracle([r for r in rows if r["id"] == 7 and r["balance"] == 2])
    assert not closed & set(footers._footers), "a closed file's footer was read at the LWM"

    old = client.query("SELECT * FROM closed_split VERSION AS OF 800 WHERE id = 7")
    assert _direct_answers(broker_env) == before + 2
    assert as_rows(old) == oracle([r for r in rows if r["id"] == 7 and r["balance"] == 1])
    assert closed <= set(footers._footers)
