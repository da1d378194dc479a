"""A stream table as Structured Streaming: a Python data source reading Redis stream entries.

``horizon ingest --stream`` (:meth:`horizon_broker.ingest.server.IngestServer.run_stream`) runs
one query per table; for a table with a ``stream`` the query's source is this data source
(``horizon_redis_stream``, registered on the session on first use). Its offset is the last entry
id read (``{"after": id}``); a micro-batch holds at most ``max_events`` entries (its default read
limit, Spark's backpressure) and never crosses an owned partition's offset. Its Spark task reads
the entries by id (:func:`horizon_broker.ingest.redis_stream_read.read_entries`, the one reading
path of stream tables) and returns them raw, each its id and fields; ``foreachBatch`` collects
them and hands them to the same batch a server pass makes
(:func:`horizon_broker.ingest.redis_stream_batches.stream_batch`), so the rows are flattened and
dead-lettered once, on the driver, and take whichever road their number picks.

A new query starts after the offsets the commit log holds, not from the stream's start. A
micro-batch replayed after a crash is recognised by its entries (the commit log's offsets), so
Spark's checkpoint and the commit log may disagree without an entry lost or ingested twice.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows

from horizon_broker._core.redis_calls import connect
from horizon_broker.ingest import redis_stream_batches
from horizon_broker.ingest.debezium_truncate import keys_reader
from horizon_broker.ingest.redis_stream_read import Entry, judged_read, read_entries
from horizon_broker.ingest.redis_stream_source import StreamSource
from horizon_broker.ingest.redis_stream_trim import StreamPosition
from horizon_broker.ingest.stream_offsets import (
    entry_key,
    read_bounds,
    unconsumed_runs,
)

if TYPE_CHECKING:
    from horizon_broker.ingest.job import BatchResult, IngestJob

SOURCE_NAME = "horizon_redis_stream"
ENTRY_SCHEMA = "entry string, fields string"
"""A micro-batch's rows: each entry's id and its fields as a JSON object, and one more row
(:data:`POSITION_ROW`) saying where the read's start stood in the stream as it was read."""
POSITION_ROW = ""
"""The entry of a micro-batch's position row (no stream entry has an empty id)."""


@dataclass(frozen=True)
class EntryRange(InputPartition):
    """The entries after ``after`` (empty: from the first) through ``through``."""

    after: str
    through: str


class RedisStreamDataSource(DataSource):
    """Options: ``url``, ``key``, ``after`` (the first micro-batch reads after it), ``stops``
    (owned partitions' offsets, comma-separated: no micro-batch crosses one), ``max_events``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return ENTRY_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return RedisStreamReader(dict(self.options))


class RedisStreamReader(DataSourceStreamReader):
    """Offsets ``{"after": <entry id or "">}``; each micro-batch one Spark task."""

    def __init__(self, options: dict[str, str]) -> None:
        self.url = options["url"]
        self.key = options["key"]
        self.after = options.get("after", "")
        self.max_events = int(options.get("max_events", "10000"))
        self.stops = sorted(
            (stop for stop in options.get("stops", "").split(",") if stop), key=entry_key
        )

    def initialOffset(self) -> dict[str, str]:
        return {"after": self.after}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_events)

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:
        """The last entry a micro-batch from ``start`` reads: at most the limit's rows, never
        past the next owned partition's offset."""
        after = start.get("after") or None
        count = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        through = next(
            (s for s in self.stops if after is None or entry_key(s) > entry_key(after)), None
        )
        client = connect(self.url, socket_timeout=30.0)
        try:
            entries = read_entries(client, self.key, after, through, count)
        finally:
            client.close()
        return {"after": entries[-1].id} if entries else dict(start)

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> list[EntryRange]:
        if start.get("after", "") == end.get("after", ""):
            return []
        return [EntryRange(start.get("after", ""), end["after"])]

    def read(self, partition: EntryRange) -> Iterator[tuple[str, str]]:  # type: ignore[override]
        """The range's entries, then a row saying where its start stood as they were read (one
        script: :func:`horizon_broker.ingest.redis_stream_read.judged_read`), for the driver's
        trim check (:func:`read_position`)."""
        client = connect(self.url, socket_timeout=30.0)
        try:
            entries, position = judged_read(
                client, self.key, partition.after or None, partition.through, None
            )
        finally:
            client.close()
        for entry in entries:
            yield entry.id, json.dumps(entry.fields)
        read = {"position": dataclasses.asdict(position), "after": partition.after}
        yield POSITION_ROW, json.dumps(read)


def read_position(rows: list[Any]) -> tuple[list[Entry], tuple[str | None, StreamPosition] | None]:
    """A micro-batch's collected rows as its entries, and where its read started (None: the
    first entry) and stood as its Spark task read them (None: no such row, a frame made
    elsewhere)."""
    entries, read_at = [], None
    for row in rows:
        if row["entry"] == POSITION_ROW:
            read = json.loads(row["fields"])
            read_at = (read["after"] or None, StreamPosition(**read["position"]))
        else:
            entries.append(Entry(row["entry"], json.loads(row["fields"])))
    return entries, read_at


def stream_frame(job: IngestJob, source: StreamSource) -> Any:
    """A streaming frame of the table's stream, starting after the commit log's offsets."""
    spark = job.spark
    spark.dataSource.register(RedisStreamDataSource)
    offsets = redis_stream_batches.owned_offsets(job, source.key)
    after, _ = read_bounds(offsets, job.partitions)
    stops = sorted({o for o in offsets.values() if o is not None}, key=entry_key)
    return (
        spark.readStream.format(SOURCE_NAME)
        .option("url", source.url)
        .option("key", source.key)
        .option("after", after or "")
        .option("stops", ",".join(stops))
        .option("max_events", str(source.max_events))
        .load()
    )


def micro_batch(
    job: IngestJob, source: StreamSource, client: Any
) -> Callable[[Any, int], list[BatchResult]]:
    """What ``foreachBatch`` runs: the micro-batch's entries collected, then ingested as a
    server pass ingests them (entries the commit log has are left out, the rest cut at the owned
    partitions' offsets); returns each batch's result, with the lag after it. Entries trimmed
    from the stream before the table read them stop it first (or are counted, under
    ``on_stream_trimmed = "skip"``), as in a server pass."""

    def each(frame: Any, batch_id: int) -> list[BatchResult]:
        del batch_id  # the entries name the batch, not Spark's numbering
        entries, read_at = read_position(frame.collect())
        offsets = redis_stream_batches.owned_offsets(job, source.key)
        after, _ = read_bounds(offsets, job.partitions)
        if read_at is not None and read_at[0] == after:  # judged where the task read
            trimmed = redis_stream_batches.judge_position(job, source, after, read_at[1])
        else:  # read from before the offset (a replay), or not by the source: judged now
            with redis_stream_batches.stream_errors(source):
                trimmed = redis_stream_batches.check_trimmed(job, source, client)
        ids = [entry.id for entry in entries]
        results = []
        runs = unconsumed_runs(ids, offsets, job.partitions)
        for start, end in _pieces(runs, source.max_events):
            job.follow_registered_schema()  # an alter since the last batch: flatten under it
            batch = redis_stream_batches.stream_batch(
                job.server, source, entries[start:end], keys_reader(job)
            )
            result = job.run_batch(batch.frame, sources=[batch.name])
            result, trimmed = dataclasses.replace(result, stream_trimmed=trimmed), 0
            lag = redis_stream_batches.table_lag(job, source, client)
            results.append(
                redis_stream_batches.remembered(
                    job,
                    redis_stream_batches.with_lag(
                        redis_stream_batches.with_arrival(result, batch), lag
                    ),
                )
            )
        return results

    return each


def _pieces(runs: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """The runs cut into pieces of at most ``size`` entries (a micro-batch of an
    ``availableNow`` query holds every entry there was: its batches still take ``max_events``).

    >>> _pieces([(0, 5), (5, 6)], 2)
    [(0, 2), (2, 4), (4, 5), (5, 6)]
    """
    return [(low, min(low + size, end)) for start, end in runs for low in range(start, end, size)]


def run_query(
    job: IngestJob,
    source: StreamSource,
    client: Any,
    checkpoint: str,
    *,
    available_now: bool = False,
    processing_time: str | None = None,
    on_batch: Callable[[BatchResult], None] | None = None,
) -> Any:
    """Start the table's streaming query over its Redis stream; returns it."""
    job.start()
    ingest = micro_batch(job, source, client)

    def each(frame: Any, batch_id: int) -> None:
        for result in ingest(frame, batch_id):
            if on_batch is not None:
                on_batch(result)

    writer = (
        stream_frame(job, source)
        .writeStream.foreachBatch(each)
        .option("checkpointLocation", checkpoint)
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif processing_time:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()
