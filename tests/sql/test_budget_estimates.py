"""The row estimate of ``check_budget`` on queries of one level and one source (pure): the pass
skips its estimator for them when nothing can multiply rows, and must still refuse any that can."""

from __future__ import annotations

import pytest

from horizon_broker.broker.sql import Catalog, CatalogTable, FunctionPolicy, WorkBudget, rewrite
from horizon_broker.broker.sql.errors import OverBudget
from horizon_broker.watermark.catalog import ColumnSpec

BIG = Catalog(
    [
        CatalogTable(
            name="big",
            columns=(ColumnSpec("id", "bigint"), ColumnSpec("tags", "array<string>")),
            primary_key=("id",),
            upsert=True,
            lwm=1_000,
            retention_horizon=0,
            source_view="__horizon_big_g1",
            rows=1_000_000,
        )
    ]
)
FUNCTIONS = FunctionPolicy.from_names(["count", "explode", "sequence", "posexplode", "stack"])
BUDGET = WorkBudget(max_estimated_rows=5_000_000)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM big WHERE id > 10",
        "SELECT count(*) FROM big",
        "SELECT explode(tags) FROM (SELECT tags FROM big WHERE id = 1) t LIMIT 3",
        "SELECT explode(sequence(1, 4)) FROM big",
    ],
)
def test_a_query_whose_estimate_stays_under_the_limit_is_accepted(sql: str) -> None:
    rewrite(sql, BIG, functions=FUNCTIONS, budget=BUDGET)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT explode(sequence(1, 10)) FROM big",
        "SELECT posexplode(sequence(1, 10)) FROM big WHERE id > 0",
        "SELECT stack(10, id, id, id, id, id, id, id, id, id, id) FROM big",
        "SELECT x FROM big LATERAL VIEW explode(sequence(1, 10)) s AS x",
        "SELECT a.id FROM big a, big b",
    ],
)
def test_a_single_level_query_that_multiplies_rows_is_refused(sql: str) -> None:
    with pytest.raises(OverBudget, match=r"max_estimated_rows|max_cross_joins"):
        rewrite(sql, BIG, functions=FUNCTIONS, budget=BUDGET)
