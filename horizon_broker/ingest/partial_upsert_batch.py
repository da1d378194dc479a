"""Partial upserts applied to a batch, once, before it takes its road.

The imperative shell around :mod:`horizon_broker.ingest.partial_upsert`. A partial table's batch
is collected on the driver right after its rows are enriched: each record becomes the row its key
has once that record commits, the fold of the key's events committed up to it (this batch's,
in commit order, and every earlier batch's, from the event log below) in comparison order. The
row carries the fold's comparison value, which never decreases along the key's commits, so each
road (driver rows, driver columns, Spark) accepts every record as the key's new version and ends
the one before at its commit, the updater's ``validUntil`` rewrite included: a late event makes a
new version from its commit on, snapshots before it keep what they showed. A delete's row keeps
deleting; a late event below a delete gives the delete again. The transaction column keeps each
event's own value, so commit timestamps are what they would be. A batch without late events is
folded as columns (:mod:`.partial_upsert_scan`, the usual case); any other is folded event by
event in Python (:func:`folded_columns`, the reference).

The event log: each batch writes its events (the user columns as they came, which were absent,
key partition, the batch's first commit timestamp ``_base`` and the event's commit order in it
``_order``) to ``<table root>/_partial_events/<server>/b<seq>/``, a directory the batch's prepare
record names, so a batch that never commits leaves none behind (a restart deletes it). A batch
reads the log of its key partitions, written by any server (a handover moves a partition, not its
events). Its cost grows with the history of the batch's keys: nothing compacts the log yet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from horizon_broker._core.errors import FailedPrecondition
from horizon_broker.ingest.driver_batches import driver_frame
from horizon_broker.ingest.partial_upsert import (
    ABSENT,
    Event,
    Strategy,
    applied,
    comparison_rank,
    fold,
)
from horizon_broker.ingest.partial_upsert_scan import commit_order_arrow, scanned_columns
from horizon_broker.ingest.resolve import SOURCE_FILE
from horizon_broker.ingest.table import TableDefinition

if TYPE_CHECKING:
    from horizon_broker.ingest.server_table import ServerTable


MERGE_ACTION = "collect and merge partial events on the driver"


@dataclass(frozen=True, slots=True)
class MergedBatch:
    """A partial table's batch: the merged rows the roads resolve, and the events to log."""

    rows: Any
    events: Any
    """This batch's events (Arrow), in commit order, without ``_base`` (known at the commit)."""

    def directory(self, server: ServerTable, seq: int) -> str:
        return events_directory(server.root, server.server_id, seq)

    def write_events(self, server: ServerTable, seq: int, base: int) -> None:
        """Log the events as batch ``seq``'s, its commit timestamps starting at ``base``."""
        import pyarrow as pa

        if self.events.num_rows == 0:
            return
        events = self.events.append_column("_base", pa.array([base] * self.events.num_rows))
        directory = self.directory(server, seq)
        local = server.storage.local_path(directory)
        if local is not None:
            _write_local(events, local)
        else:
            server.spark.createDataFrame(events).write.mode("overwrite").parquet(directory)


def events_directory(root: str, server_id: str, seq: int) -> str:
    """Where batch ``seq`` of a server logs its partial events."""
    return f"{events_root(root)}/{server_id}/b{seq:010d}"


def events_root(root: str) -> str:
    """The event log of a table (its root ``root``): one directory per server, then batch."""
    return f"{root}/_partial_events"


def merge_batch(server: ServerTable, rows: Any) -> MergedBatch:
    """The enriched ``rows`` of a partial table's batch with their merged values (a local frame
    of the same columns, so every road reads the same rows; the driver roads take its Arrow
    without collecting it again), and the events they were."""
    with server.steps.action(MERGE_ACTION):
        merged, log = merged_arrow(
            server.table,
            rows.toArrow(),
            lambda partitions, keys: read_history(server, partitions, keys),
        )
        schema = rows.drop(ABSENT).schema if ABSENT in rows.columns else rows.schema
        frame = driver_frame(server.spark, merged.select(schema.names), schema)
    return MergedBatch(frame, log)


HistoryReader = Callable[[Sequence[int], Mapping[str, Sequence[Any]]], Any]
"""The logged events (Arrow; None: no log) of some key partitions and key values
(:func:`read_history`)."""


def merged_arrow(table: TableDefinition, collected: Any, history: HistoryReader) -> tuple[Any, Any]:
    """A collected batch (Arrow, enriched) as its merged rows (the same columns but
    :data:`ABSENT`) and its events to log, in commit order (the driver's work of
    :func:`merge_batch`): folded as columns when the batch has no late event
    (:mod:`.partial_upsert_scan`), else event by event in Python."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    user = list(table.column_names)
    order = commit_order_arrow(collected, SOURCE_FILE, table.transaction_column)
    logged = None
    if collected.num_rows:
        touched = sorted(pc.unique(collected["_kp"]).to_pylist())
        keys = {name: pc.unique(collected[name]).to_pylist() for name in table.primary_key}
        logged = history(touched, keys)
    columns = scanned_columns(table, collected, order, logged)
    if columns is None:
        columns = folded_columns(table, collected, logged)
    others = [name for name in collected.column_names if name not in user and name != ABSENT]
    result = pa.table({**columns, **{name: collected[name] for name in others}})
    taken = pa.array(order.astype(np.int64))
    absent = (
        collected[ABSENT].cast(pa.list_(pa.string())).take(taken)
        if ABSENT in collected.column_names
        else pa.array([[]] * len(order), pa.list_(pa.string()))
    )
    log = pa.table(
        {
            **{name: collected[name].take(taken) for name in user},
            "_kp": collected["_kp"].take(taken),
            "_order": pa.array(range(len(order)), type=pa.int64()),
            ABSENT: absent,
        }
    )
    return result, log


def folded_columns(table: TableDefinition, collected: Any, logged: Any) -> dict[str, Any]:
    """The merged user columns of a collected batch, each event folded in Python (the
    reference; any batch)."""
    records = collected.to_pylist()
    absent = [set(record.pop(ABSENT, None) or ()) for record in records]
    order = commit_order(records, table.transaction_column)
    batch = [
        event_of(records[index], absent[index], table, (1, 0, rank), index)
        for rank, index in enumerate(order)
    ]
    merged = merged_rows(batch, history_events(table, logged), table)
    return {
        name: merged_column(table, name, [row[name] for row in merged], collected.schema)
        for name in table.column_names
    }


def merged_column(table: TableDefinition, name: str, values: list[Any], schema: Any) -> Any:
    """A column of merged values as Arrow, in the batch's type; a value the type cannot hold
    (an increment past the integer's range) fails the batch naming the column."""
    import pyarrow as pa

    type_ = schema.field(name).type
    try:
        return pa.array(values, type=type_)
    except (pa.ArrowInvalid, OverflowError) as error:
        raise FailedPrecondition(
            f"table {table.name!r}: column {name!r} merged to a value its type {type_} cannot "
            f"hold ({error}): widen the column"
        ) from None


def commit_order(records: Sequence[dict[str, Any]], transaction: str | None) -> list[int]:
    """The records' indices in commit order: source order (file, Spark partition, row, as the
    commit timestamps are handed out), a transaction's changes at its first change's place."""

    def place(record: dict[str, Any]) -> tuple[str, int, int]:
        return (record[SOURCE_FILE], record["_pid"], record["_row"])

    first: dict[Any, tuple[str, int, int]] = {}
    if transaction is not None:
        for record in records:
            value = record[transaction]
            if value is not None:
                first[value] = min(first.get(value, place(record)), place(record))

    def key(index: int) -> tuple[tuple[str, int, int], tuple[str, int, int]]:
        record = records[index]
        own = place(record)
        value = record[transaction] if transaction is not None else None
        return (own if value is None else first[value], own)

    return sorted(range(len(records)), key=key)


def event_of(
    record: dict[str, Any],
    absent: set[str],
    table: TableDefinition,
    commit: tuple[int, int, int],
    position: int,
) -> Event:
    """A record as the fold's event; ``commit``: its place in commit order across batches."""
    values = {name: record[name] for name in table.column_names if name not in absent}
    deleted = bool(table.delete_column is not None and record.get(table.delete_column))
    rank = (comparison_rank(values, table.comparison_columns), commit)
    return Event(values, deleted, rank, position)


def merged_rows(
    batch: Sequence[Event], history: Sequence[Event], table: TableDefinition
) -> list[dict[str, Any]]:
    """Each batch event's row (by its ``position``): the fold of its key's events up to it in
    commit order (``batch`` is in commit order, after all of ``history``)."""
    strategies: dict[str, Strategy] = dict(table.partial_upsert or ())
    key_of = _key_function(table.primary_key)
    keys: dict[tuple[Any, ...], _KeyFold] = {}
    for event in history:
        keys.setdefault(key_of(event.values), _KeyFold()).events.append(event)
    for state in keys.values():
        state.refold(strategies, table.column_names)
    rows: list[dict[str, Any]] = [{} for _ in batch]
    for event in batch:
        state = keys.setdefault(key_of(event.values), _KeyFold())
        state.add(event, strategies, table.column_names)
        row = state.row
        if row is None:  # deleted: the newest delete again, which the roads never store
            assert state.newest is not None  # the event just added, at least
            row = {**dict.fromkeys(table.column_names), **state.newest.values}
            if table.delete_column is not None:
                row[table.delete_column] = True
        else:
            row = dict(row)
        if table.transaction_column is not None:
            row[table.transaction_column] = event.values.get(table.transaction_column)
        rows[event.position] = row
    return rows


@dataclass(slots=True)
class _KeyFold:
    """A key's events and their fold: an event newer than all the others is applied to the
    row, a late one folds them all again (in-order events cost one merge each)."""

    events: list[Event] = field(default_factory=list)
    row: dict[str, Any] | None = None
    newest: Event | None = None

    def refold(self, strategies: dict[str, Strategy], columns: Sequence[str]) -> None:
        self.row = fold(self.events, strategies, columns)
        self.newest = max(self.events, key=lambda item: item.rank, default=None)

    def add(self, event: Event, strategies: dict[str, Strategy], columns: Sequence[str]) -> None:
        self.events.append(event)
        if self.newest is None or event.rank >= self.newest.rank:
            self.row = applied(self.row, event, strategies, columns)
            self.newest = event
        else:
            self.refold(strategies, columns)


def _key_function(primary_key: Sequence[str]) -> Any:
    def key(values: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(values.get(name) for name in primary_key)

    return key


def read_history(
    server: ServerTable, partitions: Sequence[int], keys: Mapping[str, Sequence[Any]]
) -> Any:
    """The logged events of the batch's keys (``keys``: each key column's values in the batch;
    a composite key may take a few other keys' events too, which fold apart harmlessly) in its
    key partitions, from every server's committed batches, as Arrow (None: no log yet). Only
    these keys' events are folded: the log of the partitions holds the whole table's history."""
    table = server.table
    root = events_root(server.root)
    if not server.storage.exists(root):
        return None
    local = server.storage.local_path(root)
    if local is not None:
        logged = read_local_log(local, partitions, keys)
    else:
        from pyspark.sql import functions as F

        schema = f"{table.spark_schema_ddl()}, `_kp` int, `_order` bigint, "
        schema += f"`{ABSENT}` array<string>, `_base` bigint"
        frame = server.spark.read.schema(schema).parquet(f"{root}/*/*")
        wanted = F.col("_kp").isin(list(partitions))
        for name, values in keys.items():
            wanted = wanted & F.col(name).isin(list(values))
        logged = frame.filter(wanted).toArrow()
    return logged


def history_events(table: TableDefinition, logged: Any) -> list[Event]:
    """The logged events (Arrow; None: none) as the fold's."""
    events = []
    for record in [] if logged is None else logged.to_pylist():
        commit = (0, int(record["_base"]), int(record["_order"]))
        events.append(event_of(record, set(record[ABSENT] or ()), table, commit, 0))
    return events


def read_local_log(
    directory: str, partitions: Sequence[int], keys: Mapping[str, Sequence[Any]]
) -> Any:
    """The events logged under the local ``directory`` (every server's batches) of the key
    partitions ``partitions`` whose key columns take the values ``keys`` gives (Arrow)."""
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    files = sorted(str(path) for path in Path(directory).glob("*/*/*.parquet"))
    tables = [pq.read_table(path) for path in files]
    if not tables:
        return pa.table({})
    logged = pa.concat_tables(tables, promote_options="default")
    wanted = {"_kp": partitions, **keys}
    mask = None
    for name, values in wanted.items():
        column = logged[name]
        kept = pc.is_in(column, value_set=pa.array(list(values), type=column.type))
        mask = kept if mask is None else pc.and_(mask, kept)
    return logged.filter(mask)


def _write_local(events: Any, directory: str) -> None:
    import os

    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    temporary = f"{directory}/.events.parquet.tmp"
    pq.write_table(events, temporary)
    os.replace(temporary, f"{directory}/events.parquet")
