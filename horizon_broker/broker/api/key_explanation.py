"""ExplainKey, transport-neutral: the snapshot a query would read, the key's stored versions
and their verdicts (:mod:`horizon_broker.broker.explain_key`), as the API's message.

The snapshot is chosen by preparing ``SELECT * FROM <table>`` (with ``VERSION AS OF`` when the
request names one) exactly as a query is prepared: the same LWM, bounds, staleness and regression
rules, and the same visible segments, so the answer names the snapshot and the segments a query
sent now would read.
"""

from __future__ import annotations

import json
from typing import Any

from horizon_broker._core.errors import HorizonError, InvalidArgument
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.api import messages
from horizon_broker.broker.explain_key.gather import KeyExplanation, explain_key
from horizon_broker.broker.explain_key.key_values import parse_key
from horizon_broker.broker.explain_key.verdicts import Holder, ReadPoint, Verdict
from horizon_broker.broker.grants import Principal
from horizon_broker.watermark import tokens

REASONS = {
    "visible": pb.KEY_VERSION_REASON_VISIBLE,
    "superseded": pb.KEY_VERSION_REASON_SUPERSEDED,
    "deleted": pb.KEY_VERSION_REASON_DELETED,
    "written_after_snapshot": pb.KEY_VERSION_REASON_WRITTEN_AFTER_SNAPSHOT,
    "above_lwm": pb.KEY_VERSION_REASON_ABOVE_LWM,
    "overshadowed": pb.KEY_VERSION_REASON_OVERSHADOWED,
    "standby": pb.KEY_VERSION_REASON_STANDBY,
    "unreadable_segment": pb.KEY_VERSION_REASON_UNREADABLE_SEGMENT,
    "dropped_by_retention": pb.KEY_VERSION_REASON_DROPPED_BY_RETENTION,
    "compacted": pb.KEY_VERSION_REASON_COMPACTED,
}


def snapshot_clause(at: str, table: str) -> str:
    """The snapshot clause a query would carry for ``at``: none (the LWM), or VERSION AS OF the
    number, or the snapshot a token names for ``table``."""
    text = at.strip()
    if not text:
        return ""
    if text.isdigit():
        return f" VERSION AS OF {int(text)}"
    try:
        named = tokens.decode(text)
    except HorizonError:
        raise InvalidArgument(
            f"cannot read the snapshot {at!r}: give a number (an HLC) or a snapshot token"
        ) from None
    if table.lower() not in named:
        raise InvalidArgument(
            f"the snapshot token names no snapshot of table {table} (it names "
            f"{', '.join(sorted(named)) or 'no table'})"
        )
    return f" VERSION AS OF {named[table.lower()]}"


def answer(
    engine: Any, follower: Any, principal: Principal, table: str, request: pb.ExplainKeyRequest
) -> pb.ExplainKeyResponse:
    """The explanation of ``request``'s key in ``table`` (whose name the caller may read)."""
    descriptor = follower.descriptor(table)
    if not descriptor.upsert:
        raise InvalidArgument(f"table {table} is append-only: its rows have no versions")
    types = {column.name.lower(): column.type for column in descriptor.columns}
    key = parse_key(
        request.key,
        descriptor.primary_key,
        [types[column.lower()] for column in descriptor.primary_key],
    )
    clause = snapshot_clause(request.at, table)
    prepared = engine.prepare(f"SELECT * FROM `{table}`{clause}", principal)
    [read] = prepared.tables
    [view] = prepared.table_views
    laggard = view.laggard
    point = ReadPoint(
        snapshot=int(read.snapshot),
        lwm=read.lwm,
        retention_horizon=read.retention_horizon,
        holder=None if laggard is None else Holder(laggard.server, laggard.partition, laggard.lwm),
    )
    explanation = explain_key(
        table,
        key,
        descriptor.column_names,
        point,
        timeline=follower.timeline_snapshot(table),
        read=view.visible_segments,
        unreadable=[(segment, mark.reason) for segment, mark in follower.unreadable()],
        storage_root=descriptor.storage_root,
    )
    response = explanation_message(explanation, follower)
    response.snapshot_source = messages.SNAPSHOT_SOURCES[prepared.snapshot_source]
    response.snapshot_reason = prepared.snapshot_reason
    response.snapshot_token = prepared.snapshot_token
    if laggard is not None:
        response.holder.CopyFrom(messages.laggard_message(laggard))
    return response


def explanation_message(explanation: KeyExplanation, follower: Any) -> pb.ExplainKeyResponse:
    point = explanation.point
    response = pb.ExplainKeyResponse(
        table=explanation.table,
        key_json=_json(dict(explanation.key)),
        snapshot=point.snapshot,
        retention_horizon=point.retention_horizon,
        versions=[version_message(verdict) for verdict in explanation.verdicts],
        summary=explanation.summary,
    )
    if point.lwm is not None:
        response.lwm = point.lwm
    known = {str(segment.id): segment for segment, _ in follower.unreadable()}
    for segment_id, why in explanation.not_listed:
        entry = pb.UnreadableSegment(reason=why)
        if segment_id in known:
            entry.segment.CopyFrom(messages.segment_message(known[segment_id]))
        else:
            entry.segment.id = segment_id
        response.not_listed.append(entry)
    return response


def version_message(verdict: Verdict) -> pb.KeyVersion:
    version = verdict.version
    message = pb.KeyVersion(
        valid_from=version.valid_from,
        segment_id=version.segment,
        file=version.file,
        group=verdict.place.group,
        segment_state=verdict.place.state,
        reason=REASONS[verdict.reason],
        detail=verdict.detail,
        compacted_into=list(verdict.compacted_into),
        row_json=_json(dict(version.values)),
    )
    if version.valid_until is not None:
        message.valid_until = version.valid_until
    if verdict.superseded_by is not None:
        message.superseded_by = verdict.superseded_by.valid_from
        message.superseded_by_segment = verdict.superseded_by.segment
    return message


def _json(values: dict[str, Any]) -> str:
    return json.dumps(values, default=str, sort_keys=False)
