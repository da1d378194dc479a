"""Reading a plain key lookup straight from local segment files with pyarrow, without a Spark job.

A key lookup touches a few rows, yet a Spark job for it costs ~100 ms of fixed work (task
scheduling, every file's footer, row-by-row decoding). This reader answers the narrow lookups
:func:`broker.sql.passes.find_key_lookup.find_key_lookup` recognises over the same files Spark would read:

1. footers come from a cache (segment files are immutable, so a footer read once stays true);
2. row groups are pruned with their min/max statistics on the integer key columns and on the
   validity columns (the same pruning Spark's Parquet filter push-down does);
3. the remaining row groups are read, and the key predicates and the visibility rule
   ``validFrom <= S AND (validUntil IS NULL OR validUntil > S)`` applied with SQL's
   three-valued logic;
4. the columns are returned with the Arrow schema Spark's analysis gave the query, so the answer
   is the one Spark would return (in some order: the query has no ORDER BY).

Whenever the files or the query fall outside what is reproduced exactly (remote files, a column
missing from a file or stored with another type, a literal of another type than its column, too
many candidate rows), :meth:`DirectReader.read` returns None and the query runs on Spark. A file
that is missing raises :class:`broker.spark.failures.UnreadableFiles`, exactly as Spark's failure
would, so the timeline falls back and the query is retried; a file that is there but that pyarrow
cannot read is left to Spark to judge.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from broker.spark.failures import UnreadableFiles
from broker.spark.reading import is_local, local_path
from broker.sql.model import KeyLookup, Predicate
from watermark.catalog import VALID_FROM, VALID_UNTIL

DEFAULT_MAX_ROWS = 1_000_000
"""More candidate rows than this (after row-group pruning) is a job for Spark's parallel scan."""

_INTEGER_RANGES = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
}
_STRING_TYPES = (pa.string(), pa.large_string())


class _Decline(Exception):
    """This reader cannot answer; Spark will (and will judge a file it could not read)."""


def _unreadable(path: str, detail: str) -> Exception:
    """A missing file is reported at once (the timeline falls back); any other failure is left to
    Spark, whose reader may accept what pyarrow does not, and whose verdict the broker trusts."""
    if os.path.exists(local_path(path)):
        return _Decline(detail)
    return UnreadableFiles([path], detail)


class FooterCache:
    """Parquet footers of segment files by path, least recently used dropped past ``capacity``."""

    def __init__(self, capacity: int = 50_000) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._footers: OrderedDict[str, _Footer] = OrderedDict()
        self.reads = 0
        """How many footers were read from disk (a test probe: a cache hit leaves it flat)."""

    def get(self, path: str) -> _Footer:
        with self._lock:
            footer = self._footers.get(path)
            if footer is not None:
                self._footers.move_to_end(path)
                return footer
        try:
            metadata = pq.read_metadata(local_path(path))
        except (OSError, pa.ArrowException) as error:
            raise _unreadable(path, f"cannot read the Parquet footer: {error}") from None
        footer = _Footer.of(metadata)
        with self._lock:
            self.reads += 1
            self._footers[path] = footer
            while len(self._footers) > self._capacity:
                self._footers.popitem(last=False)
        return footer


@dataclass(frozen=True, slots=True)
class _Footer:
    metadata: pq.FileMetaData
    fields: dict[str, pa.Field]
    """Top-level Arrow fields by lower-case name (a name present twice maps to None)."""
    leaves: dict[str, int]
    """Parquet leaf column index of each top-level primitive column, by lower-case name."""

    @staticmethod
    def of(metadata: pq.FileMetaData) -> _Footer:
        schema = metadata.schema.to_arrow_schema()
        fields: dict[str, Any] = {}
        for item in schema:
            key = item.name.lower()
            fields[key] = None if key in fields else item
        leaves: dict[str, int] = {}
        for index in range(metadata.num_columns):
            path = metadata.schema.column(index).path
            if "." not in path:
                leaves[path.lower()] = index
        return _Footer(metadata, fields, leaves)


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


class DirectReader:
    """Answers recognised key lookups from local segment files (see the module docstring)."""

    def __init__(self, footers: FooterCache | None = None, max_rows: int = DEFAULT_MAX_ROWS):
        self.footers = footers or FooterCache()
        self.max_rows = max_rows

    def read(
        self, lookup: KeyLookup, files: Sequence[str], snapshot: int, schema: pa.Schema
    ) -> pa.Table | None:
        """The lookup's answer at ``snapshot`` over ``files`` with ``schema``; None: ask Spark."""
        if not all(is_local(path) for path in files):
            return None
        try:
            return self._read(lookup, files, snapshot, schema)
        except _Decline:
            return None

    def _read(
        self, lookup: KeyLookup, files: Sequence[str], snapshot: int, schema: pa.Schema
    ) -> pa.Table | None:
        sources = list(schema.names) if lookup.projection is None else list(lookup.projection)
        if len(sources) != len(schema):
            return None
        plans = []
        candidate_rows = 0
        for path in files:
            plan = _plan_file(self.footers.get(path), lookup, sources, schema, snapshot)
            if plan is None:
                return None
            candidate_rows += plan.rows
            if candidate_rows > self.max_rows:
                return None
            if plan.row_groups:
                plans.append((path, plan))
        pieces = [
            _read_file(path, plan, lookup.predicates, snapshot, schema) for path, plan in plans
        ]
        result = pa.concat_tables(pieces) if pieces else schema.empty_table()
        if lookup.limit is not None and result.num_rows > lookup.limit:
            result = result.slice(0, lookup.limit)
        return result


@dataclass(frozen=True, slots=True)
class _FilePlan:
    footer: _Footer
    row_groups: tuple[int, ...]
    rows: int
    outputs: tuple[str, ...]
    """The file's column name for each result column."""
    filters: dict[str, str]
    """The file's column name for each predicate column and validity column."""


def _plan_file(
    footer: _Footer, lookup: KeyLookup, sources: Sequence[str], schema: pa.Schema, snapshot: int
) -> _FilePlan | None:
    outputs = []
    for source, expected in zip(sources, schema, strict=True):
        found = footer.fields.get(source.lower())
        if found is None or not _same_type(found.type, expected.type):
            return None
        outputs.append(found.name)
    filters: dict[str, str] = {}
    for name in (VALID_FROM, VALID_UNTIL):
        found = footer.fields.get(name.lower())
        if found is None or found.type != pa.int64():
            return None
        filters[name.lower()] = found.name
    for predicate in lookup.predicates:
        found = footer.fields.get(predicate.column)
        if found is None or not _literals_fit(found.type, predicate.values):
            return None
        filters[predicate.column] = found.name
    integer_keys = [
        p for p in lookup.predicates if pa.types.is_integer(footer.fields[p.column].type)
    ]
    metadata = footer.metadata
    row_groups = []
    rows = 0
    for index in range(metadata.num_row_groups):
        group = metadata.row_group(index)

        def stats(column: str, group: Any = group) -> RowGroupStats:
            return _stats(group, footer.leaves.get(column))

        visible = may_be_visible(stats(VALID_FROM.lower()), stats(VALID_UNTIL.lower()), snapshot)
        if visible and all(may_contain(stats(p.column), p.values) for p in integer_keys):  # type: ignore[arg-type]
            row_groups.append(index)
            rows += group.num_rows
    return _FilePlan(footer, tuple(row_groups), rows, tuple(outputs), filters)


def _stats(group: Any, leaf: int | None) -> RowGroupStats:
    if leaf is None:
        return RowGroupStats(None, None, None)
    statistics = group.column(leaf).statistics
    if statistics is None:
        return RowGroupStats(None, None, None)
    nulls = statistics.null_count if statistics.has_null_count else None
    if not statistics.has_min_max:
        return RowGroupStats(None, None, nulls)
    low, high = statistics.min, statistics.max
    if not isinstance(low, int) or not isinstance(high, int):
        return RowGroupStats(None, None, nulls)
    return RowGroupStats(low, high, nulls)


def _read_file(
    path: str, plan: _FilePlan, predicates: Sequence[Predicate], snapshot: int, schema: pa.Schema
) -> pa.Table:
    """Two passes: the filter columns of every candidate row group, then the result columns of
    only the row groups that hold a match (in unsorted segments most hold none)."""
    filter_columns = list(dict.fromkeys(plan.filters.values()))
    try:
        parquet = pq.ParquetFile(local_path(path), metadata=plan.footer.metadata)
        filters = parquet.read_row_groups(
            list(plan.row_groups), columns=filter_columns, use_threads=False
        )
    except (OSError, pa.ArrowException) as error:
        raise _unreadable(path, f"cannot read the Parquet file: {error}") from None
    # A NULL condition drops the row, as in SQL's WHERE.
    keep = pc.fill_null(_condition(filters, plan, predicates, snapshot), False)
    hit_groups, hit_masks = [], []
    offset = 0
    for group in plan.row_groups:
        rows = plan.footer.metadata.row_group(group).num_rows
        mask = keep.slice(offset, rows)
        offset += rows
        if pc.any(mask).as_py():
            hit_groups.append(group)
            hit_masks.extend(mask.chunks)
    if not hit_groups:
        return schema.empty_table()
    needed = [name for name in dict.fromkeys(plan.outputs) if name not in filter_columns]
    if needed:
        try:
            values = parquet.read_row_groups(hit_groups, columns=needed, use_threads=False)
        except (OSError, pa.ArrowException) as error:
            raise _unreadable(path, f"cannot read the Parquet file: {error}") from None
        selected_values = values.filter(pa.chunked_array(hit_masks, pa.bool_()))
    selected_filters = filters.filter(keep)
    arrays = []
    for name, target in zip(plan.outputs, schema, strict=True):
        source = selected_filters if name in filter_columns else selected_values
        column = source.column(name)
        arrays.append(column if column.type == target.type else column.cast(target.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _condition(
    table: pa.Table, plan: _FilePlan, predicates: Sequence[Predicate], snapshot: int
) -> pa.ChunkedArray:
    """The visibility rule and the key predicates, with SQL's three-valued AND/OR."""
    valid_from = table.column(plan.filters[VALID_FROM.lower()])
    valid_until = table.column(plan.filters[VALID_UNTIL.lower()])
    condition = pc.and_kleene(
        pc.less_equal(valid_from, snapshot),
        pc.or_kleene(pc.is_null(valid_until), pc.greater(valid_until, snapshot)),
    )
    for predicate in predicates:
        column = table.column(plan.filters[predicate.column])
        if len(predicate.values) == 1:
            match = pc.equal(column, pa.scalar(predicate.values[0], column.type))
        else:
            match = pc.is_in(column, value_set=pa.array(predicate.values, column.type))
        condition = pc.and_kleene(condition, match)
    return condition


def _same_type(stored: pa.DataType, expected: pa.DataType) -> bool:
    if stored in _STRING_TYPES and expected in _STRING_TYPES:
        return True
    return stored == expected


def _literals_fit(column_type: pa.DataType, values: Sequence[Any]) -> bool:
    """True when every literal has the column's own type (no implicit cast Spark would add)."""
    bounds = _INTEGER_RANGES.get(column_type)
    if bounds is not None:
        return all(type(v) is int and bounds[0] <= v <= bounds[1] for v in values)
    if column_type in _STRING_TYPES:
        return all(type(v) is str for v in values)
    return False
