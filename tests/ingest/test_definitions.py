"""Pure parts: table definitions, granularity arithmetic, the commit log's derived state."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import horizon_broker.ingest as ingest
from horizon_broker._core.errors import InvalidArgument
from horizon_broker.ingest.granularity import (
    Granularity,
    chunk_interval,
    chunk_start_ms,
    chunks_between,
)
from horizon_broker.ingest.manifest import COMMIT, DONE, PREPARE, ManifestState, Record
from horizon_broker.ingest.table import (
    RESERVED_COLUMNS,
    RESERVED_PREFIXES,
    OutOfOrder,
    TableDefinition,
)

TOML = """
name = "accounts"
primary_key = ["user_id"]
comparison = ["updated_at", "seq"]
delete_column = "deleted"
time_column = "updated_at"
granularity = "hour"
key_partitions = 8
retention = "7d"
storage_root = "s3a://bucket/horizon"
out_of_order = "drop"
update_cadence = 4
version = "2024-01-01T00:00:00Z"

[columns]
user_id = "string"
balance = "decimal(18,2)"
updated_at = "timestamp"
seq = "bigint"
deleted = "boolean"
"""


def test_a_toml_definition_loads_into_one_typed_object_and_a_descriptor():
    table = TableDefinition.from_toml(TOML)
    assert table.column_names == ("user_id", "balance", "updated_at", "seq", "deleted")
    assert table.comparison_columns == ("updated_at", "seq")
    assert table.granularity is Granularity.HOUR
    assert table.retention_ms == 7 * 86_400_000
    assert table.out_of_order is OutOfOrder.DROP
    assert table.version == "2024-01-01T00:00:00.000Z"
    assert table.table_root == "s3a://bucket/horizon/accounts"
    descriptor = table.descriptor()
    assert descriptor.upsert and descriptor.key_partitions == 8
    assert descriptor.storage_root == "s3a://bucket/horizon/accounts"
    assert descriptor.properties["delete_column"] == "deleted"
    assert table.transaction_column is None
    with_txn = TableDefinition.from_toml('transaction_column = "seq"\n' + TOML)
    assert with_txn.transaction_column == "seq"
    assert with_txn.descriptor().properties["transaction_column"] == "seq"
    assert TableDefinition.from_toml(TOML, storage_root="/local").table_root == "/local/accounts"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ('primary_key = ["nope"]', "primary key column 'nope'"),
        ('delete_column = "seq"', "must be boolean"),
        ('granularity = "fortnight"', "unknown granularity"),
        ("update_cadence = 0", "update_cadence"),
        ('retention = "soon"', "retention"),
        ("surprise = 1", "surprise: unknown key"),
        ('transaction_column = "txn"', "transaction column 'txn' is not a column"),
    ],
)
def test_a_bad_definition_is_refused_with_a_message_naming_the_problem(change, message):
    key = change.split(" = ")[0]
    lines = [line for line in TOML.splitlines() if not line.startswith(key + " ")]
    text = "\n".join([change, *lines])
    with pytest.raises(InvalidArgument, match=message):
        TableDefinition.from_toml(text)


@pytest.mark.parametrize(
    "name", ["_ts", "_KP", "_chunk", "_seg", "_metadata", "_i_cmp", "_update_x"]
)
def test_a_user_column_named_like_an_ingestion_column_is_refused_with_its_name(name):
    with pytest.raises(InvalidArgument, match=f"column '{name}' has a name ingestion reserves"):
        TableDefinition.from_toml(TOML + f'{name} = "bigint"\n')


def test_a_user_column_with_an_unreserved_underscore_name_is_accepted():
    assert "_id" in TableDefinition.from_toml(TOML + '_id = "string"\n').column_names


def test_every_underscore_column_name_the_pipeline_spells_is_reserved():
    """A new internal column must join RESERVED_COLUMNS, or a user column could be overwritten
    by it without a word."""
    spelled: set[str] = set()
    for path in Path(ingest.__file__).parent.rglob("*.py"):
        spelled |= set(re.findall(r"[\"'](_[A-Za-z][A-Za-z_]*)[\"']", path.read_text()))
    unreserved = {
        name
        for name in spelled
        if name not in RESERVED_COLUMNS and not name.startswith(RESERVED_PREFIXES)
    }
    assert unreserved <= {"_i", "_SUCCESS"}, f"not reserved: {sorted(unreserved)}"


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([g for g in Granularity if g is not Granularity.ALL]),
    st.integers(min_value=0, max_value=4_000_000_000_000),
)
def test_every_instant_lies_in_the_chunk_computed_for_it(granularity, instant):
    start = chunk_start_ms(granularity, instant)
    interval = chunk_interval(granularity, start)
    assert interval.start_ms <= instant < interval.end_ms
    assert chunk_start_ms(granularity, interval.end_ms) == interval.end_ms


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(list(Granularity)),
    st.integers(min_value=0, max_value=4_000_000_000_000),
    st.integers(min_value=0, max_value=90 * 86_400_000),
)
def test_chunks_between_lists_exactly_the_chunks_a_time_range_touches(granularity, first, span):
    last = first + span
    starts = chunks_between(granularity, first, last)
    assert starts == sorted(set(starts))
    assert starts[0] == chunk_start_ms(granularity, first)
    assert starts[-1] == chunk_start_ms(granularity, last)
    for before, after in itertools.pairwise(starts):
        assert chunk_interval(granularity, before).end_ms == after  # no chunk skipped


def test_segment_slots_take_the_time_column_chunk_or_every_commit_time_chunk():
    from horizon_broker.ingest.allocation import segment_slots

    day = 86_400_000
    base = (2 * day - 1) << 16  # the batch's commit timestamps cross midnight
    high = (2 * day + 5) << 16
    groups = [
        {"_kp": 0, "_tchunk": 7 * day},
        {"_kp": 0, "_tchunk": 7 * day},
        {"_kp": 1, "_tchunk": None},
        {"_kp": 2, "_tchunk": 3 * day},
    ]
    assert segment_slots(groups, Granularity.DAY, base, high) == [
        (day, 1),
        (2 * day, 1),
        (3 * day, 2),
        (7 * day, 0),
    ]


def test_spark_computes_the_same_chunk_starts_as_python(spark):
    from pyspark.sql import functions as F

    from horizon_broker.ingest.granularity import spark_chunk_start

    instants = [0, 1, 86_399_999, 1_700_000_000_123, 1_709_251_199_999, 951_782_400_000]
    frame = spark.createDataFrame([(i,) for i in instants], "t long")
    columns = [spark_chunk_start(g, F.col("t")).alias(g.value) for g in Granularity]
    rows = frame.select("t", *columns).orderBy("t").collect()
    for row in rows:
        for granularity in Granularity:
            assert row[granularity.value] == chunk_start_ms(granularity, row.t), granularity


def ingest_commit(seq: int, high: int, pending: dict[str, int] | None = None) -> Record:
    return Record(seq, COMMIT, {
        "kind": "ingest", "sources": [f"f{seq}"], "consumed_partitions": [0, 1], "high": high,
        "partitions": [0, 1], "key_index": {"0": f"idx{seq}"}, "segments": [],
        "updates": "u" if pending else None, "pending_min": pending or {},
    })  # fmt: skip


def test_applied_stays_just_below_the_oldest_pending_update_until_the_updater_commits():
    records = [ingest_commit(1, 100), Record(1, DONE, {"kind": "ingest"})]
    records += [ingest_commit(2, 200, {"1": 150}), Record(2, DONE, {"kind": "ingest"})]
    state = ManifestState.from_records(records)
    assert state.progress([0, 1]) == {0: (200, 200), 1: (200, 149)}
    assert state.unpublished is None and state.dangling is None
    assert state.key_index[0].levels == ("idx2",)
    records += [Record(3, COMMIT, {"kind": "update", "applied": [2], "add": [], "remove": []})]
    state = ManifestState.from_records(records)
    assert state.progress([0, 1]) == {0: (200, 200), 1: (200, 200)}
    assert state.unpublished is not None and state.unpublished.seq == 3


def test_a_prepare_without_its_commit_is_a_dead_attempt_and_its_sources_stay_unconsumed():
    records = [ingest_commit(1, 100), Record(1, DONE, {"kind": "ingest"})]
    records.append(Record(2, PREPARE, {"kind": "ingest", "directories": ["d"]}))
    state = ManifestState.from_records(records)
    assert state.dangling is not None and state.dangling.seq == 2
    assert state.next_seq == 3
    assert not state.needs(0, ["f1"]) and state.needs(0, ["f2"])


def test_a_relative_storage_root_is_registered_absolute_so_a_broker_elsewhere_reads_its_files(
    tmp_path, monkeypatch
):
    """The default root is ``./horizon-data``: Spark writes under the server's working
    directory, and a broker (running elsewhere) refused every file under a relative root."""
    from horizon_broker.timeline.interval import Interval
    from horizon_broker.timeline.segment import Segment
    from horizon_broker.watermark.storage_root import outside_storage_root

    monkeypatch.chdir(tmp_path)
    text = re.sub(r"(?m)^storage_root = .*$", "", TOML)
    descriptor = TableDefinition.from_toml(text).descriptor()
    assert descriptor.storage_root == f"{tmp_path}/horizon-data/accounts"
    written = f"file:{tmp_path}/horizon-data/accounts/p0/part-0.parquet"
    segment = Segment(
        table="accounts", interval=Interval(0, 1), version="v", partition=0, location=(written,)
    )
    assert outside_storage_root(descriptor, segment) is None
    overridden = TableDefinition.from_toml(text, storage_root="data").descriptor()
    assert overridden.storage_root == f"{tmp_path}/data/accounts"
