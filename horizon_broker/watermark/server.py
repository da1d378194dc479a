"""The ingestion server's side of the state store: announcements, reports, ownership.

Every call is one atomic Lua script that also appends its event to the log (see
:mod:`horizon_broker.watermark.scripts`), so brokers observe a server's calls in the order it made them.

The client keeps its own current state in memory. When Redis has lost its data (its epoch changed or
vanished) the next call, or the heartbeat thread, re-publishes all of it first, in causal order:
tables, segments, ownership, progress, retention, reservations, and registration last (to a broker,
a server registered in the new data set is one that has re-published everything)
(:mod:`horizon_broker.watermark.connection`).

The client owns the server's clock (:attr:`ServerClient.clock`): heartbeats carry it, so the LWM of
the partitions it reports *idle* follows it, and every call that resumes a quiet partition (a
report, a claim) moves it above the partition's resume floor (rule 7 of
``docs/design/contract/watermarks.md``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import redis

from horizon_broker._core.errors import (
    FailedPrecondition,
    InvalidArgument,
    RepublishPending,
    Unavailable,
)
from horizon_broker._core.hlc import HybridLogicalClock
from horizon_broker._core.keys import (
    DEFAULT_PREFIX,
    Keys,
    check_server_id,
    chunk_key,
    interval_key,
    padded_hlc,
)
from horizon_broker.locks.rules import PublishGuard
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import OVERWRITE_PARTITION_LIMIT, ROOT_PARTITION_LIMIT, Segment
from horizon_broker.watermark.catalog import TableDescriptor
from horizon_broker.watermark.connection import Execute, StoreConnection
from horizon_broker.watermark.heartbeat import Heartbeats
from horizon_broker.watermark.lwm import PartitionProgress, is_live
from horizon_broker.watermark.read import TableLwm, read_table_lwm
from horizon_broker.watermark.records import parse_progress, segment_key
from horizon_broker.watermark.script_args import (
    check_partition,
    counter_floors,
    dumps,
    report_args,
    segment_args,
)

__all__ = ["ServerClient"]

log = logging.getLogger(__name__)


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
        clock: HybridLogicalClock | None = None,
    ) -> None:
        self.server_id = check_server_id(server_id)
        self._keys = Keys(prefix)
        self._store = StoreConnection(
            redis_, self.server_id, self._keys, self._republish, retry_timeout_s=retry_timeout_s
        )
        self._heartbeat_timeout_ms = int(heartbeat_timeout_s * 1000)
        self._lock = threading.RLock()
        self.clock = clock or HybridLogicalClock()
        """The server's clock: heartbeats carry it (its idle partitions' LWM follows it), and it
        moves above every floor a resumed partition reports."""
        # What this server has published, to re-publish into a Redis that lost it.
        self._registered = False
        self._decommissioned = False
        self._tables: dict[str, TableDescriptor] = {}
        self._segments: dict[tuple[str, str], Segment] = {}
        self._owned: dict[str, set[int]] = {}
        self._progress: dict[str, dict[int, tuple[int, int]]] = {}
        self._idle: dict[str, set[int]] = {}
        self._retention: dict[str, int] = {}
        self._reservations: dict[tuple[str, str], int] = {}
        self._number_sources: dict[str, Callable[[], Iterable[Segment]]] = {}
        self._heartbeats = Heartbeats(self.heartbeat, f"horizon-heartbeat-{self.server_id}")

    # -- the calls ---------------------------------------------------------------------------

    def register(self) -> None:
        """Mark this server live (first heartbeat). Registering again after decommission or a
        park revives it."""
        with self._lock:
            self._run("REGISTER", [dumps({"server": self.server_id})])
            self._registered = True
            self._decommissioned = False

    def heartbeat(self) -> None:
        """Keep the server live; carries its clock, which its idle partitions' LWM follows."""
        with self._lock:
            self._run("HEARTBEAT", [str(self.clock.now())])

    def start_heartbeats(self, interval_s: float = 1.0) -> None:
        """Heartbeat from a daemon thread; it also notices a Redis that lost its data."""
        self._heartbeats.start(interval_s)

    def stop_heartbeats(self) -> None:
        self._heartbeats.stop()

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
                self._run("SEGMENTS", segment_args(added, removed, guard))

    def remember_announced(self, segments: Iterable[Segment]) -> None:
        """Count segments an earlier run of this server announced (found in the store at start)
        as this client's own, so a later change of primary re-publishes them too (rule F4)."""
        with self._lock:
            for segment in segments:
                stamped = self._stamp(segment)
                self._remember_table(stamped.table)
                self._segments.setdefault((stamped.table, segment_key(stamped)), stamped)

    def reserve_numbers_of(self, segments: Iterable[Segment]) -> None:
        """Keep the allocation counters above every partition number ``segments`` use, without
        announcing them: the numbers a commit log names, which a store that failed over may have
        forgotten handing out (rule F4)."""
        with self._lock:
            for (table, key), next_free in sorted(counter_floors(segments).items()):
                self._run("RESERVE", [table, key, str(next_free)])

    def follow_numbers_of(self, name: str, source: Callable[[], Iterable[Segment]]) -> None:
        """Reserve the numbers of the segments ``source`` lists (every server's commit log of a
        table, read from storage) now and after every change of primary, before this client
        allocates again: a server that was down then cannot re-publish its own, and another
        would be handed them again (rule F4). ``name`` replaces an earlier source."""
        with self._lock:
            self._number_sources[name] = source
            self.reserve_numbers_of(source())

    def _restore_segments(self, previous: dict[tuple[str, str], Segment]) -> None:
        self._segments = previous

    def report(
        self, table: str, progress: Mapping[int, tuple[int, int]], *, idle: Iterable[int] = ()
    ) -> int | None:
        """Report ``partition -> (ingested, applied)`` HLCs; unowned partitions become ours.

        Partitions in ``idle`` have nothing pending: their LWM follows this server's clock until
        the next report without them. A quiet partition reported busy (or a parked one) is
        resumed first: returns its floor (None: none was), which the clock has moved above;
        every commit to it must come after this call.
        """
        if not progress:
            return None
        quiet = set(idle)
        args = report_args(table, progress, quiet)
        with self._lock:
            self._remember_table(table)
            owned = set(self._owned.get(table, set()))
            reported = dict(self._progress.get(table, {}))
            was_idle = set(self._idle.get(table, set()))

            def restore() -> None:
                self._owned[table], self._progress[table] = owned, reported
                self._idle[table] = was_idle

            self._owned.setdefault(table, set()).update(progress)
            self._progress.setdefault(table, {}).update(
                {p: (int(i), int(a)) for p, (i, a) in progress.items()}
            )
            self._idle[table] = (was_idle - set(progress)) | (quiet & set(progress))
            with self._remembered_first(restore):
                reply = self._run("REPORT", args)
            return self._observe_floor(reply)

    def resume(self, table: str, partitions: Iterable[int]) -> int | None:
        """About to commit to ``partitions``: those reported idle are reported busy (their
        last progress, not idle), so their LWM stops following the clock; returns the floor
        (the clock is above it). Call it before taking the commit timestamps."""
        with self._lock:
            last = self._progress.get(table, {})
            quiet = self._idle.get(table, set())
            wanted = {p: last[p] for p in partitions if p in last and p in quiet}
        return self.report(table, wanted) if wanted else None

    def park(self, *, stop: bool = True) -> list[tuple[str, int]]:
        """Park every partition this server reported idle, in one atomic step: their LWM follows the
        state store's clock from now on (rule 7 of ``docs/design/contract/watermarks.md``). With
        ``stop`` the server also stops heart-beating and is no longer live (a clean shutdown).
        Returns the partitions it owns that could not be parked (something is pending: they stay
        frozen, as a dead server's)."""
        if stop:
            self.stop_heartbeats()
        with self._lock:
            pairs = [
                (table, partition)
                for table, owned in sorted(self._owned.items())
                for partition in sorted(owned)
            ]
            args = ["1" if stop else ""]
            for table, partition in pairs:
                if partition in self._idle.get(table, set()):
                    args += [table, str(partition)]
            reply = self._run("PARK", args)
            skipped = {(reply[0][i], int(reply[0][i + 1])) for i in range(0, len(reply[0]), 2)}
            if stop:
                self._registered = False
            return sorted(skipped | {(t, p) for t, p in pairs if p not in self._idle.get(t, set())})

    def report_retention_horizon(self, table: str, horizon: int) -> int:
        """Ask to drop history below ``horizon`` (an HLC); returns the horizon granted, which a
        live snapshot pin may hold lower (:mod:`pins`): only history below *that* may go."""
        padded_hlc(horizon)
        with self._lock:
            event = dumps({"table": table, "horizon": str(horizon)})
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
        self,
        table: str,
        interval: Interval,
        version: str,
        key_partitions: Sequence[int],
        modulus: int,
    ) -> list[int]:
        """Reserve an unused first-generation partition number of a chunk and version for each
        of ``key_partitions`` (in that order), each congruent to its key partition modulo
        ``modulus`` (the table's key partitions): the owners of different key partitions draw
        from disjoint number spaces, so a failover that rolls the shared counter back cannot
        hand one number to two servers (rule F4 of ``docs/design/contract/failover.md``)."""
        if not key_partitions:
            raise InvalidArgument("a batch allocates at least one partition number")
        if modulus < 1 or any(not 0 <= kp < modulus for kp in key_partitions):
            raise InvalidArgument(
                f"key partitions {sorted(set(key_partitions))} are not all in [0, {modulus})"
            )
        return self._allocate(
            table, interval, version, "first", 0, ROOT_PARTITION_LIMIT, modulus, key_partitions
        )

    def allocate_overwrite_partitions(
        self, table: str, interval: Interval, version: str, count: int
    ) -> list[int]:
        """Reserve ``count`` overwrite partition numbers (32768..65535) of a chunk and version."""
        if count < 1:
            raise InvalidArgument(f"partition count must be >= 1, got {count}")
        return self._allocate(
            table,
            interval,
            version,
            "overwrite",
            ROOT_PARTITION_LIMIT,
            OVERWRITE_PARTITION_LIMIT,
            1,
            [0] * count,
        )

    def _allocate(
        self,
        table: str,
        interval: Interval,
        version: str,
        kind: str,
        base: int,
        limit: int,
        modulus: int,
        residues: Sequence[int],
    ) -> list[int]:
        key = chunk_key(interval.start_ms, interval.end_ms, version, kind)
        args = [table, key, str(modulus), str(base), str(limit)]
        args += [str(self._heartbeat_timeout_ms), *map(str, residues)]
        # Another live server catches up within a heartbeat, or stops counting as live within
        # the heartbeat timeout: wait that long, no longer.
        deadline = time.monotonic() + self._heartbeat_timeout_ms / 1000 + 1.0
        while True:
            try:
                with self._lock:
                    numbers = [int(n) for n in self._run("ALLOCATE", args)[0]]
                    self._reservations[(table, key)] = max(
                        self._reservations.get((table, key), 0), numbers[-1] + 1
                    )
                    return numbers
            except RepublishPending:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(0.05)

    def claim_partitions(self, table: str, partitions: Iterable[int]) -> int | None:
        """Own unowned partitions (or those of a server that is no longer live, or parked).
        Idle or parked ones are resumed: returns their highest floor (the clock is above it)."""
        wanted = sorted(set(partitions))
        for partition in wanted:
            check_partition(partition)
        if not wanted:
            return None
        with self._lock:
            args = [table, str(self._heartbeat_timeout_ms), *map(str, wanted)]
            reply = self._run("CLAIM", args)
            self._owned.setdefault(table, set()).update(wanted)
            self._idle.setdefault(table, set()).difference_update(wanted)
            return self._observe_floor(reply)

    def hand_over(self, table: str, partition: int, to_server: str) -> None:
        """Give a partition to another server; its progress goes with it (the LWM cannot drop)."""
        check_server_id(to_server)
        with self._lock:
            self._run("HAND_OVER", [table, str(partition), to_server])
            self._owned.get(table, set()).discard(partition)
            self._progress.get(table, {}).pop(partition, None)
            self._idle.get(table, set()).discard(partition)

    def decommission(self) -> None:
        """Leave: this server's partitions stop counting (they should have been handed over)."""
        self.stop_heartbeats()
        with self._lock:
            self._run("DECOMMISSION", [])
            self._decommissioned = True
            self._registered = False
            self._owned.clear()
            self._progress.clear()
            self._idle.clear()

    @property
    def redis(self) -> redis.Redis:
        """The connection, for clients of the same state store (locks, LWM reads)."""
        return self._store.redis

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

    def table_lwm(self, table: str) -> TableLwm | None:
        """The table's LWM as Redis computes it now (quiet partitions at their clocks), in one
        round trip; None when no owned partition has reported."""
        return self._read(lambda r: read_table_lwm(r, table, prefix=self._keys.prefix))

    def live_owners(self, table: str) -> dict[int, str]:
        """Partition -> its owner, for the partitions of ``table`` another live server owns (a
        read: what a claim of them would be refused for)."""
        keys = self._keys

        def read(r: redis.Redis) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            pipe.hgetall(keys.progress(table)).hgetall(keys.servers).hgetall(keys.heartbeats)
            pipe.time()
            return pipe.execute()

        progress, servers, beats, (seconds, micros) = self._read(read)
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        gone = frozenset(s for s, status in servers.items() if status != "live")
        beats_ms = {server: int(at) for server, at in beats.items()}
        found = {}
        for field, value in progress.items():
            owner = parse_progress(value).owner
            live = is_live(owner, beats_ms, gone, now_ms, self._heartbeat_timeout_ms)
            if owner != self.server_id and live:
                found[int(field)] = owner
        return dict(sorted(found.items()))

    def close(self) -> None:
        self.stop_heartbeats()
        self._store.close()

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- machinery ---------------------------------------------------------------------------

    def _stamp(self, segment: Segment) -> Segment:
        return segment if segment.server else dataclasses.replace(segment, server=self.server_id)

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
        return self._store.read(operation)

    def _run(self, name: str, args: list[str]) -> list[Any]:
        return self._store.run(name, args)

    def _observe_floor(self, reply: list[Any]) -> int | None:
        """A reply's resume floor (``''``: none); the clock moves to it."""
        floor = int(reply[0]) if reply and reply[0] else None
        if floor is not None:
            self.clock.observe(floor)
        return floor

    def _reclaim(self, execute: Execute, table: str, owned: set[int]) -> set[int]:
        """Claim our partitions of ``table`` again; the ones kept (a lost one's progress goes)."""
        kept = set()
        for partition in sorted(owned):
            try:
                reply = execute("CLAIM", [table, str(self._heartbeat_timeout_ms), str(partition)])
                self._observe_floor(reply)
                kept.add(partition)
            except FailedPrecondition as error:
                log.warning("server %s lost partition on re-publish: %s", self.server_id, error)
                self._progress.get(table, {}).pop(partition, None)
        return kept

    def _republish_reservations(self, execute: Execute) -> None:
        """The numbers this server reserved, and those its sources name (other servers' logs)."""
        floors = dict(self._reservations)
        for source in list(self._number_sources.values()):
            for counter, next_free in counter_floors(source()).items():
                floors[counter] = max(floors.get(counter, 0), next_free)
        for (table, key), next_free in sorted(floors.items()):
            execute("RESERVE", [table, key, str(next_free)])

    def _republish(self, execute: Execute) -> None:
        """Publish our whole state again into a new data set, in causal order."""
        if not (
            self._registered
            or self._tables
            or self._segments
            or self._owned
            or self._retention
            or self._reservations
            or self._number_sources
        ):
            return
        log.info("server %s re-publishes its state", self.server_id)
        for descriptor in self._tables.values():
            execute("REGISTER_TABLE", [descriptor.name, descriptor.to_json()])
        if self._segments:
            execute("SEGMENTS", segment_args(list(self._segments.values()), []))
        for table, owned in list(self._owned.items()):
            self._owned[table] = self._reclaim(execute, table, owned)
        for table, progress in self._progress.items():
            if not progress:
                continue
            args = report_args(table, progress, self._idle.get(table, set()))
            self._observe_floor(execute("REPORT", args))
        for table, horizon in self._retention.items():
            event = dumps({"table": table, "horizon": str(horizon)})
            execute("RETENTION", [table, str(horizon), event])
        self._republish_reservations(execute)
        # Registering comes last: a follower reads "registered in this data set" as "has
        # re-published everything", and keeps carrying the server's old state until then.
        if self._registered:
            execute("REGISTER", [dumps({"server": self.server_id, "republished": True})])
