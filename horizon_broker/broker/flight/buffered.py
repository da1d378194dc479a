"""A query's whole result, read from Spark by GetFlightInfo so that no query slot waits on DoGet.

A started query holds one of the broker's few query slots until its result is read. A Flight
client may take its time to redeem the ticket, or never do it; so GetFlightInfo reads the whole
result (bounded by ``[limits]`` max_result_rows and max_result_bytes, as any query) and frees
the slot before it answers. A small result stays in memory; past ``memory_bytes`` the batches go
to a temporary Arrow IPC stream file, read back by DoGet and deleted when the result ends.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from horizon_broker.broker.engine.execution import FIRST_FLUSH_BYTES, Execution

SPILL_PREFIX = "horizon-flight-result-"


@dataclass(slots=True)
class BufferedResult:
    """The batches of one result: those in ``memory``, then those in the file at ``path``."""

    memory: list[pa.RecordBatch] = field(default_factory=list)
    path: str | None = None
    rows: int = 0
    nbytes: int = 0

    @classmethod
    def read(
        cls, batches: Iterable[pa.RecordBatch], memory_bytes: int, directory: str | None = None
    ) -> BufferedResult:
        """Every batch of ``batches``, kept in memory up to ``memory_bytes``, the rest spilled
        to a file in ``directory`` (the system's temporary directory by default)."""
        result = cls()
        writer: pa.RecordBatchStreamWriter | None = None
        sink: pa.OSFile | None = None
        try:
            for batch in batches:
                result.rows += batch.num_rows
                result.nbytes += batch.nbytes
                if writer is None and result.nbytes <= memory_bytes:
                    result.memory.append(batch)
                    continue
                if writer is None:
                    handle, result.path = tempfile.mkstemp(prefix=SPILL_PREFIX, dir=directory)
                    os.close(handle)
                    sink = pa.OSFile(result.path, "wb")
                    writer = pa.ipc.new_stream(sink, batch.schema)
                writer.write_batch(batch)
            if writer is not None:
                writer.close()
        except BaseException:
            result.discard()
            raise
        finally:
            if sink is not None:
                sink.close()
        return result

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The result's batches in order (the spilled ones read back one at a time)."""
        yield from self.memory
        if self.path is None:
            return
        with pa.OSFile(self.path, "rb") as source, pa.ipc.open_stream(source) as reader:
            yield from reader

    def discard(self) -> None:
        """Forget the batches and delete the spill file (idempotent)."""
        self.memory = []
        path, self.path = self.path, None
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def read_whole(execution: Execution, memory_bytes: int = FIRST_FLUSH_BYTES) -> BufferedResult:
    """The whole result of ``execution``; the execution is closed either way, freeing its query
    slot (its Spark jobs are stopped if the read failed or was cancelled)."""
    try:
        return BufferedResult.read(execution.batches(), memory_bytes)
    finally:
        execution.close()
