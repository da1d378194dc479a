"""A stream table's lag after each pass, written to the state store for the brokers' consoles
(:mod:`horizon_broker.watermark.stream_lag`); the pass's own figures, never its outcome."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import redis

from horizon_broker.watermark.stream_lag import StreamLag, record

if TYPE_CHECKING:
    from horizon_broker.ingest.job import BatchResult
    from horizon_broker.ingest.redis_stream_source import StreamSource
    from horizon_broker.watermark.server import ServerClient

log = logging.getLogger(__name__)


def report_stream_lag(
    client: ServerClient, table: str, stream: StreamSource, result: BatchResult
) -> None:
    """Write the lag ``result`` counted (none counted: nothing). A state store that cannot take
    it is logged, not raised: the batch is committed, and the next pass reports again."""
    if result.stream_lag_events is None:
        return
    lag = StreamLag(
        table=table,
        server=client.server_id,
        stream=stream.key,
        events=result.stream_lag_events,
        seconds=result.stream_lag_s or 0.0,
        at_ms=time.time_ns() // 1_000_000,
    )
    try:
        record(client.redis, client.prefix, lag)
    except redis.RedisError as error:
        log.warning("table %s: its stream lag was not recorded: %s", table, error)
