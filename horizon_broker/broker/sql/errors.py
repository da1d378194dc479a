"""Typed errors of the SQL rewriter, each a subclass of the one hierarchy in ``horizon_broker._core.errors``.

The subclasses exist so tests and the broker can tell *why* a query was refused without parsing
messages; the status code (and so the gRPC code) comes from the parent class.
"""

from __future__ import annotations

from horizon_broker._core.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)


class SqlSyntaxError(InvalidArgument):
    """The text is not valid Spark SQL."""


class StatementNotAllowed(InvalidArgument):
    """Anything but one read-only query: DML, DDL, session commands, several statements."""


class FunctionNotAllowed(InvalidArgument):
    """A function that reaches outside SQL (runs code, reads files) or is named with a qualifier."""


class UnknownFunction(InvalidArgument):
    """A function the Spark session does not have (an unregistered UDF name, a typo)."""


class TableReferenceNotAllowed(InvalidArgument):
    """A file-path table, a table-valued function other than the allowed ones, a foreign catalog."""


class UnknownTable(NotFound):
    """A table name that is neither registered nor a CTE in scope (``name``: as written)."""

    def __init__(self, message: str, name: str = "") -> None:
        super().__init__(message)
        self.name = name


class InvalidSnapshot(InvalidArgument):
    """A malformed snapshot clause, or explicit snapshots of one query that disagree."""


class ColumnNotAtSnapshot(InvalidArgument):
    """The query names a column its table did not have at the query's snapshot (dropped
    before it, or added after it)."""


class InvalidChangeWindow(InvalidArgument):
    """A malformed ``table_changes`` call (arguments, order of bounds, non-upsert table)."""


class SnapshotOutOfRange(FailedPrecondition):
    """A snapshot above the low-watermark (the future) or below the retention horizon."""


class NoLowWatermark(FailedPrecondition):
    """A table read by the query has no low-watermark yet, so no snapshot can be proven safe."""


class QueryTooLarge(ResourceExhausted):
    """The query is past a configured limit (text length, nesting, tree depth)."""


class OverBudget(ResourceExhausted):
    """The query's work cannot be bounded within the configured budget (generated rows, arrays,
    strings, partitions, tables, cross joins, estimated rows)."""


class HintNotAllowed(InvalidArgument):
    """A query hint outside the allow-list, or with arguments it must not have."""
