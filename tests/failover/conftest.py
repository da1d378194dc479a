"""One real Sentinel group (a primary, a replica, three sentinels) for the failover tests; each
test starts on an empty, fully replicated store (a failover swaps the roles, nothing else), so
the group is started once per run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chaos.sentinel_group import SentinelGroup


@pytest.fixture(scope="session")
def sentinel_group() -> Iterator[SentinelGroup]:
    group = SentinelGroup().start()
    yield group
    group.close()


def emptied(group: SentinelGroup) -> SentinelGroup:
    """The group replicating again, on an empty store."""
    group.heal_replication()
    with group.client(group.primary_port()) as primary:
        primary.flushall()
    group.wait_until(group.replicated, "an empty replicated store")
    return group


@pytest.fixture
def group(sentinel_group: SentinelGroup) -> SentinelGroup:
    return emptied(sentinel_group)
