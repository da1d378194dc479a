"""How the state store's hashes hold segments and partition progress (the key layout is
:mod:`horizon_broker._core.keys`)."""

from __future__ import annotations

import json

from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.lwm import ACTIVE, PartitionProgress


def segment_key(segment: Segment) -> str:
    """The field of a segment in its table's hash: its identity, unambiguous for any version text."""
    return json.dumps(
        [segment.interval.start_ms, segment.interval.end_ms, segment.version, segment.partition],
        separators=(",", ":"),
    )


def parse_progress(value: str) -> PartitionProgress:
    """Decode a ``{p}:t:{table}:prog`` hash value (older values have fewer fields)."""
    owner, ingested, applied, reported, _member, state, since, floor, *_ = (
        value.split("|") + [""] * 8
    )[:8]
    return PartitionProgress(
        owner=owner or None,
        ingested=int(ingested) if ingested else None,
        applied=int(applied) if applied else None,
        reported_at_ms=int(reported) if reported else None,
        state=state or ACTIVE,
        since_ms=int(since) if since else None,
        floor=int(floor) if floor else None,
    )
