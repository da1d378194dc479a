"""One ingestion server for many tables: one process, one Spark application, one clock, one
heartbeat and one lock renewer, whatever the number of tables.

Each table keeps its own :class:`~horizon_broker.ingest.job.IngestJob` (its commit log, its key partitions, one
transaction at a time); the server shares the rest. Batches of different tables run at once, each
in its own Spark FAIR scheduler pool (``horizon-<table>``), so the cores are shared fairly and a
big table's batch does not hold a small one's back. A table whose batch fails is restarted from
its commit log before its next batch, as a restarted process would be; the other tables go on.

Between batches every partition with nothing pending is idle, so a table that receives nothing never
holds reads back; leaving (:meth:`IngestServer.park`, :meth:`~IngestServer.close`, the end of a
``with`` block) parks every partition in one atomic step (rule 7 of
``docs/design/contract/watermarks.md``). Starting is checked whole first
(:mod:`horizon_broker.ingest.preflight`): a configuration with a problem is refused before anything
is written.

>>> with IngestServer("redis://127.0.0.1:6379/0", "ingest-1") as server:  # doctest: +SKIP
...     server.add_table("orders.toml", source="/landing/orders")
...     batch = server.run_directory("orders")
...     batch.token, server.token()
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, TypeVar

from horizon_broker._core.errors import FailedPrecondition, InvalidArgument, NotFound
from horizon_broker._core.keys import DEFAULT_PREFIX
from horizon_broker._core.spark_session import INGESTION_CONF
from horizon_broker.ingest import preflight, redis_stream_batches
from horizon_broker.ingest.job import BatchResult, IngestJob
from horizon_broker.ingest.server_config import ServerConfig, TableSource, owned_partitions
from horizon_broker.ingest.storage import require_classic_session
from horizon_broker.ingest.stream_lag_report import report_stream_lag
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.locks.client import LockRenewer
from horizon_broker.locks.rules import STREAMING_INGESTION_PRIORITY
from horizon_broker.watermark import tokens
from horizon_broker.watermark.server import ServerClient

log = logging.getLogger(__name__)

Result = TypeVar("Result")
OnResult = Callable[[str, BatchResult], None]
OnError = Callable[[str, Exception], None]
TableLike = TableDefinition | str | Path | Mapping[str, Any]


def ingestion_session_conf(spark_conf: Mapping[str, str]) -> dict[str, str]:
    """The settings of a session a server creates: :data:`horizon_broker._core.spark_session.INGESTION_CONF`,
    each overridden by the server's own ``spark_conf``."""
    return {**INGESTION_CONF, **spark_conf}


class IngestServer:
    """An ingestion server of many tables, built from a Redis URL and a server id.

    ``spark`` is the session to run on (created from ``spark_master`` and ``spark_conf`` on first
    use when absent, over :data:`horizon_broker._core.spark_session.INGESTION_CONF`; Spark Connect sessions are
    refused: ingestion needs a classic one).
    ``concurrency`` caps the tables ingesting at once in :meth:`run_once` (default: all).
    """

    def __init__(
        self,
        redis_url: str,
        server_id: str,
        spark: Any | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        spark_master: str = "local[*]",
        spark_conf: Mapping[str, str] | None = None,
        heartbeat_s: float = 1.0,
        heartbeat_timeout_s: float = 5.0,
        lock_priority: int = STREAMING_INGESTION_PRIORITY,
        concurrency: int | None = None,
    ) -> None:
        self.client = ServerClient(
            redis_url, server_id, prefix=prefix, heartbeat_timeout_s=heartbeat_timeout_s
        )
        self.server_id = self.client.server_id
        self.renewer = LockRenewer(f"horizon-locks-{self.server_id}")
        self.concurrency = concurrency
        self.lock_priority = lock_priority
        self._spark = spark
        self._spark_master = spark_master
        self._spark_conf = dict(spark_conf or {})
        self._heartbeat_s = heartbeat_s
        self._sources: dict[str, TableSource] = {}
        self._stream_clients = redis_stream_batches.StreamClients()
        self._jobs: dict[str, IngestJob] = {}
        self._broken: set[str] = set()
        self._workers: ThreadPoolExecutor | None = None
        """The threads :meth:`run_once` runs tables on, kept for the server's life (each keeps
        its JVM thread: a watching server does not start threads every pass)."""
        self._workers_size = 0
        self._lock = threading.RLock()
        self._state = "new"  # new -> live <-> parked -> closed

    @classmethod
    def from_config(cls, config: ServerConfig, spark: Any | None = None) -> IngestServer:
        """A server with every table of ``config`` added (checked whole first)."""
        server = cls(
            config.redis_url,
            config.server_id,
            spark,
            prefix=config.prefix,
            spark_master=config.spark_master,
            spark_conf=config.spark_conf,
            heartbeat_s=config.heartbeat_s,
            lock_priority=config.lock_priority,
            concurrency=config.concurrency,
        )
        try:
            server.add_tables(config.tables)
        except BaseException:
            server.close()
            raise
        return server

    # -- tables ------------------------------------------------------------------------------

    @property
    def spark(self) -> Any:
        """The Spark session every table's batches run on (created on first use)."""
        if self._spark is None:
            from horizon_broker._core.spark_session import create_spark_session

            self._spark = create_spark_session(
                master=self._spark_master,
                app_name=f"horizon-ingest-{self.server_id}",
                conf=ingestion_session_conf(self._spark_conf),
            )
        require_classic_session(self._spark)
        return self._spark

    @property
    def tables(self) -> list[str]:
        with self._lock:
            return sorted(self._sources)

    def add_table(
        self,
        table: TableLike,
        *,
        partitions: Sequence[int] | None = None,
        source: str | None = None,
        format: str = "json",
        options: Mapping[str, str] | None = None,
    ) -> IngestJob:
        """Serve ``table`` (a definition, a TOML file or its keys) on ``partitions`` (default:
        all key partitions), reading ``source`` in :meth:`run_directory` and :meth:`run_once`.
        Refused if it is served already, its definition differs from the registered one, or
        another live server owns one of its partitions."""
        definition = _definition(table)
        owned = None if partitions is None else owned_partitions(list(partitions), definition)
        entry = TableSource(definition, source, format, owned, dict(options or {}))
        return self.add_tables([entry])[0]

    def add_tables(self, tables: Sequence[TableSource]) -> list[IngestJob]:
        """Serve every one of ``tables``, or none: all are checked before anything is written."""
        with self._lock:
            self._check_open()
            found = preflight.problems(self.client, tables, served=self._sources)
            if found:
                raise InvalidArgument(
                    f"server {self.server_id} cannot serve these tables: " + "; ".join(found)
                )
            self._go_live()
            jobs = []
            for entry in tables:
                job = self._start_job(entry)
                self._sources[entry.name] = entry
                self._jobs[entry.name] = job
                jobs.append(job)
            return jobs

    def job(self, table: str) -> IngestJob:
        """The job serving ``table`` (its commit log state, partitions, last result)."""
        with self._lock:
            return self._jobs[self._name(table)]

    # -- batches -----------------------------------------------------------------------------

    def run_batch(self, table: str, frame: Any, *, sources: Sequence[str] = ()) -> BatchResult:
        """Ingest one batch (a DataFrame of the table's columns) into ``table``; ``sources``
        name what it consumed (a batch whose sources were all ingested is skipped)."""
        return self._run(table, lambda job: job.run_batch(frame, sources=sources))

    def run_directory(
        self,
        table: str,
        path: str | None = None,
        fmt: str | None = None,
        *,
        options: Mapping[str, str] | None = None,
    ) -> BatchResult:
        """Ingest the changelog files of a directory (default: the table's source) not ingested
        yet, as one batch; nothing new is no batch (the table stays idle)."""
        entry = self._source(table)
        directory = path or entry.source
        if not directory:
            raise InvalidArgument(f"table {entry.name!r} has no source directory: give one")
        reader = dict(entry.options if options is None else options)
        return self._run(
            table, lambda job: job.run_directory(directory, fmt or entry.format, options=reader)
        )

    def run_source(
        self, table: str, on_batch: Callable[[BatchResult], None] | None = None
    ) -> BatchResult:
        """Ingest what is new in the table's source: its Redis stream (every entry added so
        far, in batches of ``max_events``, each but the last returned passed to ``on_batch``)
        or its directory (:meth:`run_directory`)."""
        stream = self._source(table).stream
        if stream is None:
            return self.run_directory(table)
        client = self._stream_clients.of(stream)
        result = self._run(
            table,
            lambda job: redis_stream_batches.run_stream_pass(job, stream, client, on_batch),
        )
        report_stream_lag(self.client, self._source(table).name, stream, result)
        return result

    def run_stream(
        self,
        table: str,
        source: Any = None,
        checkpoint: str = "",
        *,
        available_now: bool = False,
        processing_time: str | None = None,
        on_batch: Callable[[BatchResult], None] | None = None,
    ) -> Any:
        """Run a Structured Streaming source into ``table`` (default: a stream over its source
        directory, or over its Redis stream), in its scheduler pool; returns the streaming
        query."""
        if not checkpoint:
            raise InvalidArgument("a stream needs a checkpoint directory")
        entry = self._source(table)

        def start(job: IngestJob) -> Any:
            if source is None and entry.stream is not None:
                from horizon_broker.ingest import redis_stream_spark

                client = self._stream_clients.of(entry.stream)
                return redis_stream_spark.run_query(
                    job,
                    entry.stream,
                    client,
                    checkpoint,
                    available_now=available_now,
                    processing_time=processing_time,
                    on_batch=on_batch,
                )
            frame = source
            if frame is None:
                if not entry.source:
                    raise InvalidArgument(f"table {entry.name!r} has no source: give a stream")
                frame = job.stream_directory(entry.source, entry.format, options=entry.options)
            return job.run_stream(
                frame,
                checkpoint,
                available_now=available_now,
                processing_time=processing_time,
                on_batch=on_batch,
            )

        return self._run(table, start)

    def run_once(
        self, *, on_result: OnResult | None = None, on_error: OnError | None = None
    ) -> dict[str, BatchResult | Exception]:
        """One pass: every table with a source ingests what is new, tables at once (up to
        ``concurrency``), each in its own scheduler pool. A table's failure is its own: it is
        passed to ``on_error`` (and returned) while the others go on."""
        names = [name for name, entry in sorted(self._sources.items()) if _has_source(entry)]
        outcome: dict[str, BatchResult | Exception] = {}
        if not names:
            return outcome
        pool = self._worker_pool(min(len(names), self.concurrency or len(names)))
        futures = {
            pool.submit(self.run_source, name, _reporting(on_result, name)): name for name in names
        }
        for future in as_completed(futures):
            name = futures[future]
            try:
                outcome[name] = result = future.result()
            except Exception as error:  # one table's failure must not stop the others
                outcome[name] = error
                if on_error is not None:
                    on_error(name, error)
                continue
            if on_result is not None:
                on_result(name, result)
        return outcome

    def serve(
        self,
        watch_s: float,
        stop: threading.Event,
        *,
        on_result: OnResult | None = None,
        on_error: OnError | None = None,
    ) -> None:
        """Pass over every source every ``watch_s`` seconds until ``stop`` is set (the current
        pass is finished first)."""
        while not stop.is_set():
            self.run_once(on_result=on_result, on_error=on_error)
            stop.wait(watch_s)

    def token(self) -> str:
        """A snapshot token covering every table this server serves, at the last commit it
        made: a query sent with it as ``min_snapshot`` sees all of it."""
        with self._lock:
            jobs = dict(self._jobs)
        highs = {}
        for name, job in jobs.items():
            last = job.last_result.high if job.last_result is not None else 0
            high = max(job.state.high, last)
            if high:
                highs[name] = high
        return tokens.encode(highs)

    # -- leaving -----------------------------------------------------------------------------

    def park(self) -> list[tuple[str, int]]:
        """Stop cleanly: apply every pending update, then park every partition of every table
        in one atomic step (their LWM follows the state store's clock until a writer resumes
        them) and stop heart-beating. Returns the partitions that could not be parked (an
        update could not be applied: they stay frozen). A later batch resumes the server."""
        with self._lock:
            if self._state != "live":
                return []
            for name, job in sorted(self._jobs.items()):
                if not job.ready_to_park():
                    log.warning("table %s of server %s is not parked", name, self.server_id)
            skipped = self.client.park(stop=True)
            self._state = "parked"
            return skipped

    def close(self) -> None:
        """Park (if live), then stop the lock renewer and close the state store connection."""
        with self._lock:
            if self._state == "closed":
                return
            workers, self._workers = self._workers, None
        if workers is not None:  # batches in flight end first (outside the lock they take)
            workers.shutdown(wait=True)
        with self._lock:
            if self._state == "closed":
                return
            try:
                self.park()
            finally:
                self._state = "closed"
                self.renewer.stop()
                self.client.close()
                self._stream_clients.close()

    def __enter__(self) -> IngestServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- machinery ---------------------------------------------------------------------------

    def _run(self, table: str, work: Callable[[IngestJob], Result]) -> Result:
        """``work`` on the table's job, in its scheduler pool; a failed job is restarted from
        its commit log before its next use."""
        name = self._name(table)
        with self._lock:
            self._check_open()
            self._go_live()
            if name in self._broken:
                self._jobs[name] = self._start_job(self._sources[name])
                self._broken.discard(name)
            job = self._jobs[name]
        try:
            with self._pool(name):
                return work(job)
        except BaseException:
            with self._lock:
                self._broken.add(name)
            raise

    def _worker_pool(self, size: int) -> ThreadPoolExecutor:
        with self._lock:
            if self._workers is None or self._workers_size < size:
                if self._workers is not None:
                    self._workers.shutdown(wait=True)
                self._workers = ThreadPoolExecutor(size, f"ingest-{self.server_id}")
                self._workers_size = size
            return self._workers

    @contextlib.contextmanager
    def _pool(self, name: str) -> Iterator[None]:
        context = self.spark.sparkContext
        previous = context.getLocalProperty("spark.scheduler.pool")
        context.setLocalProperty("spark.scheduler.pool", f"horizon-{name}")
        try:
            yield
        finally:
            context.setLocalProperty("spark.scheduler.pool", previous)

    def _start_job(self, entry: TableSource) -> IngestJob:
        job = IngestJob(
            self.spark,
            entry.definition,
            self.client,
            partitions=entry.partitions,
            lock_priority=self.lock_priority,
            lock_renewer=self.renewer,
        )
        return job.start()

    def _go_live(self) -> None:
        """Register and heartbeat (the first time, or again after parking: every table takes
        its partitions back, resumed above anything served meanwhile)."""
        if self._state == "live":
            return
        self.client.register()
        if self._state == "parked":
            for job in self._jobs.values():
                job.rejoin()
        self.client.start_heartbeats(self._heartbeat_s)
        self._state = "live"

    def _check_open(self) -> None:
        if self._state == "closed":
            raise FailedPrecondition(f"ingestion server {self.server_id} is closed")

    def _name(self, table: str) -> str:
        with self._lock:
            for name in self._sources:
                if name.lower() == table.lower():
                    return name
        raise NotFound(
            f"table {table!r} is not served by server {self.server_id} "
            f"(it serves {', '.join(sorted(self._sources)) or 'no table'}): add_table it first"
        )

    def _source(self, table: str) -> TableSource:
        return self._sources[self._name(table)]


def _reporting(on_result: OnResult | None, table: str) -> Callable[[BatchResult], None] | None:
    """A stream pass's earlier batches, reported as they commit (from the table's thread)."""
    if on_result is None:
        return None
    return lambda result: on_result(table, result)


def _has_source(entry: TableSource) -> bool:
    return bool(entry.source) or entry.stream is not None


def _definition(table: TableLike) -> TableDefinition:
    if isinstance(table, TableDefinition):
        return table
    if isinstance(table, str | Path):
        return TableDefinition.load(table)
    return TableDefinition.from_dict(dict(table))
