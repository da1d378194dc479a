"""A batch reads its table's registered schema on every run: a change of primary must not end
the ingestion server there (found by the 30-minute fault run, where both servers died on it and
one restarted after its heartbeat had timed out, so its lost numbers were handed out again)."""

from __future__ import annotations

from chaos.sentinel_group import SentinelGroup
from horizon_broker.watermark.schema_store import registered_descriptor
from horizon_broker.watermark.server import ServerClient
from tests.watermark.conftest import table_descriptor


def test_the_schema_read_of_a_batch_survives_a_change_of_primary(group: SentinelGroup):
    server = ServerClient(group.url, "s1", heartbeat_timeout_s=60)
    try:
        server.register_table(table_descriptor("accounts"))
        assert registered_descriptor(server.redis, "accounts", server.prefix) is not None
        group.fail_over()
        found = registered_descriptor(server.redis, "accounts", server.prefix)
        assert found == table_descriptor("accounts")
    finally:
        server.close()
