"""The example in each pass's docstring is true (they are the passes' quickest documentation)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "broker.sql.passes.check_limits",
    "broker.sql.passes.check_statement_kind",
    "broker.sql.passes.check_budget",
    "broker.sql.passes.check_value_sizes",
    "broker.sql.grouping",
    "broker.sql.passes.check_expressions",
    "broker.sql.passes.resolve_references",
    "broker.sql.passes.choose_snapshot",
    "broker.sql.passes.expand_table_changes",
    "broker.sql.passes.substitute_tables",
]


@pytest.mark.parametrize("name", MODULES)
def test_pass_docstring_example_holds(name: str) -> None:
    module = importlib.import_module(name)
    outcome = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert outcome.attempted > 0
    assert outcome.failed == 0
