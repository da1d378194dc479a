"""The schema-change rules: which alters a table allows, as pure functions (no Redis, no Spark)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from horizon_broker._core.errors import FailedPrecondition, InvalidArgument
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor
from horizon_broker.watermark.schema_rules import (
    DropColumn,
    KeyRoles,
    apply_changes,
    changes_between,
    parse_add,
    parse_widen,
    widens,
)
from horizon_broker.watermark.schema_versions import SchemaHistory, default_value

ROLES = KeyRoles(primary_key=("id",), others=("updated",))
START = SchemaHistory.initial(
    (("id", "int"), ("updated", "bigint"), ("score", "float"), ("price", "decimal(10,2)"))
)


def test_the_allowed_widenings_are_exactly_the_issue_s_three():
    assert widens("int", "bigint") and widens("float", "double")
    assert widens("decimal(10,2)", "decimal(12,2)") and widens("DECIMAL(10, 2)", "decimal(11,2)")
    assert not widens("bigint", "int")  # narrowing
    assert not widens("int", "double")  # another family
    assert not widens("decimal(10,2)", "decimal(12,3)")  # scale changes
    assert not widens("decimal(10,2)", "decimal(10,2)")  # same precision
    assert not widens("int", "string")


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (parse_widen("score int"), "may only widen"),
        (parse_widen("price decimal(12,3)"), "may only widen"),
        (parse_widen("id bigint"), "primary-key column's type is fixed"),
        (DropColumn("id"), "definition uses it"),
        (DropColumn("updated"), "definition uses it"),
        (parse_add("_hidden int"), "starting with a letter"),
        (parse_add("n int default 'x'"), "is not a int literal"),
        (parse_add("n map<string,int>"), "unknown type"),
    ],
)
def test_a_change_the_rules_forbid_is_refused_as_invalid_naming_the_rule(change, rule):
    with pytest.raises(InvalidArgument, match=rule):
        apply_changes(START, [change], ROLES, 100)


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (parse_add("score double"), "already has it"),
        (DropColumn("missing"), "has no such column"),
        (parse_widen("missing bigint"), "has no such column"),
    ],
)
def test_a_change_that_does_not_fit_the_current_schema_is_a_failed_precondition(change, rule):
    with pytest.raises(FailedPrecondition, match=rule):
        apply_changes(START, [change], ROLES, 100)


def test_changes_of_one_alter_make_one_version_and_repeating_them_changes_nothing():
    changes = [parse_add("tier string default 'basic'"), parse_widen("score double")]
    history = apply_changes(START, changes, ROLES, 100)
    assert [v.effective for v in history.versions] == [0, 100]
    assert history.current.column("score").type == "double"
    assert apply_changes(history, changes, ROLES, 200) is history  # idempotent


def test_a_dropped_name_is_never_added_again_so_old_snapshots_keep_their_column():
    dropped = apply_changes(START, [DropColumn("score")], ROLES, 100)
    with pytest.raises(FailedPrecondition, match="dropped column's name"):
        apply_changes(dropped, [parse_add("score double")], ROLES, 200)


def test_the_version_at_a_snapshot_and_the_storage_columns_span_every_version():
    history = apply_changes(START, [parse_add("n bigint default 7")], ROLES, 100)
    history = apply_changes(
        history, [DropColumn("score"), parse_widen("price decimal(20,2)")], ROLES, 200
    )
    assert history.at(99).names == ("id", "updated", "score", "price")
    assert history.at(100).names == ("id", "updated", "score", "price", "n")
    assert history.at(250).names == ("id", "updated", "price", "n")
    storage = {c.name: (c.type, c.default) for c in history.storage_columns()}
    assert storage == {
        "id": ("int", None),
        "updated": ("bigint", None),
        "score": ("float", None),  # kept: snapshots before 200 read it
        "price": ("decimal(20,2)", None),
        "n": ("bigint", "7"),
    }
    assert history.when("n", 50) == "it is added at 100"
    assert history.when("score", 300) == "it was dropped at 200"


def test_defaults_parse_to_their_column_s_values():
    added = parse_add("tier string default 'it''s'")
    assert (added.name, added.type, added.default) == ("tier", "string", "'it''s'")
    history = apply_changes(START, [added, parse_add("m decimal(5,2) default 1.50")], ROLES, 9)
    assert default_value(history.current.column("tier")) == "it's"
    assert default_value(history.current.column("m")) == Decimal("1.50")


def test_a_table_file_s_columns_become_the_changes_they_imply():
    changes = changes_between(
        START.current,
        (("id", "int"), ("updated", "bigint"), ("price", "decimal(12,2)"), ("x", "int")),
    )
    assert changes == (
        DropColumn("score"),
        parse_widen("price decimal(12,2)"),
        parse_add("x int"),
    )


def test_a_descriptor_keeps_its_versions_through_json():
    descriptor = TableDescriptor("t", (ColumnSpec("id", "int"), ColumnSpec("v", "int")), ("id",))
    history = apply_changes(descriptor.schema_history, [parse_widen("v bigint")], ROLES, 123)
    altered = descriptor.with_schema(history)
    assert altered.columns[1] == ColumnSpec("v", "bigint")
    assert TableDescriptor.from_json(altered.to_json()) == altered
    assert "schema_versions" not in descriptor.to_json()  # unchanged tables keep their JSON
