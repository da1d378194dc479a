"""The execution interface every kind of Spark session implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa


class SparkMode(ABC):
    """What the executor needs from a Spark session: how to tag a query's jobs and cancel them,
    how to collect a result as Arrow, how to show a plan, and whether the broker may read the
    segment files itself."""

    name: str = ""
    direct_reads: bool = False
    """Whether the broker can read the segment files with pyarrow (direct key lookups)."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    @property
    @abstractmethod
    def target(self) -> str:
        """Where the work runs: ``local[2]``, ``spark://host:7077``, ``sc://host:15002``."""

    @property
    def bypass_reason(self) -> str:
        """Why direct lookups are bypassed in this mode ("" when they are not)."""
        return ""

    def describe(self) -> str:
        return f"{self.name} Spark ({self.target})"

    def lookup_session(self) -> Any:
        """The session plain key lookups run on (one tuned for them, where the mode allows)."""
        return self.spark

    @abstractmethod
    def begin(self, group: str, description: str) -> Callable[[str], None]:
        """Run the calling thread's next jobs under ``group``; returns how to cancel a group."""

    @abstractmethod
    def end(self, group: str) -> None:
        """Stop tagging the calling thread's jobs with ``group``."""

    @abstractmethod
    def collect(
        self, frame: Any, schema: pa.Schema, ordered: bool, limits: Any
    ) -> Iterator[pa.RecordBatch]:
        """Run ``frame`` and yield its rows as Arrow batches of ``schema``, streaming: no more
        is held than ``limits`` (a :class:`horizon_broker.broker.spark.executor.ResultLimits`) allow, also while an
        ordered result's batches wait for the ones before them."""

    def jobs_running(self, group: str) -> int | None:
        """How many Spark jobs of ``group`` run now (None: this mode cannot tell)."""
        return None

    @abstractmethod
    def physical_plan(self, frame: Any) -> str:
        """Spark's physical plan of ``frame`` (analysis only)."""
