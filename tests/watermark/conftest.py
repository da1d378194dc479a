"""Helpers for the watermark tests: real Redis, real servers and followers, cleaned up after."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
from horizon_broker.watermark.follower import Follower
from horizon_broker.watermark.server import ServerClient
from tests.processes import RedisProcess


def table_descriptor(name: str = "accounts", key_partitions: int = 4) -> TableDescriptor:
    return TableDescriptor(
        name=name,
        columns=(ColumnSpec("id", "bigint"), ColumnSpec("amount", "bigint")),
        primary_key=("id",),
        key_partitions=key_partitions,
    )


def segment(
    table: str = "accounts", chunk: int = 0, partition: int = 0, version: str = "v1", **extra: Any
) -> Segment:
    """A first-generation segment of hour ``chunk`` (intervals in ms)."""
    hour = 3_600_000
    return Segment(
        table=table,
        interval=Interval(chunk * hour, (chunk + 1) * hour),
        version=version,
        partition=partition,
        **extra,
    )


@pytest.fixture
def redis_url(redis_client: redis.Redis, redis_server: RedisProcess) -> str:
    """The shared redis-server's URL, its data flushed for this test."""
    return redis_server.url


@pytest.fixture
def make_server() -> Iterator[Callable[..., ServerClient]]:
    created: list[ServerClient] = []

    def make(url: str, server_id: str, **kwargs: Any) -> ServerClient:
        client = ServerClient(url, server_id, **kwargs)
        created.append(client)
        return client

    yield make
    for client in created:
        client.close()


@pytest.fixture
def make_follower() -> Iterator[Callable[..., Follower]]:
    created: list[Follower] = []

    def make(url: str, *, start: bool = True, **kwargs: Any) -> Follower:
        follower = Follower(url, **kwargs)
        created.append(follower)
        if start:
            follower.start()
            follower.wait_until_synced(10)
        return follower

    yield make
    for follower in created:
        follower.stop()


@pytest.fixture
def private_redis() -> Iterator[Callable[..., RedisProcess]]:
    """Private redis-servers (to kill and restart), closed after the test."""
    created: list[RedisProcess] = []

    def make(*, persistence: bool) -> RedisProcess:
        process = RedisProcess(persistence=persistence).start()
        created.append(process)
        return process

    yield make
    for process in created:
        process.close()


def caught_up(follower: Follower, url: str, prefix: str = "horizon") -> bool:
    """True when the follower has applied every event currently in the log."""
    client = redis.Redis.from_url(url)
    try:
        seq = int(client.get(f"{prefix}:seq") or 0)
        epoch = (client.get(f"{prefix}:epoch") or b"").decode()
    finally:
        client.close()
    return follower.state_seq == seq and follower.state_epoch == epoch
