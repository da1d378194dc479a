"""Debezium envelopes flattened into rows (pure: no Spark): every op, tombstones, transactions,
log positions, and each kind of malformed event dead-lettered with its place."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from horizon_broker._core.errors import HorizonError, StatusCode
from horizon_broker.ingest.debezium import (
    DeadLetter,
    EnvelopeSpec,
    Place,
    Row,
    Tombstone,
    Truncate,
    TruncateRefused,
    flatten,
    log_position,
    table_problems,
    verdict,
)
from horizon_broker.ingest.debezium_settings import DebeziumOrder
from horizon_broker.ingest.table import TableDefinition
from tests.ingest.debezium_events import customers_table, mysql_event, postgres_event, wrapped

HERE = Place("changes/001.json", 7)
ALICE = {"id": 1, "name": "alice", "balance": "10.50"}


def spec(**overrides: object) -> EnvelopeSpec:
    return EnvelopeSpec.of(customers_table(Path("/tmp/unused"), **overrides))


def judge(event: object, **overrides: object) -> object:
    return verdict(HERE, json.dumps(event), spec(**overrides))


@pytest.mark.parametrize("op", ["c", "u", "r"])
def test_create_update_and_snapshot_read_take_the_after_image(op: str) -> None:
    before = {"id": 1, "name": "old", "balance": "1.00"} if op == "u" else None
    got = judge(postgres_event(op, lsn=40, before=before, after=ALICE, tx=9))
    assert got == Row(
        {"id": 1, "name": "alice", "balance": Decimal("10.50"), "lsn": 40, "deleted": False,
         "txn": "9"}
    )  # fmt: skip


def test_a_delete_takes_its_key_from_the_before_image_and_sets_the_delete_column() -> None:
    got = judge(postgres_event("d", lsn=41, before={"id": 1, "name": None, "balance": None}))
    assert got == Row(
        {"id": 1, "name": None, "balance": None, "lsn": 41, "deleted": True, "txn": None}
    )


def test_the_schema_and_payload_wrapper_gives_the_same_row_as_the_bare_envelope() -> None:
    event = postgres_event("c", lsn=40, after=ALICE, tx=9)
    assert judge(wrapped(event)) == judge(event)


@pytest.mark.parametrize("tombstone", [None, wrapped(None)])
def test_a_tombstone_is_no_row_and_no_dead_letter(tombstone: object) -> None:
    assert judge(tombstone) == Tombstone()


def test_a_truncate_is_refused_naming_its_place_unless_the_table_allows_truncation() -> None:
    pattern = r"changes/001\.json:7.*does not allow truncation; set allow_truncate = true"
    with pytest.raises(TruncateRefused, match=pattern) as caught:
        judge(postgres_event("t", lsn=50))
    assert isinstance(caught.value, HorizonError)
    assert caught.value.code is StatusCode.FAILED_PRECONDITION
    allowed = judge(postgres_event("t", lsn=50, tx=8), allow_truncate=True)
    assert allowed == Truncate(
        {"id": None, "name": None, "balance": None, "lsn": 50, "deleted": True, "txn": "8"}
    )


def test_the_transaction_is_transaction_id_else_source_txid_else_none() -> None:
    both = postgres_event("c", lsn=1, after=ALICE, tx=9, transaction="9:77")
    assert judge(both).values["txn"] == "9:77"  # type: ignore[attr-defined]
    assert judge(postgres_event("c", lsn=1, after=ALICE, tx=9)).values["txn"] == "9"  # type: ignore[attr-defined]
    assert judge(postgres_event("c", lsn=1, after=ALICE)).values["txn"] is None  # type: ignore[attr-defined]


def test_each_log_position_orders_as_its_database_log_does() -> None:
    def at(order: DebeziumOrder, event: dict[str, object]) -> int:
        return log_position(event, order)

    pg = [postgres_event("c", lsn=lsn, after=ALICE) for lsn in (5, 60, 700)]
    assert [at(DebeziumOrder.LSN, e) for e in pg] == [5, 60, 700]
    assert [at(DebeziumOrder.TS_MS, e) for e in pg] == sorted(
        at(DebeziumOrder.TS_MS, e) for e in pg
    )
    # A later binlog file wins over a larger pos in an earlier one; rows of one event by row.
    mysql = [mysql_event("c", file=3, pos=9_999_999, after=ALICE),
             mysql_event("c", file=4, pos=4, after=ALICE),
             mysql_event("c", file=4, pos=4, row=1, after=ALICE),
             mysql_event("c", file=4, pos=120, after=ALICE)]  # fmt: skip
    positions = [at(DebeziumOrder.BINLOG, e) for e in mysql]
    assert positions == sorted(positions) and len(set(positions)) == 4
    oracle = {"op": "c", "source": {"scn": "98765432109876543210"}}
    assert at(DebeziumOrder.SCN, oracle) == 98765432109876543210


def test_without_debezium_order_the_comparison_column_comes_from_the_image() -> None:
    got = judge(postgres_event("c", lsn=40, after={**ALICE, "lsn": 3}), debezium_order=None)
    assert got.values["lsn"] == 3  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{not json", "not JSON"),
        (json.dumps([1, 2]), "JSON object, not list"),
        (json.dumps({"after": ALICE}), "no op"),
        (json.dumps(postgres_event("x", lsn=1, after=ALICE)), "unknown op 'x'"),
        (json.dumps(postgres_event("c", lsn=1)), "op 'c' needs a after image"),
        (json.dumps(postgres_event("u", lsn=1, after=[1])), "needs a after image"),
        (json.dumps(postgres_event("d", lsn=1)), "op 'd' needs a before image"),
        (json.dumps(postgres_event("c", lsn=1, after={"name": "x"})), "key column 'id' is missing"),
        (json.dumps(postgres_event("d", lsn=1, before={"name": "x"})), "key column 'id' is missing from the before"),
        (json.dumps(postgres_event("c", lsn=1, after={**ALICE, "id": "1"})), "column 'id' (bigint): expected int, got str"),
        (json.dumps(postgres_event("c", lsn=1, after={**ALICE, "id": True})), "got a boolean"),
        (json.dumps(postgres_event("c", lsn=1, after={**ALICE, "id": 2**63})), "out of range"),
        (json.dumps(postgres_event("c", lsn=1, after={**ALICE, "name": 5})), "column 'name' (string)"),
        (json.dumps(postgres_event("c", lsn=1, after={**ALICE, "balance": "1.005"})), "does not fit decimal(10,2)"),
        (json.dumps(postgres_event("c", lsn=1, after={**ALICE, "balance": "AKw="})), "column 'balance'"),
        (json.dumps({"op": "c", "after": ALICE, "source": {}}), "source.lsn is nothing"),
    ],
)  # fmt: skip
def test_a_malformed_event_is_a_dead_letter_with_its_place_reason_and_text(
    text: str, reason: str
) -> None:
    got = verdict(HERE, text, spec())
    assert isinstance(got, DeadLetter), got
    assert reason in got.reason and got.place == HERE and got.text == text
    line = json.loads(got.as_json())
    assert line == {"source": HERE.source, "position": 7, "reason": got.reason, "event": text}


def test_flatten_keeps_event_order_and_sources_and_counts_what_is_not_a_row() -> None:
    events = [
        (Place("a.json", 1), json.dumps(postgres_event("c", lsn=1, after=ALICE))),
        (Place("a.json", 2), json.dumps(postgres_event("d", lsn=2, before={"id": 1}))),
        (Place("a.json", 3), "null"),
        (Place("b.json", 1), "garbage"),
        (Place("b.json", 2), json.dumps(wrapped(postgres_event("r", lsn=3, after=ALICE)))),
    ]
    flat = flatten(events, spec())
    assert [(row["id"], row["deleted"], row["lsn"]) for row in flat.rows] == [
        (1, False, 1), (1, True, 2), (1, False, 3)
    ]  # fmt: skip
    assert flat.sources == ["a.json", "a.json", "b.json"]
    assert flat.tombstones == 1
    assert [(d.place, d.reason[:8]) for d in flat.dead_letters] == [
        (Place("b.json", 1), "not JSON")
    ]


def test_a_table_without_deletes_or_with_a_column_type_it_cannot_fill_is_refused() -> None:
    assert table_problems(customers_table(Path("/tmp/x"))) == []
    no_deletes = customers_table(Path("/tmp/x"), delete_column=None)
    assert "needs a delete_column" in " ".join(table_problems(no_deletes))
    columns = {"id": "bigint", "tags": "array<string>", "lsn": "bigint", "deleted": "boolean"}
    listed = customers_table(Path("/tmp/x"), columns=columns, transaction_column=None)
    assert "cannot fill column 'tags' of type array<string>" in " ".join(table_problems(listed))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"comparison": ["lsn", "id"]}, "give exactly one"),
        ({"comparison": ["name"]}, "must be bigint or decimal(38,0), not string"),
        ({"debezium_order": "binlog"}, "binlog position: it must be decimal(38,0), not bigint"),
        ({"debezium_order": "gtid"}, "debezium_order"),
    ],
)
def test_the_table_file_refuses_a_log_position_it_cannot_store(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(HorizonError, match=re.escape(message)):
        customers_table(Path("/tmp/x"), **overrides)


def test_the_ingestion_guides_debezium_example_flattens_as_it_says() -> None:
    guide = (Path(__file__).parents[2] / "docs" / "guides" / "ingestion.md").read_text()
    section = guide.split("## Debezium change events", 1)[1]
    toml_block = section.split("```toml\n", 1)[1].split("```", 1)[0]
    json_block = section.split("```json\n", 1)[1].split("```", 1)[0]
    table = TableDefinition.from_toml(toml_block, storage_root="/tmp/unused")
    events = [(Place("0001.json", n), line) for n, line in enumerate(json_block.splitlines(), 1)]
    flat = flatten(events, EnvelopeSpec.of(table))
    assert (flat.tombstones, flat.dead_letters) == (1, [])
    assert flat.rows == [
        {"id": 1, "name": "alice", "email": "a@example.com", "lsn": 24023128, "deleted": False,
         "txn": "555"},
        {"id": 1, "name": None, "email": None, "lsn": 24023200, "deleted": True, "txn": "556"},
    ]  # fmt: skip
