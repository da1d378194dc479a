"""Reading what direct lookups need of new segment files before any lookup asks for it.

Every ingestion batch replaces hundreds of a busy table's files (the updater rewrites each segment
an update lands in), and the first lookup that reads the new files paid for all of them: each
file's footer, its key column and its row-group statistics, about 100 microseconds a file, 40 ms
over 800 files on a quiet machine and several times that while ingestion holds the cores. The
broker's follower shows the new segments to the broker before it applies the events that add
them (:meth:`horizon_broker.watermark.follower.Follower.add_preparer`), so :func:`warm_files` reads their files
while lookups still run on the files before, and the first lookup after the change finds them
cached.

A file is opened once for its footer and its key column. Missing or unreadable files are
skipped: the lookup that needs one reports it as it would have. After each file the interpreter
lock is let go for a moment, so a lookup waiting for it may take it between two files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from horizon_broker.broker.direct_lookup.file_sets import Decline, FooterCache
from horizon_broker.broker.direct_lookup.key_sets import KeySets
from horizon_broker.broker.direct_lookup.reading import is_local, local_path
from horizon_broker.broker.spark.failures import UnreadableFiles
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL


def warm_files(
    paths: Iterable[str],
    key_columns: Sequence[str],
    footers: FooterCache,
    key_sets: KeySets,
    *,
    deadline: float,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Cache the footer, the row-group statistics of the validity and ``key_columns`` (lower-case
    names) and the key sets of the integer ``key_columns`` of each local file of ``paths``,
    until ``deadline`` (on ``clock``). Returns the files done."""
    warmed = 0
    for path in paths:
        if clock() >= deadline:
            break
        if not is_local(path):
            continue
        try:
            _warm_file(path, key_columns, footers, key_sets)
        except (OSError, pa.ArrowException, Decline, UnreadableFiles):
            continue  # missing, not a regular file or unreadable: left to the lookup needing it
        warmed += 1
        time.sleep(0)  # lets the interpreter lock go: a waiting lookup may take it
    return warmed


def _warm_file(
    path: str, key_columns: Sequence[str], footers: FooterCache, key_sets: KeySets
) -> None:
    footer, parquet = footers.opened(path)
    for name in (VALID_FROM.lower(), VALID_UNTIL.lower(), *key_columns):
        footer.column_stats(name)

    def open_file() -> pq.ParquetFile:
        if parquet is not None:  # opened for the footer: its key column is read from it
            return parquet
        return pq.ParquetFile(local_path(path), metadata=footer.metadata)

    for column in key_columns:
        field = footer.fields.get(column)
        if field is not None and pa.types.is_integer(field.type):
            key_sets.keys(path, field.name, open_file)
