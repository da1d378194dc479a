"""Horizon's Arrow Flight SQL endpoint: every Arrow tool (ADBC, the Flight SQL JDBC/ODBC drivers,
pandas, polars, DuckDB, BI tools) is a client of Horizon's consistent snapshots.

The endpoint is a second listener of the broker process (``[flight]``). It is a translation layer
only: every query goes through the same :class:`broker.engine.QueryEngine` as ExecuteQuery
(rewrite, grants, admission, limits, result cache, read controls, cancellation), and every error
through the one status mapping :func:`broker.api.status.status_of`.

One idea per module: :mod:`~broker.flight.commands` (Flight SQL messages on the wire),
:mod:`~broker.flight.errors` (Horizon errors as Flight errors), :mod:`~broker.flight.auth`
(headers, bearer and basic auth), :mod:`~broker.flight.sessions` (session options and the read
controls' headers), :mod:`~broker.flight.sql_info` (the SqlInfo dense union),
:mod:`~broker.flight.catalog` (catalog, schema, table and key answers),
:mod:`~broker.flight.parameters` (binding ``?`` placeholders as literals),
:mod:`~broker.flight.results` and :mod:`~broker.flight.statements` (what a ticket or a prepared
statement handle names, until it expires), :mod:`~broker.flight.metadata` (Horizon's query metadata
in FlightInfo and schema metadata), :mod:`~broker.flight.watch` (cancelled calls cancel Spark) and
:mod:`~broker.flight.server` (the pyarrow.flight server tying them together).
"""
