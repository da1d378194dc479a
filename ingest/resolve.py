"""Key resolution as Spark transformations: which record is a key's current version.

The newest version of a key is the greatest by the comparison columns, ties broken by source order
(equivalently commit timestamp: commit timestamps follow source order). A record is *accepted* when
it compares ``>=`` everything before it: the key index's current entry and the key's earlier
records in the batch. Accepted records form the key's chain: each one's ``validUntil`` is the next
accepted record's commit timestamp. A record that loses is out of order: stored with an empty
interval or dropped. A delete that is accepted ends the chain and is never stored itself; it stays in
the key index as a tombstone so an older record that arrives later still loses.

Input columns of the batch: the user columns plus ``_ts`` (commit timestamp), ``_ord`` (unique,
increasing in source order), ``_kp`` (key partition), ``_chunk`` (time chunk start) and the source
position columns. Records of a key are ordered by ``_ord``: several records of one transaction share
a ``_ts``, so an accepted record superseded inside its own transaction gets ``validUntil ==
validFrom`` (never visible, like an out-of-order record: stored or dropped the same way). The key index has one row
per key: ``_cmp``, ``_validFrom``, ``_deleted``, ``_chunk``, ``_seg`` (first-generation partition
number of the segment holding the current version; null for tombstones) and ``_kp``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ingest.table import OutOfOrder, TableDefinition
from watermark.catalog import VALID_FROM, VALID_UNTIL

SOURCE_FILE = "_sourceFile"
SOURCE_POSITION = "_sourcePosition"
INDEX_COLUMNS = ("_cmp", "_validFrom", "_deleted", "_chunk", "_seg", "_kp")


@dataclass(frozen=True, slots=True)
class Resolution:
    """The three outputs of one batch's resolution (lazy DataFrames over one cached frame)."""

    versions: Any
    """Rows to store: user columns, validFrom, validUntil, source position, ``_kp``, ``_chunk``."""
    index_entries: Any
    """The new key index entry of every key whose current version changed (``_seg`` not set)."""
    carried: Any
    """The key index entries of the read partitions whose current version the batch did not change
    (keys not in the batch, or only with records that lost)."""
    updates: Any
    """validUntil updates of versions stored by earlier batches: pk, ``_chunk``, ``_seg``,
    validFrom (the old version's), validUntil (the new one), ``_kp``."""
    cached: Any
    """The frame to unpersist when the batch is done."""


def comparison_struct(table: TableDefinition) -> Any:
    """The comparison value of each row: a struct compared field by field (nulls lowest)."""
    from pyspark.sql import functions as F

    if not table.comparison_columns:
        return F.struct(F.lit(0).alias("_none"))
    return F.struct(*[F.col(name) for name in table.comparison_columns])


def delete_flag(table: TableDefinition) -> Any:
    from pyspark.sql import functions as F

    if table.delete_column is None:
        return F.lit(False)
    return F.coalesce(F.col(table.delete_column), F.lit(False))


def stored_columns(table: TableDefinition) -> list[str]:
    """The columns of a segment file, in order."""
    return [*table.column_names, VALID_FROM, VALID_UNTIL, SOURCE_FILE, SOURCE_POSITION]


def segment_schema(table: TableDefinition) -> str:
    """The Spark DDL of a segment file (given to readers: no schema-inference job per read)."""
    return (
        f"{table.spark_schema_ddl()}, `{VALID_FROM}` bigint, `{VALID_UNTIL}` bigint, "
        f"`{SOURCE_FILE}` string, `{SOURCE_POSITION}` bigint"
    )


def updates_schema(table: TableDefinition) -> str:
    """The Spark DDL of a pending-updates file (see :attr:`Resolution.updates`)."""
    types = {column.name: column.type for column in table.columns}
    key = ", ".join(f"`{name}` {types[name]}" for name in table.primary_key)
    return (
        f"{key}, `_chunk` bigint, `_seg` int, `{VALID_FROM}` bigint, `{VALID_UNTIL}` bigint, "
        "`_kp` int"
    )


def append_only(batch: Any, table: TableDefinition) -> Any:
    """Append tables: every record is its own version, current from its commit on."""
    from pyspark.sql import functions as F

    return batch.select(
        *table.column_names,
        F.col("_ts").alias(VALID_FROM),
        F.lit(None).cast("long").alias(VALID_UNTIL),
        SOURCE_FILE,
        SOURCE_POSITION,
        "_kp",
        "_chunk",
    )


def resolve(batch: Any, index: Any, table: TableDefinition) -> Resolution:
    """Resolve one batch of an upsert table against the key index (see the module docstring)."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    pk = list(table.primary_key)
    renamed = index.select(*pk, *[F.col(name).alias("_i" + name) for name in INDEX_COLUMNS])
    rows = (
        batch.withColumn("_cmp", comparison_struct(table))
        .withColumn("_del", delete_flag(table))
        .withColumn("_inBatch", F.lit(True))
    )
    # A full join: the keys the batch does not touch come through too, so the new key index is
    # written from this one shuffle instead of reading and joining the old index a second time.
    joined = rows.join(renamed, on=pk, how="full")
    in_batch = F.coalesce(F.col("_inBatch"), F.lit(False))

    ordered = Window.partitionBy(*pk).orderBy("_ord")
    before = ordered.rowsBetween(Window.unboundedPreceding, -1)
    after = ordered.rowsBetween(1, Window.unboundedFollowing)
    whole = Window.partitionBy(*pk)

    previous_best = F.max("_cmp").over(before)
    best = F.when(previous_best.isNull(), F.col("_i_cmp")).otherwise(
        F.when(F.col("_i_cmp").isNull(), previous_best).otherwise(
            F.greatest(previous_best, F.col("_i_cmp"))
        )
    )
    accepted = best.isNull() | (F.col("_cmp") >= best)
    flagged = joined.withColumn("_acc", in_batch & accepted)
    accepted_ts = F.when(F.col("_acc"), F.col("_ts"))
    accepted_ord = F.when(F.col("_acc"), F.col("_ord"))
    resolved = (
        flagged.withColumn("_next", F.min(accepted_ts).over(after))
        .withColumn("_first", F.min(accepted_ord).over(whole))
        .withColumn("_firstRow", F.min("_ord").over(whole))
        .persist(StorageLevel.MEMORY_AND_DISK_DESER)
    )

    user = list(table.column_names)
    source = [SOURCE_FILE, SOURCE_POSITION, "_kp", "_chunk"]
    # Superseded inside its own transaction: an empty interval, treated like an out-of-order loss.
    empty = F.coalesce(F.col("_next") == F.col("_ts"), F.lit(False))
    kept = resolved.filter(F.col("_acc") & ~F.col("_del") & ~empty).select(
        *user,
        F.col("_ts").alias(VALID_FROM),
        F.col("_next").alias(VALID_UNTIL),
        *source,
    )
    if table.out_of_order is OutOfOrder.STORE:
        lost = resolved.filter(in_batch & (~F.col("_acc") | empty) & ~F.col("_del")).select(
            *user, F.col("_ts").alias(VALID_FROM), F.col("_ts").alias(VALID_UNTIL), *source
        )
        versions = kept.unionByName(lost)
    else:
        versions = kept

    updates = resolved.filter(
        F.col("_acc")
        & (F.col("_ord") == F.col("_first"))
        & F.col("_i_seg").isNotNull()
        & ~F.coalesce(F.col("_i_deleted"), F.lit(True))
    ).select(
        *pk,
        F.col("_i_chunk").alias("_chunk"),
        F.col("_i_seg").alias("_seg"),
        F.col("_i_validFrom").alias(VALID_FROM),
        F.col("_ts").alias(VALID_UNTIL),
        "_kp",
    )
    entries = resolved.filter(F.col("_acc") & F.col("_next").isNull()).select(
        *pk,
        "_cmp",
        F.col("_ts").alias("_validFrom"),
        F.col("_del").alias("_deleted"),
        "_chunk",
        "_kp",
    )
    # Keys whose entry stays: not in the batch, or only losing records in it (once per key).
    carried = resolved.filter(
        F.col("_i_validFrom").isNotNull()
        & F.col("_first").isNull()
        & (~in_batch | (F.col("_ord") == F.col("_firstRow")))
    ).select(*pk, *[F.col("_i" + name).alias(name) for name in INDEX_COLUMNS])
    return Resolution(
        versions=versions, index_entries=entries, updates=updates, carried=carried, cached=resolved
    )


def empty_index(batch: Any, table: TableDefinition) -> Any:
    """A key index with no rows and the right schema (for partitions never written)."""
    from pyspark.sql import functions as F

    return batch.limit(0).select(
        *table.primary_key,
        comparison_struct(table).alias("_cmp"),
        F.col("_ts").alias("_validFrom"),
        F.lit(False).alias("_deleted"),
        F.col("_chunk"),
        F.lit(None).cast("int").alias("_seg"),
        F.col("_kp"),
    )
