"""Horizon's query metadata where Flight clients see it: the FlightInfo's ``app_metadata`` (a
serialized ``horizon.v1.QueryMetadata``, the message ExecuteQuery's header carries) and the result
schema's metadata (``horizon.*`` keys), so a tool that shows schema metadata shows the snapshot."""

from __future__ import annotations

import pyarrow as pa
from google.protobuf import json_format

from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.api import messages
from horizon_broker.broker.engine import Execution, Prepared

SNAPSHOT = b"horizon.snapshot"
SNAPSHOT_TOKEN = b"horizon.snapshot_token"
SNAPSHOT_SOURCE = b"horizon.snapshot_source"
CACHE = b"horizon.cache"
QUERY_ID = b"horizon.query_id"
QUERY_METADATA = b"horizon.query_metadata"
"""The whole QueryMetadata as JSON (per-table snapshot, LWM, laggard, staleness, ...)."""


def of_execution(execution: Execution) -> pb.QueryMetadata:
    """The metadata of a started query: exactly what ExecuteQuery's header says."""
    return messages.metadata_message(
        execution.prepared,
        unreadable=execution.unreadable_segments,
        retried=execution.retried,
        cache=execution.cache,
        execution=execution.route,
    )


def of_prepared(prepared: Prepared, cache: str = "") -> pb.QueryMetadata:
    """The metadata of a query bound but not run (GetSchema, a prepared statement)."""
    return messages.metadata_message(prepared, cache=cache)


def schema_metadata(metadata: pb.QueryMetadata) -> dict[bytes, bytes]:
    values = {
        SNAPSHOT_TOKEN: metadata.snapshot_token.encode(),
        SNAPSHOT_SOURCE: pb.SnapshotSource.Name(metadata.snapshot_source).encode(),
        CACHE: metadata.cache.encode(),
        QUERY_ID: metadata.query_id.encode(),
        QUERY_METADATA: json_format.MessageToJson(
            metadata,
            preserving_proto_field_name=True,
            always_print_fields_with_no_presence=True,
            indent=None,
        ).encode(),
    }
    if metadata.HasField("snapshot"):
        values[SNAPSHOT] = str(metadata.snapshot).encode()
    return values


def with_metadata(schema: pa.Schema, metadata: pb.QueryMetadata) -> pa.Schema:
    """``schema`` carrying the query's metadata (any metadata it had is kept)."""
    merged = dict(schema.metadata or {})
    merged.update(schema_metadata(metadata))
    return schema.with_metadata(merged)


def decode(app_metadata: bytes) -> pb.QueryMetadata:
    """A FlightInfo's ``app_metadata`` as Horizon's QueryMetadata (for clients in Python)."""
    return pb.QueryMetadata.FromString(app_metadata)
