"""The pure decisions of small batches: which tables the driver takes, how key index levels fold,
and how collected rows are counted and stamped (no Spark: Spark's side is compared in
``test_driver_rows_resolution`` and ``test_driver_rows_batches``)."""

from __future__ import annotations

from typing import Any

import pytest

from horizon_broker.ingest import key_index
from horizon_broker.ingest.commit_times import SourceSpan
from horizon_broker.ingest.driver_rows.batch import (
    SMALL_LEVEL_ROWS,
    count_rows,
    driver_can_take,
    plan_levels,
)
from horizon_broker.ingest.driver_rows.resolution import stamp_rows
from horizon_broker.ingest.manifest import KeyIndexVersion
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.ingest.update_rewrite import (
    DRIVER_SEGMENT_BYTES,
    DRIVER_SEGMENT_ROWS,
    driver_can_hold,
)
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment

UTC = {"spark.sql.session.timeZone": "UTC"}


def table(**overrides: Any) -> TableDefinition:
    data: dict[str, Any] = {
        "name": "t",
        "columns": {"k": "string", "v": "double", "seq": "bigint", "at": "timestamp",
                    "tx": "int"},
        "primary_key": ["k"],
        "comparison": ["seq"],
    }  # fmt: skip
    data.update(overrides)
    return TableDefinition.from_dict(data)


def test_the_driver_takes_tables_whose_keys_and_comparisons_compare_exactly() -> None:
    assert driver_can_take(table(), UTC, local=True)
    assert driver_can_take(table(time_column="at", transaction_column="tx"), UTC, local=True)


@pytest.mark.parametrize(
    ("overrides", "conf", "local"),
    [
        ({"primary_key": ["v"]}, UTC, True),  # a floating-point key
        ({"comparison": ["at"]}, UTC, True),  # a timestamp comparison
        ({}, {"spark.sql.session.timeZone": "Europe/Paris"}, True),
        ({}, UTC, False),  # an object store
        ({"driver_batch_rows": 0}, UTC, True),
        ({"columns": {"k": "string", "seq": "bigint", "m": "map<string,int>"}}, UTC, True),
    ],
    ids=["float-key", "timestamp-comparison", "session-not-utc", "not-local", "turned-off",
         "nested-column"],
)  # fmt: skip
def test_everything_else_stays_on_spark(
    overrides: dict[str, Any], conf: dict[str, str], local: bool
) -> None:
    assert not driver_can_take(table(**overrides), conf, local)


def test_a_small_batch_folds_the_small_levels_on_top_and_keeps_the_rest() -> None:
    rows = {"big": 500_000, "s1": 10, "s2": 20}
    stacks = {0: KeyIndexVersion(("big", "s1", "s2"), 0), 1: KeyIndexVersion(("s1",), 0)}
    plans = plan_levels(stacks, [0, 1, 2], rows.__getitem__)
    assert plans is not None
    assert (plans[0].below, plans[0].folded) == (("big",), ("s1", "s2"))
    assert (plans[1].below, plans[1].folded) == ((), ("s1",))
    assert (plans[2].below, plans[2].folded) == ((), ())


def test_small_levels_past_the_bound_stay_below_and_a_full_stack_goes_to_spark() -> None:
    half = SMALL_LEVEL_ROWS // 2 + 1
    rows = {"a": half, "b": half, "c": 1}
    plans = plan_levels({0: KeyIndexVersion(("a", "b", "c"), 0)}, [0], rows.__getitem__)
    assert plans is not None and (plans[0].below, plans[0].folded) == (("a",), ("b", "c"))
    full = tuple(f"l{i}" for i in range(key_index.MAX_INDEX_LEVELS))
    assert plan_levels({0: KeyIndexVersion(full, 0)}, [0], lambda _: 10**6) is None


def test_collected_rows_are_counted_and_stamped_as_spark_counts_and_stamps_them() -> None:
    t = table(transaction_column="tx")
    rows = [
        {"k": "a", "_sourceFile": "f1", "_pid": 0, "_row": 3, "_kp": 0, "at": None, "tx": None},
        {"k": "b", "_sourceFile": "f1", "_pid": 0, "_row": 5, "_kp": 1, "at": None, "tx": 7},
        {"k": "c", "_sourceFile": "f2", "_pid": 1, "_row": 0, "_kp": 0, "at": None, "tx": 7},
    ]
    count = count_rows(rows, t)
    assert count.spans == [SourceSpan("f1", 0, 3, 5, 2), SourceSpan("f2", 1, 0, 0, 1)]
    assert count.positions == 7 and count.rows == 3 and count.touched == [0, 1]
    stamped = stamp_rows(rows, t, count.spans, base=100)
    # f1 holds positions 100..105, f2 starts at 106; the transaction takes its first change's.
    assert [(row["_ord"], row["_ts"]) for row in stamped] == [(103, 103), (105, 105), (106, 105)]


def _segment(rows: int, size: int) -> Segment:
    day = Interval(0, 86_400_000)
    return Segment(table="t", interval=day, version="v", partition=0, row_count=rows,
                   size_bytes=size)  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "size", "held"),
    [
        (1_000, 50_000, True),
        (DRIVER_SEGMENT_ROWS, DRIVER_SEGMENT_BYTES, True),
        (DRIVER_SEGMENT_ROWS + 1, 50_000, False),
        (1_000, DRIVER_SEGMENT_BYTES + 1, False),
        (0, 50_000, False),  # size unknown: Spark
        (1_000, 0, False),
    ],
)
def test_the_updater_rewrites_on_the_driver_only_segments_it_can_hold(
    rows: int, size: int, held: bool
) -> None:
    assert driver_can_hold([(_segment(10, 1_000),), (_segment(rows, size),)]) is held
    assert driver_can_hold([]) is True


def test_a_merged_rewrite_is_held_on_the_driver_by_its_segments_together() -> None:
    half = (DRIVER_SEGMENT_ROWS // 2, DRIVER_SEGMENT_BYTES // 2)
    assert driver_can_hold([(_segment(*half), _segment(*half))]) is True
    assert driver_can_hold([(_segment(*half), _segment(*half), _segment(1, 1))]) is False
    assert driver_can_hold([(_segment(1, 1), _segment(0, 1))]) is False  # one of unknown size
