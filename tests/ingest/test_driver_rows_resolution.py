"""The driver's resolution of small batches agrees with Spark's, row for row.

:mod:`horizon_broker.ingest.driver_rows.resolution` restates :mod:`horizon_broker.ingest.resolve` for rows. Both run here on the same
random records and index entries (few keys, a narrow range of comparison values, null comparison
values, deletes, tombstones in the index, several records of a key in one batch, transactions
sharing a commit timestamp and touching a key several times around changes from outside them),
and every derived result is compared: the resolved frame, the stored versions, the index entries
and the update summary. Both roads' stored versions are also checked against the reference model
(:mod:`tests.ingest.resolution_reference`): one version per key at every snapshot, no inverted
interval.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from horizon_broker.ingest import resolve as spark_resolve
from horizon_broker.ingest.driver_rows import resolution
from horizon_broker.ingest.driver_rows.resolution import IndexEntry
from horizon_broker.ingest.table import TableDefinition
from tests.ingest.resolution_reference import check_against_reference

KEYS = ["a", "b", "c", "d"]


def table_of(variant: str, out_of_order: str) -> TableDefinition:
    data: dict[str, Any] = {
        "name": "t",
        "columns": {"user_id": "string", "balance": "bigint", "seq": "bigint",
                    "deleted": "boolean", "tx": "int"},
        "primary_key": ["user_id"],
        "comparison": ["seq"] if variant == "one" else ["seq", "balance"],
        "delete_column": "deleted",
        "out_of_order": out_of_order,
    }  # fmt: skip
    if variant == "two":
        data["transaction_column"] = "tx"
    return TableDefinition.from_dict(data)


record = st.fixed_dictionaries(
    {
        "user_id": st.sampled_from(KEYS),
        "balance": st.one_of(st.none(), st.integers(0, 3)),
        "seq": st.one_of(st.none(), st.integers(1, 4)),
        "deleted": st.one_of(st.none(), st.booleans()),
        "tx": st.one_of(st.none(), st.integers(0, 2)),
    }
)
transaction_record = st.fixed_dictionaries(
    {
        "user_id": st.sampled_from(KEYS[:2]),
        "balance": st.integers(0, 3),
        "seq": st.integers(1, 4),
        "deleted": st.just(False),
        "tx": st.sampled_from([None, 0, 1]),
    }
)
"""Transactions touching a key several times, changes from outside them in between (by source
and by comparison order), committed before or after them."""
records_strategy = st.one_of(
    st.lists(record, min_size=1, max_size=12), st.lists(transaction_record, min_size=2, max_size=8)
)
TRANSACTION_AROUND_AN_OUTSIDE_CHANGE = [
    {"user_id": "a", "balance": 1, "seq": 1, "deleted": False, "tx": 0},
    {"user_id": "a", "balance": 2, "seq": 2, "deleted": False, "tx": None},
    {"user_id": "a", "balance": 3, "seq": 3, "deleted": False, "tx": 0},
]
entry = st.fixed_dictionaries(
    {
        "seq": st.one_of(st.none(), st.integers(1, 4)),
        "balance": st.one_of(st.none(), st.integers(0, 3)),
        "deleted": st.booleans(),
        "seg": st.integers(0, 2),
        "valid_from": st.integers(1, 500),
    }
)


def _stamped(records: list[dict[str, Any]], table: TableDefinition) -> list[dict[str, Any]]:
    rows = []
    for i, item in enumerate(records):
        kp = KEYS.index(item["user_id"]) % 2
        rows.append({**item, "_ord": 1000 + i, "_kp": kp, "_chunk": 0,
                     "_sourceFile": "f", "_sourcePosition": i})  # fmt: skip
    first: dict[Any, int] = {}
    for row in rows:
        tx = row["tx"] if table.transaction_column else None
        if tx is not None:
            first.setdefault(tx, row["_ord"])
    for row in rows:
        tx = row["tx"] if table.transaction_column else None
        row["_ts"] = row["_ord"] if tx is None else first[tx]
    return rows


def _index(entries: dict[str, dict[str, Any]], table: TableDefinition) -> dict[Any, IndexEntry]:
    index = {}
    for key, item in entries.items():
        cmp = item["seq"] if len(table.comparison_columns) == 1 else (item["seq"], item["balance"])
        seg = None if item["deleted"] else item["seg"]
        index[(key,)] = IndexEntry(
            cmp, item["valid_from"], item["deleted"], 0, seg, KEYS.index(key) % 2
        )
    return index


RESOLUTION = ["user_id", "balance", "seq", "deleted", "tx", "_ts", "_next", "_kp", "_chunk",
              "_acc", "_first", "_carry", "_i_cmp", "_i_validFrom", "_i_deleted", "_i_chunk",
              "_i_seg", "_newSeg", "_sourceFile", "_sourcePosition"]  # fmt: skip


def _plain(value: Any) -> Any:
    if hasattr(value, "asDict"):
        return tuple(value)
    return value


def _rows(rows: list[Any], columns: list[str]) -> list[tuple[Any, ...]]:
    as_dicts = [row.asDict() if hasattr(row, "asDict") else row for row in rows]
    return sorted((tuple(_plain(item[c]) for c in columns) for item in as_dicts), key=repr)


@pytest.mark.parametrize(
    ("variant", "out_of_order"), [("one", "store"), ("two", "drop"), ("two", "store")]
)
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    records=records_strategy,
    entries=st.dictionaries(st.sampled_from(KEYS), entry, max_size=4),
)
@example(records=TRANSACTION_AROUND_AN_OUTSIDE_CHANGE, entries={})
def test_the_driver_resolves_a_batch_exactly_as_spark_does(
    spark: Any, variant: str, out_of_order: str, records: list[dict[str, Any]],
    entries: dict[str, dict[str, Any]],
) -> None:  # fmt: skip
    table = table_of(variant, out_of_order)
    stamped = _stamped(records, table)
    index = _index(entries, table)
    segments = {(0, 0): 7, (0, 1): 8}

    expected_resolved = resolution.resolve_rows(stamped, index, table, segments)

    cmp_type = spark_resolve.comparison_type(table)
    batch = spark.createDataFrame(
        stamped,
        "user_id string, balance bigint, seq bigint, deleted boolean, tx int, _ord bigint, "
        "_kp int, _chunk bigint, _sourceFile string, _sourcePosition bigint, _ts bigint",
    )
    index_frame = spark.createDataFrame(
        [(key[0], e.cmp, e.valid_from, e.deleted, e.chunk, e.seg, e.kp) for key, e in index.items()],
        f"user_id string, _cmp {cmp_type}, _validFrom bigint, _deleted boolean, _chunk bigint, "
        "_seg int, _kp int",
    )  # fmt: skip
    mapping = spark.createDataFrame(
        [(c, k, n) for (c, k), n in segments.items()], "_chunk bigint, _kp int, _seg int"
    )
    resolved = spark_resolve.resolve(batch, index_frame, table, mapping, untouched_keys=False)
    resolved = resolved.cache()
    try:
        got = resolved.collect()
        assert _rows(got, RESOLUTION) == _rows(expected_resolved, RESOLUTION)

        stored_columns = ["user_id", "balance", "seq", "deleted", "tx", "validFrom", "validUntil",
                          "_sourceFile", "_sourcePosition", "_kp", "_chunk", "_seg"]  # fmt: skip
        spark_stored = [
            row.asDict() for row in spark_resolve.stored_versions(resolved, table).collect()
        ]
        assert _rows(spark_stored, stored_columns) == (
            _rows(resolution.stored_rows(expected_resolved, table), stored_columns)
        )
        check_against_reference(stamped, index, table, spark_stored)
        check_against_reference(
            stamped, index, table, resolution.stored_rows(expected_resolved, table)
        )

        spark_entries = spark_resolve.index_entries(resolved, table).collect()
        driver_entries = resolution.entries_of(expected_resolved, table)
        assert sorted(
            (row["user_id"], _plain(row["_cmp"]), row["_validFrom"], row["_deleted"],
             row["_chunk"], row["_seg"], row["_kp"]) for row in spark_entries
        ) == sorted(
            (key[0], e.cmp, e.valid_from, e.deleted, e.chunk, e.seg, e.kp)
            for key, e in driver_entries.items()
        )  # fmt: skip

        summary = spark_resolve.resolution_summary(resolved).collect()
        driver = resolution.update_summary(expected_resolved)
        updated = [row for row in summary if row["_seg"] is not None]
        assert sum(row["rows"] for row in summary) == driver.rows
        assert sorted([row["_chunk"], row["_seg"], row["updates"]] for row in updated) == (
            driver.targets
        )
        oldest = min((row["oldest"] for row in updated), default=None)
        assert oldest == driver.oldest
    finally:
        resolved.unpersist()
