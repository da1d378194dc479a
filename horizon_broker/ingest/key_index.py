"""Key index levels: where a batch's resolution lives, and reading the index back from them.

A batch writes its resolved frame once, one ``_kpDir=<key partition>`` directory per partition
(:func:`resolution_directory`); each such directory is that partition's newest key index level
and holds the batch's pending ``validUntil`` updates. A partition's index is a stack of levels,
oldest first (:class:`horizon_broker.ingest.manifest.KeyIndexVersion`): a batch adds its level on top, a read
takes each key's newest entry, and once a partition has :data:`MAX_INDEX_LEVELS` levels the next
batch resolves against the whole index, so its level holds every key and replaces the stack.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from horizon_broker._core.errors import Internal
from horizon_broker.ingest.bucketing import BUCKET_COLUMN, BucketLayout, bucket_column
from horizon_broker.ingest.manifest import KeyIndexVersion
from horizon_broker.ingest.resolve import (
    empty_index,
    index_entries,
    resolution_schema,
    with_derived_columns,
)
from horizon_broker.ingest.storage import Storage
from horizon_broker.ingest.table import TableDefinition

MAX_INDEX_LEVELS = 8
"""Key index levels of a partition before a batch writes its full index again."""
INDEX_PARTITION_DIR = "_kpDir"
_RESOLUTION = re.compile(r"/_keyindex/[^/]+/r\d+(?:/|$)")


def private_directory(root: str, server_id: str) -> str:
    """Where a server keeps the files only it reads: its batches' resolutions."""
    return f"{root}/_keyindex/{server_id}"


def resolution_directory(root: str, server_id: str, seq: int) -> str:
    """Where batch ``seq`` writes its resolved frame (its key index level and pending updates),
    one ``_kpDir=<key partition>`` directory per partition."""
    return f"{private_directory(root, server_id)}/r{seq:010d}"


def is_resolution(path: str) -> bool:
    """Whether a key index level or pending updates path is a batch's resolution (the older
    layout wrote key index entries and updates as files of their own)."""
    return _RESOLUTION.search(path) is not None


def resolves_against_levels(
    key_index: Mapping[int, KeyIndexVersion], partitions: Sequence[int]
) -> bool:
    """Whether a batch touching ``partitions`` resolves against their levels only (and adds one
    on top): not once a partition has :data:`MAX_INDEX_LEVELS` levels (then it resolves against
    the whole index, and its level replaces the stack)."""
    return all(len(key_index[kp].levels) < MAX_INDEX_LEVELS for kp in partitions if kp in key_index)


def read_resolutions(spark: Any, table: TableDefinition, paths: Sequence[str]) -> Any:
    """Batches' resolved frames (whole batch directories or single partitions of them)."""
    unknown = [path for path in paths if not is_resolution(path)]
    if unknown:
        raise Internal(
            f"table {table.name!r}: the commit log names files in a layout this version "
            f"does not read (written before key index levels were batches' resolutions): "
            f"{unknown[:3]}"
        )
    # Found recursively: partition discovery refuses several batch directories at once.
    stored = (
        spark.read.schema(resolution_schema(table))
        .option("recursiveFileLookup", "true")
        .parquet(*paths)
    )
    return with_derived_columns(stored, table)


def read_index(
    spark: Any,
    table: TableDefinition,
    key_index: Mapping[int, KeyIndexVersion],
    partitions: Sequence[int],
    like: Any,
    layout: BucketLayout,
    *,
    only_keys: Any | None = None,
) -> Any:
    """The key index of ``partitions``, split like the batch: of several levels, each key's
    newest entry (ranked in the split and order the join with the batch needs anyway).

    ``only_keys``, a frame of primary keys (the batch's), keeps only their entries: a batch that
    resolves its own keys alone (a left join) needs no others, and filtering each level as it is
    read (the keys broadcast to the reading tasks) spares shuffling and sorting the whole index,
    which grows with the table, for the few keys a batch has.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    stacks = [key_index[kp].levels for kp in partitions if kp in key_index]
    if not stacks:
        return empty_index(like, table).withColumn(BUCKET_COLUMN, bucket_column(layout))

    def entries(paths: Sequence[str]) -> Any:
        found = index_entries(read_resolutions(spark, table, paths), table)
        if only_keys is None:
            return found
        return found.join(F.broadcast(only_keys), on=list(table.primary_key), how="left_semi")

    deepest = max(len(levels) for levels in stacks)
    if deepest == 1:
        index = entries([levels[0] for levels in stacks])
        return index.withColumn(BUCKET_COLUMN, bucket_column(layout))
    frames = [
        entries([levels[level] for levels in stacks if len(levels) > level]).withColumn(
            "_level", F.lit(level)
        )
        for level in range(deepest)
    ]
    stacked = frames[0]
    for frame in frames[1:]:
        stacked = stacked.unionByName(frame)
    keys = [*table.primary_key, BUCKET_COLUMN]  # key first: see resolve()
    newest_first = Window.partitionBy(*keys).orderBy(F.col("_level").desc())
    return (
        stacked.withColumn(BUCKET_COLUMN, bucket_column(layout))
        .repartition(layout.tasks, BUCKET_COLUMN)
        .withColumn("_rank", F.row_number().over(newest_first))
        .filter(F.col("_rank") == 1)
        .drop("_rank", "_level")
    )


def levels_after_batch(
    storage: Storage,
    key_index: Mapping[int, KeyIndexVersion],
    directory: str,
    touched: Sequence[int],
    on_top: bool,
) -> dict[int, tuple[str, ...]]:
    """The key index levels of each touched partition after a batch wrote its resolution to
    ``directory``: its partition directory goes on top of them (``on_top``), or replaces them
    when the batch resolved against the whole index (then it holds every key)."""
    written = {
        info.path.rstrip("/").rsplit(f"/{INDEX_PARTITION_DIR}=", 1)[-1]
        for info in storage.list_dir(directory)
        if f"/{INDEX_PARTITION_DIR}=" in info.path
    }
    levels: dict[int, tuple[str, ...]] = {}
    for kp in touched:
        if str(kp) not in written:
            raise Internal(f"the resolution of key partition {kp} wrote no file")
        path = f"{directory}/{INDEX_PARTITION_DIR}={kp}"
        below = key_index.get(kp)
        levels[kp] = (*below.levels, path) if on_top and below is not None else (path,)
    return levels
