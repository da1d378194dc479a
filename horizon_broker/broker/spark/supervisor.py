"""The broker survives its engine: probe the Spark session, and replace it when it dies.

One hostile or unlucky query can kill the embedded Spark JVM (an ``OutOfMemoryError`` ends it)
or wedge it. Without a supervisor every later query would fail at once while health checks said
SERVING. The supervisor probes the session every ``probe_interval_s`` (and at once when a query
suspects it), reports the engine down (the broker's health turns NOT_SERVING), and, when the
broker created the session itself, stops what is left of it (killing a wedged JVM), creates a new
one and reports the engine up again once that one answers. The engine rebuilds its views and its
executor on the new session from the follower's state (``on_restart``).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from horizon_broker._core.errors import HorizonError, Internal, Unavailable
from horizon_broker.broker.spark.failures import EngineLost, OutOfMemory, classify

log = logging.getLogger("horizon.broker.spark")


def jvm_pid(spark: Any) -> int | None:
    """The process id of a classic session's JVM (None for Spark Connect or when unknown)."""
    try:
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        process = getattr(gateway, "proc", None)
        return int(process.pid) if process is not None else None
    except Exception:
        return None


def probe(spark: Any) -> None:
    """Raise unless ``spark`` answers a trivial request (a JVM round trip, or a Connect RPC)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        spark.version  # noqa: B018 - an analyze round trip to the Connect server
        return
    context = spark.sparkContext
    if context._jsc is None or context._jsc.sc().isStopped():
        raise RuntimeError("the SparkContext is stopped")
    context._jvm.java.lang.System.currentTimeMillis()


def probe_with_a_job(spark: Any) -> None:
    """:func:`probe`, then a one-row Spark job: an ``OutOfMemoryError`` that struck one of
    Spark's own threads (the scheduler's event loop, the context cleaner) can leave a JVM that
    answers calls but runs no job, or a stopped context."""
    probe(spark)
    if not type(spark).__module__.startswith("pyspark.sql.connect"):
        spark.range(1).count()


def discard(spark: Any) -> None:
    """Let go of a dead or wedged classic session so a new one can start in this process: kill
    its JVM (it may still hold memory or threads) and clear PySpark's process-wide singletons."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        with suppress(Exception):
            spark.stop()
        return
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    if process is not None and process.poll() is None:
        with suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        with suppress(Exception):
            process.wait(timeout=10)
    context = SparkContext._active_spark_context
    if context is not None:
        server = getattr(context, "_accumulatorServer", None)
        if server is not None:
            with suppress(Exception):
                server.shutdown()
        context._jsc = None
    if gateway is not None:
        with suppress(Exception):
            gateway.shutdown()
    with SparkContext._lock:
        SparkContext._active_spark_context = None
        SparkContext._gateway = None
        SparkContext._jvm = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    with suppress(Exception):
        from pyspark.sql.context import SQLContext

        SQLContext._instantiatedContext = None


class SparkSupervisor:
    """Holds the current Spark session and replaces it after it dies (when it may)."""

    def __init__(
        self,
        spark: Any,
        *,
        create: Callable[[], Any] | None,
        probe_interval_s: float = 2.0,
        probe_timeout_s: float = 10.0,
        on_restart: Callable[[Any], None] = lambda spark: None,
        on_health: Callable[[bool], None] = lambda up: None,
        on_answering: Callable[[], None] = lambda: None,
    ) -> None:
        """``create`` makes a new session (None: the session is not the broker's to replace;
        a dead one is only reported). ``on_restart`` adopts a new session before it is probed;
        ``on_answering`` runs once it has answered a probe (a new session is cold: the broker
        warms it up then)."""
        self._spark = spark
        self._create = create
        self._probe_interval_s = probe_interval_s
        self._probe_timeout_s = probe_timeout_s
        self._on_restart = on_restart
        self._on_health = on_health
        self._on_answering = on_answering
        self._up = True
        self._wake = threading.Event()
        self._run_a_job = False
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.generation = 0
        """Bumped by every restart: a query that ran on an older generation lost its engine."""
        self.restarts = 0
        self.last_failure = ""

    @property
    def spark(self) -> Any:
        return self._spark

    @property
    def up(self) -> bool:
        return self._up

    def start(self) -> SparkSupervisor:
        self._thread = threading.Thread(target=self._run, name="horizon-spark-probe", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self._probe_timeout_s + 5)

    def suspect(self) -> None:
        """A query failed in a way that may mean the engine is gone: probe now."""
        self._wake.set()

    def suspect_after_out_of_memory(self) -> None:
        """A query ran the JVM out of memory: probe now, with a job (see
        :func:`probe_with_a_job`)."""
        self._run_a_job = True
        self._wake.set()

    def check(self, *, with_a_job: bool = False) -> bool:
        """Probe the session once, within the probe timeout (a wedged JVM does not answer)."""
        outcome: list[BaseException | None] = []
        spark = self._spark

        def attempt() -> None:
            try:
                (probe_with_a_job if with_a_job else probe)(spark)
                outcome.append(None)
            except BaseException as error:
                outcome.append(error)

        thread = threading.Thread(target=attempt, name="horizon-spark-probe-call", daemon=True)
        thread.start()
        thread.join(self._probe_timeout_s)
        if not outcome:
            self.last_failure = f"no answer within {self._probe_timeout_s:g}s (wedged)"
            return False
        if outcome[0] is not None:
            self.last_failure = f"{type(outcome[0]).__name__}: {outcome[0]}"[:300]
            return False
        return True

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(self._probe_interval_s)
            self._wake.clear()
            if self._stopped.is_set():
                return
            with_a_job, self._run_a_job = self._run_a_job, False
            if self.check(with_a_job=with_a_job):
                self._set_up(True)
                continue
            log.error("the Spark engine is not answering (%s)", self.last_failure)
            self._set_up(False)
            if self._create is not None:
                self._restart()

    def _restart(self) -> None:
        started = time.monotonic()
        with self._lock:
            discard(self._spark)
            try:
                fresh = self._create()
            except Exception:
                log.exception("could not start a new Spark session; trying again shortly")
                return
            self._spark = fresh
            self.generation += 1
            self.restarts += 1
        try:
            self._on_restart(fresh)
        except Exception:
            log.exception("rebuilding the engine on the new Spark session failed")
            return
        if self.check():
            log.warning(
                "the Spark engine was restarted in %.1fs (restart %d)",
                time.monotonic() - started,
                self.restarts,
            )
            self._set_up(True)
            try:
                self._on_answering()
            except Exception:
                log.exception("after the Spark engine's restart")

    def _set_up(self, up: bool) -> None:
        if up != self._up:
            self._up = up
            self._on_health(up)


def check_engine_up(supervisor: SparkSupervisor | None) -> None:
    """UNAVAILABLE at once while the engine is being replaced (no query waits on a dead one)."""
    if supervisor is not None and not supervisor.up:
        raise Unavailable(
            "the Spark engine is restarting after it stopped answering "
            f"({supervisor.last_failure or 'probe failed'}); retry shortly"
        )


def engine_failure(
    error: BaseException, supervisor: SparkSupervisor | None, *, session_replaced: bool
) -> BaseException:
    """``error``, or EngineLost when the query's Spark session died under it (the supervisor
    is told at once, so the broker starts recovering before the next probe).
    ``session_replaced``: the session the query started on is no longer the engine's."""
    if not isinstance(error, HorizonError) and isinstance(error, Exception):
        error = classify(error)
    lost = isinstance(error, EngineLost) or session_replaced
    if isinstance(error, OutOfMemory) and supervisor is not None:
        supervisor.suspect_after_out_of_memory()
    if not lost and isinstance(error, Internal) and supervisor is not None:
        lost = not supervisor.check()  # an unexplained failure: is Spark still there?
    if not lost:
        return error
    if supervisor is not None:
        supervisor.suspect()
    return EngineLost(
        "the Spark engine stopped answering while this query ran (its JVM died or hung); the "
        "broker is restarting it: retry shortly"
    )
