"""The files of one table generation as a direct lookup sees them: footers and row groups.

Segment files are immutable, so a footer read once stays true (:class:`FooterCache`), and one set
of files (a table generation's visible files) is indexed once (:class:`FileSet`): its row groups
numbered end to end with their statistics as arrays (:mod:`horizon_broker.broker.direct_lookup.row_groups`), so a
lookup prunes every row group of the set with a few array operations. A file that cannot be read
is reported as :func:`unreadable` says: missing (the timeline falls back) or left to Spark.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from horizon_broker._core.lru import Lru
from horizon_broker.broker.direct_lookup.reading import local_path
from horizon_broker.broker.direct_lookup.row_groups import ColumnStats, column_stats, concatenated
from horizon_broker.broker.spark.failures import UnreadableFiles


class Decline(Exception):
    """This reader cannot answer; Spark will (and will judge a file it could not read)."""


def unreadable(path: str, detail: str) -> Exception:
    """A missing file is reported at once (the timeline falls back); any other failure is left to
    Spark, whose reader may accept what pyarrow does not, and whose verdict the broker trusts."""
    if os.path.exists(local_path(path)):
        return Decline(detail)
    return UnreadableFiles([path], detail)


class FooterCache:
    """Parquet footers of segment files by path, least recently used dropped past ``capacity``."""

    def __init__(self, capacity: int = 50_000) -> None:
        self._footers: Lru[str, Footer] = Lru(capacity)
        self.reads = 0
        """How many footers were read from disk (a test probe: a cache hit leaves it flat)."""

    def get(self, path: str) -> Footer:
        return self.opened(path)[0]

    def opened(self, path: str) -> tuple[Footer, pq.ParquetFile | None]:
        """The file's footer, and the file itself when it was opened to read the footer (a
        caller reading more of it reads it from there); :func:`unreadable` when it cannot be
        read."""
        footer = self.cached(path)
        if footer is not None:
            return footer, None
        if not os.path.isfile(local_path(path)):  # a pipe or a device: its read may block
            raise unreadable(path, "not a regular file")
        try:
            parquet = pq.ParquetFile(local_path(path))
            footer = Footer.of(parquet.metadata)
        except (OSError, pa.ArrowException) as error:
            raise unreadable(path, f"cannot read the Parquet footer: {error}") from None
        return self.put(path, footer), parquet

    def cached(self, path: str) -> Footer | None:
        """The file's footer when it is cached (no read)."""
        return self._footers.get(path)

    def put(self, path: str, footer: Footer) -> Footer:
        """Keep ``footer``, read by the caller; returns the one kept (another thread's, when it
        read the file first)."""
        kept = self._footers.keep(path, footer)
        if kept is footer:
            self.reads += 1
        return kept


@dataclass(frozen=True, slots=True)
class SchemaParts:
    """What a footer's lookups ask of its schema, shared by every file of the same columns."""

    fields: dict[str, pa.Field | None]
    """Top-level Arrow fields by lower-case name (a name present twice maps to None)."""
    leaves: dict[str, int]
    """Parquet leaf column index of each top-level primitive column, by lower-case name."""
    signature: tuple[tuple[str, str], ...]
    """The file's columns and types: files alike are checked against a query once."""

    @staticmethod
    def of(metadata: pq.FileMetaData, schema: pa.Schema) -> SchemaParts:
        fields: dict[str, pa.Field | None] = {}
        for item in schema:
            key = item.name.lower()
            fields[key] = None if key in fields else item
        leaves: dict[str, int] = {}
        for index in range(metadata.num_columns):
            path = metadata.schema.column(index).path
            if "." not in path:
                leaves[path.lower()] = index
        signature = tuple((item.name, str(item.type)) for item in schema)
        return SchemaParts(fields, leaves, signature)

    @property
    def case_twins(self) -> bool:
        """Whether two top-level columns' names differ only in case."""
        return len(self.fields) < len(self.signature)


SCHEMAS_KEPT = 1_024
"""Distinct file schemas whose :class:`SchemaParts` are shared (a table has a few)."""
_schemas: Lru[tuple[tuple[str, ...], tuple[pa.DataType, ...]], SchemaParts] = Lru(SCHEMAS_KEPT)


def schema_parts(metadata: pq.FileMetaData) -> SchemaParts:
    """The footer's :class:`SchemaParts`, one object for all files of the same column names and
    types: a broker keeps up to 50,000 footers, and nine Arrow fields and two dictionaries of
    each were most of the objects every full garbage collection walked (40 to 65 ms each)."""
    schema = metadata.schema.to_arrow_schema()
    key = (tuple(schema.names), tuple(schema.types))
    return _schemas.get_or_load(key, lambda: SchemaParts.of(metadata, schema))


@dataclass(frozen=True, slots=True)
class Footer:
    metadata: pq.FileMetaData
    schema: SchemaParts
    stats: dict[str, tuple[np.ndarray, ...]] = field(default_factory=dict)
    """Row-group statistics by lower-case column name, gathered when first needed; kept as
    plain tuples of arrays, which (unlike any class) the garbage collector stops tracking."""

    @staticmethod
    def of(metadata: pq.FileMetaData) -> Footer:
        return Footer(metadata, schema_parts(metadata))

    @property
    def fields(self) -> dict[str, pa.Field | None]:
        return self.schema.fields

    @property
    def leaves(self) -> dict[str, int]:
        return self.schema.leaves

    @property
    def signature(self) -> tuple[tuple[str, str], ...]:
        return self.schema.signature

    def column_stats(self, name: str) -> ColumnStats:
        found = self.stats.get(name)
        if found is None:
            stats = column_stats(self.metadata, self.leaves.get(name))
            self.stats[name] = (stats.minimum, stats.maximum, stats.known, stats.nulls)
            return stats
        return ColumnStats(*found)


class FileSet:
    """The footers of one set of files with their row groups numbered end to end: entry ``i``
    of every array is row group ``group[i]`` of file ``file[i]``."""

    _serials = itertools.count()

    def __init__(self, files: Sequence[str], footers: Sequence[Footer]) -> None:
        self.serial = next(FileSet._serials)
        """Names this set in caches (hashing its file names per lookup costs more)."""
        self.files = tuple(files)
        self.footers = tuple(footers)
        self.checks = 0.0
        """Files its lookups have checked one by one (their key sets), before combined keys (a
        check against laid-out keys counts as a fraction of one)."""
        counts = [footer.metadata.num_row_groups for footer in footers]
        self.file = np.repeat(np.arange(len(footers)), counts)
        self.group = np.concatenate([np.arange(n) for n in counts]) if counts else np.zeros(0)
        self.rows = np.asarray(
            [
                footer.metadata.row_group(index).num_rows
                for footer in footers
                for index in range(footer.metadata.num_row_groups)
            ],
            dtype=np.int64,
        )
        self.total_rows = int(self.rows.sum())
        self.stored_bytes = np.asarray(
            [
                footer.metadata.row_group(index).total_byte_size
                for footer in footers
                for index in range(footer.metadata.num_row_groups)
            ],
            dtype=np.int64,
        )
        """Each row group's uncompressed size, as its footer records it."""
        kinds: dict[tuple[tuple[str, str], ...], int] = {}
        self.kind = [kinds.setdefault(footer.signature, len(kinds)) for footer in footers]
        """Each file's signature as a small number (files alike share it)."""
        self.kind_array = np.asarray(self.kind, dtype=np.int64)
        """:attr:`kind` as an array, to pick the kinds of many files at once."""
        self.kinds: list[Footer] = [footers[self.kind.index(n)] for n in range(len(kinds))]
        """One footer of each signature."""
        self._columns: dict[str, ColumnStats] = {}
        self._lock = threading.Lock()

    def column(self, name: str) -> ColumnStats:
        """Column ``name``'s statistics over every row group of the set (built once)."""
        with self._lock:
            found = self._columns.get(name)
        if found is None:
            found = concatenated([footer.column_stats(name) for footer in self.footers])
            with self._lock:
                self._columns[name] = found
        return found
