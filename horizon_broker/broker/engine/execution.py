"""A started query: its schema, the batches gathered before the first send, the rest as a
stream, and where the time went."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from horizon_broker._core.errors import Unavailable
from horizon_broker.broker.engine.prepared import Prepared
from horizon_broker.broker.engine.result_cache import Recorder
from horizon_broker.broker.spark.failures import UnreadableFiles

Stream = Generator[Any, None, None]
"""A query's answer as it is read: its schema, then its batches; closing it stops the work."""

FIRST_FLUSH_BYTES = 4 * 1024 * 1024
"""Result bytes gathered before anything is sent: a smaller result is whole before the header
goes out, so a segment file found unreadable can still be fallen back from and retried."""


@dataclass(slots=True)
class Execution:
    """A started query: its schema, its result as a stream, what it read, where the time went."""

    prepared: Prepared
    schema: pa.Schema
    head: list[pa.RecordBatch]
    """The batches gathered before the first send."""
    rest: Iterator[Any] | None
    """The executor's stream of the remaining batches (None when ``head`` is everything)."""
    files: tuple[str, ...] = ()
    queued_s: float = 0.0
    rewrite_s: float = 0.0
    views_s: float = 0.0
    spark_s: float = 0.0
    """Seconds spent waiting on Spark (planning, jobs, and reading the streamed batches)."""
    unreadable_segments: list[str] = field(default_factory=list)
    retried: bool = False
    cache: str = ""
    """What the result cache did: hit, miss, off, bypassed, or why the query is not cached."""
    route: str = ""
    """Where the answer came from: the Spark mode, the files directly, or the result cache."""
    recorder: Recorder | None = None
    """On a miss, collects the batches sent, kept in the cache once the stream ends whole."""
    on_failure: Callable[[BaseException], BaseException] | None = None
    """Turns a failure of the streamed rest into the error to raise (the engine's check for a
    lost Spark session)."""
    _held: ExitStack = field(default_factory=ExitStack)

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Every batch of the result, in order; Spark's time while waiting goes to ``spark_s``."""
        head, self.head = self.head, []
        for batch in head:
            self._record(batch)
            yield batch
        if self.rest is None:
            self._finish()
            return
        while True:
            started = time.perf_counter()
            try:
                batch = next(self.rest)
            except StopIteration:
                self._finish()
                return
            except UnreadableFiles as error:
                raise Unavailable(
                    f"{error}; part of the result was already sent, so the query was not "
                    "retried: run the query again"
                ) from None
            except Exception as error:
                if self.on_failure is None:
                    raise
                raise self.on_failure(error) from None
            finally:
                self.spark_s += time.perf_counter() - started
            self._record(batch)
            yield batch

    def _record(self, batch: pa.RecordBatch) -> None:
        if self.recorder is not None:
            self.recorder.add(batch)

    def _finish(self) -> None:
        if self.recorder is not None:
            self.recorder.finish()
            self.recorder = None

    def close(self) -> None:
        """Stop the stream (cancelling Spark's jobs if unfinished) and free the admission slot."""
        self._held.close()


def first_batches(stream: Iterator[Any], limit_bytes: int) -> tuple[list[pa.RecordBatch], bool]:
    """Take batches from ``stream`` until ``limit_bytes`` are held; True when it ran out."""
    head: list[pa.RecordBatch] = []
    held = 0
    while held < limit_bytes:
        try:
            batch = next(stream)
        except StopIteration:
            return head, True
        head.append(batch)
        held += batch.nbytes
    return head, False


def limited_batches(schema: pa.Schema, answer: pa.Table, limits: Any) -> Stream:
    """A whole answer as the executor's stream would yield it (its schema, then its batches),
    with the result limits (:class:`horizon_broker.broker.spark.executor.ResultLimits`) checked."""
    yield schema
    rows = byte_count = 0
    for batch in answer.to_batches():
        rows += batch.num_rows
        byte_count += batch.nbytes
        limits.check(rows, byte_count)
        yield batch


def no_stream() -> Stream:
    """A stream that yields nothing (closable like the others)."""
    yield from ()
