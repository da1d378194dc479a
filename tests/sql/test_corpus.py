"""Table-driven corpus: every reference position, quoting, shadowing, time travel, change feed,
and every rejection, checked against the pure rewriter (no Spark)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import sqlglot
from sqlglot import exp

from horizon_broker._core.errors import FailedPrecondition, HorizonError, InvalidArgument, NotFound
from horizon_broker.broker.sql import Catalog, FunctionPolicy, rewrite
from horizon_broker.broker.sql.errors import (
    FunctionNotAllowed,
    InvalidChangeWindow,
    InvalidSnapshot,
    NoLowWatermark,
    QueryTooLarge,
    SnapshotOutOfRange,
    SqlSyntaxError,
    StatementNotAllowed,
    TableReferenceNotAllowed,
    UnknownFunction,
    UnknownTable,
)
from horizon_broker.broker.sql.passes.resolve_references import is_cte_reference
from horizon_broker.broker.sql.timestamps import timestamp_to_hlc

_UNSET = object()


@dataclass(frozen=True)
class Ok:
    """A query that rewrites: ``reads`` maps each table to its number of references."""

    sql: str
    reads: dict[str, int]
    snapshot: object = _UNSET
    change_feed: bool = False
    contains: tuple[str, ...] = field(default=())
    #: sqlglot cannot re-read ``(subquery) TABLESAMPLE (...) AS x`` although Spark's grammar has
    #: it; such cases are checked by the Spark analysis test instead.
    sqlglot_rereads: bool = True


@dataclass(frozen=True)
class Err:
    """A query that is refused with ``error`` and a message containing ``fragment``."""

    sql: str
    error: type[HorizonError]
    fragment: str


S = 900  # min LWM of orders (1000) and customers (900)
ORDERS_ONLY = 70_000

CASES: list[Ok | Err] = [
    # --- FROM, quoting, qualification, letter case
    Ok("SELECT * FROM orders", {"orders": 1}, ORDERS_ONLY),
    Ok("SELECT id FROM ORDERS", {"orders": 1}, contains=("AS ORDERS",)),
    Ok("SELECT id FROM `orders`", {"orders": 1}, contains=("AS `orders`",)),
    Ok("SELECT id FROM `Orders` AS o", {"orders": 1}, contains=("AS o",)),
    Ok("SELECT o.id FROM default.orders o", {"orders": 1}, contains=("AS o",)),
    Ok("SELECT orders.id FROM horizon.orders", {"orders": 1}, contains=("AS orders",)),
    Ok("SELECT id FROM `default`.`orders`", {"orders": 1}),
    Ok("SELECT id FROM spark_catalog.default.orders", {"orders": 1}),
    Ok("SELECT id FROM DEFAULT.Orders", {"orders": 1}),
    Ok("SELECT * FROM orders AS o(a, b, c, d, e, f, g)", {"orders": 1}, contains=("AS o(a, b",)),
    Ok("FROM orders SELECT id", {"orders": 1}),
    Ok("SELECT validFrom, validUntil FROM orders", {"orders": 1}),
    Ok("SELECT `select`, `from` FROM `order`", {"order": 1}, 950, contains=("`select`",)),
    # --- every JOIN kind on each side
    Ok(
        "SELECT * FROM orders o JOIN customers c ON o.customer_id = c.id",
        {"orders": 1, "customers": 1},
        S,
    ),
    Ok(
        "SELECT * FROM orders o INNER JOIN customers c ON o.customer_id = c.id",
        {"orders": 1, "customers": 1},
    ),
    Ok(
        "SELECT * FROM orders o LEFT JOIN customers c ON o.customer_id = c.id",
        {"orders": 1, "customers": 1},
    ),
    Ok(
        "SELECT * FROM customers c LEFT OUTER JOIN orders o ON o.customer_id = c.id",
        {"orders": 1, "customers": 1},
    ),
    Ok(
        "SELECT * FROM orders o RIGHT JOIN customers c ON o.customer_id = c.id",
        {"orders": 1, "customers": 1},
    ),
    Ok(
        "SELECT * FROM orders o FULL OUTER JOIN customers c ON o.customer_id = c.id",
        {"orders": 1, "customers": 1},
    ),
    Ok(
        "SELECT * FROM orders o LEFT SEMI JOIN customers c ON o.customer_id = c.id",
        {"orders": 1, "customers": 1},
    ),
    Ok(
        "SELECT * FROM orders o LEFT ANTI JOIN customers c ON o.customer_id = c.id",
        {"orders": 1, "customers": 1},
    ),
    Ok("SELECT * FROM orders CROSS JOIN customers", {"orders": 1, "customers": 1}),
    Ok("SELECT * FROM orders, customers", {"orders": 1, "customers": 1}),
    Ok("SELECT * FROM orders NATURAL JOIN customers", {"orders": 1, "customers": 1}),
    Ok("SELECT * FROM orders JOIN customers USING (id)", {"orders": 1, "customers": 1}),
    Ok(
        "SELECT * FROM (orders o JOIN customers c ON o.customer_id = c.id)",
        {"orders": 1, "customers": 1},
    ),
    Ok("SELECT * FROM orders a JOIN orders b ON a.id = b.id", {"orders": 2}, ORDERS_ONLY),
    Ok(
        "SELECT * FROM orders JOIN events ON orders.id = events.id",
        {"orders": 1, "events": 1},
        ORDERS_ONLY,
    ),
    Ok(
        "SELECT * FROM events",
        {"events": 1},
        None,
        contains=("(SELECT id, kind FROM __horizon_events_g1) AS events",),
    ),
    # --- subqueries
    Ok("SELECT (SELECT max(amount) FROM orders) AS m", {"orders": 1}),
    Ok(
        "SELECT * FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
        {"orders": 1, "customers": 1},
    ),
    Ok(
        "SELECT * FROM customers WHERE NOT EXISTS (SELECT 1 FROM orders WHERE orders.customer_id = customers.id)",
        {"orders": 1, "customers": 1},
    ),
    Ok(
        "SELECT * FROM customers WHERE id IN (SELECT customer_id FROM orders)",
        {"orders": 1, "customers": 1},
    ),
    Ok(
        "SELECT * FROM customers WHERE id NOT IN (SELECT customer_id FROM orders WHERE amount > 1)",
        {"orders": 1, "customers": 1},
    ),
    Ok(
        "SELECT c.id, (SELECT count(*) FROM orders o WHERE o.customer_id = c.id) AS n FROM customers c",
        {"orders": 1, "customers": 1},
    ),
    Ok(
        "SELECT customer_id FROM orders GROUP BY customer_id HAVING sum(amount) > (SELECT avg(amount) FROM orders)",
        {"orders": 2},
    ),
    Ok("SELECT * FROM (SELECT * FROM (SELECT id FROM orders) x) y", {"orders": 1}),
    Ok(
        "SELECT * FROM customers c, LATERAL (SELECT * FROM orders o WHERE o.customer_id = c.id)",
        {"orders": 1, "customers": 1},
    ),
    Ok("SELECT CASE WHEN EXISTS (SELECT 1 FROM orders) THEN 1 ELSE 0 END", {"orders": 1}),
    # --- CTEs and shadowing
    Ok("WITH x AS (SELECT * FROM orders) SELECT * FROM x", {"orders": 1}),
    Ok("WITH orders AS (SELECT 1 AS id) SELECT * FROM orders", {}, None),
    Ok("WITH ORDERS AS (SELECT 1 AS id) SELECT * FROM orders", {}, None),
    Ok(
        "WITH orders AS (SELECT * FROM orders WHERE amount > 0) SELECT * FROM orders", {"orders": 1}
    ),
    Ok(
        "WITH a AS (SELECT * FROM customers), customers AS (SELECT * FROM a) SELECT * FROM customers",
        {"customers": 1},
    ),
    Ok(
        "WITH a AS (SELECT * FROM customers), customers AS (SELECT 1 AS id) SELECT * FROM a",
        {"customers": 1},
    ),
    Ok("WITH orders AS (SELECT 1 AS id) SELECT * FROM default.orders", {"orders": 1}),
    Ok(
        "WITH orders AS (SELECT 1 AS id) SELECT * FROM (WITH orders AS (SELECT * FROM orders) SELECT * FROM orders)",
        {},
        None,
    ),
    Ok(
        "WITH c AS (SELECT 1 AS id) SELECT * FROM (WITH orders AS (SELECT 2 AS id) SELECT * FROM orders) JOIN orders USING (id)",
        {"orders": 1},
    ),
    Ok(
        "SELECT * FROM (WITH customers AS (SELECT 1 AS id) SELECT * FROM customers) q JOIN customers USING (id)",
        {"customers": 1},
    ),
    Ok(
        "WITH x AS (SELECT 1 AS id) SELECT (WITH orders AS (SELECT 5 AS id) SELECT max(id) FROM orders), (SELECT max(id) FROM orders)",
        {"orders": 1},
    ),
    Ok(
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r JOIN orders ON orders.id = r.n",
        {"orders": 1},
    ),
    Ok(
        "WITH RECURSIVE orders(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM orders WHERE n < 3) SELECT * FROM orders",
        {},
        None,
    ),
    Ok("WITH RECURSIVE r AS (SELECT id FROM orders) SELECT * FROM r", {"orders": 1}),
    Ok(
        "WITH x AS (SELECT id FROM orders) SELECT * FROM x UNION ALL SELECT id FROM customers",
        {"orders": 1, "customers": 1},
    ),
    # --- set operations
    Ok("SELECT id FROM orders UNION SELECT id FROM customers", {"orders": 1, "customers": 1}),
    Ok("SELECT id FROM orders UNION ALL SELECT id FROM orders", {"orders": 2}),
    Ok("SELECT id FROM orders INTERSECT SELECT id FROM customers", {"orders": 1, "customers": 1}),
    Ok("SELECT id FROM orders EXCEPT SELECT id FROM customers", {"orders": 1, "customers": 1}),
    Ok(
        "(SELECT id FROM orders) UNION (SELECT id FROM customers ORDER BY id LIMIT 1)",
        {"orders": 1, "customers": 1},
    ),
    # --- LATERAL VIEW, windows, grouping, pivot, sampling, hints
    Ok("SELECT id, item FROM orders LATERAL VIEW explode(items) t AS item", {"orders": 1}),
    Ok("SELECT id, item FROM orders LATERAL VIEW OUTER explode(items) t AS item", {"orders": 1}),
    Ok(
        "SELECT id, row_number() OVER (PARTITION BY customer_id ORDER BY amount DESC) AS rn FROM orders",
        {"orders": 1},
    ),
    Ok(
        "SELECT customer_id, status, sum(amount) FROM orders GROUP BY GROUPING SETS ((customer_id), (status), ())",
        {"orders": 1},
    ),
    Ok("SELECT customer_id, sum(amount) FROM orders GROUP BY ROLLUP (customer_id)", {"orders": 1}),
    Ok(
        "SELECT * FROM (SELECT customer_id, status, amount FROM orders) PIVOT (sum(amount) FOR status IN ('open', 'done'))",
        {"orders": 1},
    ),
    Ok(
        "SELECT * FROM orders PIVOT (sum(amount) FOR status IN ('open', 'done'))",
        {"orders": 1},
        contains=("PIVOT(",),
    ),
    Ok(
        "SELECT * FROM orders TABLESAMPLE (50 PERCENT) AS o",
        {"orders": 1},
        contains=("TABLESAMPLE",),
        sqlglot_rereads=False,
    ),
    Ok(
        "SELECT /*+ BROADCAST(orders) */ * FROM orders JOIN customers ON orders.customer_id = customers.id",
        {"orders": 1, "customers": 1},
        contains=("/*+ BROADCAST(orders) */",),
    ),
    Ok("SELECT * FROM orders /* AND validUntil IS NULL */ WHERE 1 = 1 -- comment", {"orders": 1}),
    Ok("SELECT * FROM range(10)", {}, None),
    Ok("SELECT * FROM explode(array(1, 2))", {}, None),
    Ok("SELECT * FROM VALUES (1, 2) AS v(a, b)", {}, None),
    Ok("VALUES (1), (2)", {}, None),
    Ok("SELECT transform(items, x -> x + 1) FROM orders", {"orders": 1}),
    Ok("SELECT * FROM orders WHERE validUntil IS NULL OR validFrom > 0", {"orders": 1}),
    Ok("SELECT 1", {}, None),
    # --- time travel
    Ok("SELECT * FROM orders VERSION AS OF 500", {"orders": 1}, 500),
    Ok("SELECT * FROM orders FOR VERSION AS OF 500 o", {"orders": 1}, 500),
    Ok(
        "SELECT * FROM orders VERSION AS OF 500 JOIN customers USING (id)",
        {"orders": 1, "customers": 1},
        500,
    ),
    Ok(
        "SELECT * FROM orders VERSION AS OF 500 a JOIN orders VERSION AS OF 500 b USING (id)",
        {"orders": 2},
        500,
    ),
    Ok(
        "SELECT * FROM customers WHERE id IN (SELECT customer_id FROM orders VERSION AS OF 300)",
        {"orders": 1, "customers": 1},
        300,
    ),
    Ok(
        "SELECT * FROM orders TIMESTAMP AS OF '1970-01-01T00:00:00.000Z'",
        {"orders": 1},
        0xFFFF,
        contains=("validFrom <= 65535",),
    ),
    Ok(
        "SELECT * FROM orders FOR SYSTEM_TIME AS OF '1970-01-01 00:00:00.0009'",
        {"orders": 1},
        0xFFFF,
    ),
    Ok(
        "SELECT * FROM orders TIMESTAMP AS OF TIMESTAMP '1970-01-01T00:00:00Z'",
        {"orders": 1},
        0xFFFF,
    ),
    Ok("SELECT * FROM orders VERSION AS OF 70000", {"orders": 1}, 70_000),
    Ok("SELECT * FROM orders VERSION AS OF 100", {"orders": 1}, 100),
    # --- change history
    Ok(
        "SELECT * FROM table_changes('orders', 100, 1000)",
        {"orders": 1},
        None,
        change_feed=True,
        contains=("'update_postimage'", "_commit_timestamp"),
    ),
    Ok("SELECT * FROM table_changes('default.orders', 100)", {"orders": 1}, None, change_feed=True),
    Ok(
        "SELECT c.* FROM table_changes('orders', 100, 500) AS c JOIN customers ON c.customer_id = customers.id",
        {"orders": 1, "customers": 1},
        S,
        change_feed=True,
    ),
    Ok("SELECT * FROM TABLE_CHANGES('ORDERS', 200, 200)", {"orders": 1}, None, change_feed=True),
    # --- rejections: statements
    Err("INSERT INTO orders SELECT * FROM orders", StatementNotAllowed, "INSERT"),
    Err("INSERT OVERWRITE DIRECTORY '/tmp/x' SELECT 1", StatementNotAllowed, "INSERT"),
    Err("UPDATE orders SET amount = 0", StatementNotAllowed, "UPDATE"),
    Err("DELETE FROM orders", StatementNotAllowed, "DELETE"),
    Err(
        "MERGE INTO orders USING customers ON orders.id = customers.id WHEN MATCHED THEN DELETE",
        StatementNotAllowed,
        "MERGE",
    ),
    Err("CREATE TEMP VIEW v AS SELECT 1", StatementNotAllowed, "CREATE"),
    Err("DROP TABLE orders", StatementNotAllowed, "DROP"),
    Err("ALTER TABLE orders ADD COLUMNS (c int)", StatementNotAllowed, "ALTER"),
    Err("CACHE TABLE orders", StatementNotAllowed, "CACHE"),
    Err("UNCACHE TABLE orders", StatementNotAllowed, "UNCACHE"),
    Err("SET spark.sql.ansi.enabled = false", StatementNotAllowed, "SET"),
    Err("RESET", StatementNotAllowed, "RESET"),
    Err("ADD JAR /tmp/evil.jar", StatementNotAllowed, "ADD JAR"),
    Err("LOAD DATA INPATH '/x' INTO TABLE orders", StatementNotAllowed, "LOAD DATA"),
    Err("USE horizon", StatementNotAllowed, "USE"),
    Err("REFRESH TABLE orders", StatementNotAllowed, "REFRESH"),
    Err("SHOW TABLES", StatementNotAllowed, "SHOW"),
    Err("DESCRIBE orders", StatementNotAllowed, "DESCRIBE"),
    Err("EXPLAIN SELECT 1", StatementNotAllowed, "EXPLAIN"),
    Err("TRUNCATE TABLE orders", StatementNotAllowed, "TRUNCATE"),
    Err("SELECT 1; SELECT 2", StatementNotAllowed, "2 statements"),
    Err("SELECT 1; DROP TABLE orders", StatementNotAllowed, "2 statements"),
    Err("SELECT * INTO copy FROM orders", StatementNotAllowed, "INTO"),
    Err("SELECT TRANSFORM(id) USING 'cat' AS (x) FROM orders", StatementNotAllowed, "TRANSFORM"),
    Err("", StatementNotAllowed, "empty"),
    Err("SELECT FROM WHERE", SqlSyntaxError, "syntax"),
    # --- rejections: functions
    Err("SELECT reflect('java.lang.Runtime', 'getRuntime')", FunctionNotAllowed, "reflect()"),
    Err("SELECT java_method('java.lang.System', 'exit', 0)", FunctionNotAllowed, "java_method()"),
    Err(
        "SELECT * FROM orders WHERE try_reflect('a', 'b') IS NULL",
        FunctionNotAllowed,
        "try_reflect()",
    ),
    Err("SELECT input_file_name() FROM orders", FunctionNotAllowed, "input_file_name()"),
    Err("SELECT xpath('<a/>', 'a')", FunctionNotAllowed, "xpath()"),
    Err(
        "SELECT id FROM orders WHERE id IN (SELECT my_udf(id) FROM customers)",
        UnknownFunction,
        "my_udf()",
    ),
    Err("SELECT evil.fn(1)", FunctionNotAllowed, "qualified function"),
    # --- rejections: tables
    Err("SELECT * FROM parquet.`/etc/passwd`", TableReferenceNotAllowed, "file-path table"),
    Err("SELECT * FROM csv.`file:///etc/passwd`", TableReferenceNotAllowed, "file-path table"),
    Err("SELECT * FROM `/data/o1.parquet`", TableReferenceNotAllowed, "file-path table"),
    Err("SELECT * FROM json.`s3://bucket/x`", TableReferenceNotAllowed, "file-path table"),
    Err("SELECT * FROM nosuch", UnknownTable, "nosuch"),
    Err("SELECT * FROM orders JOIN secret_table USING (id)", UnknownTable, "secret_table"),
    Err("SELECT * FROM __horizon_orders_g17", UnknownTable, "__horizon_orders_g17"),
    Err(
        "WITH __horizon_orders_g17 AS (SELECT 1 AS id) SELECT * FROM orders",
        TableReferenceNotAllowed,
        "reserved",
    ),
    Err("SELECT * FROM other_db.orders", UnknownTable, "other_db"),
    Err("SELECT * FROM global_temp.orders", UnknownTable, "global_temp"),
    Err("SELECT * FROM hive_metastore.default.orders", UnknownTable, "hive_metastore"),
    Err(
        "WITH x AS (SELECT 1) SELECT * FROM x JOIN (SELECT * FROM nosuch) USING (id)",
        UnknownTable,
        "nosuch",
    ),
    Err("WITH a AS (SELECT * FROM b), b AS (SELECT 1 AS id) SELECT * FROM a", UnknownTable, "b"),
    Err("SELECT * FROM IDENTIFIER('orders')", TableReferenceNotAllowed, "table-valued function"),
    Err("SELECT * FROM json_tuple('{}', 'a')", TableReferenceNotAllowed, "table-valued function"),
    Err("SELECT * FROM read_files('/etc')", TableReferenceNotAllowed, "table-valued function"),
    # --- rejections: snapshots
    Err(
        "SELECT * FROM orders VERSION AS OF 500 JOIN customers VERSION AS OF 600 USING (id)",
        InvalidSnapshot,
        "differs",
    ),
    Err(
        "SELECT * FROM orders VERSION AS OF 70001",
        SnapshotOutOfRange,
        "snapshot 70001 is in the future: above the low-watermark 70000 of table orders",
    ),
    Err(
        "SELECT * FROM orders VERSION AS OF 950 JOIN customers USING (id)",
        SnapshotOutOfRange,
        "above the low-watermark 900 of table customers",
    ),
    Err("SELECT * FROM orders VERSION AS OF 99", SnapshotOutOfRange, "retention horizon 100"),
    Err(
        "SELECT * FROM orders VERSION AS OF 150 JOIN customers USING (id)",
        SnapshotOutOfRange,
        "retention horizon 200 of table customers",
    ),
    Err("SELECT * FROM orders VERSION AS OF 'x'", InvalidSnapshot, "VERSION AS OF takes"),
    Err("SELECT * FROM orders TIMESTAMP AS OF 5", InvalidSnapshot, "timestamp string"),
    Err("SELECT * FROM orders TIMESTAMP AS OF 'yesterday'", InvalidSnapshot, "invalid timestamp"),
    Err(
        "SELECT * FROM orders TIMESTAMP AS OF '2026-11-21T10:00:00Z'",
        SnapshotOutOfRange,
        "in the future",
    ),
    Err("SELECT * FROM events VERSION AS OF 5", InvalidSnapshot, "append-only"),
    Err("WITH c AS (SELECT 1 AS id) SELECT * FROM c VERSION AS OF 5", InvalidSnapshot, "CTE c"),
    Err("SELECT * FROM pending", NoLowWatermark, "pending"),
    Err("SELECT * FROM orders JOIN pending USING (id)", NoLowWatermark, "pending"),
    # --- rejections: change feed
    Err(
        "SELECT * FROM table_changes('orders', 100, 70001)",
        SnapshotOutOfRange,
        "low-watermark 70000",
    ),
    Err(
        "SELECT * FROM table_changes('orders', 99, 500)",
        SnapshotOutOfRange,
        "retention horizon 100",
    ),
    Err("SELECT * FROM table_changes('orders', 600, 500)", InvalidChangeWindow, "after"),
    Err("SELECT * FROM table_changes('orders', id, 500)", InvalidChangeWindow, "integer HLC"),
    Err("SELECT * FROM table_changes('orders')", InvalidChangeWindow, "argument"),
    Err("SELECT * FROM table_changes(orders, 1, 2)", InvalidChangeWindow, "table name as a string"),
    Err("SELECT * FROM table_changes('events', 1, 2)", InvalidChangeWindow, "append-only"),
    Err("SELECT * FROM table_changes('nosuch', 1, 2)", UnknownTable, "nosuch"),
    Err("SELECT * FROM table_changes('pending', 1)", NoLowWatermark, "pending"),
    # --- rejections: limits
    Err("SELECT " + "(" * 5000 + "1" + ")" * 5000, QueryTooLarge, "nesting depth"),
    Err("SELECT " + "NOT " * 5000 + "true", QueryTooLarge, "nesting depth"),
    Err("SELECT " + "+".join(["1"] * 5000), QueryTooLarge, "deeper than the limit"),
]


def _case_id(case: Ok | Err) -> str:
    text = case.sql if len(case.sql) < 70 else case.sql[:67] + "..."
    return text


def _unsubstituted(sql: str, catalog: Catalog) -> list[str]:
    """Registered table names still standing as plain table references in ``sql``."""
    tree = sqlglot.parse_one(sql, read="spark")
    left = []
    for node in tree.walk(prune=lambda n: isinstance(n, exp.Hint)):
        named = isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier)
        if named and node.name in catalog and (node.db or not is_cte_reference(node, node.name)):
            left.append(node.sql(dialect="spark"))
    return left


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 80
    assert len({case.sql for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", [c for c in CASES if isinstance(c, Ok)], ids=_case_id)
def test_accepted_query_reads_every_reference_through_a_filtered_derived_table(
    case: Ok, catalog: Catalog, functions: FunctionPolicy
) -> None:
    result = rewrite(case.sql, catalog, functions=functions)
    plan = result.plan
    assert {read.name: read.references for read in plan.tables_read} == case.reads
    if case.snapshot is not _UNSET:
        assert plan.snapshot == case.snapshot
    assert plan.change_feed == case.change_feed
    if case.sqlglot_rereads:
        assert _unsubstituted(result.sql, catalog) == []
    scans = sum(
        read.references - len(read.change_windows) for read in plan.tables_read if read.upsert
    )
    if scans:
        predicate = (
            f"validFrom <= {plan.snapshot} AND (validUntil IS NULL OR validUntil > {plan.snapshot})"
        )
        assert result.sql.count(predicate) == scans
    for read in plan.tables_read:
        assert read.source_view in result.sql
    for fragment in case.contains:
        assert fragment in result.sql


@pytest.mark.parametrize("case", [c for c in CASES if isinstance(c, Err)], ids=_case_id)
def test_refused_query_fails_with_a_typed_error_naming_the_construct(
    case: Err, catalog: Catalog, functions: FunctionPolicy
) -> None:
    with pytest.raises(case.error) as raised:
        rewrite(case.sql, catalog, functions=functions)
    assert case.fragment in str(raised.value)


def test_error_classes_map_to_the_documented_status_families() -> None:
    assert issubclass(StatementNotAllowed, InvalidArgument)
    assert issubclass(FunctionNotAllowed, InvalidArgument)
    assert issubclass(UnknownTable, NotFound)
    assert issubclass(SnapshotOutOfRange, FailedPrecondition)
    assert issubclass(NoLowWatermark, FailedPrecondition)


def test_timestamp_snapshot_is_the_last_hlc_of_that_millisecond() -> None:
    ms = 1_795_255_200_000  # 2026-11-21T10:00:00Z
    assert timestamp_to_hlc("2026-11-21T10:00:00Z") == (ms << 16) | 0xFFFF
    assert timestamp_to_hlc("2026-11-21T12:00:00.000999+02:00") == (ms << 16) | 0xFFFF
    assert timestamp_to_hlc("2026-11-21T10:00:00.001") == ((ms + 1) << 16) | 0xFFFF


def test_outer_join_filter_stays_inside_the_scan_not_in_the_outer_where(
    catalog: Catalog, functions: FunctionPolicy
) -> None:
    sql = "SELECT * FROM customers c LEFT JOIN orders o ON o.customer_id = c.id WHERE c.id > 0"
    tree = sqlglot.parse_one(rewrite(sql, catalog, functions=functions).sql, read="spark")
    outer_where = tree.args["where"].sql(dialect="spark")
    assert "validFrom" not in outer_where and "validUntil" not in outer_where
    joined = tree.args["joins"][0].this
    assert "validUntil IS NULL OR validUntil > 900" in joined.sql(dialect="spark")


def test_rewritten_query_exposes_only_user_and_validity_columns(
    catalog: Catalog, functions: FunctionPolicy
) -> None:
    sql = rewrite("SELECT * FROM orders", catalog, functions=functions).sql
    derived = sqlglot.parse_one(sql, read="spark").args["from_"].this.this
    assert [e.name for e in derived.expressions] == [
        "id",
        "customer_id",
        "amount",
        "status",
        "items",
        "validFrom",
        "validUntil",
    ]


def test_plan_lists_tables_with_their_files_for_access_checks_and_passthrough(
    catalog: Catalog, functions: FunctionPolicy
) -> None:
    plan = rewrite(
        "SELECT * FROM orders VERSION AS OF 500 o JOIN events e ON o.id = e.id",
        catalog,
        functions=functions,
    ).plan
    orders, events = plan.tables_read
    assert (orders.name, orders.snapshot, orders.upsert) == ("orders", 500, True)
    assert orders.files == ("/data/o1.parquet", "/data/o2.parquet")
    assert orders.segments == ("orders_s1", "orders_s2")
    assert orders.source_view == "__horizon_orders_g17"
    assert (events.name, events.snapshot, events.upsert) == ("events", None, False)
    assert plan.snapshot_source == "VERSION AS OF"
    assert plan.table_names == ("orders", "events")


def test_default_snapshot_is_the_lowest_lwm_of_the_tables_read(
    catalog: Catalog, functions: FunctionPolicy
) -> None:
    plan = rewrite(
        "SELECT * FROM orders JOIN customers USING (id)", catalog, functions=functions
    ).plan
    assert (plan.snapshot, plan.snapshot_source) == (900, "default: min LWM")


def test_nested_with_clauses_stay_nested_so_shadowing_keeps_its_meaning(
    catalog: Catalog, functions: FunctionPolicy
) -> None:
    sql = (
        "WITH orders AS (SELECT 1 AS id) "
        "SELECT * FROM (WITH orders AS (SELECT * FROM orders) SELECT * FROM orders)"
    )
    assert rewrite(sql, catalog, functions=functions).sql == sql
