"""The derived tables that replace references to registered tables, as Spark SQL text.

They are built as text (not trees) because they are fixed templates: formatting a string costs a
few microseconds, while generating the same subtree through sqlglot would cost more than parsing
the user's whole query. Every identifier that did not come from the user's text is quoted when it
is not a plain identifier or when it is a keyword.
"""

from __future__ import annotations

import re

from sqlglot.dialects.spark import Spark

from horizon_broker.broker.sql.catalog import CatalogTable
from horizon_broker.broker.sql.feed_files import BEGINS, ENDS, files_view, prunable, side_filter
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEYWORDS = frozenset(
    word.upper() for keyword in Spark.Tokenizer.KEYWORDS for word in keyword.split()
)

#: Names the rewrite generates (source views, change-feed aliases) start with this; a query may not
#: define a CTE with it, or the CTE would shadow a source view inside the substituted scans.
RESERVED_PREFIX = "__horizon"
CHANGE_TYPE = "_change_type"
COMMIT_TIMESTAMP = "_commit_timestamp"
_VERSION = "__horizon_v"
_NEIGHBOUR = "__horizon_n"
_AT = "__horizon_at"
_SOURCE = "__horizon_src"
_BEGINS = "__horizon_begins"


def quote(name: str) -> str:
    """``name`` as a Spark identifier: bare when that is unambiguous, backticked otherwise."""
    if _PLAIN.match(name) and name.upper() not in _KEYWORDS:
        return name
    return "`" + name.replace("`", "``") + "`"


def visibility_predicate(snapshot: int, qualifier: str = "") -> str:
    """Versions alive at ``snapshot``: the half-open interval ``[validFrom, validUntil)`` holds it.

    Written with explicit brackets: ``validFrom <= S AND validUntil IS NULL OR validUntil > S``
    would show versions before they were inserted.
    """
    valid_from = qualifier + quote(VALID_FROM)
    return f"{valid_from} <= {snapshot} AND {alive_predicate(snapshot, qualifier)}"


def alive_predicate(snapshot: int, qualifier: str = "") -> str:
    """The ``validUntil`` half of :func:`visibility_predicate`: not yet replaced at ``snapshot``."""
    valid_until = qualifier + quote(VALID_UNTIL)
    return f"({valid_until} IS NULL OR {valid_until} > {snapshot})"


def _scan_columns(table: CatalogTable, validity: bool = True) -> str:
    names = (*table.column_names, VALID_FROM, VALID_UNTIL) if validity else table.column_names
    return ", ".join(quote(name) for name in names)


def visible_scan_sql(table: CatalogTable, snapshot: int) -> str:
    """The versions of an upsert table visible at ``snapshot``, user columns plus validity.

    Each of the table's views (``horizon_broker.broker.spark.scan_layout``) gets the least test that is exact at
    ``snapshot``: at or above ``table.settled_through`` the settled view needs only the
    ``validUntil`` test and the open view none; at or above ``table.closed_through`` the closed
    view holds no visible row and is not read. Below those bounds, and always for the source
    view, the full predicate applies.
    """
    columns = _scan_columns(table)
    full = visibility_predicate(snapshot)
    settled = table.settled_through is not None and snapshot >= table.settled_through
    tests = [
        (table.settled_view, alive_predicate(snapshot) if settled else full),
        (table.open_view, "" if settled else f"{quote(VALID_FROM)} <= {snapshot}"),
        (table.source_view, full),
    ]
    if table.closed_through is None or snapshot < table.closed_through:
        tests.append((table.closed_view, full))
    branches = [
        f"SELECT {columns} FROM {quote(view)}" + (f" WHERE {test}" if test else "")
        for view, test in tests
        if view
    ]
    if not branches:  # only closed files, none visible: an empty scan with the table's columns
        branches = [f"SELECT {columns} FROM {quote(table.main_view)} WHERE FALSE"]
    return "(" + " UNION ALL ".join(branches) + ")"


def _all_rows(table: CatalogTable, validity: bool = True, alias: str = "") -> str:
    """A relation over every row of the table's views: the one view itself, or the union of its
    views as a subquery (named ``alias`` when given)."""
    views = table.views
    if len(views) == 1:
        return quote(views[0])
    columns = _scan_columns(table, validity)
    union = " UNION ALL ".join(f"SELECT {columns} FROM {quote(view)}" for view in views)
    return f"({union}) AS {alias}" if alias else f"({union})"


def append_scan_sql(table: CatalogTable) -> str:
    """An append-only table: every row of its visible segments, user columns only."""
    columns = _scan_columns(table, validity=False)
    return f"(SELECT {columns} FROM {_all_rows(table, validity=False, alias=_SOURCE)})"


def _side_rows(table: CatalogTable, side: str, start: int, end: int, alias: str = "") -> str:
    """The table's rows that may begin (``side`` BEGINS) or end (ENDS) in ``(start, end]``: of
    each view only the files whose versions may lie there (:mod:`.feed_files`), with the row test
    Spark also checks against each row group's statistics (read from the views' companions,
    which show each row's file). Every row when nothing is known of
    the files (the caller's exact test, pushed into the scans, still skips row groups)."""
    known = table.file_validity if prunable(table.column_names) else ()
    files = side_filter(known, side, start)
    if files is None:
        return _all_rows(table, alias=alias)
    column = quote(VALID_FROM) if side == BEGINS else quote(VALID_UNTIL)
    tests = f"{files} AND {column} > {start} AND {column} <= {end}"
    columns = _scan_columns(table)
    union = " UNION ALL ".join(
        f"SELECT {columns} FROM {quote(files_view(view))} WHERE {tests}" for view in table.views
    )
    return f"({union}) AS {alias}" if alias else f"({union})"


def change_feed_sql(table: CatalogTable, start: int, end: int) -> str:
    """Every change of ``table`` committed in ``(start, end]``, in Delta's change-data-feed shape.

    A version beginning in the window is an ``insert``, or an ``update_postimage`` when another
    (non-empty) version of its key ended at that instant; a version ending in the window is a
    ``delete``, or an ``update_preimage`` when another (non-empty) version of its key began then.
    Empty versions (``validFrom = validUntil``) never appear and never count as neighbours.

    Each version beginning or ending in the window is one event (:func:`_side_rows` reads only
    the files that may hold one); one window over (key, instant) tells an event whether the other
    kind happened to its key at the same instant. So the feed costs two pruned scans and one
    shuffle of the window's events, never a join.
    """
    valid_from, valid_until = quote(VALID_FROM), quote(VALID_UNTIL)
    user = ", ".join(quote(name) for name in table.column_names)
    instant = f"PARTITION BY {', '.join(quote(name) for name in table.primary_key)}, {_AT}"
    events = (
        f"SELECT {user}, {valid_from} AS {_AT}, 1 AS {_BEGINS} "
        f"FROM {_side_rows(table, BEGINS, start, end)} AS {_VERSION} "
        f"WHERE {valid_from} > {start} AND {valid_from} <= {end} "
        f"AND ({valid_until} IS NULL OR {valid_until} > {valid_from}) "
        f"UNION ALL SELECT {user}, {valid_until} AS {_AT}, 0 AS {_BEGINS} "
        f"FROM {_side_rows(table, ENDS, start, end)} AS {_NEIGHBOUR} "
        f"WHERE {valid_until} > {start} AND {valid_until} <= {end} "
        f"AND {valid_until} > {valid_from}"
    )
    kinds = (
        f"CASE WHEN {_BEGINS} = 1 THEN CASE WHEN min({_BEGINS}) OVER ({instant}) = 0 "
        f"THEN 'update_postimage' ELSE 'insert' END "
        f"ELSE CASE WHEN max({_BEGINS}) OVER ({instant}) = 1 "
        f"THEN 'update_preimage' ELSE 'delete' END END"
    )
    return (
        f"(SELECT {user}, {kinds} AS {CHANGE_TYPE}, {_AT} AS {COMMIT_TIMESTAMP} "
        f"FROM ({events}) AS {_SOURCE})"
    )
