"""Spark temp views over a table's visible segments, one set per (table, timeline generation,
layout bounds).

The rewritten SQL reads ``__horizon_<table>_g<generation>`` instead of the table; when the files
are split by what a scan must test (settled segments, open and closed files, see
``broker.view_layout``), it reads one view per part, each named after the layout's bounds too. A
view is built once (``spark.read.parquet(files)`` with the descriptor's explicit schema, so Spark
neither infers the schema nor opens a footer to plan) and reused by every query until the table's
timeline changes or its LWM passes another segment's greatest validFrom or closed files' greatest
validUntil. Older layouts are dropped once no running query holds them.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from broker.view_layout import VIEW_PREFIX, ViewLayout, view_layout
from timeline.errors import HorizonError, Unavailable
from watermark.catalog import VALIDITY_COLUMNS, TableDescriptor

__all__ = [
    "VIEW_PREFIX",
    "SegmentViews",
    "UnreadableFiles",
    "ViewMissing",
    "classify_read_error",
    "schema_ddl",
]


def schema_ddl(descriptor: TableDescriptor) -> str:
    """The Spark DDL schema of a table's segment files: user columns + validity columns."""
    columns = [f"`{column.name}` {column.type}" for column in descriptor.columns]
    columns += [f"`{name}` bigint" for name in VALIDITY_COLUMNS]
    return ", ".join(columns)


class ViewMissing(Unavailable):
    """A segment view this cache built is gone from the Spark session (dropped by someone else)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"segment view {name} vanished from the Spark session")
        self.name = name


class UnreadableFiles(HorizonError):
    """Spark could not read some segment files (missing or corrupt); the caller falls back."""

    def __init__(self, paths: Sequence[str], detail: str) -> None:
        super().__init__(f"unreadable segment file(s): {', '.join(paths) or '?'} ({detail})")
        self.paths = tuple(paths)
        self.detail = detail


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


class SegmentViews:
    """The cache of segment views of one Spark session."""

    def __init__(self, spark: Any, *, namespace: str = "", mirrors: Sequence[Any] = ()) -> None:
        self._spark = spark
        self._sessions = (spark, *mirrors)
        """Every session the views are registered in (``mirrors`` share the Spark context)."""
        self.namespace = namespace
        self._lock = threading.RLock()
        self._entries: dict[tuple[str, int, int, int], _Entry] = {}
        self._layouts: dict[str, tuple[tuple[int, int | None], ViewLayout]] = {}
        self.builds = 0
        """How many view sets were built (a test and benchmark probe: reuse keeps it flat)."""
        self.layouts_computed = 0
        """How many layouts were derived (a test probe: one per table and state, not per use)."""

    def layout(self, table_view: Any) -> ViewLayout:
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
        layout = view_layout(table_view, self.namespace)
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
        ddl = schema_ddl(descriptor)
        try:
            for session in self._sessions:
                if files:
                    frame = session.read.schema(ddl).parquet(*files)
                else:
                    frame = session.createDataFrame([], ddl)
                frame.createOrReplaceTempView(name)
        except Exception as error:
            raise classify_read_error(error, files) from None

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
            with suppress(Exception):  # a vanished session has nothing left to drop
                session.catalog.dropTempView(name)


_MISSING_MARKERS = (
    "PATH_NOT_FOUND",
    "FILE_NOT_EXIST",
    "FileNotFoundException",
    "does not exist",
    "CANNOT_READ_FILE_FOOTER",
    "FAILED_READ_FILE",
    "is not a Parquet file",
)


def classify_read_error(error: BaseException, files: Sequence[str]) -> BaseException:
    """Turn a Spark failure into :class:`UnreadableFiles` when it is about segment files.

    The paths are taken from Spark's message when it names them, otherwise found by checking which
    local files are gone. Other failures come back unchanged.
    """
    message = str(error)
    if not any(marker in message for marker in _MISSING_MARKERS):
        return error
    named = [path for path in files if _mentions(message, path)]
    if not named:
        named = [path for path in files if is_local(path) and not os.path.exists(local_path(path))]
    if not named:
        if "PATH_NOT_FOUND" in message or "FILE_NOT_EXIST" in message:
            return Unavailable(f"Spark cannot read a file it was given: {_first_line(message)}")
        return error
    return UnreadableFiles(named, _first_line(message))


def _mentions(message: str, path: str) -> bool:
    local = local_path(path)
    candidates = {path, local, os.path.abspath(local)} if is_local(path) else {path}
    for candidate in candidates:
        # The path must end where the message's token ends (no prefix-of-a-longer-name hits).
        if re.search(re.escape(candidate) + r"(?![\w.\-/])", message):
            return True
    return False


def is_local(path: str) -> bool:
    """A path on this machine's file system (plain, or a ``file:`` URI)."""
    return "://" not in path or path.startswith("file:")


def local_path(path: str) -> str:
    """The file system path of a local ``path`` (``file:`` prefixes removed)."""
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    return path


def _first_line(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line[:500]
