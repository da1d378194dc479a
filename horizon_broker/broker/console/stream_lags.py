"""The ingestion page's source: each stream table's lag as its servers last reported it to the
state store (:mod:`horizon_broker.watermark.stream_lag`), read on a connection of its own."""

from __future__ import annotations

from collections.abc import Iterable

import redis

from horizon_broker._core.errors import Unavailable
from horizon_broker._core.redis_calls import connect
from horizon_broker.watermark.stream_lag import StreamLag, reports


class StreamLags:
    """Reads the stream-lag reports of the tables a page shows."""

    def __init__(self, redis_url: str, prefix: str) -> None:
        self.prefix = prefix
        self._redis = connect(redis_url, socket_timeout=2.0)

    def of(self, tables: Iterable[str]) -> list[StreamLag]:
        try:
            return reports(self._redis, self.prefix, tables)
        except redis.RedisError as error:
            raise Unavailable(
                f"the stream lags cannot be read from the state store: {error}"
            ) from None

    def close(self) -> None:
        self._redis.close()
