"""Spark Connect: the broker is a Connect client; nothing runs in its process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from horizon_broker.broker.spark.modes.base import SparkMode


class ConnectMode(SparkMode):
    """Operation tags (``addTag`` / ``interruptTag``) instead of job groups; the result comes as
    Connect's Arrow stream. The server's files may not be the broker's: no direct reads."""

    name = "connect"

    @property
    def target(self) -> str:
        builder = getattr(getattr(self.spark, "client", None), "_builder", None)
        endpoint = getattr(builder, "endpoint", None)
        return f"sc://{endpoint}" if endpoint else "sc://"

    @property
    def bypass_reason(self) -> str:
        return "Spark Connect: the Connect server reads the segment files, not the broker"

    def begin(self, group: str, description: str) -> Callable[[str], None]:
        self.spark.addTag(group)
        return self.spark.interruptTag

    def end(self, group: str) -> None:
        self.spark.removeTag(group)

    def collect(
        self, frame: Any, schema: pa.Schema, ordered: bool, limits: Any
    ) -> Iterator[pa.RecordBatch]:
        """Connect's result stream, batch by batch as the server sends it (in query order), so
        nothing past the limits is ever held."""
        client = frame._session.client
        plan = frame._plan.to_proto(client)
        for piece in client.to_table_as_iterator(plan, frame._plan.observations):
            if isinstance(piece, pa.Table):
                yield from piece.cast(schema).to_batches()

    def physical_plan(self, frame: Any) -> str:
        return str(frame._explain_string(mode="formatted"))
