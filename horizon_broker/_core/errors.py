"""Horizon's one exception hierarchy.

Every layer (the pure timeline and rewrite, the Redis follower, the Spark executor, the gRPC service)
raises subclasses of :class:`HorizonError`. Each class carries a transport-neutral status code; the
broker maps those codes to gRPC status codes in exactly one place (``horizon_broker.broker.api.status``). The hierarchy
lives in ``timeline`` because it is the package every other package already depends on, and the pure
layers must be able to raise typed errors without importing gRPC.
"""

from __future__ import annotations

from enum import StrEnum


class StatusCode(StrEnum):
    """Transport-neutral status codes; names match gRPC's so the mapping is obvious."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    UNAVAILABLE = "UNAVAILABLE"
    CANCELLED = "CANCELLED"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"


class HorizonError(Exception):
    """Base of every error Horizon raises on purpose. ``str(error)`` is the human message."""

    code: StatusCode = StatusCode.INTERNAL
    condition: str = ""
    """The engine's error condition behind it (``DIVIDE_BY_ZERO``...), when the engine raised it:
    what the error was, without the message that may quote the caller's literals."""


class InvalidArgument(HorizonError):
    """The caller sent something malformed or not allowed (bad SQL, bad segment, bad interval)."""

    code = StatusCode.INVALID_ARGUMENT


class NotFound(HorizonError):
    """A named thing (table, segment, server) does not exist."""

    code = StatusCode.NOT_FOUND


class AlreadyExists(HorizonError):
    """Something with that identity exists already and differs from what was sent."""

    code = StatusCode.ALREADY_EXISTS


class FailedPrecondition(HorizonError):
    """The request is well formed but the system is not in a state to answer it (snapshot out of
    bounds, table without a low-watermark, regression policy)."""

    code = StatusCode.FAILED_PRECONDITION


class PermissionDenied(HorizonError):
    """The caller is known but may not do this (table not in its token's grant)."""

    code = StatusCode.PERMISSION_DENIED


class Unauthenticated(HorizonError):
    """The caller did not prove who it is (missing or unknown bearer token)."""

    code = StatusCode.UNAUTHENTICATED


class ResourceExhausted(HorizonError):
    """A limit was hit: query queue full, result too large, SQL too long or too deep."""

    code = StatusCode.RESOURCE_EXHAUSTED


class DeadlineExceeded(HorizonError):
    """The query ran past its deadline and was stopped."""

    code = StatusCode.DEADLINE_EXCEEDED


class Unavailable(HorizonError):
    """A dependency (Redis, Spark) cannot be reached, or the state is too stale to serve."""

    code = StatusCode.UNAVAILABLE


class ReplicationShortfall(Unavailable):
    """Fewer replicas than ``wait_replicas`` confirmed a write within ``wait_timeout_ms``: the
    write may be on the primary alone, so it does not count as acknowledged (rule F2 of
    ``docs/design/contract/failover.md``)."""


class Cancelled(HorizonError):
    """The client cancelled the request."""

    code = StatusCode.CANCELLED


class Unimplemented(HorizonError):
    """The request asks for something Horizon does not do (an update or a transaction through
    Flight SQL: the broker is read-only)."""

    code = StatusCode.UNIMPLEMENTED


class Internal(HorizonError):
    """A bug or an unexpected failure of a dependency; the message says what failed."""

    code = StatusCode.INTERNAL


class SegmentConflict(InvalidArgument):
    """A segment cannot join the timeline because it contradicts what is stored: the same id with
    different shard fields, a same-version overlap of different time chunks, an atomic update group
    size mismatch, or a chunk for an atomic update group that is already full."""


class WrongTable(InvalidArgument):
    """A segment of another table was given to a table's timeline."""


class LockConflict(FailedPrecondition):
    """A lock request conflicts with a lock held by a job of equal or higher priority."""


class LockLost(FailedPrecondition):
    """A job's lock was revoked by a higher-priority job or its lease ran out: what the job wrote
    under it must not be published."""


class SegmentIdReused(FailedPrecondition):
    """An announcement names a segment id the state store already gives to other files: refused,
    so neither segment's rows vanish silently (a failover can hand a partition number out twice)."""


class RepublishPending(Unavailable):
    """The state store changed primary and a live server has not published its state on the new
    one yet: no partition number is handed out until it has (it may hold numbers the new primary
    never saw)."""


class PartitionNotOwned(FailedPrecondition):
    """A server tried to publish segments of a key partition it no longer owns."""
