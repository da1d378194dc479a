"""The rewrite reads each altered table under the schema of its snapshot (pure: no Spark)."""

from __future__ import annotations

import pytest

from horizon_broker.broker.sql.catalog import Catalog, CatalogTable
from horizon_broker.broker.sql.errors import ColumnNotAtSnapshot
from horizon_broker.broker.sql.functions import FunctionPolicy
from horizon_broker.broker.sql.rewrite import rewrite
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
from horizon_broker.watermark.schema_rules import (
    DropColumn,
    KeyRoles,
    apply_changes,
    parse_add,
    parse_widen,
)

POLICY = FunctionPolicy(allowed=frozenset({"count"}))
ROLES = KeyRoles(primary_key=("k",))


def altered_catalog() -> Catalog:
    """``t``: k, v int, old; ``n`` added (default 7) and ``v`` widened at 100, ``old`` dropped
    at 200; LWM 1000. ``u``: another table with a column ``old`` of its own."""
    base = TableDescriptor(
        "t", (ColumnSpec("k", "string"), ColumnSpec("v", "int"), ColumnSpec("old", "int")), ("k",)
    )
    history = apply_changes(
        base.schema_history, [parse_add("n bigint default 7"), parse_widen("v bigint")], ROLES, 100
    )
    history = apply_changes(history, [DropColumn("old")], ROLES, 200)
    other = TableDescriptor("u", (ColumnSpec("k", "string"), ColumnSpec("old", "int")), ("k",))
    return Catalog(
        [
            CatalogTable.from_descriptor(
                base.with_schema(history), lwm=1000, retention_horizon=0, source_view="__horizon_t"
            ),
            CatalogTable.from_descriptor(
                other, lwm=1000, retention_horizon=0, source_view="__horizon_u"
            ),
        ]
    )


def scanned(sql: str) -> str:
    return rewrite(sql, altered_catalog(), functions=POLICY).sql


def test_each_snapshot_selects_the_columns_of_its_version():
    assert "SELECT k, v, old, validFrom" in scanned("SELECT * FROM t VERSION AS OF 50")
    assert "SELECT k, v, old, n, validFrom" in scanned("SELECT * FROM t VERSION AS OF 150")
    assert "SELECT k, v, n, validFrom" in scanned("SELECT * FROM t")  # the LWM, after the drop
    # A change feed reads the version at its window's end (whatever the feed's SQL shape).
    assert "old" in scanned("SELECT * FROM table_changes('t', 10, 150)")
    assert "old" not in scanned("SELECT * FROM table_changes('t', 10, 250)")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "SELECT n FROM t VERSION AS OF 50",
            "'n' is not in table t's schema at snapshot 50: it is added at 100",
        ),
        (
            "SELECT x.old FROM t VERSION AS OF 250 AS x",
            "'old' is not in table t's schema at snapshot 250: it was dropped at 200",
        ),
        ("SELECT k FROM t WHERE old > 1", "'old' is not in table t's schema at snapshot 1000"),
        ("SELECT n FROM table_changes('t', 1, 50)", "at snapshot 50: it is added at 100"),
    ],
)
def test_a_column_the_snapshot_lacks_is_refused_naming_it_and_the_snapshot(sql, message):
    with pytest.raises(ColumnNotAtSnapshot, match=message):
        scanned(sql)


def test_a_name_another_table_or_an_alias_defines_is_not_refused():
    assert scanned("SELECT v AS old FROM t ORDER BY old")
    assert scanned("SELECT old FROM t JOIN u USING (k)")  # u's own column
    assert scanned("SELECT old FROM t VERSION AS OF 150")  # not dropped yet at 150
