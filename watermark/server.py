"""The ingestion server's side of the state store: announcements, reports, ownership.

Every call is one atomic Lua script that also appends its event to the log (see
:mod:`watermark.scripts`), so brokers observe a server's calls in the order it made them.

The client keeps its own current state in memory. When Redis has lost its data (its epoch changed or
vanished) the next call, or the heartbeat thread, re-publishes all of it first, in causal order:
tables, segments, ownership, progress, retention, reservations, and registration last (to a broker,
a server registered in the new data set is one that has re-published everything).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import redis

from locks.rules import PublishGuard
from timeline.errors import (
    FailedPrecondition,
    HorizonError,
    Internal,
    InvalidArgument,
    LockLost,
    PartitionNotOwned,
    ResourceExhausted,
    Unavailable,
)
from timeline.interval import Interval
from timeline.segment import OVERWRITE_PARTITION_LIMIT, ROOT_PARTITION_LIMIT, Segment
from watermark import scripts
from watermark.catalog import TableDescriptor
from watermark.keys import (
    DEFAULT_PREFIX,
    Keys,
    check_server_id,
    chunk_key,
    interval_key,
    lwm_member,
    padded_hlc,
    parse_progress,
    segment_key,
)
from watermark.lwm import PartitionProgress
from watermark.redis_calls import decode_reply, retrying

log = logging.getLogger(__name__)

_ERRORS: dict[str, type[HorizonError]] = {
    "FAILED_PRECONDITION": FailedPrecondition,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
    "INVALID_ARGUMENT": InvalidArgument,
    "LOCK_LOST": LockLost,
    "NOT_OWNER": PartitionNotOwned,
    "SUPERSEDED": FailedPrecondition,
}


class _EpochChanged(Exception):
    """Redis's data set is not the one this client published into: re-publish first."""


def connect(url: str, *, socket_timeout: float | None = 5.0) -> redis.Redis:
    """A client without redis-py's hidden retries: our callers retry and notice restarts."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(
        url,
        socket_timeout=socket_timeout,
        socket_connect_timeout=2.0,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
    )


def _chunk(segment: Segment) -> tuple[str, int]:
    kind, base = ("overwrite", ROOT_PARTITION_LIMIT) if segment.is_overwrite else ("first", 0)
    return chunk_key(
        segment.interval.start_ms, segment.interval.end_ms, segment.version, kind
    ), base


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


class ServerClient:
    """One ingestion server's connection to the state store."""

    def __init__(
        self,
        redis_: str | redis.Redis,
        server_id: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        heartbeat_timeout_s: float = 5.0,
        retry_timeout_s: float = 10.0,
    ) -> None:
        self.server_id = check_server_id(server_id)
        self._keys = Keys(prefix)
        self._owns_connection = isinstance(redis_, str)
        self._redis = connect(redis_) if isinstance(redis_, str) else redis_
        self._heartbeat_timeout_ms = int(heartbeat_timeout_s * 1000)
        self._retry_timeout_s = retry_timeout_s
        self._lock = threading.RLock()
        self._scripts = {
            name: self._redis.register_script(getattr(scripts, name))
            for name in (
                "ADOPT_EPOCH",
                "REGISTER",
                "HEARTBEAT",
                "REGISTER_TABLE",
                "SEGMENTS",
                "REPORT",
                "RETENTION",
                "ALLOCATE",
                "RESERVE",
                "CLAIM",
                "HAND_OVER",
                "DECOMMISSION",
            )
        }
        self._epoch: str | None = None
        # What this server has published, to re-publish into a Redis that lost it.
        self._registered = False
        self._decommissioned = False
        self._tables: dict[str, TableDescriptor] = {}
        self._segments: dict[tuple[str, str], Segment] = {}
        self._owned: dict[str, set[int]] = {}
        self._progress: dict[str, dict[int, tuple[int, int]]] = {}
        self._retention: dict[str, int] = {}
        self._reservations: dict[tuple[str, str], int] = {}
        self._heartbeat_stop: threading.Event | None = None
        self._heartbeat_thread: threading.Thread | None = None

    # -- the calls ---------------------------------------------------------------------------

    def register(self) -> None:
        """Mark this server live (first heartbeat). Registering again after decommission revives."""
        with self._lock:
            self._run("REGISTER", [_dumps({"server": self.server_id})])
            self._registered = True
            self._decommissioned = False

    def heartbeat(self) -> None:
        with self._lock:
            self._run("HEARTBEAT", ["{}"])

    def start_heartbeats(self, interval_s: float = 1.0) -> None:
        """Heartbeat from a daemon thread; it also notices a Redis that lost its data."""
        with self._lock:
            if self._heartbeat_thread is not None:
                return
            stop = threading.Event()
            thread = threading.Thread(
                target=self._heartbeat_loop,
                args=(stop, interval_s),
                name=f"horizon-heartbeat-{self.server_id}",
                daemon=True,
            )
            self._heartbeat_stop, self._heartbeat_thread = stop, thread
            thread.start()

    def stop_heartbeats(self) -> None:
        with self._lock:
            stop, thread = self._heartbeat_stop, self._heartbeat_thread
            self._heartbeat_stop = self._heartbeat_thread = None
        if stop is not None and thread is not None:
            stop.set()
            thread.join(timeout=30)

    def _heartbeat_loop(self, stop: threading.Event, interval_s: float) -> None:
        while not stop.wait(interval_s):
            try:
                self.heartbeat()
            except HorizonError as error:
                log.warning("heartbeat of server %s failed: %s", self.server_id, error)

    def register_table(self, descriptor: TableDescriptor) -> None:
        """Publish a table's descriptor; idempotent, but a different definition is refused."""
        with self._lock:
            reply = self._run("REGISTER_TABLE", [descriptor.name, descriptor.to_json()])
            if reply and reply[0] == "EXISTS":
                existing = TableDescriptor.from_json(reply[1])
                if existing != descriptor:
                    raise FailedPrecondition(
                        f"table {descriptor.name!r} is already registered with a different "
                        f"definition: {existing.to_json()} (asked: {descriptor.to_json()})"
                    )
            self._tables[descriptor.name] = descriptor

    def announce(self, segments: Iterable[Segment], *, guard: PublishGuard | None = None) -> None:
        """Announce segments (one atomic batch)."""
        self.replace(add=segments, remove=(), guard=guard)

    def unannounce(self, segments: Iterable[Segment]) -> None:
        """Withdraw segments (one atomic batch); unknown ones are ignored."""
        self.replace(add=(), remove=segments)

    def replace(
        self,
        *,
        add: Iterable[Segment],
        remove: Iterable[Segment],
        guard: PublishGuard | None = None,
    ) -> None:
        """Announce ``add`` and withdraw ``remove`` in one atomic step (e.g. an update).

        With a ``guard``, the step takes effect only if the guard's job still holds locks covering
        its segments and this server still owns its key partitions (:class:`LockLost`,
        :class:`PartitionNotOwned` otherwise, and nothing changes).
        """
        added = [self._stamp(segment) for segment in add]
        removed = list(remove)
        if not added and not removed:
            return
        with self._lock:
            for table in {segment.table for segment in added}:
                self._remember_table(table)
            previous = dict(self._segments)
            for segment in removed:
                self._segments.pop((segment.table, segment_key(segment)), None)
            for segment in added:
                self._segments[(segment.table, segment_key(segment))] = segment
            with self._remembered_first(lambda: self._restore_segments(previous)):
                self._run("SEGMENTS", self._segment_args(added, removed, guard))

    def _restore_segments(self, previous: dict[tuple[str, str], Segment]) -> None:
        self._segments = previous

    def report(self, table: str, progress: Mapping[int, tuple[int, int]]) -> None:
        """Report ``partition -> (ingested, applied)`` HLCs; unowned partitions become ours."""
        if not progress:
            return
        args = [table, _dumps({"table": table, "progress": _progress_json(progress)})]
        for partition, (ingested, applied) in sorted(progress.items()):
            _check_partition(partition)
            args += [
                str(partition),
                str(ingested),
                str(applied),
                lwm_member(min(ingested, applied), partition),
            ]
            padded_hlc(max(ingested, applied))
        with self._lock:
            self._remember_table(table)
            owned = set(self._owned.get(table, set()))
            reported = dict(self._progress.get(table, {}))

            def restore() -> None:
                self._owned[table], self._progress[table] = owned, reported

            self._owned.setdefault(table, set()).update(progress)
            self._progress.setdefault(table, {}).update(
                {p: (int(i), int(a)) for p, (i, a) in progress.items()}
            )
            with self._remembered_first(restore):
                self._run("REPORT", args)

    def report_retention_horizon(self, table: str, horizon: int) -> int:
        """Ask to drop history below ``horizon`` (an HLC); returns the horizon granted, which a
        live snapshot pin may hold lower (:mod:`pins`): only history below *that* may go."""
        padded_hlc(horizon)
        with self._lock:
            event = _dumps({"table": table, "horizon": str(horizon)})
            previous = self._retention.get(table)

            def restore() -> None:
                if previous is None:
                    self._retention.pop(table, None)
                else:
                    self._retention[table] = previous

            self._retention[table] = horizon
            with self._remembered_first(restore):
                reply = self._run("RETENTION", [table, str(horizon), event])
            granted = int(reply[0])
            self._retention[table] = granted
            return granted

    def chunk_versions(
        self, table: str, intervals: Iterable[Interval], default: str
    ) -> dict[Interval, str]:
        """The major version to append to in each time chunk (one round trip): the highest one
        announced for the chunk (a major compaction's) or ``default``, whichever is higher."""
        wanted = sorted(set(intervals))
        if not wanted:
            return {}
        fields = [interval_key(i.start_ms, i.end_ms) for i in wanted]
        found = self._read(lambda r: r.hmget(self._keys.majors(table), fields))
        return {
            interval: max(default, major) if major else default
            for interval, major in zip(wanted, found, strict=True)
        }

    def allocate_partitions(
        self, table: str, interval: Interval, version: str, count: int
    ) -> list[int]:
        """Reserve ``count`` unused first-generation partition numbers of a chunk and version."""
        return self._allocate(table, interval, version, count, "first", 0, ROOT_PARTITION_LIMIT)

    def allocate_overwrite_partitions(
        self, table: str, interval: Interval, version: str, count: int
    ) -> list[int]:
        """Reserve ``count`` overwrite partition numbers (32768..65535) of a chunk and version."""
        return self._allocate(
            table,
            interval,
            version,
            count,
            "overwrite",
            ROOT_PARTITION_LIMIT,
            OVERWRITE_PARTITION_LIMIT,
        )

    def _allocate(
        self,
        table: str,
        interval: Interval,
        version: str,
        count: int,
        kind: str,
        base: int,
        limit: int,
    ) -> list[int]:
        if count < 1:
            raise InvalidArgument(f"partition count must be >= 1, got {count}")
        key = chunk_key(interval.start_ms, interval.end_ms, version, kind)
        with self._lock:
            reply = self._run("ALLOCATE", [table, key, str(count), str(base), str(limit)])
            first = int(reply[0])
            self._reservations[(table, key)] = max(
                self._reservations.get((table, key), 0), first + count
            )
            return list(range(first, first + count))

    def claim_partitions(self, table: str, partitions: Iterable[int]) -> None:
        """Own unowned partitions (or those of a server that is no longer live)."""
        wanted = sorted(set(partitions))
        for partition in wanted:
            _check_partition(partition)
        if not wanted:
            return
        with self._lock:
            event = _dumps({"table": table, "partitions": wanted})
            args = [table, str(self._heartbeat_timeout_ms), event, *map(str, wanted)]
            self._run("CLAIM", args)
            self._owned.setdefault(table, set()).update(wanted)

    def hand_over(self, table: str, partition: int, to_server: str) -> None:
        """Give a partition to another server; its progress goes with it (the LWM cannot drop)."""
        check_server_id(to_server)
        with self._lock:
            event = _dumps({"table": table, "partition": partition, "to": to_server})
            self._run("HAND_OVER", [table, str(partition), to_server, event])
            self._owned.get(table, set()).discard(partition)
            self._progress.get(table, {}).pop(partition, None)

    def decommission(self) -> None:
        """Leave: this server's partitions stop counting (they should have been handed over)."""
        self.stop_heartbeats()
        with self._lock:
            self._run("DECOMMISSION", ["{}"])
            self._decommissioned = True
            self._registered = False
            self._owned.clear()
            self._progress.clear()

    @property
    def redis(self) -> redis.Redis:
        """The connection, for clients of the same state store (locks, LWM reads)."""
        return self._redis

    @property
    def prefix(self) -> str:
        return self._keys.prefix

    # -- reads -------------------------------------------------------------------------------

    def announced_segments(self, table: str) -> list[Segment]:
        """Every segment currently announced for ``table`` by any server."""
        values = self._read(lambda r: r.hvals(self._keys.segments(table)))
        segments = [Segment.from_dict(json.loads(value)) for value in values]
        return sorted(segments, key=lambda s: (s.interval, s.version, s.partition))

    def retention_horizon(self, table: str) -> int:
        """The table's retention horizon: the highest any server reported (0: none). Brokers
        refuse snapshots below it, so no query can see a version that ended at or below it."""
        values = self._read(lambda r: r.hvals(self._keys.retention(table)))
        return max((int(value) for value in values), default=0)

    def partition_progress(self, table: str) -> dict[int, PartitionProgress]:
        """Owner and last report of every known partition of ``table``."""
        entries = self._read(lambda r: r.hgetall(self._keys.progress(table)))
        return {
            int(field): parse_progress(value)
            for field, value in sorted(entries.items(), key=lambda item: int(item[0]))
        }

    def close(self) -> None:
        self.stop_heartbeats()
        if self._owns_connection:
            self._redis.close()

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- machinery ---------------------------------------------------------------------------

    def _stamp(self, segment: Segment) -> Segment:
        return segment if segment.server else dataclasses.replace(segment, server=self.server_id)

    def _segment_args(
        self, added: list[Segment], removed: list[Segment], guard: PublishGuard | None = None
    ) -> list[str]:
        event = _dumps(
            {"add": [s.to_dict() for s in added], "remove": [s.to_dict() for s in removed]}
        )
        args = [event, str(len(added)), "" if guard is None else guard.to_json()]
        for segment in added:
            key, base = _chunk(segment)
            start, end = segment.interval.start_ms, segment.interval.end_ms
            args += [
                segment.table,
                segment_key(segment),
                _dumps(segment.to_dict()),
                key,
                str(segment.partition),
                str(base),
                interval_key(start, end),
                segment.version,
                chunk_key(start, end, segment.version, "first"),
                str(segment.root_end),
            ]
        for segment in removed:
            args += [segment.table, segment_key(segment)]
        return args

    def _remember_table(self, table: str) -> None:
        """Keep the descriptor of a table someone else registered, to re-publish it if needed."""
        if table in self._tables:
            return
        text = self._read(lambda r: r.hget(self._keys.tables, table))
        if text is not None:
            self._tables[table] = TableDescriptor.from_json(text)

    @contextmanager
    def _remembered_first(self, restore: Callable[[], None]) -> Iterator[None]:
        """Around a call whose effect is already in the in-memory state that gets re-published.

        Redis may apply a call and lose the reply; if it then loses its data, the re-publish that
        precedes the retry must already include the call, or brokers would see the server's state
        go back. A call Redis refuses (anything but unavailability) is taken back out.
        """
        try:
            yield
        except Unavailable:
            raise
        except BaseException:
            restore()
            raise

    def _read(self, operation: Callable[[redis.Redis], Any]) -> Any:
        return self._with_retries(lambda: decode_reply(operation(self._redis)))

    def _run(self, name: str, args: list[str]) -> list[Any]:
        """Run one script, re-publishing first whenever Redis's data set is not ours."""

        def attempt() -> list[Any]:
            for _ in range(5):
                if self._epoch is None:
                    self._republish()
                try:
                    return self._exec(name, args)
                except _EpochChanged:
                    self._epoch = None
            raise Unavailable("the state store's data set keeps changing; giving up")

        return self._with_retries(attempt)

    def _with_retries(self, operation: Callable[[], Any]) -> Any:
        return retrying(
            operation, self._retry_timeout_s, f"Redis is unreachable for server {self.server_id}"
        )

    def _exec(self, name: str, args: list[str]) -> list[Any]:
        reply = decode_reply(
            self._scripts[name](args=[self._keys.prefix, self._epoch or "", self.server_id, *args])
        )
        status = reply[0]
        if status == "EPOCH":
            raise _EpochChanged(reply[1])
        if status == "ERR":
            raise _ERRORS.get(reply[1], Internal)(reply[2])
        return reply[1:]

    def _republish(self) -> None:
        """Adopt the data set's epoch (creating it if absent) and publish our whole state again."""
        candidate = uuid.uuid4().hex
        reply = decode_reply(
            self._scripts["ADOPT_EPOCH"](args=[self._keys.prefix, candidate, self.server_id])
        )
        self._epoch = reply[1]
        if not (
            self._registered
            or self._tables
            or self._segments
            or self._owned
            or self._retention
            or self._reservations
        ):
            return
        log.info("server %s re-publishes its state into epoch %s", self.server_id, self._epoch)
        for descriptor in self._tables.values():
            self._exec("REGISTER_TABLE", [descriptor.name, descriptor.to_json()])
        if self._segments:
            self._exec("SEGMENTS", self._segment_args(list(self._segments.values()), []))
        for table, owned in list(self._owned.items()):
            kept = set()
            for partition in sorted(owned):
                event = _dumps({"table": table, "partitions": [partition]})
                try:
                    self._exec(
                        "CLAIM",
                        [table, str(self._heartbeat_timeout_ms), event, str(partition)],
                    )
                    kept.add(partition)
                except FailedPrecondition as error:
                    log.warning("server %s lost partition on re-publish: %s", self.server_id, error)
                    self._progress.get(table, {}).pop(partition, None)
            self._owned[table] = kept
        for table, progress in self._progress.items():
            if not progress:
                continue
            args = [table, _dumps({"table": table, "progress": _progress_json(progress)})]
            for partition, (ingested, applied) in sorted(progress.items()):
                member = lwm_member(min(ingested, applied), partition)
                args += [str(partition), str(ingested), str(applied), member]
            self._exec("REPORT", args)
        for table, horizon in self._retention.items():
            event = _dumps({"table": table, "horizon": str(horizon)})
            self._exec("RETENTION", [table, str(horizon), event])
        for (table, key), next_free in self._reservations.items():
            self._exec("RESERVE", [table, key, str(next_free)])
        # Registering comes last: a follower reads "registered in this data set" as "has
        # re-published everything", and keeps carrying the server's old state until then.
        if self._registered:
            self._exec("REGISTER", [_dumps({"server": self.server_id, "republished": True})])


def _progress_json(progress: Mapping[int, tuple[int, int]]) -> dict[str, list[str]]:
    return {str(p): [str(i), str(a)] for p, (i, a) in sorted(progress.items())}


def _check_partition(partition: int) -> None:
    if not isinstance(partition, int) or not 0 <= partition < OVERWRITE_PARTITION_LIMIT:
        raise InvalidArgument(f"partition {partition!r} is not in [0, {OVERWRITE_PARTITION_LIMIT})")
