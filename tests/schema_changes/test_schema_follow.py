"""How ingestion takes up the registered schema: from the table file at start, and before each
batch (real redis-server; no Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from horizon_broker._core.errors import InvalidArgument
from horizon_broker._core.hlc import HybridLogicalClock
from horizon_broker.ingest.schema_follow import follow_schema, register_from_file
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.watermark.catalog import ColumnSpec
from horizon_broker.watermark.schema_rules import parse_add
from horizon_broker.watermark.schema_store import alter_table, registered_descriptor
from horizon_broker.watermark.server import ServerClient


def definition(root: Path, **columns: str) -> TableDefinition:
    return TableDefinition.from_dict(
        {
            "name": "orders",
            "columns": columns or {"id": "string", "seq": "bigint", "qty": "int"},
            "primary_key": ["id"],
            "comparison": ["seq"],
            "storage_root": str(root),
        }
    )


@pytest.fixture
def client(redis_server, redis_client):
    made = ServerClient(redis_server.url, "s1")
    yield made
    made.close()


def test_a_batch_writes_every_version_s_columns_with_the_current_defaults_after_the_alter(
    client, redis_client, tmp_path
):
    table = register_from_file(client, definition(tmp_path))
    assert follow_schema(client, table) is table  # never altered: nothing to take up
    ahead = HybridLogicalClock(lambda: 4_000_000_000_000)  # an alter from a clock far ahead
    added = [parse_add("status string default 'new'")]
    outcome = alter_table(client.redis, "orders", added, clock=ahead)
    followed = follow_schema(client, table)
    assert followed.columns[-1] == ColumnSpec("status", "string")
    assert followed.column_defaults == (("status", "'new'"),)
    assert client.clock.now() > outcome.version.effective  # the next commit comes after it


def test_the_table_file_alters_the_schema_at_start_unless_it_is_behind(
    client, redis_client, tmp_path
):
    register_from_file(client, definition(tmp_path))
    widened = definition(tmp_path, id="string", seq="bigint", qty="bigint", note="string")
    register_from_file(client, widened)
    current = registered_descriptor(redis_client, "orders")
    assert [(c.name, c.type) for c in current.columns] == [
        ("id", "string"),
        ("seq", "bigint"),
        ("qty", "bigint"),
        ("note", "string"),
    ]
    behind = register_from_file(client, definition(tmp_path))  # the first file again
    assert registered_descriptor(redis_client, "orders") == current
    assert "note" in {c.name for c in behind.columns}
    with pytest.raises(InvalidArgument, match="may only widen"):
        register_from_file(
            client, definition(tmp_path, id="string", seq="bigint", qty="string", note="string")
        )
