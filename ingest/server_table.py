"""One ingestion server's handle on one table: what every stage of its transactions works with.

The stages (:mod:`ingest.batch`, :mod:`ingest.commit`, :mod:`ingest.recovery`,
:mod:`ingest.update_run`, :mod:`ingest.upkeep`) share these parts instead of passing them one by
one: the Spark session, the table definition, the server's Redis client, the storage with the
table's root and this server's commit log, the commit clock and the step timer. None of them is
ever replaced while the job lives; what changes (the commit log's state, the owned partitions,
the locks) belongs to :class:`ingest.commit.CommitProtocol`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.hlc import HybridLogicalClock
from ingest.manifest import Manifest
from ingest.steps import Steps
from ingest.storage import Storage
from ingest.table import TableDefinition
from watermark.server import ServerClient


@dataclass(frozen=True, slots=True)
class ServerTable:
    spark: Any
    table: TableDefinition
    client: ServerClient
    storage: Storage
    root: str
    """The table's root directory, qualified (``file:/...``, ``s3a://...``)."""
    manifest: Manifest
    clock: HybridLogicalClock
    steps: Steps

    @property
    def server_id(self) -> str:
        return self.client.server_id

    def batch_directory(self, seq: int) -> str:
        """Where batch ``seq`` writes its first-generation segments."""
        return f"{self.root}/segments/{self.server_id}/b{seq:010d}"

    def update_directory(self, seq: int) -> str:
        """Where updater run ``seq`` writes its overwrite segments."""
        return f"{self.root}/segments/{self.server_id}/u{seq:010d}"
