"""A Debezium truncate (``op = t``) as a delete of every key current at its place.

A truncate names no keys: it ends whatever is current in the source table when it commits. A
table that allows it (``allow_truncate``) turns it, before the batch takes any of its roads
(driver rows, driver columns, Spark), into one delete row per key that may be current at that
point: every key the table's index holds alive in the partitions this server owns, and every key
of the batch's rows before the truncate. The deletes carry the truncate's log position (so each
ends its key's versions before it, and a later change of the key starts a new one) and its
transaction (so they commit together, at one timestamp: a snapshot sees the table whole or
truncated, never half). A delete of a key not current is a tombstone the resolution keeps and
stores nothing for, so taking too many keys is harmless; taking too few is not possible, since a
version of a key can only be current if the index or the batch has it.

:func:`expanded` is pure; :func:`current_keys` reads the key index with Spark (a truncate is rare,
and its cost is one read of the index of the owned partitions).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from horizon_broker.ingest.debezium import Flattened
from horizon_broker.ingest.key_index import read_resolutions
from horizon_broker.ingest.resolve import index_entries
from horizon_broker.ingest.table import TableDefinition

if TYPE_CHECKING:
    from horizon_broker.ingest.job import IngestJob
    from horizon_broker.ingest.manifest import KeyIndexVersion

KeysReader = Callable[[], list[tuple[Any, ...]]]
"""The primary keys (in the table's key order) current in the table before a batch."""


def expanded(
    flattened: Flattened, primary_key: Sequence[str], current: KeysReader | None
) -> Flattened:
    """``flattened`` with each truncate replaced by a delete of every key current at its place
    (``current``: the keys current before the batch, read once, only when there is a truncate).

    >>> from horizon_broker.ingest.debezium import Truncation
    >>> rows = [{"id": 3, "d": False}]
    >>> cut = Flattened(rows, ["f"], [], 0, [frozenset()], [Truncation(1, {"id": None, "d": True}, "f")])
    >>> [row["id"] for row in expanded(cut, ["id"], lambda: [(1,)]).rows]
    [3, 1, 3]
    """
    if not flattened.truncates:
        return flattened
    before = list(current()) if current is not None else []
    rows: list[dict[str, Any]] = []
    sources: list[str] = []
    absent: list[frozenset[str]] = []
    seen: dict[tuple[Any, ...], None] = dict.fromkeys(before)
    done = 0
    for truncation in flattened.truncates:
        for index in range(done, truncation.at):
            row = flattened.rows[index]
            seen.setdefault(tuple(row[name] for name in primary_key), None)
            rows.append(row)
            sources.append(flattened.sources[index])
            absent.append(_absent(flattened, index))
        done = truncation.at
        for key in seen:
            rows.append({**truncation.values, **dict(zip(primary_key, key, strict=True))})
            sources.append(truncation.source)
            absent.append(frozenset())
    for index in range(done, len(flattened.rows)):
        rows.append(flattened.rows[index])
        sources.append(flattened.sources[index])
        absent.append(_absent(flattened, index))
    return Flattened(rows, sources, flattened.dead_letters, flattened.tombstones, absent)


def _absent(flattened: Flattened, index: int) -> frozenset[str]:
    return flattened.absent[index] if index < len(flattened.absent) else frozenset()


def current_keys(
    spark: Any,
    table: TableDefinition,
    key_index: Mapping[int, KeyIndexVersion],
    partitions: Sequence[int],
) -> list[tuple[Any, ...]]:
    """The keys the index of ``partitions`` holds alive (each key's newest entry not a
    delete), read with Spark."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    stacks = [key_index[kp].levels for kp in partitions if kp in key_index]
    if not stacks:
        return []
    frames = [
        index_entries(
            read_resolutions(
                spark, table, [levels[depth] for levels in stacks if len(levels) > depth]
            ),
            table,
        ).withColumn("_level", F.lit(depth))
        for depth in range(max(len(levels) for levels in stacks))
    ]
    stacked = frames[0]
    for frame in frames[1:]:
        stacked = stacked.unionByName(frame)
    keys = list(table.primary_key)
    newest = Window.partitionBy(*keys).orderBy(F.col("_level").desc())
    alive = (
        stacked.withColumn("_rank", F.row_number().over(newest))
        .filter((F.col("_rank") == 1) & ~F.col("_deleted"))
        .select(*keys)
    )
    return [tuple(row) for row in alive.collect()]


def keys_reader(job: IngestJob) -> KeysReader:
    """The keys current in ``job``'s partitions, read when called (at most once a batch)."""
    return lambda: current_keys(job.spark, job.table, job.state.key_index, job.partitions)
