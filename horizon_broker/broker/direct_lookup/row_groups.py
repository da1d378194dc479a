"""Row-group statistics of a set of Parquet files as flat arrays, pruned in one vectorized step.

A key lookup over a table of many segments must not pay per file and per row group in Python:
the statistics of every row group of every file of a (table, generation) are gathered once into
numpy arrays (one entry per row group), and a lookup's pruning is a few array comparisons, the
same answer as testing each row group with :func:`may_contain` and :func:`may_be_visible` (the
scalar rules, kept as the reference). Pure: it reads footers already in memory, never files.

>>> import pyarrow as pa, pyarrow.parquet as pq, io
>>> sink = io.BytesIO()
>>> pq.write_table(pa.table({"id": list(range(10))}), sink, row_group_size=5)
>>> stats = column_stats(pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata, 0)
>>> contains(stats, [7]).tolist()
[False, True]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class RowGroupStats:
    """What a row group's statistics say about one integer column (None: unknown)."""

    minimum: int | None
    maximum: int | None
    null_count: int | None


def may_contain(stats: RowGroupStats, values: Sequence[int]) -> bool:
    """False only when the statistics prove no value of the column equals one of ``values``."""
    if stats.minimum is None or stats.maximum is None:
        return True
    return any(stats.minimum <= value <= stats.maximum for value in values)


def may_be_visible(valid_from: RowGroupStats, valid_until: RowGroupStats, snapshot: int) -> bool:
    """False only when the statistics prove no row is visible at ``snapshot``."""
    if valid_from.minimum is not None and valid_from.minimum > snapshot:
        return False
    if valid_until.null_count is None or valid_until.null_count > 0:
        return True
    return valid_until.maximum is None or valid_until.maximum > snapshot


@dataclass(frozen=True, slots=True)
class ColumnStats:
    """One integer column's statistics over many row groups (index ``i``: the ``i``-th group)."""

    minimum: np.ndarray
    """int64; meaningful where ``known``."""
    maximum: np.ndarray
    known: np.ndarray
    """bool: both bounds are known integers."""
    nulls: np.ndarray
    """int64 null counts, -1 where unknown."""

    def __len__(self) -> int:
        return len(self.known)

    def at(self, index: int) -> RowGroupStats:
        """The scalar form of entry ``index`` (what the reference rules take)."""
        known = bool(self.known[index])
        nulls = int(self.nulls[index])
        return RowGroupStats(
            int(self.minimum[index]) if known else None,
            int(self.maximum[index]) if known else None,
            None if nulls < 0 else nulls,
        )


def unknown_stats(groups: int) -> ColumnStats:
    """Statistics that prove nothing, for ``groups`` row groups (a file without the column)."""
    return ColumnStats(
        np.zeros(groups, np.int64),
        np.zeros(groups, np.int64),
        np.zeros(groups, bool),
        np.full(groups, -1, np.int64),
    )


def column_stats(metadata: Any, leaf: int | None) -> ColumnStats:
    """The statistics of Parquet leaf column ``leaf`` in every row group of one file's footer
    (``metadata``: a ``pyarrow.parquet.FileMetaData``); unknown where the footer has none or
    they are not integers."""
    groups = metadata.num_row_groups
    if leaf is None:
        return unknown_stats(groups)
    minimum, maximum = np.zeros(groups, np.int64), np.zeros(groups, np.int64)
    known, nulls = np.zeros(groups, bool), np.full(groups, -1, np.int64)
    for index in range(groups):
        statistics = metadata.row_group(index).column(leaf).statistics
        if statistics is None:
            continue
        if statistics.has_null_count:
            nulls[index] = statistics.null_count
        if statistics.has_min_max:
            low, high = statistics.min, statistics.max
            if type(low) is int and type(high) is int:
                minimum[index], maximum[index], known[index] = low, high, True
    return ColumnStats(minimum, maximum, known, nulls)


def concatenated(parts: Sequence[ColumnStats]) -> ColumnStats:
    """Several files' statistics end to end, in the order given."""
    if not parts:
        return unknown_stats(0)
    return ColumnStats(
        np.concatenate([part.minimum for part in parts]),
        np.concatenate([part.maximum for part in parts]),
        np.concatenate([part.known for part in parts]),
        np.concatenate([part.nulls for part in parts]),
    )


def contains(stats: ColumnStats, values: Sequence[int]) -> np.ndarray:
    """:func:`may_contain` of every row group at once: a group may hold one of ``values`` unless
    its known bounds leave every value out (a sorted-values bisection, any number of values)."""
    if not values:
        return np.zeros(len(stats), bool)
    ordered = np.asarray(sorted(set(values)), dtype=np.int64)
    first_not_below = np.searchsorted(ordered, stats.minimum, side="left")
    first_above = np.searchsorted(ordered, stats.maximum, side="right")
    return ~stats.known | (first_not_below < first_above)


def visible(valid_from: ColumnStats, valid_until: ColumnStats, snapshot: int) -> np.ndarray:
    """:func:`may_be_visible` of every row group at once."""
    born_later = valid_from.known & (valid_from.minimum > snapshot)
    may_be_open = valid_until.nulls != 0  # unknown (-1) or some open rows
    may_be_current = ~valid_until.known | (valid_until.maximum > snapshot)
    return ~born_later & (may_be_open | may_be_current)
