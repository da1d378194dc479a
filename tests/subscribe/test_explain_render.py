"""`horizon explain` prints which strategy Subscribe would use for the query, and why."""

from __future__ import annotations

import io

from rich.console import Console

from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.render import print_explain


def _printed(explain: pb.ExplainQueryResponse) -> str:
    output = io.StringIO()
    print_explain(Console(file=output, width=200), explain)
    return output.getvalue()


def test_horizon_explain_prints_the_subscription_strategy_and_its_reason() -> None:
    reason = "exact_diff: the query joins tables"
    explain = pb.ExplainQueryResponse(
        rewritten_sql="SELECT 1", subscribe_strategy="exact_diff", subscribe_strategy_reason=reason
    )
    assert f"Subscription strategy {reason}" in _printed(explain)


def test_a_query_subscribe_refuses_prints_no_strategy_line_when_the_broker_sent_none() -> None:
    assert "Subscription strategy" not in _printed(
        pb.ExplainQueryResponse(rewritten_sql="SELECT 1")
    )
