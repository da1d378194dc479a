"""The broker's follower: server state rebuilt from Redis, then kept current from its log.

Start takes one atomic snapshot of the whole state together with the log position it corresponds
to, then a daemon thread blocks on ``XREAD`` from exactly that position and applies events in log
order (a watermark report is applied only after every earlier change, so never before the segment
changes its server made before it). Stream ids are ``<seq>-0``: a gap (trimmed log), an event of
another epoch, or a changed epoch after a reconnect makes the follower rebuild from a fresh
snapshot, built aside and swapped in atomically, so readers never see a half-built state.

A store that went back under the follower (a failover, :mod:`.generation`) is resynchronised
with what it served held (F5 of ``docs/design/contract/failover.md``, :mod:`.carry`).

Before a read's events are applied, *preparers* are shown the segments those events add
(:meth:`Follower.add_preparer`): a broker reads what its lookups will need of their files while
queries still run on the state before, so the first query after a change does not pay for it.
The events wait for them (in log order: no later event overtakes them); a preparer bounds its
own time.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import redis

from horizon_broker._core.errors import FailedPrecondition, HorizonError, NotFound, Unavailable
from horizon_broker._core.keys import DEFAULT_PREFIX, Keys
from horizon_broker._core.redis_calls import connect, decode_reply
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark import generation as history
from horizon_broker.watermark import scripts
from horizon_broker.watermark.carry import release_replaced
from horizon_broker.watermark.catalog import TableDescriptor
from horizon_broker.watermark.follower_views import TableState, WatermarkReport
from horizon_broker.watermark.lwm import breakdown, no_lwm_error
from horizon_broker.watermark.state import ServerState, UnreadableMark, segment_ref
from horizon_broker.watermark.storage_root import outside_storage_root

__all__ = ["Follower", "TableState", "WatermarkReport"]

log = logging.getLogger(__name__)

BLOCK_MS = 500
"""How long one XREAD blocks; an idle follower re-checks the epoch this often."""
BATCH = 1000
REGRESSION_POLICIES = ("keep", "fail")
Preparer = Callable[[Mapping[str, Sequence[Segment]]], None]
"""Shown the segments about to be added, by table (:meth:`Follower.add_preparer`)."""
_TRANSIENT = (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError, OSError)


class Follower:
    """Follows the state store for a broker; thread-safe readers, one following thread."""

    def __init__(
        self,
        redis_url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        heartbeat_timeout_s: float = 5.0,
        max_staleness_s: float | None = 30.0,
        regression_policy: str = "keep",
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if regression_policy not in REGRESSION_POLICIES:
            raise ValueError(f"regression_policy must be one of {REGRESSION_POLICIES}")
        self._url = redis_url
        self._keys = Keys(prefix)
        self._heartbeat_timeout_ms = int(heartbeat_timeout_s * 1000)
        self._max_staleness_s = max_staleness_s
        self._regression_policy = regression_policy
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.RLock()
        self._state = ServerState()
        self._synced = threading.Event()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._redis: redis.Redis | None = None
        self._following = False
        self._last_contact = clock()
        self._listeners: list[Callable[[str], None]] = []
        self._preparers: list[Preparer] = []
        self.events_applied = 0
        self.full_syncs = 0
        self.rewinds = 0
        """How many times the store was found behind what this follower applied (F5)."""
        self._applied: history.Fingerprint | None = None
        self._rewound = False

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Sync once from Redis (if reachable) and follow changes from a daemon thread."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._follow, name="horizon-follower", daemon=True)
        self._thread.start()

    def wait_until_synced(self, timeout: float = 10.0) -> None:
        if not self._synced.wait(timeout):
            raise Unavailable(f"could not sync server state from Redis within {timeout:.1f}s")

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)
        if self._redis is not None:
            self._redis.close()
            self._redis = None
        self._following = False

    def add_listener(self, callback: Callable[[str], None]) -> None:
        """``callback(table)`` runs on the following thread after each change to that table."""
        with self._lock:
            self._listeners.append(callback)

    def add_preparer(self, callback: Preparer) -> None:
        """``callback({table: [segment, ...]})`` runs on the following thread with the segments
        the events just read add, before they are applied (see the module docstring)."""
        with self._lock:
            self._preparers.append(callback)

    def remove_preparer(self, callback: Preparer) -> None:
        with self._lock:
            if callback in self._preparers:
                self._preparers.remove(callback)

    # -- reads -------------------------------------------------------------------------------

    def tables(self) -> list[str]:
        with self._lock:
            return sorted(self._state.descriptors)

    def descriptor(self, table: str) -> TableDescriptor:
        with self._lock:
            return self._descriptor(table)

    def view(self, table: str) -> TableState:
        with self._lock:
            descriptor = self._descriptor(table)
            state = self._state
            timeline = state.timelines[table]
            return TableState(
                table=table,
                descriptor=descriptor,
                generation=timeline.generation,
                visible_segments=tuple(timeline.visible_segments()),
                lwm=state.served[table].served,
                retention_horizon=state.retention_horizon(table),
                staleness_s=self.staleness_s(),
                laggard=state.progress[table].minimum(state.clocks()),
                fallbacks=state.fallbacks(table),
                held_segments=len(state.held.get(table, ())),
            )

    def watermarks(self, table: str) -> WatermarkReport:
        with self._lock:
            self._descriptor(table)
            state = self._state
            decommissioned = frozenset(s for s, v in state.servers.items() if v != "live")
            now_ms = int(self._wall_clock() * 1000)
            result = breakdown(
                state.progress[table],
                state.heartbeats_ms,
                decommissioned,
                now_ms,
                self._heartbeat_timeout_ms,
                state.clocks(),
            )
            owners = {row.owner for row in result.partitions if row.owner is not None}
            tracker = state.served[table]
            return WatermarkReport(
                table=table,
                lwm=tracker.served,
                computed=result.computed,
                laggard=result.laggard,
                partitions=result.partitions,
                stale_servers=result.stale_servers,
                regressions=tuple(tracker.history),
                active_regression=tracker.active,
                retention_horizon=state.retention_horizon(table),
                staleness_s=self.staleness_s(),
                server_clocks={s: state.server_clocks.get(s, 0) for s in sorted(owners)},
                server_status={s: state.servers.get(s, "unknown") for s in sorted(owners)},
                store_ms=state.store_ms,
                held_segments=len(state.held.get(table, ())),
            )

    def lwm(self, table: str) -> int:
        """The snapshot a default query reads at; raises when there is none to serve safely."""
        with self._lock:
            self._descriptor(table)
            staleness = self.staleness_s()
            if self._max_staleness_s is not None and staleness > self._max_staleness_s:
                raise Unavailable(
                    f"server state is {staleness:.1f}s stale (limit {self._max_staleness_s:.1f}s):"
                    " the state store is unreachable"
                )
            tracker = self._state.served[table]
            if tracker.served is None:
                raise no_lwm_error(table)
            if self._regression_policy == "fail" and tracker.active is not None:
                r = tracker.active
                raise FailedPrecondition(
                    f"table {table!r}: low-watermark regressed from {r.from_lwm} to {r.to_lwm}"
                    f" (server {r.server}, partition {r.partition}); queries fail by policy"
                )
            return tracker.served

    def timeline_snapshot(self, table: str) -> Any:
        with self._lock:
            self._descriptor(table)
            return self._state.timelines[table].snapshot()

    def mark_unreadable(self, segment_id: Any, reason: str = "unreadable") -> bool:
        """The broker could not read this segment: drop it locally (the timeline falls back) and
        keep it out across resyncs, until :meth:`clear_unreadable`."""
        ref = segment_ref(segment_id)
        mark = UnreadableMark(reason, int(self._wall_clock() * 1000))
        with self._lock:
            removed = self._state.mark_unreadable(ref, mark)
            self._changed.notify_all()
        if removed:
            self._notify({ref[0]})
        return removed

    def clear_unreadable(self, segment_id: Any) -> bool:
        """The segment's files are readable again: it is visible again if still announced."""
        ref = segment_ref(segment_id)
        with self._lock:
            restored = self._state.clear_unreadable(ref)
            self._changed.notify_all()
        if restored:
            self._notify({ref[0]})
        return restored

    def still_unreadable(self, segment_id: Any) -> None:
        """A recheck found the segment still unreadable: note when."""
        ref = segment_ref(segment_id)
        with self._lock:
            mark = self._state.unreadable.get(ref)
            if mark is not None:
                checked = replace(mark, checked_ms=int(self._wall_clock() * 1000))
                self._state.unreadable[ref] = checked

    def unreadable(self) -> list[tuple[Segment, UnreadableMark]]:
        """Every announced segment kept out as unreadable, with why and since when."""
        with self._lock:
            state = self._state
            found = []
            for (table, key), mark in sorted(state.unreadable.items()):
                segment = state.segments.get(table, {}).get(key)
                if segment is not None:
                    found.append((segment, mark))
            return found

    def staleness_s(self) -> float:
        """0 while following Redis; otherwise seconds since the last successful contact."""
        if self._following:
            return 0.0
        return max(0.0, self._clock() - self._last_contact)

    def wait_for(self, predicate: Callable[[Follower], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.1))
            return True

    def held(self) -> dict[str, int]:
        """Tables held because the store went back, with their held segments (F5, F6)."""
        with self._lock:
            return {table: len(keys) for table, keys in sorted(self._state.held.items())}

    @property
    def state_epoch(self) -> str:
        with self._lock:
            return self._state.epoch

    @property
    def state_seq(self) -> int:
        with self._lock:
            return self._state.seq

    def _descriptor(self, table: str) -> TableDescriptor:
        descriptor = self._state.descriptors.get(table)
        if descriptor is None:
            raise NotFound(f"table {table!r} is not registered")
        return descriptor

    # -- following ---------------------------------------------------------------------------

    def _follow(self) -> None:
        backoff = 0.05
        # A restarted follower resumes from its state (the epoch is checked on connect).
        need_sync = not self._synced.is_set()
        while not self._stop.is_set():
            try:
                if self._redis is None:
                    self._redis = connect(self._url, socket_timeout=BLOCK_MS / 1000 + 5)
                    self._snapshot_script = self._redis.register_script(scripts.SNAPSHOT)
                    self._clock_script = self._redis.register_script(scripts.CLOCK)
                    need_sync = self._epoch_changed() or self._store_went_back() or need_sync
                if need_sync or self._rewound:
                    self._full_sync()
                    need_sync = False
                need_sync = self._read_once()
                backoff = 0.05
            except redis.ResponseError as error:
                if "UNBLOCKED" not in str(error):
                    raise
                # Our primary was demoted while we blocked on it: reconnect through Sentinel.
                log.warning("the state store's primary changed under the follower (%s)", error)
                self._drop_connection()
            except _TRANSIENT as error:
                if self._following:
                    log.warning("lost the state store (%s); serving the last state", error)
                self._following = False
                self._drop_connection()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)
            except Exception:
                log.exception("follower failed to apply the log; rebuilding from a snapshot")
                need_sync = True
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 2.0)

    def _drop_connection(self) -> None:
        if self._redis is not None:
            self._redis.close()
            self._redis = None

    def _store_went_back(self) -> bool:
        """On a new connection: must we resync (held, if the store went back under us)? (F3)"""
        assert self._redis is not None
        with self._lock:
            seq = self._state.seq
        found = history.history_at(self._redis, self._keys, seq, self._applied)
        self._rewound = self._rewound or found == "rewound"
        return found != "same"

    def _epoch_changed(self) -> bool:
        assert self._redis is not None
        current = self._redis.get(self._keys.epoch)
        return (current.decode() if current else "") != self._state.epoch

    def _contact(self) -> None:
        self._last_contact = self._clock()
        self._following = True

    def _full_sync(self) -> None:
        assert self._redis is not None
        reply = decode_reply(self._snapshot_script(args=[self._keys.prefix]))
        applied = history.fingerprint_at(self._redis, self._keys, int(reply[1]))
        with self._lock:
            previous = self._state
            known_unreadable = dict(previous.unreadable)
        rewound, self._rewound = self._rewound, False
        if rewound:
            self.rewinds += 1
            log.warning("the state store went back below event %d: resyncing", previous.seq)
        # Built outside the lock (readers keep the old state), swapped in one assignment.
        fresh = ServerState.from_snapshot(
            reply, unreadable=known_unreadable, previous=previous, rewound=rewound
        )
        if fresh.held:
            release_replaced(fresh, history.segment_events(self._redis, self._keys, fresh.seq))
        with self._lock:
            # Marks set or cleared while the snapshot was being built.
            for ref, mark in self._state.unreadable.items():
                if ref not in known_unreadable:
                    fresh.mark_unreadable(ref, mark)
            for ref in set(known_unreadable) - set(self._state.unreadable):
                fresh.clear_unreadable(ref)
            self._state = fresh
            self._applied = applied
            self.full_syncs += 1
            self._changed.notify_all()
        self._contact()
        log.info("follower synced: epoch %s at event %d", fresh.epoch, fresh.seq)
        self._notify(set(previous.descriptors) | set(fresh.descriptors))
        # After the listeners: one added once wait_until_synced returned hears only later changes.
        self._synced.set()

    def _read_once(self) -> bool:
        """One blocking read and apply; True when a full sync is needed."""
        assert self._redis is not None
        with self._lock:
            seq, epoch = self._state.seq, self._state.epoch
        reply = self._redis.xread({self._keys.log: f"{seq}-0"}, count=BATCH, block=BLOCK_MS)
        self._contact()
        if not reply:
            return self._tick(seq, epoch)
        entries = reply[0][1]
        self._prepare(entries)
        touched: set[str] = set()
        discontinuity = False
        with self._lock:
            state = self._state
            for entry_id, fields in entries:
                entry_seq = int(entry_id.split(b"-")[0])
                if entry_seq != state.seq + 1 or fields[b"e"].decode() != epoch:
                    # Synced before the log existed: its first event starts an epoch we could
                    # not know. Rebuilding from empty is cheap and nothing was missed.
                    first_log = not epoch and state.seq == 0 and entry_seq == 1
                    log.log(
                        logging.INFO if first_log else logging.WARNING,
                        "log discontinuity after event %d (next is %d): rebuilding",
                        state.seq,
                        entry_seq,
                    )
                    discontinuity = True
                    break
                if not history.follows(fields, self._applied):  # the store went back under us (F5)
                    log.warning("event %d does not follow the one applied: rebuilding", entry_seq)
                    discontinuity = self._rewound = True
                    break
                touched |= state.apply(
                    fields[b"k"].decode(),
                    json.loads(fields[b"d"]),
                    fields[b"s"].decode(),
                    int(fields[b"t"]),
                )
                state.seq = entry_seq
                self._applied = history.fingerprint(fields)
                self.events_applied += 1
            self._changed.notify_all()
        self._notify(touched)
        return discontinuity

    def _prepare(self, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        """Show the preparers the segments ``entries`` add (outside the lock: readers go on);
        only those whose files lie inside their table's storage root, the only ones applying
        them accepts."""
        with self._lock:
            preparers = list(self._preparers)
            descriptors = dict(self._state.descriptors)
        if not preparers:
            return
        added: dict[str, list[Segment]] = {}
        for _, fields in entries:
            if fields.get(b"k") != b"segments":
                continue
            try:
                raws = json.loads(fields[b"d"]).get("add", ())
                segments = [Segment.from_dict(raw) for raw in raws]
            except (HorizonError, KeyError, TypeError, ValueError, AttributeError):
                continue  # applying the event reports what is wrong with it
            for segment in segments:
                descriptor = descriptors.get(segment.table)
                if descriptor is not None and outside_storage_root(descriptor, segment) is None:
                    added.setdefault(segment.table, []).append(segment)
        if not added:
            return
        for preparer in preparers:
            try:
                preparer(added)
            except Exception:
                log.exception("follower preparer failed")

    def _tick(self, seq: int, epoch: str) -> bool:
        """Nothing new in the log: read the store's clock with the log position (one round
        trip). At our position, parked partitions may follow it; True when the epoch changed."""
        assert self._redis is not None
        current, current_seq, store_ms = decode_reply(self._clock_script(args=[self._keys.prefix]))
        if current != epoch:
            return True
        if int(current_seq) < seq:
            self._rewound = True  # the log went back below what we applied (F3)
            return True
        if int(current_seq) != seq:
            return False  # events arrived meanwhile: the clock moves with them
        with self._lock:
            if self._state.seq != seq:
                return False
            moved = self._state.advance_clock(int(store_ms))
            if moved:
                self._changed.notify_all()
        self._notify(moved)
        return False

    def _notify(self, tables: set[str]) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for table in sorted(tables):
            for listener in listeners:
                try:
                    listener(table)
                except Exception:
                    log.exception("follower listener failed for table %s", table)
