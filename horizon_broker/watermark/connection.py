"""One ingestion server's connection to the state store: scripts, retries and the data set's epoch.

Every call runs one script of :mod:`horizon_broker.watermark.scripts` under the epoch this server last published
into. When Redis has lost its data (the epoch changed or vanished), the connection adopts the new
epoch and hands the server's ``republish`` callback a raw :meth:`StoreConnection.execute` to put
its whole state back first, then runs the call. Transient errors are retried, then raised as
UNAVAILABLE (:mod:`horizon_broker._core.redis_calls`).

A change of primary (a promoted replica, a restarted Redis: rule F3 of
``docs/design/contract/failover.md``) is treated the same way: the store may lack what this
server saw acknowledged, so its state is re-published before any other call runs there (F4).
Announcements and reports wait for the URL's ``wait_replicas`` (F2).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import redis

from horizon_broker._core.errors import (
    FailedPrecondition,
    HorizonError,
    Internal,
    InvalidArgument,
    LockLost,
    NotFound,
    PartitionNotOwned,
    RepublishPending,
    ResourceExhausted,
    SegmentIdReused,
    Unavailable,
)
from horizon_broker._core.keys import Keys
from horizon_broker._core.redis_calls import connect, decode_reply, retrying
from horizon_broker._core.redis_sentinel import (
    PrimaryChanged,
    call_acknowledged,
    primary_generation,
)
from horizon_broker.watermark import scripts

SCRIPTS = (
    "ADOPT_EPOCH",
    "REGISTER",
    "HEARTBEAT",
    "REGISTER_TABLE",
    "SEGMENTS",
    "REPORT",
    "PARK",
    "RETENTION",
    "ALLOCATE",
    "RESERVE",
    "CLAIM",
    "HAND_OVER",
    "DECOMMISSION",
    "ALTER_TABLE",
)

ERRORS: dict[str, type[HorizonError]] = {
    "FAILED_PRECONDITION": FailedPrecondition,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
    "INVALID_ARGUMENT": InvalidArgument,
    "NOT_FOUND": NotFound,
    "LOCK_LOST": LockLost,
    "NOT_OWNER": PartitionNotOwned,
    "SUPERSEDED": FailedPrecondition,
    "ID_REUSED": SegmentIdReused,
    "REPUBLISH_PENDING": RepublishPending,
}

Execute = Callable[[str, list[str]], list[Any]]
ACKNOWLEDGED = frozenset({"SEGMENTS", "REPORT"})
"""The calls that wait for replicas (rule F2 of ``docs/design/contract/failover.md``)."""


class EpochChanged(Exception):
    """Redis's data set is not the one this client published into: re-publish first."""


_EPOCH_ATTEMPTS = 5
"""Adoptions of a data set a call tries before it gives up (UNAVAILABLE): each fails only when
the data set changed again under it (another failover, a lost data set)."""


class StoreConnection:
    """Scripts and reads of one server against one Redis key space."""

    def __init__(
        self,
        redis_: str | redis.Redis,
        server_id: str,
        keys: Keys,
        republish: Callable[[Execute], None],
        *,
        retry_timeout_s: float = 10.0,
    ) -> None:
        self.server_id = server_id
        self.keys = keys
        self.owns_connection = isinstance(redis_, str)
        self.redis = connect(redis_, strict=True) if isinstance(redis_, str) else redis_
        self._republish = republish
        self._retry_timeout_s = retry_timeout_s
        self._scripts = {
            name: self.redis.register_script(getattr(scripts, name)) for name in SCRIPTS
        }
        self._epoch: str | None = None
        self._primary = primary_generation(self.redis)
        self.republished_after_failover = 0
        """How many times a change of primary made this server re-publish (F4)."""

    def run(self, name: str, args: list[str]) -> list[Any]:
        """Run one script, re-publishing first whenever Redis's data set is not ours, or the
        primary is not the one we last wrote to."""

        def attempt() -> list[Any]:
            for _ in range(_EPOCH_ATTEMPTS):
                try:
                    if self._primary != primary_generation(self.redis):
                        self._epoch = None  # another Redis: re-publish before anything else
                    if self._epoch is None:
                        self._adopt_epoch()
                    return self.execute(name, args)
                except EpochChanged:  # also from the re-publish: the data set changed again
                    self._epoch = None
            raise Unavailable("the state store's data set keeps changing; giving up")

        return self.retrying(attempt)

    def read(self, operation: Callable[[redis.Redis], Any]) -> Any:
        """A plain read, retried, with bytes decoded; after a change of primary, this server's
        state is published again first (rule F4), so it never reads a store that lacks what it
        announced itself (an update planned on such a read finds its targets missing)."""

        def attempt() -> Any:
            publish = self._epoch is not None and self._primary != primary_generation(self.redis)
            for _ in range(_EPOCH_ATTEMPTS):
                try:
                    if publish:
                        self._epoch = None
                        self._adopt_epoch()
                    return decode_reply(operation(self.redis))
                except EpochChanged:  # from the re-publish: the data set changed again
                    publish = True
            raise Unavailable("the state store's data set keeps changing; giving up")

        return self.retrying(attempt)

    def retrying(self, operation: Callable[[], Any]) -> Any:
        return retrying(
            operation, self._retry_timeout_s, f"Redis is unreachable for server {self.server_id}"
        )

    def execute(self, name: str, args: list[str]) -> list[Any]:
        """One script under the current epoch, no retry: ``{'OK', ...}`` minus the status, or
        the error the script named; :class:`EpochChanged` when the data set is not ours."""
        full = [self.keys.prefix, self._epoch or "", self.server_id, *args]
        if name in ACKNOWLEDGED:
            raw = call_acknowledged(
                self.redis, self._scripts[name], full, f"server {self.server_id}'s {name.lower()}"
            )
        else:
            raw = self._scripts[name](args=full)
        reply = decode_reply(raw)
        status = reply[0]
        if status == "EPOCH":
            raise EpochChanged(reply[1])
        if status == "ERR":
            raise ERRORS.get(reply[1], Internal)(reply[2])
        return reply[1:]

    def _adopt_epoch(self) -> None:
        """Adopt the data set's epoch (creating it if absent), then publish everything again."""
        candidate = uuid.uuid4().hex
        try:
            reply = decode_reply(
                self._scripts["ADOPT_EPOCH"](args=[self.keys.prefix, candidate, self.server_id])
            )
        except PrimaryChanged:
            reply = decode_reply(
                self._scripts["ADOPT_EPOCH"](args=[self.keys.prefix, candidate, self.server_id])
            )
        generation = primary_generation(self.redis)
        if generation != self._primary:
            self.republished_after_failover += 1
        self._epoch = reply[1]
        self._republish(self.execute)
        self._primary = generation

    def close(self) -> None:
        if self.owns_connection:
            self.redis.close()
