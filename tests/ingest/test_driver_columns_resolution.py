"""The columnar resolution agrees with the row-wise one, row for row.

:mod:`horizon_broker.ingest.driver_columns.resolution` restates :mod:`horizon_broker.ingest.driver_rows.resolution` (itself checked
against Spark's :mod:`horizon_broker.ingest.resolve` in ``test_driver_rows_resolution``) as vectorized passes. Both run
here on the same random batches: few keys (often several records of a key in one batch), a
narrow range of comparison values with nulls, deletes, tombstones and null comparison values in
the index, transactions sharing a commit timestamp (and touching a key several times around
changes from outside them), several source files and Spark partitions, an event-time column with
rows that have no time. Every derived result is compared: the count, the stamps, the resolved
frame, the stored versions, the index entries and the update summary; the stored versions are also
checked against the reference model (:mod:`tests.ingest.resolution_reference`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from horizon_broker.ingest.commit_times import SourceSpan
from horizon_broker.ingest.driver_columns import resolution as columnar
from horizon_broker.ingest.driver_columns import stamps
from horizon_broker.ingest.driver_rows import resolution as rows
from horizon_broker.ingest.driver_rows.batch import count_rows
from horizon_broker.ingest.driver_rows.resolution import IndexEntry, order_key
from horizon_broker.ingest.table import TableDefinition
from tests.ingest.resolution_reference import check_against_reference

KEYS = ["a", "b", "c", "d", "e"]
HOUR = 3_600_000


def table_of(variant: str, out_of_order: str) -> TableDefinition:
    data: dict[str, Any] = {
        "name": "t",
        "columns": {"user_id": "string", "part": "int", "balance": "bigint", "seq": "bigint",
                    "deleted": "boolean", "tx": "int", "at": "bigint"},
        "primary_key": ["user_id"],
        "comparison": ["seq"],
        "delete_column": "deleted",
        "out_of_order": out_of_order,
    }  # fmt: skip
    if variant == "transactions":
        data["transaction_column"] = "tx"
    elif variant == "no comparison":
        data["comparison"] = []
        data["delete_column"] = None
    elif variant == "composite key, event time":
        data["primary_key"] = ["user_id", "part"]
        data["time_column"] = "at"
        data["granularity"] = "HOUR"
    return TableDefinition.from_dict(data)


SCHEMA = pa.schema(
    [("user_id", pa.string()), ("part", pa.int32()), ("balance", pa.int64()),
     ("seq", pa.int64()), ("deleted", pa.bool_()), ("tx", pa.int32()), ("at", pa.int64()),
     ("_sourceFile", pa.string()), ("_sourcePosition", pa.int64()), ("_kp", pa.int32()),
     ("_pid", pa.int32()), ("_row", pa.int64())]
)  # fmt: skip

record = st.fixed_dictionaries(
    {
        "user_id": st.sampled_from(KEYS),
        "part": st.integers(0, 1),
        "balance": st.one_of(st.none(), st.integers(0, 3)),
        "seq": st.one_of(st.none(), st.integers(1, 4)),
        "deleted": st.one_of(st.none(), st.booleans()),
        "tx": st.one_of(st.none(), st.integers(0, 2)),
        "at": st.one_of(st.none(), st.integers(0, 3 * HOUR)),
        "_sourceFile": st.sampled_from(["file:/a", "file:/b"]),
        "_pid": st.integers(0, 2),
    }
)
transaction_record = st.fixed_dictionaries(
    {
        "user_id": st.sampled_from(KEYS[:2]),
        "part": st.just(0),
        "balance": st.integers(0, 3),
        "seq": st.integers(1, 4),
        "deleted": st.just(False),
        "tx": st.sampled_from([None, 0, 1]),
        "at": st.just(None),
        "_sourceFile": st.sampled_from(["file:/a", "file:/b"]),
        "_pid": st.integers(0, 1),
    }
)
"""Transactions touching a key several times, changes from outside them in between (by source
and by comparison order), committed before or after them."""
entry = st.fixed_dictionaries(
    {
        "seq": st.one_of(st.none(), st.integers(1, 4)),
        "deleted": st.booleans(),
        "seg": st.integers(0, 2),
        "chunk": st.sampled_from([0, HOUR]),
        "valid_from": st.integers(1, 500),
    }
)


def _batch(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Enriched rows: a row number per (file, Spark partition), the key partition from the key."""
    counters: dict[tuple[str, int], int] = {}
    enriched = []
    for position, item in enumerate(records):
        place = (item["_sourceFile"], item["_pid"])
        counters[place] = counters.get(place, 0) + 1
        enriched.append(
            {
                **item,
                "_row": 2 * counters[place],
                "_sourcePosition": position,
                "_kp": KEYS.index(item["user_id"]) % 2,
            }
        )
    return enriched


def _key(item: dict[str, Any], table: TableDefinition) -> tuple[Any, ...]:
    return tuple(item[name] for name in table.primary_key)


def _index(
    entries: dict[tuple[str, int], dict[str, Any]], table: TableDefinition
) -> dict[tuple[Any, ...], IndexEntry]:
    index = {}
    for (name, part), item in entries.items():
        key = (name, part) if len(table.primary_key) == 2 else (name,)
        cmp = item["seq"] if table.comparison_columns else 0
        seg = None if item["deleted"] else item["seg"]
        index[key] = IndexEntry(
            cmp, item["valid_from"], item["deleted"], item["chunk"], seg, KEYS.index(name) % 2
        )
    return index


def _index_table(index: dict[tuple[Any, ...], IndexEntry], table: TableDefinition) -> Any:
    cmp_type = pa.int64() if table.comparison_columns else pa.int32()
    columns: dict[str, Any] = {
        name: pa.array([key[i] for key in index], SCHEMA.field(name).type)
        for i, name in enumerate(table.primary_key)
    }
    values = list(index.values())
    columns.update(
        _cmp=pa.array([e.cmp for e in values], cmp_type),
        _validFrom=pa.array([e.valid_from for e in values], pa.int64()),
        _deleted=pa.array([e.deleted for e in values], pa.bool_()),
        _chunk=pa.array([e.chunk for e in values], pa.int64()),
        _seg=pa.array([e.seg for e in values], pa.int32()),
        _kp=pa.array([e.kp for e in values], pa.int32()),
    )
    return pa.table(columns)


def _sorted(items: list[dict[str, Any]]) -> list[list[tuple[str, Any]]]:
    return sorted((sorted(item.items()) for item in items), key=repr)


def _entries(table_rows: list[dict[str, Any]], table: TableDefinition) -> dict[Any, IndexEntry]:
    return {
        _key(row, table): IndexEntry(
            row["_cmp"], row["_validFrom"], row["_deleted"], row["_chunk"], row["_seg"], row["_kp"]
        )
        for row in table_rows
    }


VARIANTS = [
    ("transactions", "store"),
    ("no comparison", "drop"),
    ("composite key, event time", "store"),
    ("plain", "drop"),
]


@pytest.mark.parametrize(("variant", "out_of_order"), VARIANTS)
@settings(max_examples=150, deadline=None)
@given(
    records=st.one_of(
        st.lists(record, min_size=1, max_size=14),
        st.lists(transaction_record, min_size=2, max_size=8),
    ),
    entries=st.dictionaries(st.tuples(st.sampled_from(KEYS), st.integers(0, 1)), entry, max_size=6),
    base=st.integers(1 << 20, 1 << 40),
)
def test_the_columnar_resolution_agrees_with_the_row_wise_one(
    variant: str,
    out_of_order: str,
    records: list[dict[str, Any]],
    entries: dict[tuple[str, int], dict[str, Any]],
    base: int,
) -> None:
    table = table_of(variant, out_of_order)
    if len(table.primary_key) == 1:
        entries = {(name, 0): item for (name, _), item in entries.items()}
    batch_rows = _batch(records)
    arrow = pa.Table.from_pylist(batch_rows, schema=SCHEMA)

    count = stamps.count_columns(arrow, table)
    expected_count = count_rows(batch_rows, table)
    assert count.spans == expected_count.spans
    assert _sorted(count.groups) == _sorted(expected_count.groups)

    stamped_rows = rows.stamp_rows(batch_rows, table, count.spans, base)
    stamped = stamps.stamp_columns(arrow, table, count.spans, base)
    assert _sorted(stamped.to_pylist()) == _sorted(stamped_rows)

    index = _index(entries, table)
    chunks = {row["_chunk"] for row in stamped_rows}
    segments = {(chunk, kp): 7 + kp for chunk in sorted(chunks)[:-1] or chunks for kp in (0, 1)}
    resolved = columnar.resolve_columns(stamped, _index_table(index, table), table, segments)
    expected = rows.resolve_rows(stamped_rows, index, table, segments)
    assert resolved.to_pylist() == expected  # the same order too: key, then commit order

    try:
        expected_stored = rows.stored_rows(expected, table)
    except Exception as error:  # a chunk without a segment: both refuse
        with pytest.raises(type(error), match="no segment was reserved"):
            columnar.stored_versions(resolved, table)
    else:
        stored = columnar.stored_versions(resolved, table).to_pylist()
        assert _sorted(stored) == _sorted(expected_stored)
        check_against_reference(stamped_rows, index, table, stored)

    untouched = {
        key: e for key, e in index.items() if key not in {_key(r, table) for r in batch_rows}
    }
    carried = columnar.carried_columns(
        _index_table(untouched, table), resolved.schema, table
    ).to_pylist()
    assert _sorted(carried) == _sorted(rows.carried_rows(untouched, table))

    level = resolved.drop_columns(["_cmp", "_del", "_inBatch"])
    assert _entries(columnar.level_entries(level, table).to_pylist(), table) == (
        rows.entries_of(expected, table)
    )
    assert columnar.update_summary(resolved) == rows.update_summary(expected)


@settings(max_examples=100, deadline=None)
@given(
    levels=st.lists(
        st.dictionaries(st.sampled_from(KEYS), st.integers(0, 50), max_size=5), max_size=4
    )
)
def test_newest_entries_keep_each_keys_entry_from_its_newest_level(
    levels: list[dict[str, int]],
) -> None:
    table = table_of("plain", "drop")
    tables = [
        pa.table({"user_id": pa.array(list(level), pa.string()),
                  "_validFrom": pa.array(list(level.values()), pa.int64())})
        for level in levels
    ]  # fmt: skip
    expected: dict[str, int] = {}
    for level in levels:
        expected.update(level)
    newest = columnar.newest_entries(tables, table)
    got = {} if newest is None else dict(zip(*newest.to_pydict().values(), strict=True))
    assert got == expected
    if newest is not None:
        assert newest["user_id"].to_pylist() == sorted(expected, key=order_key)


def test_a_time_column_of_dates_and_timestamps_chunks_as_the_rows_do() -> None:
    from datetime import UTC, date, datetime

    values = [datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=UTC), None,
              datetime(2026, 11, 27, 3, 4, 5, 678_900, tzinfo=UTC)]  # fmt: skip
    ms, valid = stamps.event_ms(pa.chunked_array([pa.array(values, pa.timestamp("us", "UTC"))]))
    assert [int(v) if ok else None for v, ok in zip(ms, valid, strict=True)] == [
        rows.epoch_ms(v) for v in values
    ]
    days = [date(1969, 12, 30), date(2026, 2, 28)]
    ms, _ = stamps.event_ms(pa.chunked_array([pa.array(days, pa.date32())]))
    assert ms.tolist() == [rows.epoch_ms(d) for d in days]


def test_source_spans_from_the_columns_are_the_rows_spans() -> None:
    table = table_of("plain", "drop")
    batch = _batch(
        [{"user_id": "a", "part": 0, "balance": 1, "seq": 1, "deleted": None, "tx": None,
          "at": None, "_sourceFile": f, "_pid": p} for f, p in [("x", 1), ("x", 0), ("y", 1)]]
    )  # fmt: skip
    count = stamps.count_columns(pa.Table.from_pylist(batch, schema=SCHEMA), table)
    assert count.spans == [SourceSpan("x", 0, 2, 2, 1), SourceSpan("x", 1, 2, 2, 1),
                           SourceSpan("y", 1, 2, 2, 1)]  # fmt: skip


def test_the_docstring_examples_hold() -> None:
    import doctest

    from horizon_broker.ingest.driver_columns import key_lookup

    for module in (columnar, key_lookup):
        outcome = doctest.testmod(module)
        assert outcome.attempted > 0 and outcome.failed == 0, module.__name__


@settings(max_examples=100, deadline=None)
@given(moments=st.lists(st.integers(-(10**12), 4 * 10**12), min_size=1, max_size=20))
def test_chunk_starts_are_the_row_wise_chunk_starts_at_every_granularity(
    moments: list[int],
) -> None:
    import numpy as np

    from horizon_broker.ingest.granularity import Granularity, chunk_start_ms

    for granularity in Granularity:
        got = stamps.chunk_starts(granularity, np.array(moments, dtype=np.int64)).tolist()
        assert got == [chunk_start_ms(granularity, m) for m in moments], granularity
