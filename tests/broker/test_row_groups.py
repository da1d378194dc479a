"""The vectorized row-group pruning equals the scalar rules, row group by row group (pure)."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from horizon_broker.broker.direct_lookup.row_groups import (
    ColumnStats,
    RowGroupStats,
    column_stats,
    concatenated,
    contains,
    may_be_visible,
    may_contain,
    visible,
)

bound = st.integers(-(2**63), 2**63 - 1)
small = st.integers(-5, 30)


@st.composite
def stats_arrays(draw: st.DrawFn, groups: int, values: st.SearchStrategy[int]) -> ColumnStats:
    known = np.asarray(draw(st.lists(st.booleans(), min_size=groups, max_size=groups)), bool)
    lows = [draw(values) for _ in range(groups)]
    highs = [max(low, draw(values)) for low in lows]
    nulls = draw(st.lists(st.integers(-1, 3), min_size=groups, max_size=groups))
    return ColumnStats(
        np.asarray(lows, np.int64), np.asarray(highs, np.int64), known, np.asarray(nulls)
    )


@given(data=st.data(), groups=st.integers(0, 40), wide=st.booleans())
def test_contains_equals_may_contain_for_every_row_group(
    data: st.DataObject, groups: int, wide: bool
) -> None:
    values = bound if wide else small
    stats = data.draw(stats_arrays(groups, values))
    wanted = data.draw(st.lists(values, max_size=6))
    mask = contains(stats, wanted)
    for index in range(groups):
        expected = may_contain(stats.at(index), wanted) if wanted else False
        assert bool(mask[index]) == expected


@given(data=st.data(), groups=st.integers(0, 40), snapshot=small)
def test_visible_equals_may_be_visible_for_every_row_group(
    data: st.DataObject, groups: int, snapshot: int
) -> None:
    valid_from = data.draw(stats_arrays(groups, small))
    valid_until = data.draw(stats_arrays(groups, small))
    mask = visible(valid_from, valid_until, snapshot)
    for index in range(groups):
        expected = may_be_visible(valid_from.at(index), valid_until.at(index), snapshot)
        assert bool(mask[index]) == expected


def test_footer_statistics_become_arrays_and_files_concatenate_in_order() -> None:
    def footer(values: list[int | None], group: int) -> pq.FileMetaData:
        sink = io.BytesIO()
        pq.write_table(pa.table({"k": pa.array(values, pa.int64())}), sink, row_group_size=group)
        return pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata

    first = column_stats(footer([1, 2, 3, None], 2), 0)
    assert [first.at(i) for i in range(2)] == [RowGroupStats(1, 2, 0), RowGroupStats(3, 3, 1)]
    second = column_stats(footer([7, 9], 5), None)  # no such column: nothing is proven
    both = concatenated([first, second])
    assert len(both) == 3 and both.at(2) == RowGroupStats(None, None, None)
    assert contains(both, [7]).tolist() == [False, False, True]
