"""The console's query box: run or explain SQL through the engine, as ExecuteQuery does.

A run goes through the engine's ``execute`` (grants, admission, the result cache, the rewrite),
its messages are the ones ExecuteQuery streams (:func:`horizon_broker.broker.api.query_service.query_messages`),
and it is recorded in the query registry with ``rpc = "console"``, so it shows in ListQueries,
the query log and the metrics like any other. The answer is held whole for the page, so it is
capped at ``[console] max_rows``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from horizon_broker._core.errors import HorizonError
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.api import arrow_ipc
from horizon_broker.broker.api.query_service import explain_query, query_messages, trailer_fields
from horizon_broker.broker.api.status import status_of
from horizon_broker.broker.engine.read_options import DEFAULT as DEFAULT_READ
from horizon_broker.broker.grants import Principal
from horizon_broker.broker.spark.executor import QueryScope

RPC = "console"


@dataclass
class Answer:
    """What the page shows of a run: the rows, the snapshot, the rewritten SQL, the timings."""

    query_id: str
    table: pa.Table
    metadata: pb.QueryMetadata
    rewritten_sql: str
    trailer: pb.QueryTrailer
    columns: list[str] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)


def run_query(engine: Any, principal: Principal, sql: str, *, max_rows: int) -> Answer:
    """Run ``sql`` as ``principal`` to its end (errors are raised as the API's types)."""
    started = time.perf_counter()
    query_id = uuid.uuid4().hex[:16]
    registry = engine.queries
    scope = QueryScope(query_id, deadline=time.monotonic() + engine.config.limits.query_timeout_s)
    registry.begin(scope.handle, query_id, principal.name, sql, rpc=RPC)
    try:
        execution = engine.execute(sql, principal, scope, max_rows=max_rows)
        registry.started(scope.handle, execution)
        try:
            header: pb.QueryHeader | None = None
            trailer = pb.QueryTrailer()
            batches: list[bytes] = []
            limits = engine.config.limits
            for message in query_messages(execution, limits.batch_bytes, started):
                kind = message.WhichOneof("kind")
                if kind == "header":
                    header = message.header
                elif kind == "batch":
                    batches.append(message.batch.data)
                else:
                    trailer = message.trailer
            rewritten = execution.prepared.sql
        finally:
            execution.close()
    except BaseException as error:
        code = status_of(error)[0].name
        condition = error.condition if isinstance(error, HorizonError) else ""
        registry.end(scope.handle, "failed", code, str(error), condition)
        raise
    registry.end(scope.handle, "done", "OK", **trailer_fields(trailer))
    assert header is not None
    schema = arrow_ipc.decode_schema(header.arrow_schema)
    table = arrow_ipc.decode_batches(schema, batches)
    return Answer(
        query_id,
        table,
        header.metadata,
        rewritten,
        trailer,
        columns=table.column_names,
        rows=list(zip(*(column.to_pylist() for column in table.columns), strict=True))
        if table.num_columns
        else [],
    )


def explain(engine: Any, principal: Principal, sql: str) -> pb.ExplainQueryResponse:
    """ExplainQuery's answer for ``sql``: the rewritten SQL, the snapshot, what is read and why."""
    request = pb.ExplainQueryRequest(sql=sql)
    deadline = time.monotonic() + engine.config.limits.query_timeout_s
    return explain_query(engine, request, principal, DEFAULT_READ, deadline)
