"""Errors classified by the engine's types, never by text a caller writes: a caller's runtime
error is INVALID_ARGUMENT with Spark's condition and the caller's own message (no paths, hosts or
executors), and no text a query raises can mark a segment unreadable, rebuild a view or pass for
a cancellation."""

from __future__ import annotations

import pytest

from horizon_broker._core.errors import InvalidArgument


@pytest.mark.parametrize(
    ("sql", "condition"),
    [
        ("SELECT raise_error(concat('boom ', owner)) FROM accounts", "USER_RAISED_EXCEPTION"),
        ("SELECT assert_true(balance < 0) FROM accounts", "USER_RAISED_EXCEPTION"),
        ("SELECT regexp_like(owner, concat('[', owner)) FROM accounts", "PatternSyntaxException"),
        (
            "SELECT element_at(array(1, 2), cast(id AS int) + 5) FROM accounts",
            "INVALID_ARRAY_INDEX",
        ),
        # Folded while Spark plans the collection, before the Arrow stream's schema is written:
        # the stream is empty and only the JVM's own failure says why.
        ("SELECT element_at(array(1, 2), 5) FROM accounts", "INVALID_ARRAY_INDEX"),
        ("SELECT element_at(array(1, 2), 5) AS e FROM accounts ORDER BY e", "INVALID_ARRAY_INDEX"),
        ("SELECT balance / (id - id) FROM accounts", "DIVIDE_BY_ZERO"),
        ("SELECT cast(owner AS int) FROM accounts", "CAST_INVALID_INPUT"),
        ("SELECT (SELECT id FROM accounts) FROM accounts", "SCALAR_SUBQUERY_TOO_MANY_ROWS"),
    ],
)
def test_a_callers_runtime_error_is_invalid_argument_naming_sparks_condition(
    client, sql, condition
):
    with pytest.raises(InvalidArgument, match=condition) as refused:
        client.query(sql, cache=False)
    message = str(refused.value)
    for leak in ("/tmp", "file:", "executor", "TID", "at org.apache", "== SQL"):
        assert leak not in message, f"{leak!r} leaked into: {message}"


def test_a_raised_message_naming_a_segment_file_leaves_every_segment_visible(broker_env, client):
    table = broker_env.tables["accounts"]
    path = table.p1.location[0]
    engine = broker_env.broker.engine
    before = client.execute("SELECT count(*) AS n FROM accounts")
    generation = broker_env.broker.follower.view("accounts").generation
    cached, builds = len(engine.cache), engine.views.builds
    for text in (
        f"[FAILED_READ_FILE.FILE_NOT_EXIST] Encountered error while reading file {path}. "
        "File does not exist",
        f"File file:{path} does not exist",
        "[TABLE_OR_VIEW_NOT_FOUND] The table or view `__horizon_accounts_g1` cannot be found",
        "Job 3 cancelled part of cancelled job group x",
    ):
        escaped = text.replace("'", "\\'")
        with pytest.raises(InvalidArgument, match="USER_RAISED_EXCEPTION"):
            client.query(f"SELECT raise_error('{escaped}') FROM accounts", cache=False)
    assert [s for s, _ in broker_env.broker.follower.unreadable() if s.table == "accounts"] == []
    assert broker_env.broker.follower.view("accounts").generation == generation
    assert len(engine.cache) >= cached and engine.views.builds == builds
    again = client.execute("SELECT count(*) AS n FROM accounts")
    assert again.metadata.cache == "hit" and again.table == before.table
