"""Which functions a query may call: Spark's built-ins minus the ones that reach outside SQL.

The policy is a plain value built once at broker start-up from the Spark session's function list
(``functions_from_spark.py`` is the only part that touches Spark), so checking a query stays pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlglot import exp

DENIED_FUNCTIONS: frozenset[str] = frozenset(
    {
        # Run arbitrary JVM code by reflection.
        "reflect",
        "java_method",
        "try_reflect",
        # Expose the physical layout (segment file paths, byte ranges) instead of the logical table;
        # answers would change with compaction and leak storage paths.
        "input_file_name",
        "input_file_block_start",
        "input_file_block_length",
        # Read a descriptor file from the broker's file system.
        "from_protobuf",
        "to_protobuf",
        # XML parsers that may resolve external entities (a file read in disguise).
        "xpath",
        "xpath_boolean",
        "xpath_double",
        "xpath_float",
        "xpath_int",
        "xpath_long",
        "xpath_number",
        "xpath_short",
        "xpath_string",
        "from_xml",
        "schema_of_xml",
        # Read files or call out of the process in distributions that ship them.
        "read_files",
        "http_request",
    }
)
"""Functions no query may call, whatever the Spark session offers.

A name is here when calling it can run code (``reflect`` and friends), read a file of the broker
(``from_protobuf`` with a descriptor path, XML entity resolution, ``read_files``), reach the network
(``http_request``), or expose the physical segment files behind a logical table
(``input_file_name``). Matching is by lower-case name; sqlglot's typed function classes whose SQL
names are listed here are refused as well.
"""

ALLOWED_TABLE_FUNCTIONS: frozenset[str] = frozenset(
    {
        "range",
        "explode",
        "explode_outer",
        "posexplode",
        "posexplode_outer",
        "inline",
        "inline_outer",
        "stack",
    }
)
"""Table-valued functions allowed in FROM besides ``table_changes``.

Each computes its rows from its arguments only (no table, file or session state is read), so it
cannot bypass the visibility filter or reach outside the registered tables. Every other TVF is
refused.
"""

CHANGE_FEED_FUNCTION = "table_changes"


def function_names(node: exp.Func) -> tuple[str, ...]:
    """The lower-case SQL name(s) a function node stands for (its written name if sqlglot does not
    know it, otherwise every name sqlglot maps to that class)."""
    if isinstance(node, exp.Anonymous):
        return (node.name.lower(),)
    return tuple(name.lower() for name in type(node).sql_names())


def _denied_classes() -> frozenset[type[exp.Func]]:
    denied: set[type[exp.Func]] = set()
    for function_class in exp.ALL_FUNCTIONS:
        names = {name.lower() for name in function_class.sql_names()}
        if names & DENIED_FUNCTIONS:
            denied.add(function_class)
    return frozenset(denied)


DENIED_FUNCTION_CLASSES: frozenset[type[exp.Func]] = _denied_classes()


@dataclass(frozen=True, slots=True)
class FunctionPolicy:
    """The set of function names (lower case) a query may call by a name sqlglot does not know.

    Functions sqlglot parses into typed nodes (``SUM``, ``DATE_ADD``...) are Spark built-ins the
    generator writes in Spark's spelling; only the deny-list applies to them.
    """

    allowed: frozenset[str]

    @classmethod
    def from_names(cls, names: Iterable[str]) -> FunctionPolicy:
        """A policy allowing ``names`` (e.g. the session's built-ins) minus the deny-list."""
        lowered = {name.lower() for name in names}
        return cls(allowed=frozenset(lowered - DENIED_FUNCTIONS))

    def is_denied(self, name: str) -> bool:
        return name.lower() in DENIED_FUNCTIONS

    def is_known(self, name: str) -> bool:
        return name.lower() in self.allowed
