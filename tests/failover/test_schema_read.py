"""A batch reads its table's registered schema on every run: a change of primary must not end
the ingestion server there (found by the 30-minute fault run, where both servers died on it and
one restarted after its heartbeat had timed out, so its lost numbers were handed out again)."""

from __future__ import annotations

from chaos.sentinel_group import SentinelGroup
from horizon_broker.watermark.schema_store import registered_descriptor
from horizon_broker.watermark.server import ServerClient
from tests.watermark.conftest import segment, table_descriptor


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


def test_a_read_after_a_change_of_primary_sees_what_the_server_announced(group: SentinelGroup):
    """The updater plans on a read of the announced segments; a store that lost the server's
    last announcement must get it back before that read (found by a fault run: the update's
    target was missing and the server died on it)."""
    server = ServerClient(group.url, "s1", heartbeat_timeout_s=60)
    try:
        server.register()
        server.register_table(table_descriptor("accounts"))
        server.announce([segment("accounts", partition=0)])
        group.cut_replication()
        server.announce([segment("accounts", partition=1)])  # on the old primary alone
        group.fail_over()
        group.heal_replication()
        assert sorted(s.partition for s in server.announced_segments("accounts")) == [0, 1]
    finally:
        server.close()


def test_a_data_set_that_changes_again_during_the_re_publish_is_adopted_again(
    group: SentinelGroup,
):
    """The re-publish after a change of primary can meet yet another data set (found by the
    30-minute fault run: both servers died on the EpochChanged their re-publish raised inside a
    read). Both a read and a script call adopt the new one and publish again."""
    server = ServerClient(group.url, "s1", heartbeat_timeout_s=60)
    moves: list[str] = []
    allowed = [0]

    def epoch_moves_under_the_re_publish() -> list:
        if len(moves) < allowed[0]:
            moves.append(f"moved-{len(moves)}")
            with group.client(group.primary_port()) as primary:
                primary.set(f"{server.prefix}:epoch", moves[-1])
        return []

    try:
        server.register()
        server.register_table(table_descriptor("accounts"))
        server.announce([segment("accounts", partition=0)])
        server.follow_numbers_of("race", epoch_moves_under_the_re_publish)
        allowed[0] = 1
        group.fail_over()
        assert [s.partition for s in server.announced_segments("accounts")] == [0]  # a read
        assert moves == ["moved-0"]
        allowed[0] = 2
        with group.client(group.primary_port()) as primary:
            primary.set(f"{server.prefix}:epoch", "lost")  # the data set is not ours any more
        server.heartbeat()  # a script call
        assert moves == ["moved-0", "moved-1"]
        assert [s.partition for s in server.announced_segments("accounts")] == [0]
    finally:
        server.close()
