"""The verdict on each stored version of one key at one snapshot (pure: no I/O, no clocks).

A query at snapshot ``S`` reads the rows of the segments the timeline shows (the *read*
segments) that pass the visibility rule ``validFrom <= S AND (validUntil IS NULL OR validUntil >
S)``. A stored version is therefore visible exactly when its segment is read and the rule holds;
every other version gets the first reason that keeps it out, in this order:

1. its segment is not read: unreadable, compacted into another segment (which kept it, or
   dropped it because retention let it go), overshadowed by a newer group or version, or waiting
   in a standby group (newer than what is read, but not complete);
2. retention let it go: ``validUntil`` at or below the retention horizon ``H``, so no snapshot a
   query may read sees it (the next rewrite or compaction drops it);
3. it was committed above the low-watermark (a partition still behind holds the snapshot back);
4. it was committed after the snapshot (below the LWM: a later snapshot sees it);
5. it was closed at or before the snapshot: superseded by the version committed when it closed,
   or deleted when none was.

The snapshot must be one a query may read: ``H <= S <= LWM``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Reason = Literal[
    "visible",
    "superseded",
    "deleted",
    "written_after_snapshot",
    "above_lwm",
    "overshadowed",
    "standby",
    "unreadable_segment",
    "dropped_by_retention",
    "compacted",
]

PlaceState = Literal["read", "overshadowed", "standby", "unreadable"]


@dataclass(frozen=True, slots=True)
class StoredVersion:
    """One stored row of the key: its validity, the segment and file holding it, its values."""

    valid_from: int
    valid_until: int | None
    segment: str
    file: str
    values: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True, slots=True)
class SegmentPlace:
    """Where a segment stands for a query: read, or why not (``why``: a sentence), its atomic
    update group in words, and the segments a compaction merged it into (when one did)."""

    segment: str
    state: PlaceState
    group: str = ""
    why: str = ""
    compacted_into: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Holder:
    """The server and partition holding the LWM back, and their watermark (None: unreported)."""

    server: str
    partition: int
    watermark: int | None


@dataclass(frozen=True, slots=True)
class ReadPoint:
    """The snapshot explained, with the table's LWM, retention horizon and LWM holder."""

    snapshot: int
    lwm: int | None
    retention_horizon: int = 0
    holder: Holder | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """One stored version's verdict: the reason, a sentence saying it, and what it names."""

    version: StoredVersion
    place: SegmentPlace
    reason: Reason
    detail: str
    superseded_by: StoredVersion | None = None
    """The version committed when this one closed (None: open, or closed by a delete)."""
    compacted_into: tuple[str, ...] = ()


def explain_versions(
    versions: Iterable[StoredVersion],
    places: Mapping[str, SegmentPlace],
    point: ReadPoint,
) -> list[Verdict]:
    """Every version's verdict at ``point``, newest ``validFrom`` first (copies of one version
    in several segments: read ones first). A version whose segment ``places`` does not know is
    taken as in a segment no query reads (standby)."""
    stored = sorted(
        versions,
        key=lambda v: (
            -v.valid_from,
            places.get(v.segment, _unknown(v.segment)).state != "read",
            v.segment,
            v.file,
        ),
    )
    return [_verdict(version, stored, places, point) for version in stored]


def _unknown(segment: str) -> SegmentPlace:
    return SegmentPlace(segment, "standby", why="the timeline no longer holds it")


def _verdict(
    version: StoredVersion,
    stored: Sequence[StoredVersion],
    places: Mapping[str, SegmentPlace],
    point: ReadPoint,
) -> Verdict:
    place = places.get(version.segment, _unknown(version.segment))
    successor = _successor(version, stored, places)
    unread = _unread(version, place, stored, point)
    if unread is not None:
        reason, detail = unread
        return Verdict(version, place, reason, detail, successor, place.compacted_into)
    reason, detail = _by_time(version, successor, point)
    return Verdict(version, place, reason, detail, successor)


def _successor(
    version: StoredVersion, stored: Sequence[StoredVersion], places: Mapping[str, SegmentPlace]
) -> StoredVersion | None:
    """The version committed when ``version`` closed (a copy in a read segment if there is one)."""
    closed = version.valid_until
    if closed is None or closed == version.valid_from:
        return None
    found = [v for v in stored if v.valid_from == closed]
    found.sort(key=lambda v: places.get(v.segment, _unknown(v.segment)).state != "read")
    return found[0] if found else None


def _unread(
    version: StoredVersion,
    place: SegmentPlace,
    stored: Sequence[StoredVersion],
    point: ReadPoint,
) -> tuple[Reason, str] | None:
    """The reason when the version's segment is not read (None when it is)."""
    if place.state == "read":
        return None
    if place.state == "unreadable":
        return "unreadable_segment", f"segment {place.segment} is unreadable: {place.why}"
    if place.compacted_into:
        into = ", ".join(place.compacted_into)
        kept = [
            v
            for v in stored
            if v.segment in place.compacted_into and v.valid_from == version.valid_from
        ]
        if not kept and _let_go(version, point):
            return "dropped_by_retention", (
                f"segment {place.segment} was compacted into {into}, which dropped this version: "
                + _retention_words(version, point)
            )
        return "compacted", f"segment {place.segment} was compacted into {into}" + (
            "" if kept else _copies_elsewhere(version, place, stored)
        )
    if place.state == "overshadowed":
        return "overshadowed", f"segment {place.segment} is overshadowed: {place.why}"
    return "standby", f"segment {place.segment} is in a standby group: {place.why}"


def _copies_elsewhere(
    version: StoredVersion, place: SegmentPlace, stored: Sequence[StoredVersion]
) -> str:
    """Where the version's copies are when the compaction's output no longer holds one (a later
    rewrite replaced that output, or its file could not be read for the key)."""
    others = sorted(
        {
            v.segment
            for v in stored
            if v.valid_from == version.valid_from
            and v.segment != place.segment
            and v.segment not in place.compacted_into
        }
    )
    if others:
        return (
            f"; no copy is in {', '.join(place.compacted_into)} now, one is in {', '.join(others)}"
        )
    return f"; no copy of this version is in {', '.join(place.compacted_into)} or any other segment"


def _let_go(version: StoredVersion, point: ReadPoint) -> bool:
    """Visible at no snapshot a query may read: closed at or below the retention horizon, or
    empty (closed when it was committed)."""
    until = version.valid_until
    return until is not None and (until <= point.retention_horizon or until == version.valid_from)


def _retention_words(version: StoredVersion, point: ReadPoint) -> str:
    if version.valid_until == version.valid_from:
        return (
            f"it is empty ([{version.valid_from}, {version.valid_until})), visible at no snapshot"
        )
    return (
        f"validUntil {version.valid_until} is at or below the retention horizon "
        f"{point.retention_horizon}, so no snapshot a query may read sees it"
    )


def _by_time(
    version: StoredVersion, successor: StoredVersion | None, point: ReadPoint
) -> tuple[Reason, str]:
    """The reason for a version in a read segment: the visibility rule, told apart."""
    snapshot, until = point.snapshot, version.valid_until
    if until is not None and until <= point.retention_horizon and point.retention_horizon > 0:
        return "dropped_by_retention", (
            _retention_words(version, point) + "; the next rewrite or compaction drops it"
        )
    if point.lwm is not None and version.valid_from > point.lwm:
        return "above_lwm", _above_lwm_words(version, point)
    if version.valid_from > snapshot:
        return "written_after_snapshot", (
            f"committed at {version.valid_from}, after the snapshot {snapshot} (a later snapshot, "
            f"up to the LWM {point.lwm}, sees it)"
        )
    if until is not None and until <= snapshot:
        if successor is not None:
            return "superseded", (
                f"superseded at {until} by the version committed then (validFrom "
                f"{successor.valid_from}, in segment {successor.segment})"
            )
        if until == version.valid_from:
            return "superseded", f"empty ([{until}, {until})): superseded in its own commit"
        return "deleted", f"deleted at {until}, at or before the snapshot {snapshot}"
    return "visible", f"visible at {snapshot}: validFrom {version.valid_from} <= {snapshot}" + (
        " and validUntil is NULL" if until is None else f" < validUntil {until}"
    )


def _above_lwm_words(version: StoredVersion, point: ReadPoint) -> str:
    text = f"committed at {version.valid_from}, above the low-watermark {point.lwm}"
    holder = point.holder
    if holder is None:
        return text
    mark = "nothing reported yet" if holder.watermark is None else f"at {holder.watermark}"
    return f"{text}: partition {holder.partition} on server {holder.server} ({mark}) holds it back"


def visible_by_rule(version: StoredVersion, place: SegmentPlace, snapshot: int) -> bool:
    """What a query reads, said once more as plainly as possible (the tests' reference)."""
    return (
        place.state == "read"
        and version.valid_from <= snapshot
        and (version.valid_until is None or version.valid_until > snapshot)
    )


def summary(verdicts: Sequence[Verdict], point: ReadPoint) -> str:
    """One sentence: the visible version at the snapshot, or that there is none and why the
    newest version is not."""
    visible = [v for v in verdicts if v.reason == "visible"]
    if len(visible) == 1:
        seen = visible[0].version
        return (
            f"at snapshot {point.snapshot} the row is the version committed at "
            f"{seen.valid_from} (segment {seen.segment})"
        )
    if visible:
        return f"at snapshot {point.snapshot} {len(visible)} versions are visible (a key twice)"
    if not verdicts:
        return f"no version of this key is stored: at snapshot {point.snapshot} there is no row"
    newest = verdicts[0]
    return f"at snapshot {point.snapshot} there is no row: the newest version is {newest.reason}"
