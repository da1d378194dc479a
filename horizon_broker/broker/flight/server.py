"""The Flight SQL server: Flight calls in, the broker's query engine and catalog behind them.

Every query, from ``CommandStatementQuery`` or an executed prepared statement, is started by
:meth:`QueryEngine.execute` in GetFlightInfo (the same call ExecuteQuery makes: rewrite, grants,
admission, limits, result cache, read controls, cancellation), so the FlightInfo carries the
query's metadata and exact schema; DoGet streams the started result. Catalog commands are answered
from the follower's tables, filtered by the caller's grants. Writes are refused with UNIMPLEMENTED.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.flight as fl

from horizon_broker._core.errors import (
    InvalidArgument,
    NotFound,
    Unavailable,
    Unimplemented,
)
from horizon_broker.broker._proto.arrow.flight.protocol import flight_actions_pb2 as fa
from horizon_broker.broker._proto.arrow.flight.protocol.sql import flight_sql_pb2 as sql
from horizon_broker.broker.api.auth import Authenticator
from horizon_broker.broker.api.listen import check_listen_policy
from horizon_broker.broker.config import BrokerConfig, parse_listen
from horizon_broker.broker.engine import QueryEngine
from horizon_broker.broker.engine.read_options import ReadOptions
from horizon_broker.broker.flight import commands, metadata, parameters, quotas, session_actions
from horizon_broker.broker.flight.auth import (
    MIDDLEWARE_KEY,
    CallHeadersFactory,
    HandshakeAuth,
    call_headers,
)
from horizon_broker.broker.flight.auth import principal as authenticate
from horizon_broker.broker.flight.buffered import read_whole
from horizon_broker.broker.flight.catalog_answers import CatalogAnswers
from horizon_broker.broker.flight.errors import flight_error, install_quiet_tracebacks
from horizon_broker.broker.flight.exchange import SubscribeByExchange
from horizon_broker.broker.flight.recording import FlightQueries
from horizon_broker.broker.flight.results import (
    PendingResult,
    ResultStore,
    SchemaCache,
    batch_slices,
)
from horizon_broker.broker.flight.sessions import (
    QUERY_ID_HEADER,
    Session,
    SessionStore,
    query_id,
    read_options,
)
from horizon_broker.broker.flight.sql_info import server_info
from horizon_broker.broker.flight.statements import StatementStore
from horizon_broker.broker.flight.watch import CancelWatcher
from horizon_broker.broker.grants import Principal
from horizon_broker.broker.spark.executor import QueryScope

log = logging.getLogger("horizon.broker.flight")

_F = TypeVar("_F", bound=Callable[..., Any])

REAP_INTERVAL_S = 1.0
RESULT_SCHEMAS_KEPT = 4096
"""Prepared statements' result schemas kept (statement text, caller, table columns -> schema)."""

ACTIONS = {
    "CreatePreparedStatement": "prepare a SQL query (? placeholders bind by position)",
    "ClosePreparedStatement": "close a prepared statement",
    "CancelFlightInfo": "cancel a query started by GetFlightInfo (its Spark jobs stop)",
    "CancelQuery": "cancel a query (deprecated Flight SQL form of CancelFlightInfo)",
    "SetSessionOptions": "set read controls for this session: min_snapshot, max_staleness, "
    "pin_id, bypass_cache",
    "GetSessionOptions": "the session's read controls",
    "CloseSession": "forget this session's options",
}
_TRANSACTION_ACTIONS = {"BeginTransaction", "EndTransaction", "BeginSavepoint", "EndSavepoint"}


def answering(method: _F) -> _F:
    """Turn any error of a Flight handler into its Flight error (the one status mapping)."""

    @functools.wraps(method)
    def wrapper(self: Any, context: Any, *args: Any) -> Any:
        try:
            return method(self, context, *args)
        except Exception as error:
            raise flight_error(error, context) from None

    return wrapper  # type: ignore[return-value]


class FlightSqlServer(SubscribeByExchange, fl.FlightServerBase):
    """Horizon's Flight SQL service on its own listener (:func:`start_flight_server`)."""

    def __init__(
        self,
        engine: QueryEngine,
        config: BrokerConfig,
        location: str,
        tls_certificates: list[fl.CertKeyPair] | None = None,
        client_ca: bytes | None = None,
    ) -> None:
        flight = config.flight
        self.engine = engine
        self.config = config
        self.auth = Authenticator(config.tokens)
        self.queries = FlightQueries(engine.queries)
        statements, sessions, results = quotas.configured(flight)
        self.results = ResultStore(
            flight.result_ttl_s,
            quota=results,
            on_unread_end=lambda result, *end: self.queries.ended(result.scope.handle, *end),
        )
        self.statements = StatementStore(flight.statement_ttl_s, quota=statements)
        self.sessions = SessionStore(flight.statement_ttl_s, quota=sessions)
        self.watcher = CancelWatcher()
        self.info = server_info(
            statement_ttl_s=flight.statement_ttl_s, max_sql_length=config.limits.max_sql_length
        )
        self.catalog = CatalogAnswers(engine, self.info)
        self._result_schemas: SchemaCache = SchemaCache(RESULT_SCHEMAS_KEPT)
        self._stopped = threading.Event()
        install_quiet_tracebacks()
        super().__init__(
            location,
            auth_handler=HandshakeAuth(),
            tls_certificates=tls_certificates or [],
            verify_client=client_ca is not None,
            root_certificates=client_ca,
            middleware={MIDDLEWARE_KEY: CallHeadersFactory(config.tokens)},
        )
        self._reaper = threading.Thread(
            target=self._reap, name="horizon-flight-reaper", daemon=True
        )
        self._reaper.start()

    # -- who, and with which read controls -----------------------------------------------------

    def _principal(self, context: Any) -> Principal:
        return authenticate(self.auth, context)

    def _session(self, context: Any, principal: Principal) -> Session | None:
        return session_actions.caller_session(self.sessions, context, principal)

    def _session_action(self, action: Callable[..., list[bytes]]) -> Callable[..., list[bytes]]:
        return lambda context, body: action(self.sessions, context, self._principal(context), body)

    def _read_options(self, context: Any, principal: Principal) -> ReadOptions:
        session = self._session(context, principal)
        return read_options(session.options if session else {}, call_headers(context).first)

    # -- GetFlightInfo / DoGet -----------------------------------------------------------------

    @answering
    def get_flight_info(self, context: Any, descriptor: fl.FlightDescriptor) -> fl.FlightInfo:
        command = commands.from_descriptor(descriptor)
        if isinstance(command, sql.CommandStatementQuery):
            commands.refuse_transaction(command)
            return self._query_info(context, descriptor, command.query)
        if isinstance(command, sql.CommandPreparedStatementQuery):
            principal = self._principal(context)
            statement = self.statements.get(command.prepared_statement_handle, principal.name)
            return self._query_info(context, descriptor, statement.bound_sql())
        if isinstance(command, commands.METADATA_COMMANDS):
            table = self.catalog.answer(self._principal(context), command)
            endpoint = fl.FlightEndpoint(descriptor.command, [])
            return fl.FlightInfo(table.schema, descriptor, [endpoint], table.num_rows, -1)
        raise commands.not_a_query(command)

    def _query_info(
        self, context: Any, descriptor: fl.FlightDescriptor, query: str
    ) -> fl.FlightInfo:
        principal = self._principal(context)
        options = self._read_options(context, principal)
        call = call_headers(context)
        scope = QueryScope(query_id(call.first(QUERY_ID_HEADER)))
        started = time.perf_counter()
        self.results.check_room(principal.name)
        self.queries.begin(scope, principal.name, query)
        try:
            with self.watcher.watching(context, scope, call):
                execution = self.engine.execute(
                    query,
                    principal,
                    scope,
                    is_active=lambda: not context.is_cancelled(),
                    options=options,
                )
                buffered = read_whole(execution)  # no query slot waits for the DoGet
        except BaseException as error:
            self.queries.failed(scope.handle, error)
            raise
        self.queries.started(scope.handle, execution)
        try:
            query_metadata = metadata.of_execution(execution)
            schema = metadata.with_metadata(execution.schema, query_metadata)
            pending = self.results.add(execution, scope, principal.name, schema, started, buffered)
        except BaseException as error:
            buffered.discard()
            self.queries.failed(scope.handle, error)
            raise
        if context.is_cancelled():  # the client left while Spark started: nobody will read it
            self.results.cancel(pending.handle, principal.name)
        ticket = commands.pack(sql.TicketStatementQuery(statement_handle=pending.handle))
        return fl.FlightInfo(
            schema,
            descriptor,
            [fl.FlightEndpoint(ticket, [])],
            buffered.rows,
            -1,
            app_metadata=query_metadata.SerializeToString(),
        )

    @answering
    def do_get(self, context: Any, ticket: fl.Ticket) -> fl.FlightDataStream:
        command = commands.unpack(ticket.ticket, "ticket")
        if isinstance(command, sql.TicketStatementQuery):
            principal = self._principal(context)
            pending = self.results.take(command.statement_handle, principal.name)
            return fl.GeneratorStream(pending.schema, self._stream(context, pending))
        if isinstance(command, commands.METADATA_COMMANDS):
            return fl.RecordBatchStream(self.catalog.answer(self._principal(context), command))
        raise InvalidArgument(
            f"the ticket holds {command.DESCRIPTOR.name}: redeem the ticket a FlightInfo gave"
        )

    def _stream(self, context: Any, pending: PendingResult) -> Iterator[pa.RecordBatch]:
        """The result's batches, re-cut to message size; the end of the stream (read whole,
        failed, or dropped by the client) closes the query and frees its slot."""
        target = self.config.limits.batch_bytes
        call = call_headers(context)
        query_id = pending.scope.handle
        rows = nbytes = 0
        try:
            with self.watcher.watching(context, pending.scope, call):
                for batch in pending.batches():
                    rows += batch.num_rows
                    nbytes += batch.nbytes
                    yield from batch_slices(batch, target)
            self.queries.streamed(query_id, pending.execution, pending.started, rows, nbytes)
        except GeneratorExit:
            self.queries.ended(query_id, "cancelled", "CANCELLED", "the client stopped reading")
            raise
        except Exception as error:
            self.queries.failed(query_id, error)
            raise flight_error(error, context) from None
        finally:
            pending.close()
            self.results.finish(pending.handle)

    @answering
    def get_schema(self, context: Any, descriptor: fl.FlightDescriptor) -> fl.SchemaResult:
        command = commands.from_descriptor(descriptor)
        if isinstance(command, sql.CommandStatementQuery):
            commands.refuse_transaction(command)
            return fl.SchemaResult(self._statement_schema(context, command.query))
        if isinstance(command, sql.CommandPreparedStatementQuery):
            principal = self._principal(context)
            statement = self.statements.get(command.prepared_statement_handle, principal.name)
            if statement.parameters is None and statement.dataset_schema is not None:
                return fl.SchemaResult(statement.dataset_schema)
            return fl.SchemaResult(self._statement_schema(context, statement.bound_sql()))
        if isinstance(command, commands.METADATA_COMMANDS):
            return fl.SchemaResult(self.catalog.answer(self._principal(context), command).schema)
        raise commands.not_a_query(command)

    def _statement_schema(self, context: Any, query: str) -> pa.Schema:
        """What ``query`` would answer with, from Spark's analysis, with the metadata of the
        snapshot it would read now."""
        principal = self._principal(context)
        options = self._read_options(context, principal)
        prepared = self.engine.prepare(query, principal, options=options)
        schema = self.engine.result_schema(prepared)
        cache = self.engine.cache_state(prepared, options)
        return metadata.with_metadata(schema, metadata.of_prepared(prepared, cache))

    # -- DoPut ---------------------------------------------------------------------------------

    @answering
    def do_put(
        self,
        context: Any,
        descriptor: fl.FlightDescriptor,
        reader: fl.MetadataRecordBatchReader,
        writer: fl.FlightMetadataWriter,
    ) -> None:
        command = commands.from_descriptor(descriptor)
        if isinstance(command, sql.CommandStatementUpdate):
            raise Unimplemented(f"{commands.READ_ONLY}; refused update: {command.query[:200]}")
        if not isinstance(command, sql.CommandPreparedStatementQuery):
            raise InvalidArgument(
                f"DoPut with {command.DESCRIPTOR.name}: Horizon takes DoPut only to bind the "
                "parameters of a prepared query"
            )
        principal = self._principal(context)
        handle = command.prepared_statement_handle
        self.statements.get(handle, principal.name)
        values = parameters.parameter_row(parameters.read_parameters(reader))
        self.statements.bind(handle, principal.name, values)
        result = sql.DoPutPreparedStatementResult(prepared_statement_handle=handle)
        writer.write(pa.py_buffer(result.SerializeToString()))

    # -- DoAction ------------------------------------------------------------------------------

    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        return list(ACTIONS.items())

    def list_flights(self, context: Any, criteria: bytes) -> Iterator[fl.FlightInfo]:
        return iter(())

    @answering
    def do_action(self, context: Any, action: fl.Action) -> list[fl.Result]:
        kind = action.type
        body = action.body.to_pybytes() if action.body is not None else b""
        handlers: dict[str, Callable[[Any, bytes], list[bytes]]] = {
            "CreatePreparedStatement": self._create_prepared,
            "ClosePreparedStatement": self._close_prepared,
            "CancelFlightInfo": self._cancel_flight_info,
            "CancelQuery": self._cancel_query,
            "SetSessionOptions": self._session_action(session_actions.set_options),
            "GetSessionOptions": self._session_action(session_actions.get_options),
            "CloseSession": self._session_action(session_actions.close),
        }
        handler = handlers.get(kind)
        if handler is None:
            if kind in _TRANSACTION_ACTIONS:
                raise Unimplemented(
                    f"{kind}: Horizon has no transactions (it is read-only; every query reads "
                    "one consistent snapshot by itself)"
                )
            if kind == "CreatePreparedSubstraitPlan":
                raise Unimplemented("Horizon runs SQL, not Substrait plans")
            raise Unimplemented(
                f"unknown action {kind!r}: Horizon's actions are {', '.join(sorted(ACTIONS))}"
            )
        return [fl.Result(pa.py_buffer(payload)) for payload in handler(context, body)]

    def _create_prepared(self, context: Any, body: bytes) -> list[bytes]:
        """Check the statement (rewrite, grants) and say what it answers with. DB-API drivers
        prepare every statement they execute, so what the check found is kept per statement
        text, caller and table columns: a repeated statement is answered from memory."""
        request = commands.unpack_as(body, sql.ActionCreatePreparedStatementRequest, "action body")
        commands.refuse_transaction(request)
        principal = self._principal(context)
        self.statements.check_room(principal.name)
        options = self._read_options(context, principal)
        count = len(parameters.placeholder_spans(request.query))
        probe = request.query
        if count:  # check the statement (grants, rewrite) with NULL in every placeholder
            probe = parameters.bind(request.query, [pa.scalar(None)] * count)
        # A statement of a shape this caller prepared before (the same but for its filters'
        # values), over tables whose columns are unchanged, was checked then: its schema is kept
        # (the rewrite and grants run again, on the statement itself, when it executes).
        known = (parameters.result_shape(probe), principal.name, self._catalog_signature())
        schema: pa.Schema | None = self._result_schemas.get(known)
        if schema is None:
            try:
                prepared = self.engine.prepare(probe, principal, options=options)
                schema = self.engine.result_schema(prepared)
                self._result_schemas.put(known, schema)
            except InvalidArgument:
                if not count:
                    raise
                # A placeholder where NULL does not analyse (LIMIT ?): checked once bound.
        statement = self.statements.create(principal.name, request.query, count, schema)
        result = sql.ActionCreatePreparedStatementResult(
            prepared_statement_handle=statement.handle,
            dataset_schema=schema.serialize().to_pybytes() if schema is not None else b"",
            parameter_schema=(
                parameters.parameter_schema(count).serialize().to_pybytes() if count else b""
            ),
        )
        return [commands.pack(result)]

    def _catalog_signature(self) -> tuple[tuple[str, str], ...]:
        """Every registered table with its columns: a result schema depends on nothing else."""
        follower = self.engine.follower
        return tuple(
            (name, repr(follower.descriptor(name).columns)) for name in sorted(follower.tables())
        )

    def _close_prepared(self, context: Any, body: bytes) -> list[bytes]:
        request = commands.unpack_as(body, sql.ActionClosePreparedStatementRequest, "action body")
        principal = self._principal(context)
        self.statements.close(request.prepared_statement_handle, principal.name)
        return []

    def _cancel_flight_info(self, context: Any, body: bytes) -> list[bytes]:
        request = commands.parse_raw(body, fa.CancelFlightInfoRequest, "CancelFlightInfo body")
        status = self._cancel(context, request.info)
        return [fa.CancelFlightInfoResult(status=status).SerializeToString()]

    def _cancel_query(self, context: Any, body: bytes) -> list[bytes]:
        request = commands.unpack_as(body, sql.ActionCancelQueryRequest, "action body")
        status = self._cancel(context, request.info)  # the enums share their numbers
        return [commands.pack(sql.ActionCancelQueryResult(result=status))]  # type: ignore[arg-type]

    def _cancel(self, context: Any, serialized_info: bytes) -> int:
        """Cancel every query the FlightInfo's tickets name: CANCELLED, or NOT_CANCELLABLE for
        catalog answers (NOT_FOUND when no ticket names a known query)."""
        principal = self._principal(context)
        try:
            info = fl.FlightInfo.deserialize(serialized_info)
        except Exception:
            raise InvalidArgument("the cancel request does not hold a valid FlightInfo") from None
        found = metadata_only = False
        for endpoint in info.endpoints:
            command = commands.unpack(endpoint.ticket.ticket, "ticket")
            if isinstance(command, sql.TicketStatementQuery):
                found |= self.results.cancel(command.statement_handle, principal.name)
            else:
                metadata_only = True
        if found:
            return fa.CANCEL_STATUS_CANCELLED
        if metadata_only:
            return fa.CANCEL_STATUS_NOT_CANCELLABLE
        raise NotFound("the query is not running: it finished, was cancelled, or expired")

    # -- helpers -------------------------------------------------------------------------------

    def _reap(self) -> None:
        """Close results nobody fetched, and statements and sessions nobody used, past TTL."""
        while not self._stopped.wait(REAP_INTERVAL_S):
            try:
                self.results.expire()
                self.statements.expire()
                self.sessions.expire()
            except Exception:  # never let the reaper die; the next round tries again
                log.exception("Flight SQL reaper failed")

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop serving: started queries are cancelled (their slots freed), running calls get
        ``grace_s`` to end. A call still running then (a client holding a stream open without
        reading it) is left to its connection rather than blocking the broker's shutdown."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.end_subscriptions()
        self.results.close()
        finished = threading.Event()

        def shut_down() -> None:
            self.shutdown()
            finished.set()

        threading.Thread(target=shut_down, name="horizon-flight-shutdown", daemon=True).start()
        if not finished.wait(max(grace_s, 1.0)):
            log.warning(
                "Flight SQL calls still running %.1f s after shutdown began (a client holding a "
                "stream open without reading it); not waiting for them",
                grace_s,
            )
        self.watcher.stop()


def start_flight_server(config: BrokerConfig, engine: QueryEngine) -> FlightSqlServer:
    """Listen on ``[flight]``'s address with ``[server]``'s TLS settings and tokens: with
    ``tls_client_ca``, a caller must present a certificate the CA signed (mutual TLS), as on the
    main API."""
    address = config.flight.address(config.server.listen)
    check_listen_policy(config, address, "[flight] listen")
    host, port = parse_listen(address)
    server = config.server
    uri_host = f"[{host}]" if ":" in host else host
    certificates = None
    client_ca = None
    if server.tls:
        try:
            certificates = [
                fl.CertKeyPair(
                    cert=Path(server.tls_cert or "").read_bytes(),
                    key=Path(server.tls_key or "").read_bytes(),
                )
            ]
            if server.tls_client_ca:
                client_ca = Path(server.tls_client_ca).read_bytes()
        except OSError as error:
            raise InvalidArgument(
                f"cannot read the TLS certificate, key or client CA: {error}"
            ) from None
    scheme = "grpc+tls" if server.tls else "grpc+tcp"
    try:
        flight = FlightSqlServer(
            engine, config, f"{scheme}://{uri_host}:{port}", certificates, client_ca
        )
    except (OSError, pa.ArrowException) as error:
        raise Unavailable(f"cannot listen on {address} ([flight] listen): {error}") from None
    log.info("Flight SQL endpoint listening on %s:%s", host, flight.port)
    return flight
