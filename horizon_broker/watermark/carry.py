"""What a resync keeps of the state before it (pure).

Two cases keep something the fresh snapshot lacks. After a lost data set (a new epoch) a server
that has not re-published yet keeps its old segments and progress (:func:`carry_unpublished`).
After the store *went back* (a promoted replica without the last acknowledged writes, rule F5 of
``docs/design/contract/failover.md``) every segment this broker had applied and the store lost is
*held*: kept in the timeline, with the table's served snapshot frozen, until the store has it
again or the new history removes it (:func:`hold_served`, :func:`release_held`). Answers at a
served snapshot therefore never lose a row, and nothing committed after it shows there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.lwm import TableProgress
from horizon_broker.watermark.records import segment_key

if TYPE_CHECKING:
    from horizon_broker.timeline.timeline import Timeline
    from horizon_broker.watermark.state import ServerState

log = logging.getLogger(__name__)


def hold_served(
    previous: ServerState,
    state: ServerState,
    raw_segments: dict[str, list[Segment]],
    *,
    rewound: bool,
) -> None:
    """Hold the segments ``previous`` served and the fresh snapshot lacks: all of them when the
    store went back (``rewound``), else only those already held (a resync during a hold)."""
    for name, descriptor in previous.descriptors.items():
        served = previous.segments.get(name, {})
        candidates = (
            served
            if rewound
            else {k: served[k] for k in previous.held.get(name, ()) if k in served}
        )
        present = {segment_key(s): s.location for s in raw_segments.get(name, [])}
        carried = {
            key: segment
            for key, segment in candidates.items()
            if present.get(key) != segment.location
        }
        if not carried:
            continue
        state.descriptors.setdefault(name, descriptor)
        raw_segments[name] = _without_reused_ids(raw_segments.get(name, []), carried)
        raw_segments[name].extend(carried.values())
        state.held[name] = set(carried)
        log.warning(
            "state store is behind what this broker served: holding %d segment(s) of table %s "
            "and its snapshot until the store has them again: %s",
            len(carried),
            name,
            ", ".join(f"{s.id} ({s.server})" for s in carried.values()),
        )


def _without_reused_ids(fresh: list[Segment], carried: Mapping[str, Segment]) -> list[Segment]:
    """The fresh snapshot's segments minus those that reuse a held segment's id for other
    files (a failover handed the number out twice): the held segment is what was served."""
    return [segment for segment in fresh if not _reuses_held_id(segment, carried)]


def _reuses_held_id(segment: Segment, held: Mapping[str, Segment]) -> bool:
    """Whether ``segment`` names a held segment's id with other files (logged when it does)."""
    mine = held.get(segment_key(segment))
    if mine is None or mine.location == segment.location:
        return False
    log.error(
        "table %s: held segment %s's id now names other files %s (a failover handed the "
        "number out twice): the held segment stays, the other is ignored",
        segment.table,
        mine.id,
        list(segment.location),
    )
    return True


def ignore_reused_ids(
    held: Mapping[str, set[str]],
    stored_segments: Mapping[str, Mapping[str, Segment]],
    event: Mapping[str, Any],
) -> Mapping[str, Any]:
    """A segments event minus what names a held segment's id with other files (a failover
    handed the number out twice): the held segment is what was served, and stays held; neither
    an add nor a remove of the other segment may replace it or end its hold."""
    if not held:
        return event

    def reused(raw: Mapping[str, Any]) -> bool:
        segment = Segment.from_dict(dict(raw))
        key = segment_key(segment)
        if key not in held.get(segment.table, ()):
            return False
        mine = stored_segments.get(segment.table, {}).get(key)
        return mine is not None and _reuses_held_id(segment, {key: mine})

    return {
        **event,
        "add": [raw for raw in event.get("add", ()) if not reused(raw)],
        "remove": [raw for raw in event.get("remove", ()) if not reused(raw)],
    }


def release_replaced(state: ServerState, events: Iterable[Mapping[str, Any]]) -> int:
    """Let go of held segments that the store's history itself removed (an update or a
    compaction whose event this broker never applied: it resynced past it). They were replaced,
    not lost, and no later event will name them: held, they would freeze the table for good.
    A segment whose last mention in the log is an add stays held. Returns how many went."""
    if not state.held:
        return 0
    last: dict[tuple[str, str], Mapping[str, Any] | None] = {}
    for event in events:
        for kind in ("remove", "add"):
            for raw in event.get(kind, ()):
                segment = Segment.from_dict(dict(raw))
                key = segment_key(segment)
                if key in state.held.get(segment.table, ()):
                    last[(segment.table, key)] = raw if kind == "remove" else None
    replaced = [raw for raw in last.values() if raw is not None]
    if replaced:
        log.warning(
            "%d held segment(s) were replaced by events of the store's history this broker "
            "resynced past: no longer held",
            len(replaced),
        )
        state.apply("segments", {"add": [], "remove": replaced}, "", state.store_ms)
    return len(replaced)


def overshadowed_held(
    held: Mapping[str, set[str]],
    segments: Mapping[str, Mapping[str, Segment]],
    timelines: Mapping[str, Timeline],
) -> list[Segment]:
    """Held segments that another segment overshadows (pure): the store lost them *and* the
    update or compaction that replaced them, then their owner published its newer state again.
    No event will name them (their removal was lost with them), and at every snapshot served
    the newer segment answers the same rows (what it adds are validUntils above them, set by
    commits the served snapshots do not include), so they are let go rather than held for good."""
    found = []
    for table, keys in held.items():
        timeline, stored = timelines.get(table), segments.get(table, {})
        if timeline is None:
            continue
        for key in sorted(keys):
            segment = stored.get(key)
            if segment is not None and timeline.is_overshadowed(segment):
                found.append(segment)
    return found


def release_held(held: dict[str, set[str]], event: Mapping[str, Any]) -> list[str]:
    """A segments event of the new history: what it adds again or removes is no longer held.
    Returns the tables whose hold it ended."""
    if not held:
        return []
    ended = []
    for raw in _raw_segments(event):
        segment = Segment.from_dict(raw)
        keys = held.get(segment.table)
        if keys is None:
            continue
        keys.discard(segment_key(segment))
        if not keys:
            del held[segment.table]
            ended.append(segment.table)
            log.info("table %s: the state store caught up, the hold ends", segment.table)
    return ended


def _raw_segments(event: Mapping[str, Any]) -> Iterable[Any]:
    yield from event.get("remove", ())
    yield from event.get("add", ())


def carry_unpublished(
    previous: ServerState, state: ServerState, raw_segments: dict[str, list[Segment]]
) -> None:
    """After a data loss, keep what servers that have not re-published yet had published.

    Within one data set a server never leaves the server list, so a live server that the
    snapshot lacks is one whose data set was lost. A re-publishing server registers last; until
    then its old segments and progress keep holding, however many snapshots the broker takes
    meanwhile (the first can even see no epoch at all).
    """
    missing = {
        server
        for server, status in previous.servers.items()
        if status == "live" and server not in state.servers
    }
    if not missing:
        return
    log.warning(
        "state store lost its data; carrying state of %s until they re-publish", sorted(missing)
    )
    for server in missing:
        state.servers[server] = previous.servers[server]
        if server in previous.heartbeats_ms:
            state.heartbeats_ms[server] = previous.heartbeats_ms[server]
        if server in previous.server_clocks:
            state.server_clocks[server] = previous.server_clocks[server]
    for name, descriptor in previous.descriptors.items():
        state.descriptors.setdefault(name, descriptor)
        present = {segment_key(s) for s in raw_segments.get(name, [])}
        carried = [
            s
            for key, s in previous.segments.get(name, {}).items()
            if s.server in missing and key not in present
        ]
        raw_segments.setdefault(name, []).extend(carried)
        progress = state.progress.setdefault(name, TableProgress())
        for partition, entry in previous.progress.get(name, TableProgress()).items():
            if entry.owner in missing and progress.get(partition) is None:
                progress.set(partition, entry)
        for server in missing:
            horizon = previous.retention.get(name, {}).get(server)
            if horizon is not None:
                state.retention.setdefault(name, {})[server] = horizon
