"""Reading a plain key lookup straight from local segment files with pyarrow, without a Spark job.

A key lookup touches a few rows, yet a Spark job for it costs ~100 ms of fixed work (task
scheduling, every file's footer, row-by-row decoding). This reader answers the narrow lookups
:func:`horizon_broker.broker.sql.passes.find_key_lookup.find_key_lookup` recognises over the same files Spark would read:

1. footers come from a cache (segment files are immutable, so a footer read once stays true;
   :mod:`horizon_broker.broker.direct_lookup.file_sets`);
2. row groups are pruned with their min/max statistics on the integer key columns and on the
   validity columns (the same pruning Spark's Parquet filter push-down does), over arrays of
   every row group of the file set built once per set of files (:mod:`horizon_broker.broker.direct_lookup.row_groups`),
   so the cost of a lookup hardly grows with the files that cannot hold its keys; where keys are
   hashed over the files (every file's range spans the table), each file's sorted key column
   (:mod:`horizon_broker.broker.direct_lookup.key_sets`) rules it out, and a set looked up often gets all its keys in
   one sorted array, so finding the files that hold a key is a bisection, not a loop over files;
3. the remaining row groups are read (:mod:`horizon_broker.broker.direct_lookup.file_rows`; a large one, as
   compaction writes, is decoded once and kept: :mod:`horizon_broker.broker.direct_lookup.row_group_cache`), and the
   key predicates and the visibility rule ``validFrom <= S AND (validUntil IS NULL OR
   validUntil > S)`` applied with SQL's three-valued logic;
4. the columns are returned with the Arrow schema Spark's analysis gave the query, so the answer
   is the one Spark would return (in some order: the query has no ORDER BY).

Whenever the files or the query fall outside what is reproduced exactly (remote files, a column
missing from a file or stored with another type, a literal of another type than its column, too
many candidate rows), :meth:`DirectReader.read` returns None and the query runs on Spark. A file
that is missing raises :class:`horizon_broker.broker.spark.failures.UnreadableFiles`, exactly as Spark's failure
would, so the timeline falls back and the query is retried; a file that is there but that pyarrow
cannot read is left to Spark to judge.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from horizon_broker._core.lru import Lru
from horizon_broker.broker.direct_lookup.file_rows import FilePlan, read_file
from horizon_broker.broker.direct_lookup.file_sets import (
    Decline,
    FileSet,
    Footer,
    FooterCache,
    unreadable,
)
from horizon_broker.broker.direct_lookup.key_sets import (
    CombinedKeys,
    ConcatenatedKeys,
    KeySets,
    holds_any,
    lookup_values,
)
from horizon_broker.broker.direct_lookup.reading import is_local, local_path
from horizon_broker.broker.direct_lookup.row_group_cache import RowGroupCache
from horizon_broker.broker.direct_lookup.row_groups import contains, visible
from horizon_broker.broker.sql.model import KeyLookup, Predicate
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL

DEFAULT_MAX_ROWS = 1_000_000
"""More candidate rows than this (after row-group pruning) is a job for Spark's parallel scan."""
PAGED_GROUP_ROWS = 20_000
"""What a row group read by pages counts against :attr:`DirectReader.max_rows` (a page run of
Spark's writer)."""
FILE_SETS_KEPT = 64
"""Indexes of file sets kept (a set is one table generation's visible files)."""
KEY_SETS_FROM_FILES = 2
"""When statistics leave this many files or more, their key sets choose the ones to open."""
COMBINED_KEYS_FROM_FILES = 16
"""When statistics leave this many files or more, a set's combined keys choose them (built in
the background, see :data:`BUILD_AFTER_CHECKS_PER_KEY`; until then, its files' key sets laid
end to end: :class:`horizon_broker.broker.direct_lookup.key_sets.ConcatenatedKeys`)."""
BUILD_AFTER_CHECKS_PER_KEY = 0.1
"""A set's combined keys are built once its lookups have checked files one by one as many times
as a tenth of its keys: building costs about that much (measured: about 170 ns a key, against
about 2 microseconds a file check), so a set whose lookups are few (a generation of a table
that ingestion replaces every second) never pays more than twice what the cheaper way costs."""
LAID_OUT_CHECK_COST = 0.05
"""What checking a file against a set's laid-out key sets costs, in one-by-one checks (measured:
about 100 ns a file over 800 files, against about 2 microseconds): a set's lookups count their
checks at this weight towards :data:`BUILD_AFTER_CHECKS_PER_KEY`."""
COMBINED_KEYS_MAX_BYTES = 128 * 1024 * 1024
"""Memory for the combined keys of file sets; a set whose keys would not fit keeps per-file
checks."""
_COMBINED_BYTES_PER_KEY = 12  # an int64 key and an int32 file number
_LAID_OUT_BYTES_PER_KEY = 8  # an int64 key

_INTEGER_RANGES = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int16(): (-(2**15), 2**15 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
}
_STRING_TYPES = (pa.string(), pa.large_string())


class DirectReader:
    """Answers recognised key lookups from local segment files (see the module docstring)."""

    def __init__(
        self,
        footers: FooterCache | None = None,
        max_rows: int = DEFAULT_MAX_ROWS,
        key_sets: KeySets | None = None,
        row_groups: RowGroupCache | None = None,
        combined_max_bytes: int = COMBINED_KEYS_MAX_BYTES,
    ):
        self.footers = footers or FooterCache()
        self.max_rows = max_rows
        self.key_sets = key_sets or KeySets()
        self.row_groups = row_groups or RowGroupCache()
        self.combined: Lru[tuple[Any, ...], CombinedKeys] = Lru(
            combined_max_bytes, lambda combined: combined.nbytes
        )
        self.laid_out: Lru[tuple[Any, ...], ConcatenatedKeys] = Lru(
            combined_max_bytes, lambda laid: laid.nbytes
        )
        self.layouts = 0
        """Key sets laid end to end (a test probe: a set looked up again leaves it flat)."""
        self._file_sets: Lru[tuple[str, ...], FileSet] = Lru(FILE_SETS_KEPT)
        self._lock = threading.Lock()
        """Guards :attr:`_building`."""
        self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="combined-keys")
        self._building: dict[tuple[Any, ...], Future[None]] = {}

    def _file_set(self, files: Sequence[str]) -> FileSet | None:
        """The index of ``files`` (built on first use); None when one of them is not a local
        file (only local sets are ever built, so a kept set needs no check)."""
        key = tuple(files)
        found = self._file_sets.get(key)
        if found is not None:
            return found
        if not all(is_local(path) for path in key):
            return None
        return self._file_sets.keep(key, FileSet(key, [self.footers.get(path) for path in key]))

    def read(
        self, lookup: KeyLookup, files: Sequence[str], snapshot: int, schema: pa.Schema
    ) -> pa.Table | None:
        """The lookup's answer at ``snapshot`` over ``files`` with ``schema``; None: ask Spark."""
        try:
            file_set = self._file_set(files)
            if file_set is None:
                return None
            return self._read(lookup, file_set, snapshot, schema)
        except Decline:
            return None

    def _read(
        self, lookup: KeyLookup, file_set: FileSet, snapshot: int, schema: pa.Schema
    ) -> pa.Table | None:
        shapes = _file_shapes(file_set, lookup, schema)
        if shapes is None:
            return None
        integer_keys = {p.column for shape in shapes for p in shape.int_keys}
        chosen = self._row_groups_to_read(lookup, file_set, snapshot, integer_keys)
        if chosen is None:
            return None
        keys = [
            (p.column, lookup_values(p.values))  # type: ignore[arg-type]
            for p in lookup.predicates
            if p.column in integer_keys
        ]
        candidates, starts, ends, check_each = self._files_to_read(file_set, shapes, keys, chosen)
        pieces = []
        for number, start, end in zip(
            candidates.tolist(), starts.tolist(), ends.tolist(), strict=True
        ):
            footer = file_set.footers[number]
            shape = shapes[file_set.kind[number]]
            if check_each and not self._may_hold(file_set.files[number], footer, shape, keys):
                continue
            groups = tuple(file_set.group[chosen[start:end]].tolist())
            plan = FilePlan(footer, groups, shape.outputs, shape.filters)
            path = file_set.files[number]
            pieces.append(
                read_file(path, plan, lookup.predicates, snapshot, schema, self.row_groups)
            )
        result = pa.concat_tables(pieces) if pieces else schema.empty_table()
        if lookup.limit is not None and result.num_rows > lookup.limit:
            result = result.slice(0, lookup.limit)
        return result

    def _row_groups_to_read(
        self, lookup: KeyLookup, file_set: FileSet, snapshot: int, integer_keys: set[str]
    ) -> np.ndarray | None:
        """The set's row groups (their numbers) whose statistics allow a row visible at
        ``snapshot`` with a looked-up integer key; None when they hold more rows than
        :attr:`max_rows` (a job for Spark)."""
        keep = visible(
            file_set.column(VALID_FROM.lower()), file_set.column(VALID_UNTIL.lower()), snapshot
        )
        for predicate in lookup.predicates:
            if predicate.column in integer_keys:
                keep &= contains(file_set.column(predicate.column), predicate.values)  # type: ignore[arg-type]
        rows = file_set.rows[keep]
        if integer_keys:  # a group read by pages costs its matching pages, not its rows
            paged = self.row_groups.reads_pages(rows, file_set.stored_bytes[keep])
            rows = np.where(paged, np.minimum(rows, PAGED_GROUP_ROWS), rows)
        if int(rows.sum()) > self.max_rows:
            return None
        return np.nonzero(keep)[0]

    def _files_to_read(
        self,
        file_set: FileSet,
        shapes: Sequence[_FileShape],
        keys: Sequence[tuple[str, np.ndarray]],
        chosen: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """The files of the ``chosen`` row groups, with where each one's run of them starts and
        ends, less the files the set's combined or laid-out keys rule out; and whether each file
        left must still be checked against its own key set (many files, keys not combined)."""
        candidates, starts, ends = _runs(file_set.file[chosen])
        use_key_sets = len(candidates) >= KEY_SETS_FROM_FILES and bool(keys)
        holding = None
        if use_key_sets and len(candidates) >= COMBINED_KEYS_FROM_FILES:
            holding = self._set_holding(file_set, shapes, keys, candidates)
        if holding is not None:
            kept = np.isin(candidates, holding)
            candidates, starts, ends = candidates[kept], starts[kept], ends[kept]
        check_each = use_key_sets and holding is None
        if check_each:
            file_set.checks += len(candidates)
        return candidates, starts, ends, check_each

    def _set_holding(
        self,
        file_set: FileSet,
        shapes: Sequence[_FileShape],
        keys: Sequence[tuple[str, np.ndarray]],
        candidates: np.ndarray,
    ) -> np.ndarray | None:
        """The files that may hold the keys by the set's combined keys, else by its laid-out
        keys (their checks counted towards building the combined ones); None: by neither."""
        holding = self._files_holding(file_set, shapes, keys)
        if holding is None:
            holding = self._laid_out_holding(file_set, shapes, keys, candidates)
            if holding is not None:
                file_set.checks += len(candidates) * LAID_OUT_CHECK_COST
        return holding

    def _files_holding(
        self,
        file_set: FileSet,
        shapes: Sequence[_FileShape | None],
        keys: Sequence[tuple[str, np.ndarray]],
    ) -> np.ndarray | None:
        """The numbers of the set's files that may hold the looked-up keys (every key column's
        combined keys agree); None while they are not built (see :meth:`_build_later`)."""
        if file_set.total_rows * _COMBINED_BYTES_PER_KEY > self.combined.capacity:
            return None
        holding: np.ndarray | None = None
        for column, values in keys:
            names = _key_names(shapes, column)
            found = self.combined.get((file_set.serial, names))
            if found is None:
                if file_set.checks >= file_set.total_rows * BUILD_AFTER_CHECKS_PER_KEY:
                    self._build_later(file_set, names)
                return None
            files = found.files_holding(values)
            holding = files if holding is None else np.intersect1d(holding, files)
        return holding

    def _laid_out_holding(
        self,
        file_set: FileSet,
        shapes: Sequence[_FileShape | None],
        keys: Sequence[tuple[str, np.ndarray]],
        candidates: np.ndarray,
    ) -> np.ndarray | None:
        """The ``candidates`` that may hold the looked-up keys, from their key sets laid end to
        end (:class:`ConcatenatedKeys`, built on the first lookup of a set that needs them and
        kept): every key column's keys agree; a file without an integer key column may hold
        any key. None when a set's keys would not fit in memory (files are checked one by one)."""
        if file_set.total_rows * _LAID_OUT_BYTES_PER_KEY > self.laid_out.capacity:
            return None
        holding = candidates
        for column, values in keys:
            names = _key_names(shapes, column)
            indexed = np.asarray([name is not None for name in names])[
                file_set.kind_array[candidates]
            ]
            laid = self.laid_out.get((file_set.serial, names))
            if laid is None or not np.isin(candidates[indexed], laid.numbers).all():
                laid = self._lay_out(file_set, names, candidates[indexed])
            found = np.union1d(laid.holding(values), candidates[~indexed])
            holding = np.intersect1d(holding, found)
        return holding

    def _lay_out(
        self, file_set: FileSet, names: tuple[str | None, ...], numbers: np.ndarray
    ) -> ConcatenatedKeys:
        arrays = []
        for number in numbers.tolist():
            name = names[file_set.kind[number]]
            assert name is not None
            arrays.append(self._keys_of(file_set.files[number], file_set.footers[number], name))
        laid = ConcatenatedKeys.of(numbers.tolist(), arrays)
        self.layouts += 1
        # Not replacing a kept layout of fewer files (as before the generic Lru): this lookup
        # uses its own.
        self.laid_out.keep((file_set.serial, names), laid)
        return laid

    def _build_later(self, file_set: FileSet, names: tuple[str | None, ...]) -> None:
        """Build a set's combined keys of one column (``names``: its name in each kind of file)
        on the builder thread, at most once at a time: a lookup never waits for it."""
        key = (file_set.serial, names)
        with self._lock:
            if key in self._building:
                return
            self._building[key] = self._builder.submit(self._build, file_set, names)

    def _build(self, file_set: FileSet, names: tuple[str | None, ...]) -> None:
        key = (file_set.serial, names)
        try:
            arrays = {}
            for number, path in enumerate(file_set.files):
                name = names[file_set.kind[number]]
                if name is not None:
                    arrays[number] = self.key_sets.keys(
                        path, name, _opener(path, file_set.footers[number])
                    )
            self.combined.keep(key, CombinedKeys.of(arrays, len(file_set.files)))
        except (OSError, pa.ArrowException):
            pass  # not built: lookups check file by file, and report a file they cannot read
        finally:
            with self._lock:
                self._building.pop(key, None)

    def settle(self) -> None:
        """Wait for the combined keys being built (tests and benchmarks measure after it)."""
        with self._lock:
            pending = list(self._building.values())
        wait(pending)

    def _keys_of(self, path: str, footer: Footer, column: str) -> np.ndarray:
        """The file's sorted keys of ``column`` (a file that cannot be read: :func:`unreadable`)."""
        try:
            return self.key_sets.keys(path, column, _opener(path, footer))
        except (OSError, pa.ArrowException) as error:
            raise unreadable(path, f"cannot read the Parquet file: {error}") from None

    def _may_hold(
        self,
        path: str,
        footer: Footer,
        shape: _FileShape,
        keys: Sequence[tuple[str, np.ndarray]],
    ) -> bool:
        """False when the file's key sets prove it holds none of the looked-up keys."""
        for column, values in keys:
            if column not in shape.int_key_columns:
                continue
            if not holds_any(self._keys_of(path, footer, shape.filters[column]), values):
                return False
        return True


def _runs(files_of: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct file numbers of the chosen row groups, with where each one's run starts and
    ends: the row groups are numbered file by file, so each file's are one run (no sort).

    >>> [run.tolist() for run in _runs(np.array([2, 2, 5, 7, 7, 7]))]
    [[2, 5, 7], [0, 2, 3], [2, 3, 6]]
    """
    if len(files_of) == 0:
        return files_of, files_of, files_of
    starts = np.flatnonzero(files_of[1:] != files_of[:-1]) + 1
    starts = np.concatenate(([0], starts))
    ends = np.concatenate((starts[1:], [len(files_of)]))
    return files_of[starts], starts, ends


def _key_names(shapes: Sequence[_FileShape | None], column: str) -> tuple[str | None, ...]:
    """The name of integer key ``column`` in each kind of file (None: not an integer key there):
    with the set, it names the set's combined or laid-out keys of that column."""
    return tuple(
        shape.filters[column] if shape and column in shape.int_key_columns else None
        for shape in shapes
    )


def _opener(path: str, footer: Footer) -> Callable[[], pq.ParquetFile]:
    """Opens the file with its cached footer (no second read of it)."""
    return lambda: pq.ParquetFile(local_path(path), metadata=footer.metadata)


@dataclass(frozen=True, slots=True)
class _FileShape:
    """How the files of one signature answer a lookup: their column names and key columns."""

    outputs: tuple[str, ...]
    """The file's column name for each result column."""
    filters: dict[str, str]
    """The file's column name for each predicate column and validity column."""
    int_keys: tuple[Predicate, ...]
    """The key predicates on integer columns (their statistics prune row groups)."""
    int_key_columns: frozenset[str] = frozenset()


def _file_shapes(
    file_set: FileSet, lookup: KeyLookup, schema: pa.Schema
) -> list[_FileShape] | None:
    """How each kind of file of the set answers the lookup; None when one cannot (Spark must)."""
    sources = list(schema.names) if lookup.projection is None else list(lookup.projection)
    if len(sources) != len(schema):
        return None
    shapes = []
    for footer in file_set.kinds:
        shape = _file_shape(footer, lookup, sources, schema)
        if shape is None:
            return None
        shapes.append(shape)
    return shapes


def _file_shape(
    footer: Footer, lookup: KeyLookup, sources: Sequence[str], schema: pa.Schema
) -> _FileShape | None:
    """None when a file of this signature cannot answer exactly (a column missing or of
    another type, a literal of another type than its column): Spark must."""
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
    int_keys = []
    for predicate in lookup.predicates:
        found = footer.fields.get(predicate.column)
        if found is None or not _literals_fit(found.type, predicate.values):
            return None
        filters[predicate.column] = found.name
        if pa.types.is_integer(found.type):
            int_keys.append(predicate)
    return _FileShape(
        tuple(outputs), filters, tuple(int_keys), frozenset(p.column for p in int_keys)
    )


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
