"""Shared fixtures of the SQL rewriter tests: a small catalog and a function policy."""

from __future__ import annotations

import pytest

from horizon_broker.broker.sql import Catalog, CatalogTable, FunctionPolicy
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor

#: Built-in names the corpus calls by a name sqlglot may not know; the Spark-backed test checks
#: that the session really has them.
SAMPLE_BUILTINS = (
    "abs",
    "avg",
    "coalesce",
    "count",
    "max",
    "min",
    "sum",
    "upper",
    "lower",
    "explode",
    "range",
    "row_number",
    "rank",
    "array_contains",
    "size",
    "concat",
    "date_add",
    "reflect",
    "java_method",
    "try_reflect",
    "input_file_name",
    "from_protobuf",
    "xpath",
    "nvl",
    "struct",
    "named_struct",
    "percentile_approx",
    "collect_list",
    "transform",
)


def make_catalog() -> Catalog:
    orders = TableDescriptor(
        name="orders",
        columns=(
            ColumnSpec("id", "bigint"),
            ColumnSpec("customer_id", "bigint"),
            ColumnSpec("amount", "decimal(18,2)"),
            ColumnSpec("status", "string"),
            ColumnSpec("items", "array<int>"),
        ),
        primary_key=("id",),
    )
    return Catalog(
        [
            CatalogTable.from_descriptor(
                orders,
                lwm=70_000,
                retention_horizon=100,
                source_view="__horizon_orders_g17",
                segments=("orders_s1", "orders_s2"),
                files=("/data/o1.parquet", "/data/o2.parquet"),
            ),
            CatalogTable(
                name="customers",
                columns=(
                    ColumnSpec("id", "bigint"),
                    ColumnSpec("name", "string"),
                    ColumnSpec("region", "string"),
                ),
                primary_key=("id",),
                upsert=True,
                lwm=900,
                retention_horizon=200,
                source_view="__horizon_customers_g3",
            ),
            CatalogTable(
                name="events",
                columns=(ColumnSpec("id", "bigint"), ColumnSpec("kind", "string")),
                primary_key=(),
                upsert=False,
                lwm=None,
                retention_horizon=0,
                source_view="__horizon_events_g1",
            ),
            CatalogTable(
                name="pending",
                columns=(ColumnSpec("id", "bigint"),),
                primary_key=("id",),
                upsert=True,
                lwm=None,
                retention_horizon=0,
                source_view="__horizon_pending_g1",
            ),
            CatalogTable(
                name="order",
                columns=(ColumnSpec("select", "bigint"), ColumnSpec("from", "string")),
                primary_key=("select",),
                upsert=True,
                lwm=950,
                retention_horizon=0,
                source_view="__horizon_order_g2",
            ),
        ]
    )


@pytest.fixture
def catalog() -> Catalog:
    return make_catalog()


@pytest.fixture
def functions() -> FunctionPolicy:
    return FunctionPolicy.from_names(SAMPLE_BUILTINS)
