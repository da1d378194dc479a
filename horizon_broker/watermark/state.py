"""The broker's picture of the server state, and how each logged event changes it (pure).

A :class:`ServerState` is built from one atomic snapshot of Redis and then advanced by the log's
events in order. Nothing here touches Redis or a clock: event times come from the events (Redis
time), so two brokers fed the same snapshot and events hold exactly the same state.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from horizon_broker._core.errors import HorizonError
from horizon_broker.timeline.segment import Segment
from horizon_broker.timeline.timeline import Timeline
from horizon_broker.watermark.carry import (
    carry_unpublished,
    hold_served,
    ignore_reused_ids,
    overshadowed_held,
    release_held,
)
from horizon_broker.watermark.catalog import TableDescriptor
from horizon_broker.watermark.lwm import (
    ACTIVE,
    IDLE,
    PARKED,
    Clocks,
    MonotonicLwm,
    PartitionProgress,
    TableProgress,
)
from horizon_broker.watermark.records import parse_progress, segment_key
from horizon_broker.watermark.storage_root import outside_storage_root

log = logging.getLogger(__name__)

SegmentRef = tuple[str, str]
"""(table, segment key): how the follower names a segment."""


@dataclass(frozen=True, slots=True)
class UnreadableMark:
    """Why and since when this broker keeps a segment out of its timeline."""

    reason: str
    since_ms: int
    checked_ms: int = 0
    """When a recheck last found it still unreadable (0: never rechecked)."""
    refused: bool = False
    """Kept out for what its announcement says (files outside the table's storage root), not
    for a read that failed: no recheck brings it back."""


@dataclass(frozen=True, slots=True)
class Fallback:
    """An unreadable segment and the timeline around it: what the broker read with it
    (``before``) and what it reads now (``after``), over the segment's time chunk."""

    lost: Segment
    mark: UnreadableMark
    before: tuple[Segment, ...]
    after: tuple[Segment, ...]


def segment_ref(segment_or_id: Any) -> SegmentRef:
    """The reference of a Segment or SegmentId (anything with table/interval/version/partition)."""
    interval = segment_or_id.interval
    key = json.dumps(
        [interval.start_ms, interval.end_ms, segment_or_id.version, segment_or_id.partition],
        separators=(",", ":"),
    )
    return (segment_or_id.table, key)


@dataclass
class ServerState:
    """Everything a broker knows: descriptors, segments and timelines, servers, progress."""

    epoch: str = ""
    seq: int = 0
    descriptors: dict[str, TableDescriptor] = field(default_factory=dict)
    segments: dict[str, dict[str, Segment]] = field(default_factory=dict)
    timelines: dict[str, Timeline] = field(default_factory=dict)
    servers: dict[str, str] = field(default_factory=dict)
    """server -> ``live``, ``parked`` or ``decommissioned``."""
    heartbeats_ms: dict[str, int] = field(default_factory=dict)
    server_clocks: dict[str, int] = field(default_factory=dict)
    """server -> its clock at its last heartbeat: what its idle partitions' LWM follows."""
    store_ms: int = 0
    """The state store's clock as of the last event applied (or clock read): what parked partitions'
    LWM follows. A partition resumed later is resumed above it (rule 7 of
    ``docs/design/contract/watermarks.md``)."""
    progress: dict[str, TableProgress] = field(default_factory=dict)
    retention: dict[str, dict[str, int]] = field(default_factory=dict)
    served: dict[str, MonotonicLwm] = field(default_factory=dict)
    unreadable: dict[SegmentRef, UnreadableMark] = field(default_factory=dict)
    held: dict[str, set[str]] = field(default_factory=dict)
    """table -> keys of served segments the store lost, kept until it has them again (F5)."""
    rejected: list[str] = field(default_factory=list)
    _fallbacks: dict[str, tuple[Any, tuple[Fallback, ...]]] = field(default_factory=dict)

    # -- building ----------------------------------------------------------------------------

    @classmethod
    def from_snapshot(
        cls,
        reply: list[Any],
        *,
        unreadable: Mapping[SegmentRef, UnreadableMark] | None = None,
        previous: ServerState | None = None,
        rewound: bool = False,
    ) -> ServerState:
        """Build from the SNAPSHOT script's decoded reply.

        ``previous`` (this broker's state before a resync) contributes the served LWM floors, so
        the served LWM stays monotonic, and, when the data set was lost (new epoch), the state of
        servers that have not re-published yet, so their frozen contribution keeps holding; when
        the store went back (``rewound``), the segments it lost are held (:mod:`.carry`).
        """
        epoch, seq, now_ms, tables, servers, heartbeats, per_table, *more = reply
        state = cls(epoch=epoch, seq=int(seq), unreadable=dict(unreadable or {}))
        state.store_ms = int(now_ms)
        state.servers = _pairs(servers)
        state.heartbeats_ms = {k: int(v) for k, v in _pairs(heartbeats).items()}
        state.server_clocks = {k: int(v) for k, v in _pairs(more[0] if more else []).items()}
        for name, text in _pairs(tables).items():
            state.descriptors[name] = TableDescriptor.from_json(text)
        raw_segments: dict[str, list[Segment]] = {}
        for name, segment_values, progress_pairs, retention_pairs in per_table:
            raw_segments[name] = [Segment.from_dict(json.loads(v)) for v in segment_values]
            state.progress[name] = TableProgress(
                {int(p): parse_progress(v) for p, v in _pairs(progress_pairs).items()}
            )
            state.retention[name] = {s: int(h) for s, h in _pairs(retention_pairs).items()}
        if previous is not None:
            carry_unpublished(previous, state, raw_segments)
            hold_served(previous, state, raw_segments, rewound=rewound)
        for name in state.descriptors:
            state.segments.setdefault(name, {})
            timeline = state.timelines[name] = Timeline(name)
            if previous is not None and name in previous.timelines:
                # Generations name cached views: a rebuilt timeline must never reuse a number
                # that meant another set of segments before the resync.
                timeline.generation = previous.timelines[name].generation + 1
            state.progress.setdefault(name, TableProgress())
            state.retention.setdefault(name, {})
            state._add_segments(name, raw_segments.get(name, []), int(now_ms))
            floor = previous.served.get(name) if previous is not None else None
            tracker = floor.copy() if floor is not None else MonotonicLwm(name)
            if not state.held.get(name):
                tracker.observe(state.progress[name].minimum(state.clocks()), int(now_ms) / 1000)
            state.served[name] = tracker
        state._release_overshadowed(int(now_ms))
        return state

    def clocks(self) -> Clocks:
        """The clocks quiet partitions follow, as this state knows them."""
        return Clocks(self.server_clocks, self.store_ms)

    # -- events ------------------------------------------------------------------------------

    def apply(self, kind: str, data: Mapping[str, Any], server: str, t_ms: int) -> set[str]:
        """Apply one logged event; returns the tables whose state changed."""
        handler = getattr(self, f"_on_{kind}", None)
        if handler is None:
            log.warning("ignoring unknown event kind %r", kind)
            return set()
        return handler(data, server, t_ms) | self.advance_clock(t_ms)

    def advance_clock(self, store_ms: int) -> set[str]:
        """The store's clock reached ``store_ms`` with every event before it applied (an event's
        time, or a clock read at this log position): parked partitions follow it. Returns the
        tables whose LWM may have moved."""
        if store_ms <= self.store_ms:
            return set()
        self.store_ms = store_ms
        moved = {table for table, progress in self.progress.items() if progress.has_parked}
        for table in moved:
            self._observe(table, store_ms)
        return moved

    def _on_register(self, data: Mapping[str, Any], server: str, t_ms: int) -> set[str]:
        self.servers[server] = "live"
        self.heartbeats_ms[server] = t_ms
        return set()

    def _on_heartbeat(self, data: Mapping[str, Any], server: str, t_ms: int) -> set[str]:
        self.heartbeats_ms[server] = t_ms
        clock = data.get("clock")
        if not clock or int(clock) <= self.server_clocks.get(server, 0):
            return set()
        self.server_clocks[server] = int(clock)
        moved = {table for table, progress in self.progress.items() if progress.follows(server)}
        for table in moved:
            self._observe(table, t_ms)
        return moved

    def _on_table(self, data: Mapping[str, Any], server: str, t_ms: int) -> set[str]:
        descriptor = TableDescriptor.from_dict(dict(data))
        name = descriptor.name
        known = self.descriptors.get(name)
        self.descriptors[name] = descriptor
        if known is not None and known.schema_versions != descriptor.schema_versions:
            # A schema change: views built over the old columns must not serve it.
            self.timelines[name].generation += 1
        if name not in self.timelines:
            self.timelines[name] = Timeline(name)
            self.segments[name] = {}
            self.progress[name] = TableProgress()
            self.retention[name] = {}
            self.served[name] = MonotonicLwm(name)
        return {name}

    def _on_segments(self, data: Mapping[str, Any], server: str, t_ms: int) -> set[str]:
        data = ignore_reused_ids(self.held, self.segments, data)
        touched: set[str] = set()
        removed: dict[str, list[Segment]] = {}
        for raw in data.get("remove", ()):
            segment = Segment.from_dict(raw)
            touched.add(segment.table)
            stored = self.segments.get(segment.table, {}).pop(segment_key(segment), None)
            if stored is not None:
                removed.setdefault(segment.table, []).append(stored)
        for table, segments in removed.items():
            # One settling per time chunk: an update replaces hundreds of segments of one.
            self.timelines[table].remove_all(segments)
        by_table: dict[str, list[Segment]] = {}
        for raw in data.get("add", ()):
            segment = Segment.from_dict(raw)
            by_table.setdefault(segment.table, []).append(segment)
        for table, segments in by_table.items():
            if table in self.timelines:
                self._add_segments(table, segments, t_ms)
                touched.add(table)
        for table in release_held(self.held, data):
            self._observe(table, t_ms)
        return touched | self._release_overshadowed(t_ms)

    def _release_overshadowed(self, t_ms: int) -> set[str]:
        """Let go of held segments a segment of the store overshadows (:mod:`.carry`); returns
        the tables that changed."""
        released = overshadowed_held(self.held, self.segments, self.timelines)
        if not released:
            return set()
        log.warning(
            "%d held segment(s) are overshadowed by segments the store has (their "
            "replacement was lost with them and published again): no longer held: %s",
            len(released),
            ", ".join(str(s.id) for s in released),
        )
        removal = {"add": [], "remove": [s.to_dict() for s in released]}
        return self._on_segments(removal, "", t_ms)

    def _on_report(self, data: Mapping[str, Any], server: str, t_ms: int) -> set[str]:
        table = data["table"]
        progress = self.progress.get(table)
        if progress is None:
            return set()
        idle = {int(p) for p in data.get("idle") or ()}
        for key, (ingested, applied) in data["progress"].items():
            partition = int(key)
            old = progress.get(partition)
            entry = PartitionProgress(server, int(ingested), int(applied), t_ms)
            if partition in idle:
                since = old.since_ms if old is not None and old.state == IDLE else t_ms
                entry = dataclasses.replace(entry, state=IDLE, since_ms=since)
            progress.set(partition, entry)
        self._observe(table, t_ms)
        return {table}

    def _on_park(self, data: Mapping[str, Any], server: str, t_ms: int) -> set[str]:
        if data.get("stops"):
            self.servers[server] = "parked"
        touched = set()
        for table, partitions in (data.get("tables") or {}).items():
            progress = self.progress.get(table)
            if progress is None:
                continue
            for key, (ingested, applied, since) in partitions.items():
                old = progress.get(int(key)) or PartitionProgress(server)
                parked = dataclasses.replace(
                    old, ingested=int(ingested), applied=int(applied), state=PARKED
                )
                progress.set(int(key), dataclasses.replace(parked, since_ms=int(since)))
            self._observe(table, t_ms)
            touched.add(table)
        return touched

    def _on_retention(self, data: Mapping[str, Any], server: str, t_ms: int) -> set[str]:
        table = data["table"]
        if table not in self.retention:
            return set()
        self.retention[table][server] = int(data["horizon"])
        return {table}

    def _on_claim(self, data: Mapping[str, Any], server: str, t_ms: int) -> set[str]:
        table = data["table"]
        return self._set_owner(table, data["partitions"], server, t_ms, data.get("progress"))

    def _on_handover(self, data: Mapping[str, Any], server: str, t_ms: int) -> set[str]:
        table, partitions = data["table"], [data["partition"]]
        return self._set_owner(table, partitions, data["to"], t_ms, data.get("progress"))

    def _on_decommission(self, data: Mapping[str, Any], server: str, t_ms: int) -> set[str]:
        self.servers[server] = "decommissioned"
        self.heartbeats_ms.pop(server, None)
        touched = set()
        for table, progress in self.progress.items():
            owned = progress.owned_by(server)
            if owned:
                touched |= self._set_owner(table, owned, None, t_ms)
        return touched

    # -- helpers -----------------------------------------------------------------------------

    def _set_owner(
        self,
        table: str,
        partitions: Iterable[int],
        owner: str | None,
        t_ms: int,
        resumed: Mapping[str, Any] | None = None,
    ) -> set[str]:
        """A new owner (None: released) for ``partitions``, each active again; ``resumed``
        names the progress of those a claim or handover resumed."""
        progress = self.progress.get(table)
        if progress is None:
            return set()
        for partition in partitions:
            old = progress.get(int(partition)) or PartitionProgress(None)
            entry = dataclasses.replace(old, owner=owner, state=ACTIVE, since_ms=None)
            values = (resumed or {}).get(str(partition))
            if values is not None:
                entry = dataclasses.replace(entry, ingested=int(values[0]), applied=int(values[1]))
            progress.set(int(partition), entry)
        self._observe(table, t_ms)
        return {table}

    def _observe(self, table: str, t_ms: int) -> None:
        if self.held.get(table):
            return  # the hold keeps the served snapshot until the store caught up (F5)
        self.served[table].observe(self.progress[table].minimum(self.clocks()), t_ms / 1000)

    def _add_segments(self, table: str, segments: Iterable[Segment], now_ms: int) -> None:
        """Store announced segments and put the readable ones in the timeline: the segments
        they replace removed in one batch, then all of them added in one (each time chunk
        settled once, not once per segment), or one by one when the batch is refused, so a
        conflicting announcement is rejected alone."""
        segments = list(segments)
        keys = [segment_key(segment) for segment in segments]
        if len(set(keys)) != len(keys):  # one segment announced twice: each replaces the last
            for segment in segments:
                self._add_segments(table, [segment], now_ms)
            return
        replaced, added = self._store_announced(table, keys, segments, now_ms)
        timeline = self.timelines[table]
        if replaced:
            timeline.remove_all(replaced)
        self._show_added(table, added)

    def _store_announced(
        self, table: str, keys: list[str], segments: list[Segment], now_ms: int
    ) -> tuple[list[Segment], list[tuple[str, Segment]]]:
        """Store the announced segments; the readable ones they replace, and the ones to add
        to the timeline (a segment outside the table's storage root is refused, kept out)."""
        stored = self.segments[table]
        descriptor = self.descriptors[table]
        replaced: list[Segment] = []
        added: list[tuple[str, Segment]] = []
        for key, segment in zip(keys, segments, strict=True):
            previous = stored.get(key)
            if previous is not None:
                if previous == segment:
                    continue
                if (table, key) not in self.unreadable:
                    replaced.append(previous)
            stored[key] = segment
            problem = outside_storage_root(descriptor, segment)
            if problem is not None:
                # Kept out like an unreadable segment: its chunk falls back, and a query that
                # would need it fails clearly instead of missing its rows.
                self.unreadable[(table, key)] = UnreadableMark(
                    f"refused: {problem}", now_ms, refused=True
                )
                log.error("refused announced segment %s: %s", segment, problem)
                continue
            if (table, key) in self.unreadable:
                continue
            added.append((key, segment))
        return replaced, added

    def _show_added(self, table: str, added: list[tuple[str, Segment]]) -> None:
        """Add the segments to the timeline in one batch, or one by one when the batch is
        refused, so that a conflicting announcement is rejected alone."""
        stored = self.segments[table]
        timeline = self.timelines[table]
        try:
            timeline.add_all([segment for _, segment in added])
        except HorizonError:
            for key, segment in added:  # the batch left nothing: each on its own
                try:
                    timeline.add(segment)
                except HorizonError as error:
                    # A conflicting announcement must not stop the broker following the others.
                    del stored[key]
                    self.rejected.append(f"{segment}: {error}")
                    del self.rejected[:-100]
                    log.error("rejected announced segment %s: %s", segment, error)

    def mark_unreadable(self, ref: SegmentRef, mark: UnreadableMark) -> bool:
        """Keep the segment out of the timeline (it falls back) until :meth:`clear_unreadable`."""
        known = self.unreadable.get(ref)
        if known is not None and known.refused:
            return False
        self.unreadable[ref] = mark
        table, key = ref
        timeline = self.timelines.get(table)
        segment = self.segments.get(table, {}).get(key)
        if timeline is None or segment is None:
            return False
        return bool(timeline.remove_unreadable(segment))

    def clear_unreadable(self, ref: SegmentRef) -> bool:
        """The segment is readable again: back into the timeline if it is still announced."""
        known = self.unreadable.get(ref)
        if known is None or known.refused:
            return False
        del self.unreadable[ref]
        table, key = ref
        timeline = self.timelines.get(table)
        segment = self.segments.get(table, {}).get(key)
        if timeline is None or segment is None:
            return False
        try:
            timeline.add(segment)
        except HorizonError as error:
            log.error("could not restore segment %s: %s", segment, error)
            return False
        return True

    def fallbacks(self, table: str) -> tuple[Fallback, ...]:
        """Each announced segment of ``table`` this broker keeps out as unreadable, with the
        visible segments of its chunk with and without it (cached per timeline generation)."""
        refs = {ref: mark for ref, mark in self.unreadable.items() if ref[0] == table}
        timeline = self.timelines.get(table)
        if not refs or timeline is None:
            return ()
        stamp = (timeline.generation, tuple(sorted(refs.items())))
        cached = self._fallbacks.get(table)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        stored = self.segments.get(table, {})
        found = []
        for (_, key), mark in sorted(refs.items()):
            lost = stored.get(key)
            if lost is None:
                continue
            chunk = lost.interval
            neighbours = [
                segment
                for other_key, segment in stored.items()
                if segment.interval.overlaps(chunk) and (table, other_key) not in refs
            ]
            with_it = Timeline(table)
            with_it.add_all([*neighbours, lost])
            found.append(
                Fallback(
                    lost=lost,
                    mark=mark,
                    before=tuple(with_it.visible_segments(chunk)),
                    after=tuple(timeline.visible_segments(chunk)),
                )
            )
        result = tuple(found)
        self._fallbacks[table] = (stamp, result)
        return result

    def retention_horizon(self, table: str) -> int:
        """History below this HLC may be gone on some server: the max of their horizons."""
        return max(self.retention.get(table, {}).values(), default=0)


def _pairs(flat: list[Any]) -> dict[str, Any]:
    return dict(zip(flat[0::2], flat[1::2], strict=True))
