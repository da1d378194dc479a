"""The named steps of an ingestion transaction: kill points for tests, timings for benchmarks.

A batch (then its updater run) passes the steps of :data:`STEPS` in order; a job built with
``fail_at=<step>`` dies there (:class:`SimulatedCrash`), which is how the tests show that a
restart loses nothing and announces nothing twice. The same object times each step and labels
each Spark action, so logs, the Spark UI and ``bench.ingest`` see where a batch spends its time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from horizon_broker._core.errors import Internal, InvalidArgument

STEPS = (
    "after_prepare",
    "after_segments",
    "after_files",
    "after_commit",
    "after_announce",
    "after_report",
    "update_after_prepare",
    "update_after_files",
    "update_after_commit",
    "update_after_replace",
)
"""Named kill points, in the order a batch (then its updater run) passes them."""


class SimulatedCrash(Internal):
    """Raised at an injected kill point (tests only): the job object must be thrown away."""


class Steps:
    """Where one job is in its transaction: the kill point to die at, and what each step and
    each Spark action of the last batch cost."""

    def __init__(self, spark: Any, table_name: str, fail_at: str | None = None) -> None:
        if fail_at is not None and fail_at not in STEPS:
            raise InvalidArgument(f"unknown kill point {fail_at!r}: expected one of {STEPS}")
        self._spark = spark
        self._table_name = table_name
        self.fail_at = fail_at
        self.step_seconds: dict[str, float] = {}
        """Seconds spent before each step of the last batch (for benchmarks and logs)."""
        self.action_seconds: dict[str, float] = {}
        """Seconds of each Spark action of the last batch (for profiling)."""
        self._last_step = self._started = time.perf_counter()

    def restart(self) -> None:
        """Start timing a new batch (its updater run, if any, counts with it)."""
        self.step_seconds, self._last_step = {}, time.perf_counter()
        self._started = self._last_step
        self.action_seconds = {}

    def elapsed(self) -> float:
        """Seconds since the batch began (:meth:`restart`)."""
        return time.perf_counter() - self._started

    def step(self, name: str) -> None:
        """Pass the step ``name``: time it, and die here if this is the injected kill point."""
        now = time.perf_counter()
        self.step_seconds[name] = now - self._last_step
        self._last_step = now
        if self.fail_at == name:
            raise SimulatedCrash(f"simulated crash at {name}")

    @contextlib.contextmanager
    def action(self, name: str) -> Iterator[None]:
        """Label the Spark jobs of one action (visible in logs and the UI) and time it."""
        context = self._spark.sparkContext
        context.setJobDescription(f"ingest {self._table_name}: {name}")
        started = time.perf_counter()
        try:
            yield
        finally:
            self.action_seconds[name] = time.perf_counter() - started
            context.setJobDescription(None)
