"""Schema changes in the state store: atomic with the registration, above every snapshot read,
idempotent, and seen by followers (real redis-server)."""

from __future__ import annotations

import pytest

from horizon_broker._core.errors import NotFound
from horizon_broker.cli import main
from horizon_broker.watermark.schema_rules import DropColumn, parse_add
from horizon_broker.watermark.schema_store import alter_table, registered_descriptor
from tests.waiting import eventually
from tests.watermark.conftest import table_descriptor


def test_an_alter_takes_effect_above_the_table_s_lwm_and_followers_see_it(
    redis_url, redis_client, make_server, make_follower
):
    server = make_server(redis_url, "s1")
    server.register()
    server.register_table(table_descriptor())
    ahead = (4_000_000_000_000 << 16) | 5  # a clock far ahead of this machine's
    server.report("accounts", {p: (ahead, ahead) for p in range(4)})
    follower = make_follower(redis_url)
    generation = follower.view("accounts").generation
    outcome = alter_table(redis_url, "accounts", [parse_add("tier string default 'basic'")])
    assert outcome.changed and outcome.version.effective > ahead
    assert registered_descriptor(redis_client, "accounts") == outcome.descriptor
    eventually(
        lambda: follower.descriptor("accounts").column_names == ("id", "amount", "tier"),
        "the follower never saw the added column",
    )
    # A new generation: the broker's views over the old columns are not reused.
    assert follower.view("accounts").generation > generation
    again = alter_table(redis_url, "accounts", [parse_add("tier string default 'basic'")])
    assert not again.changed and again.descriptor == outcome.descriptor


def test_the_cli_alters_and_refuses_with_the_rule(redis_url, redis_client, make_server, capsys):
    server = make_server(redis_url, "s1")
    server.register_table(table_descriptor())
    assert (
        main(["table", "alter", "accounts", "--redis", redis_url, "--drop-column", "amount"]) == 0
    )
    assert "altered" in capsys.readouterr().out
    assert registered_descriptor(redis_client, "accounts").column_names == ("id",)
    refused = main(["table", "alter", "accounts", "--redis", redis_url, "--drop-column", "id"])
    assert refused == 2 and "definition uses it" in capsys.readouterr().err
    with pytest.raises(NotFound, match="not registered"):
        alter_table(redis_url, "missing", [DropColumn("x")])
