"""Spark temp views over a table's visible segments, one set per (table, timeline generation,
layout bounds).

The rewritten SQL reads ``__horizon_<table>_g<generation>`` instead of the table; when the files
are split by what a scan must test (settled segments, open and closed files, see
``horizon_broker.broker.spark.scan_layout``), it reads one view per part, each named after the layout's bounds too. A
view is built once (``spark.read.parquet(files)`` with the descriptor's explicit schema, so Spark
neither infers the schema nor opens a footer to plan) and reused by every query until the table's
timeline changes or its LWM passes another segment's greatest validFrom or closed files' greatest
validUntil. Older layouts are dropped once no running query holds them.
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


@dataclass(slots=True)
class _Entry:
    table: str
    generation: int
    bounds: tuple[int, int]
    """The layout's ``settled_through`` and ``closed_through``, -1 for none: both only grow
    with the LWM within one generation."""
    names: tuple[str, ...]
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
        self.builds = 0
        """How many view sets were built (a test and benchmark probe: reuse keeps it flat)."""
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
                built: list[str] = []
                try:
                    for part in layout.parts:
                        self._build(part.name, table_view.descriptor, part.files)
                        built.append(part.name)
                except BaseException:
                    for name in built:
                        self._drop(name)
                    raise
                entry = _Entry(table, key[1], bounds, layout.names)
                self._entries[key] = entry
                self.builds += 1
            entry.leases += 1
            self._evict_older(table)
            return entry

    def _build(self, name: str, descriptor: TableDescriptor, files: Sequence[str]) -> None:
        """The view ``name`` over ``files``, and its companion that shows each row's file (the
        change feed prunes files with it, ``horizon_broker.broker.sql.feed_files``)."""
        ddl = schema_ddl(descriptor)
        companion = prunable(column.name for column in descriptor.columns)
        try:
            for session in self._sessions:
                if files:
                    frame = session.read.schema(ddl).parquet(*files)
                    named = frame.selectExpr("*", FILE_NAME_EXPRESSION)
                else:
                    frame = session.createDataFrame([], ddl)
                    named = session.createDataFrame([], f"{ddl}, `{FILE_COLUMN}` string")
                frame.createOrReplaceTempView(name)
                if companion:
                    named.createOrReplaceTempView(files_view(name))
        except Exception as error:
            raise classify(error, files) from None

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

    def clear(self) -> None:
        with self._lock:
            for entry in self._entries.values():
                for name in entry.names:
                    self._drop(name)
            self._entries.clear()

    def _drop(self, name: str) -> None:
        for session in self._sessions:
            for view in (name, files_view(name)):
                with suppress(Exception):  # a vanished session has nothing left to drop
                    session.catalog.dropTempView(view)
