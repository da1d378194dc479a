"""The example in each pass's docstring is true (they are the passes' quickest documentation)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "horizon_broker.broker.sql.passes.check_limits",
    "horizon_broker.broker.sql.passes.check_statement_kind",
    "horizon_broker.broker.sql.passes.check_budget",
    "horizon_broker.broker.sql.passes.check_value_sizes",
    "horizon_broker.broker.sql.grouping",
    "horizon_broker.broker.sql.passes.check_expressions",
    "horizon_broker.broker.sql.passes.resolve_references",
    "horizon_broker.broker.sql.passes.choose_snapshot",
    "horizon_broker.broker.sql.passes.expand_table_changes",
    "horizon_broker.broker.sql.passes.substitute_tables",
    "horizon_broker.broker.sql.passes.name_views",
    "horizon_broker.broker.sql.passes.inner_cross_joins",
    "horizon_broker.broker.sql.passes.describe_shape",
    "horizon_broker.broker.sql.passes.find_key_lookup",
    "horizon_broker.broker.sql.passes.cap_rows",
]


@pytest.mark.parametrize("name", MODULES)
def test_pass_docstring_example_holds(name: str) -> None:
    module = importlib.import_module(name)
    outcome = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert outcome.attempted > 0
    assert outcome.failed == 0
