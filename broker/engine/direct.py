"""Plain key lookups answered straight from the segment files, when the broker may read them.

Only with embedded Spark: its files are this machine's files (on a cluster or behind Spark
Connect a local path may name a file the broker cannot see). The rewrite found the lookup
(:mod:`broker.sql.passes.find_key_lookup`); :mod:`broker.spark.direct_read` reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from broker.config import SparkConfig
from broker.engine.prepared import Prepared
from broker.spark.direct_read import DirectReader

log = logging.getLogger("horizon.broker.engine")

DIRECT_ROUTE = "answered from the segment files with pyarrow (direct key lookup), no Spark job"


class DirectLookups:
    """Decides, per query, whether the files answer it, and counts the answers."""

    def __init__(self, config: SparkConfig, mode: Any) -> None:
        self.reader = DirectReader(max_rows=config.direct_lookup_max_rows)
        self.enabled = config.direct_lookups and mode.direct_reads
        self.bypassed = (
            mode.bypass_reason if config.direct_lookups and not mode.direct_reads else ""
        )
        """Why direct lookups are configured but not used ("" when they are, or are off)."""
        if self.bypassed:
            log.warning("direct key lookups are bypassed: %s", self.bypassed)
        self.answers = 0

    def reader_for(
        self, prepared: Prepared, route: list[str]
    ) -> Callable[[pa.Schema], pa.Table | None] | None:
        """A reader of ``prepared`` straight from its files, when it is a plain key lookup.
        ``route`` gets a line saying so when the reader answered, or why it was bypassed."""
        if len(prepared.tables) != 1 or len(prepared.plan.tables_read) != 1:
            return None
        table = prepared.tables[0]
        lookup = prepared.plan.shape.key_lookup
        if table.snapshot is None or lookup is None:
            return None
        if not self.enabled:
            if self.bypassed:
                route.append(f"direct key lookup bypassed: {self.bypassed}")
            return None
        snapshot = table.snapshot

        def read(schema: pa.Schema) -> pa.Table | None:
            answer = self.reader.read(lookup, table.files, snapshot, schema)
            if answer is not None:
                self.answers += 1
                route[:] = [DIRECT_ROUTE]
            return answer

        return read
