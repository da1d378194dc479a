"""The steps of the ExecuteQuery call alone (no server, no Spark): the request's checks, the
query's time, and how a stopped query is cancelled and recorded for each way it can end."""

from __future__ import annotations

import asyncio

import pytest

from horizon_broker._core.errors import DeadlineExceeded, InvalidArgument, ResourceExhausted
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.api.query_service import _execute_options, query_timeout, stopped_as
from horizon_broker.broker.spark.executor import CANCELLED, DEADLINE


def test_a_negative_max_rows_is_refused_before_anything_runs():
    with pytest.raises(InvalidArgument, match="max_rows must not be negative"):
        _execute_options(pb.ExecuteQueryRequest(sql="SELECT 1", max_rows=-1))
    options = _execute_options(
        pb.ExecuteQueryRequest(sql="SELECT 1", read=pb.ReadOptions(bypass_cache=True))
    )
    assert not options.use_cache


def test_a_query_takes_the_query_timeout_or_the_calls_sooner_deadline():
    assert query_timeout(60.0, None) == 60.0
    assert query_timeout(60.0, 5.0) == 5.0
    assert query_timeout(60.0, 600.0) == 60.0


def test_a_query_that_outlived_its_deadline_is_stopped_as_past_its_deadline():
    error = DeadlineExceeded("the client did not read the result")
    assert stopped_as(error, deadline_passed=False) == (
        DEADLINE,
        ("deadline", "DEADLINE_EXCEEDED", "the client did not read the result"),
    )


def test_a_query_that_failed_is_cancelled_and_recorded_with_its_own_status():
    reason, ended = stopped_as(ResourceExhausted("too many rows"), deadline_passed=True)
    assert reason == CANCELLED
    assert ended[:3] == ("failed", "RESOURCE_EXHAUSTED", "too many rows")


def test_a_call_grpc_ended_is_a_passed_deadline_or_else_the_clients_cancel():
    ended_by_grpc = asyncio.CancelledError()
    assert stopped_as(ended_by_grpc, deadline_passed=True) == (
        DEADLINE,
        ("deadline", "DEADLINE_EXCEEDED", "the deadline passed"),
    )
    assert stopped_as(ended_by_grpc, deadline_passed=False) == (
        CANCELLED,
        ("cancelled", "CANCELLED", "the client cancelled"),
    )
