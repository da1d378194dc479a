"""Classic Spark driven from the broker's process (Py4J): embedded local mode, or a cluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

import pyarrow as pa

from horizon_broker.broker.spark.modes.base import SparkMode

LOOKUP_CONF: dict[str, str] = {"spark.sql.codegen.wholeStage": "false"}
"""The lookup session's settings (see :mod:`broker.query_shape` for why)."""


class ClassicMode(SparkMode):
    """Job groups with interrupt on cancel (PySpark's pinned threads make them per thread), and
    the result streamed from the JVM as Arrow batches in task completion order."""

    def __init__(self, spark: Any) -> None:
        super().__init__(spark)
        self._lookup = spark.newSession()
        for key, value in LOOKUP_CONF.items():
            self._lookup.conf.set(key, value)

    @property
    def target(self) -> str:
        return str(self.spark.sparkContext.master)

    def lookup_session(self) -> Any:
        return self._lookup

    def begin(self, group: str, description: str) -> Callable[[str], None]:
        context = self.spark.sparkContext
        context.setJobGroup(group, description, True)
        return context.cancelJobGroup

    def end(self, group: str) -> None:
        context = self.spark.sparkContext
        for key in ("spark.jobGroup.id", "spark.job.description"):
            context.setLocalProperty(key, None)

    def collect(
        self, frame: Any, schema: pa.Schema, ordered: bool, limits: Any
    ) -> Iterator[pa.RecordBatch]:
        from pyspark.errors.exceptions.captured import unwrap_spark_exception
        from pyspark.util import _create_local_socket

        port, secret, server = frame._jdf.collectAsArrowToPython()
        sockfile, sock = _create_local_socket((port, secret))
        completed = False
        cut_short: Exception | None = None
        try:
            for batch in _read_collect_stream(sockfile, ordered, limits):
                yield batch if batch.schema == schema else _cast(batch, schema)
            completed = True
        except (_StreamFailed, pa.ArrowInvalid, EOFError) as error:
            # The JVM's serving thread failed: its exception (typed, with its cause chain) is
            # what explains the failure, not the text it wrote into the stream, nor the stream
            # it cut short (a failure while planning, before the schema, leaves it empty).
            completed = True
            cut_short = error
        finally:
            sockfile.close()
            sock.close()
            if completed:
                with unwrap_spark_exception():
                    server.getResult()  # raises the JVM serving thread's failure, if any
            else:
                with suppress(Exception):  # the jobs were cancelled; only wait for the thread
                    server.getResult()
        if cut_short is not None:  # the JVM reported no failure: the stream's own is the cause
            raise cut_short

    def physical_plan(self, frame: Any) -> str:
        return str(frame._jdf.queryExecution().executedPlan().toString())

    def jobs_running(self, group: str) -> int | None:
        tracker = self.spark.sparkContext.statusTracker()
        infos = [tracker.getJobInfo(job) for job in tracker.getJobIdsForGroup(group)]
        return sum(1 for info in infos if info is not None and info.status == "RUNNING")


class LocalMode(ClassicMode):
    """Embedded ``local[*]`` Spark: its files are this machine's, so the broker may read them."""

    name = "local"
    direct_reads = True


class ClusterMode(ClassicMode):
    """A cluster (standalone ``spark://``, YARN, Kubernetes): the executors read the files,
    which may not even be visible from the broker's machine."""

    name = "cluster"

    @property
    def bypass_reason(self) -> str:
        return (
            f"Spark runs on a cluster ({self.target}): its executors read the segment files, "
            "the broker does not assume it can see them"
        )


def _cast(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    return pa.Table.from_batches([batch]).cast(schema).combine_chunks().to_batches()[0]


class _StreamFailed(Exception):
    """The JVM reported a failure at the end of its Arrow stream."""


def _read_collect_stream(stream: Any, ordered: bool, limits: Any) -> Iterator[pa.RecordBatch]:
    """Read the JVM's ``collectAsArrowToPython`` stream: an Arrow IPC stream of batches in task
    completion order, then how many batches there were and their query order (or -1 and an
    error message). Batches held for their turn count against ``limits``."""
    from pyspark.serializers import read_int

    held: list[pa.RecordBatch | None] = []
    held_rows = held_bytes = 0
    for batch in pa.ipc.open_stream(stream):
        if ordered:
            held.append(batch)
            held_rows += batch.num_rows
            held_bytes += batch.nbytes
            limits.check(held_rows, held_bytes)
        else:
            yield batch
    count = read_int(stream)
    if count == -1:
        raise _StreamFailed()
    for _ in range(count):
        index = read_int(stream)
        if ordered:
            batch, held[index] = held[index], None
            assert batch is not None
            yield batch
