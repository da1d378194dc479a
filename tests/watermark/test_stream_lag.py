"""The stream-lag reports in the state store (what the console's ingestion page reads): one per
server and table, read back by table then server, expiring after the last write so a table no
server reads any more drops off; a field this version cannot read is skipped, not an error."""

from __future__ import annotations

import redis

from horizon_broker.watermark.stream_lag import KEEP_S, StreamLag, lag_key, record, reports


def test_reports_round_trip_per_table_and_server_and_expire(redis_client: redis.Redis) -> None:
    b = StreamLag("orders", "srv-b", "shop.public.orders", 12, 3.5, 1_790_000_000_000)
    a = StreamLag("orders", "srv-a", "shop.public.orders", 0, 0.0, 1_790_000_000_100)
    c = StreamLag("customers", "srv-a", "shop.public.customers", 4, 1.25, 1_790_000_000_200)
    for lag in (b, a, c):
        record(redis_client, "horizon", lag)
    redis_client.hset(lag_key("horizon", "orders"), "srv-old", "not json")

    assert reports(redis_client, "horizon", ["orders", "customers", "none"]) == [c, a, b]
    ttl = redis_client.ttl(lag_key("horizon", "orders"))
    assert isinstance(ttl, int) and 0 < ttl <= KEEP_S
