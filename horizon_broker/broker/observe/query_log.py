"""One log line per query end, with the fields a log system indexes.

The line is written by the query registry's listener (:mod:`horizon_broker.broker.engine.registry`), so every
door (gRPC, Flight SQL, the console) logs alike. The SQL text is left out: it may quote keys and
literal values that belong in no log; the query id finds it in ``ListQueries`` while it is recent.
So is a failed query's error message (it quotes the caller's literals), unless ``[logging]
error_messages`` asks for it: the line keeps the status code and Spark's error condition.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("horizon.query")

STAGES = ("queued", "rewrite", "views", "spark", "serialize", "total")


def query_fields(record: Any) -> dict[str, Any]:
    """The indexed fields of a finished :class:`~horizon_broker.broker.engine.registry.QueryRecord`."""
    return {
        "event": "query_end",
        "query_id": record.query_id,
        "identity": record.identity,
        "rpc": record.rpc or "unknown",
        "tables": list(record.tables),
        "snapshot": record.snapshot,
        "snapshot_kind": record.kind or "unknown",
        "state": record.state,
        "status": record.status,
        "rows": record.rows,
        "bytes": record.bytes,
        "cache": record.cache,
        "timings_ms": {
            stage: round(record.timings[stage], 3) for stage in STAGES if stage in record.timings
        },
        "duration_ms": max(0, record.ended_ms - record.started_ms),
    }


def log_query(record: Any, *, error_messages: bool = False) -> None:
    """Registry listener: INFO for a query that answered, WARNING otherwise, with Spark's error
    condition and (``error_messages``) the message."""
    fields = query_fields(record)
    if record.status == "OK":
        log.info("query %s ended OK", record.query_id, extra=fields)
        return
    if record.condition:
        fields["error_condition"] = record.condition
    if error_messages:
        fields["error"] = record.message
    log.warning("query %s ended %s", record.query_id, record.status, extra=fields)
