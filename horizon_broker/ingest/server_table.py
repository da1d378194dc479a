"""One ingestion server's handle on one table: what every stage of its transactions works with.

The stages (:mod:`horizon_broker.ingest.batch`, :mod:`horizon_broker.ingest.commit`, :mod:`horizon_broker.ingest.recovery`,
:mod:`horizon_broker.ingest.update_run`, :mod:`horizon_broker.ingest.upkeep`) share these parts instead of passing them one by
one: the Spark session, the table definition, the server's Redis client, the storage with the
table's root and this server's commit log, the commit clock and the step timer. None of them is
ever replaced while the job lives; what changes (the commit log's state, the owned partitions,
the locks) belongs to :class:`horizon_broker.ingest.commit.CommitProtocol`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from horizon_broker._core.hlc import HybridLogicalClock
from horizon_broker.ingest.manifest import Manifest
from horizon_broker.ingest.steps import Steps
from horizon_broker.ingest.storage import Storage
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.watermark.server import ServerClient


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
