"""Whether the broker itself can read a segment file (the check behind every unreadable mark).

A file is marked unreadable only when Spark's reader failed on it *and* the broker cannot read
its Parquet footer either; a file off this machine's file system (``s3a://``, ``hdfs://``) cannot
be checked here, so the reader's typed failure is taken as the answer.
"""

from __future__ import annotations

from collections.abc import Iterable


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


def file_readable(path: str) -> bool:
    """Whether ``path``'s Parquet footer reads (True for files this machine cannot see)."""
    import pyarrow.parquet as pq

    if not is_local(path):
        return True
    try:
        pq.read_metadata(local_path(path))
    except (OSError, ValueError):
        return False
    return True


def files_readable(paths: Iterable[str]) -> bool:
    """Whether every one of ``paths`` reads (see :func:`file_readable`)."""
    return all(file_readable(path) for path in paths)
