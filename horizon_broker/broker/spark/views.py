"""Spark temp views over a table's visible segments, one set per (table, timeline generation,
layout bounds).

The rewritten SQL reads ``__horizon_<table>_g<generation>`` instead of the table; when the files
are split by what a scan must test (settled segments, open and closed files, see
``horizon_broker.broker.spark.scan_layout``), it reads one view per part, each named after the layout's bounds too. A
view is built once (``spark.read.parquet(files)`` with the descriptor's explicit schema, so Spark
neither infers the schema nor opens a footer to plan) and reused by every query until the table's
timeline changes or its LWM passes another segment's greatest validFrom or closed files' greatest
validUntil. Older layouts are dropped once no running query holds them.

A new layout's names are new, but most of its parts read the very files a part of the last
layout read (a commit adds one segment to the rest; the LWM then moves it to the settled parts):
the DataFrames are kept per file set (:class:`_Frames`) and a part whose files some live part
already reads is only registered under its new name, no file listed again. A file set is read
once, in the main session: the mirrors register that DataFrame's plan (one listing, not one per
session). Segment files are immutable (a rewrite writes new ones), so the same paths are the
same rows. Measured by ``bench.subscribe`` (the Subscriptions guide): listing the files and
resolving the read took 30-50 ms per part and session, every part on every commit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from horizon_broker.broker.spark.failures import UnreadableFiles, ViewMissing, classify
from horizon_broker.broker.spark.scan_layout import VIEW_PREFIX, ScanLayout, scan_layout
from horizon_broker.broker.spark.segment_schema import storage_ddl
from horizon_broker.broker.sql.feed_files import (
    FILE_COLUMN,
    FILE_NAME_EXPRESSION,
    files_view,
    prunable,
)
from horizon_broker.watermark.catalog import TableDescriptor

__all__ = [
    "VIEW_PREFIX",
    "UnreadableFiles",
    "ViewCache",
    "ViewMissing",
    "schema_ddl",
]


def schema_ddl(descriptor: TableDescriptor) -> str:
    """The Spark DDL schema of a table's segment files: user columns (of every schema version,
    :mod:`horizon_broker.broker.spark.segment_schema`) + validity columns."""
    return storage_ddl(descriptor)


FrameKey = tuple[str, bool, tuple[str, ...]]
"""A file set as read: the schema DDL, whether it has a companion, the files in order."""


@dataclass(frozen=True, slots=True)
class _Frames:
    """One file set's DataFrames, one (plain, companion) pair per session (companion None for a
    table whose files cannot be told apart by name)."""

    per_session: tuple[tuple[Any, Any | None], ...]


@dataclass(slots=True)
class _Entry:
    table: str
    generation: int
    bounds: tuple[int, int]
    """The layout's ``settled_through`` and ``closed_through``, -1 for none: both only grow
    with the LWM within one generation."""
    names: tuple[str, ...]
    frames: tuple[FrameKey, ...] = ()
    """The file sets its views read (kept while an entry reads them)."""
    leases: int = 0

    @property
    def age(self) -> tuple[int, int, int]:
        """Newer timeline generations first, then higher bounds (the LWM moves up)."""
        return (self.generation, *self.bounds)


class ViewCache:
    """The cache of segment views of one Spark session."""

    def __init__(self, spark: Any, *, namespace: str = "", mirrors: Sequence[Any] = ()) -> None:
        self._spark = spark
        self._sessions = (spark, *mirrors)
        """Every session the views are registered in (``mirrors`` share the Spark context)."""
        self.namespace = namespace
        self._lock = threading.RLock()
        self._entries: dict[tuple[str, int, int, int], _Entry] = {}
        self._layouts: dict[str, tuple[tuple[int, int | None], ScanLayout]] = {}
        self._frames: dict[FrameKey, _Frames] = {}
        self.builds = 0
        """How many view sets were built (a test and benchmark probe: reuse keeps it flat)."""
        self.file_sets_read = 0
        """How many file sets were read (listed, a DataFrame resolved): a view set whose parts
        read file sets already read registers names only (a test and benchmark probe)."""
        self.layouts_computed = 0
        """How many layouts were derived (a test probe: one per table and state, not per use)."""

    def layout(self, table_view: Any) -> ScanLayout:
        """The view layout of a follower table view, derived once per (generation, LWM).

        A query needs it for the catalog of every table, the views it reads and its metadata.
        Deriving it walks all of a table's files, so it is kept per table until the table's
        generation or LWM moves (the generation names the visible segments, see ``_acquire``).
        """
        table = table_view.table.lower()
        state = (int(table_view.generation), table_view.lwm)
        with self._lock:
            known = self._layouts.get(table)
            if known is not None and known[0] == state:
                return known[1]
        layout = scan_layout(table_view, self.namespace)
        with self._lock:
            self._layouts[table] = (state, layout)
            self.layouts_computed += 1
        return layout

    def forget(self, name: str) -> None:
        """Drop a cache entry one of whose views vanished, so the next lease rebuilds it."""
        with self._lock:
            for key, entry in list(self._entries.items()):
                if name in entry.names:
                    del self._entries[key]
            self._frames.clear()  # a vanished view may be a vanished session: read anew

    def names(self) -> list[str]:
        with self._lock:
            return sorted(name for entry in self._entries.values() for name in entry.names)

    @contextmanager
    def lease(self, tables: Sequence[Any]) -> Iterator[tuple[list[str], float]]:
        """Make sure the views of each table view (``follower.view(t)``) exist and hold them.

        Yields the view names and the seconds spent building (0.0 when all were cached).
        While held, the views survive newer layouts; they are dropped when released.
        """
        import time

        started = time.perf_counter()
        entries: list[_Entry] = []
        try:
            for table_view in tables:
                entries.append(self._acquire(table_view))
            names = [name for entry in entries for name in entry.names]
            yield names, time.perf_counter() - started
        finally:
            with self._lock:
                for entry in entries:
                    entry.leases -= 1
                    self._evict_older(entry.table)

    def _acquire(self, table_view: Any) -> _Entry:
        layout = self.layout(table_view)
        table = table_view.table.lower()
        settled, closed = layout.settled_through, layout.closed_through
        bounds = (-1 if settled is None else settled, -1 if closed is None else closed)
        key = (table, int(table_view.generation), *bounds)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._build_entry(table, key[1], bounds, layout, table_view.descriptor)
                self._entries[key] = entry
                self.builds += 1
            entry.leases += 1
            self._evict_older(table)
            return entry

    def _build_entry(
        self,
        table: str,
        generation: int,
        bounds: tuple[int, int],
        layout: ScanLayout,
        descriptor: TableDescriptor,
    ) -> _Entry:
        """Register every part of ``layout`` under its name, reading only file sets no live
        entry reads already (all or nothing: a failure drops what it registered)."""
        ddl = schema_ddl(descriptor)
        companion = prunable(column.name for column in descriptor.columns)
        built: list[str] = []
        keys: list[FrameKey] = []
        try:
            for part in layout.parts:
                frame_key: FrameKey = (ddl, companion, tuple(part.files))
                frames = self._frames.get(frame_key)
                if frames is None:
                    frames = self._read(ddl, companion, part.files)
                    self._frames[frame_key] = frames
                    self.file_sets_read += 1
                keys.append(frame_key)
                self._register(part.name, frames)
                built.append(part.name)
        except BaseException:
            for name in built:
                self._drop(name)
            self._prune_frames()
            raise
        return _Entry(table, generation, bounds, layout.names, tuple(keys))

    def _read(self, ddl: str, companion: bool, files: Sequence[str]) -> _Frames:
        """The DataFrames over ``files`` in every session: read (listed) once, in the main
        session, the mirrors given the same plan; with the companion that shows each row's
        file (the change feed prunes files with it, ``horizon_broker.broker.sql.feed_files``)."""
        try:
            spark = self._spark
            if files:
                frame = spark.read.schema(ddl).parquet(*files)
                named = frame.selectExpr("*", FILE_NAME_EXPRESSION) if companion else None
            else:
                frame = spark.createDataFrame([], ddl)
                named = (
                    spark.createDataFrame([], f"{ddl}, `{FILE_COLUMN}` string")
                    if companion
                    else None
                )
            pairs = [(frame, named)]
            for mirror in self._sessions[1:]:
                pairs.append((_in_session(frame, mirror), _in_session(named, mirror)))
            return _Frames(tuple(pairs))
        except Exception as error:
            raise classify(error, files) from None

    def _register(self, name: str, frames: _Frames) -> None:
        """The view ``name`` (and its companion) over ``frames`` in every session."""
        try:
            for frame, named in frames.per_session:
                frame.createOrReplaceTempView(name)
                if named is not None:
                    named.createOrReplaceTempView(files_view(name))
        except Exception as error:
            raise classify(error) from None

    def _prune_frames(self) -> None:
        """Forget the file sets no entry reads any more."""
        live = {key for entry in self._entries.values() for key in entry.frames}
        for key in [key for key in self._frames if key not in live]:
            del self._frames[key]

    def _evict_older(self, table: str) -> None:
        """Drop this table's views older than its newest layout that no query holds."""
        entries = [(key, entry) for key, entry in self._entries.items() if entry.table == table]
        if not entries:
            return
        newest = max(entry.age for _, entry in entries)
        for key, entry in entries:
            if entry.age < newest and entry.leases == 0:
                del self._entries[key]
                for name in entry.names:
                    self._drop(name)
        self._prune_frames()

    def clear(self) -> None:
        with self._lock:
            for entry in self._entries.values():
                for name in entry.names:
                    self._drop(name)
            self._entries.clear()
            self._frames.clear()

    def _drop(self, name: str) -> None:
        for session in self._sessions:
            for view in (name, files_view(name)):
                with suppress(Exception):  # a vanished session has nothing left to drop
                    session.catalog.dropTempView(view)


def _in_session(frame: Any, session: Any) -> Any:
    """``frame``'s analyzed plan as a DataFrame of ``session`` (a session of the same classic
    Spark context): its files are not listed again. None stays None."""
    if frame is None:
        return None
    from pyspark.sql import DataFrame

    classic = session._jvm.org.apache.spark.sql.classic.Dataset
    return DataFrame(classic.ofRows(session._jsparkSession, frame._jdf.logicalPlan()), session)
