"""Which announced segment files the broker may read: those under their table's storage root.

An announcement names files by path; a broker must never be pointed at a file outside the
table's registered root (``/data/t/../../etc/passwd``, another table's files). Pure.
"""

from __future__ import annotations

from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import TableDescriptor


def outside_storage_root(descriptor: TableDescriptor, segment: Segment) -> str | None:
    """Why ``segment``'s files may not be read, when one lies outside the table's registered
    storage root (an announcement must not point the broker at any other file), else None.

    >>> from horizon_broker.watermark.catalog import ColumnSpec
    >>> from horizon_broker.timeline.interval import Interval
    >>> d = TableDescriptor("t", (ColumnSpec("k", "int"),), ("k",), storage_root="/data/t")
    >>> def at(path): return Segment(table="t", interval=Interval(0, 1), version="v",
    ...                              partition=0, location=(path,))
    >>> outside_storage_root(d, at("file:///data/t/p0/a.parquet")) is None
    True
    >>> outside_storage_root(d, at("/data/t/../../etc/passwd"))
    "file /data/t/../../etc/passwd is outside the table's storage root /data/t"
    """
    root = _normal_location(descriptor.storage_root)
    for path in (*segment.location, *segment.open_files):
        if not root:
            return (
                f"file {path} cannot be checked: table {descriptor.name} registered no storage root"
            )
        normal = _normal_location(path)
        if ".." in normal.split("/") or not normal.startswith(root + "/"):
            return f"file {path} is outside the table's storage root {descriptor.storage_root}"
    return None


def _normal_location(path: str) -> str:
    """``file:`` URIs as plain paths, no trailing slash (``file:///a/`` -> ``/a``)."""
    if path.startswith("file:"):
        path = "/" + path[len("file:") :].lstrip("/")
    return path.rstrip("/")
