"""Resume tokens and the query at a snapshot (pure)."""

from __future__ import annotations

import pytest

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.broker.subscribe import resume
from horizon_broker.broker.subscribe.snapshot_sql import at_snapshot
from horizon_broker.tokens import snapshots


def test_a_resume_token_carries_the_snapshot_token_of_its_tables() -> None:
    token = resume.encode("SELECT * FROM t", {"t": 42, "u": 42})
    assert snapshots(token.split(".", 2)[2]) == {"t": 42, "u": 42}
    assert resume.decode(token, "select *\n FROM t VERSION AS OF 7") == 42


def test_a_resume_token_of_another_query_is_refused() -> None:
    token = resume.encode("SELECT * FROM t", {"t": 42})
    with pytest.raises(InvalidArgument, match="another query"):
        resume.decode(token, "SELECT id FROM t")
    with pytest.raises(InvalidArgument, match="not a subscription resume token"):
        resume.decode("hz1.abc", "SELECT * FROM t")


def test_every_reference_to_a_followed_table_reads_the_snapshot_and_a_start_clause_is_replaced() -> (
    None
):
    sql = "SELECT * FROM t TIMESTAMP AS OF '2026-01-01' JOIN u ON t.k = u.k JOIN t AS t2 ON 1 = 1"
    assert at_snapshot(sql, {"t"}, 9) == (
        "SELECT * FROM t VERSION AS OF 9 JOIN u ON t.k = u.k JOIN t VERSION AS OF 9 AS t2 ON 1 = 1"
    )
    assert "VERSION AS OF" not in at_snapshot("WITH t AS (SELECT 1) SELECT * FROM t", {"t"}, 9)
