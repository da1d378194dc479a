"""Horizon's Arrow Flight SQL endpoint: every Arrow tool (ADBC, the Flight SQL JDBC/ODBC drivers,
pandas, polars, DuckDB, BI tools) is a client of Horizon's consistent snapshots.

The endpoint is a second listener of the broker process (``[flight]``). It is a translation layer
only: every query goes through the same :class:`horizon_broker.broker.engine.QueryEngine` as ExecuteQuery
(rewrite, grants, admission, limits, result cache, read controls, cancellation), and every error
through the one status mapping :func:`horizon_broker.broker.api.status.status_of`.

One idea per module: :mod:`~horizon_broker.broker.flight.commands` (Flight SQL messages on the wire),
:mod:`~horizon_broker.broker.flight.errors` (Horizon errors as Flight errors), :mod:`~horizon_broker.broker.flight.auth`
(headers, bearer and basic auth), :mod:`~horizon_broker.broker.flight.sessions` (session options and the read
controls' headers), :mod:`~horizon_broker.broker.flight.sql_info` (the SqlInfo dense union),
:mod:`~horizon_broker.broker.flight.catalog` (catalog, schema, table and key answers),
:mod:`~horizon_broker.broker.flight.parameters` (binding ``?`` placeholders as literals),
:mod:`~horizon_broker.broker.flight.results` and :mod:`~horizon_broker.broker.flight.statements` (what a ticket or a prepared
statement handle names, until it expires), :mod:`~horizon_broker.broker.flight.metadata` (Horizon's query metadata
in FlightInfo and schema metadata), :mod:`~horizon_broker.broker.flight.watch` (cancelled calls cancel Spark) and
:mod:`~horizon_broker.broker.flight.server` (the pyarrow.flight server tying them together).
"""
