"""The client's rules for several brokers (horizon_broker/client/targets.py), against stand-in
brokers on loopback (tests/client/standin.py): which failures move a call to the next broker,
that the session token goes with it, and which calls are never sent twice. No Spark: the
same client against two real brokers is tests/broker/test_several_brokers.py."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from horizon_broker._core.errors import DeadlineExceeded, InvalidArgument, Unavailable
from horizon_broker.cli import main as cli_main
from horizon_broker.client import connect, parse_targets
from horizon_broker.watermark import tokens
from tests.client.standin import Silent, StandIn, refused_target


@pytest.fixture
def brokers() -> Iterator[tuple[StandIn, StandIn]]:
    first, second = StandIn(snapshot=500), StandIn(snapshot=400)
    yield first, second
    first.stop()
    second.stop()


def test_a_query_moves_to_the_next_broker_when_the_first_refuses_connections(brokers):
    _, second = brokers
    with connect([refused_target(), second.target]) as horizon:
        assert horizon.execute("SELECT 1").snapshot == 400
        assert horizon.current == second.target


def test_a_query_answered_unavailable_runs_on_the_next_broker_which_then_stays_current(brokers):
    first, second = brokers
    first.status = grpc.StatusCode.UNAVAILABLE
    with connect([first.target, second.target]) as horizon:
        horizon.query("SELECT 1")
        horizon.query("SELECT 1")
    assert (first.calls["ExecuteQuery"], second.calls["ExecuteQuery"]) == (1, 2)


def test_a_query_cut_off_mid_stream_runs_again_whole_on_the_next_broker(brokers):
    first, second = brokers
    first.cut_mid_stream = True
    with connect([first.target, second.target]) as horizon:
        result = horizon.execute("SELECT 1")
    assert result.table.to_pylist() == [{"snapshot": 400}]  # no rows kept from the first


def test_the_next_broker_is_asked_for_at_least_the_snapshot_the_client_was_served(brokers):
    first, second = brokers
    with connect([first.target, second.target]) as horizon:
        assert horizon.execute("SELECT 1").snapshot == 500
        first.status = grpc.StatusCode.UNAVAILABLE
        horizon.execute("SELECT 1")
    assert tokens.decode(second.min_snapshots[-1]) == {"t": 500}


def test_a_deadline_before_any_connection_moves_on(brokers):
    _, second = brokers
    silent = Silent()
    try:
        with connect([silent.target, second.target], timeout=1.0) as horizon:
            assert horizon.execute("SELECT 1").snapshot == 400
    finally:
        silent.stop()


def test_a_deadline_on_a_connected_broker_is_the_answer_not_a_move(brokers):
    first, second = brokers
    with connect([first.target, second.target]) as horizon:
        horizon.query("SELECT 1")  # connected
        first.delay_s = 1.0
        with pytest.raises(DeadlineExceeded):
            horizon.query("SELECT 1", timeout=0.3)
        assert horizon.current == first.target
    assert second.calls["ExecuteQuery"] == 0


def test_an_invalid_argument_is_the_answer_not_a_move(brokers):
    first, second = brokers
    first.status = grpc.StatusCode.INVALID_ARGUMENT
    with connect([first.target, second.target]) as horizon:
        with pytest.raises(InvalidArgument):
            horizon.query("SELEC 1")
        assert horizon.current == first.target
    assert second.calls["ExecuteQuery"] == 0


def test_a_pin_sent_to_a_broker_that_fails_is_not_sent_again(brokers):
    first, second = brokers
    with connect([first.target, second.target]) as horizon:
        horizon.tables()  # connected
        first.status = grpc.StatusCode.UNAVAILABLE
        with pytest.raises(Unavailable):
            horizon.pin("t", renew=False)
        assert (first.calls["PinSnapshot"], second.calls["PinSnapshot"]) == (1, 0)
        assert horizon.pin("t", renew=False).pin_id == "p1"  # the next call starts elsewhere
    assert second.calls["PinSnapshot"] == 1


def test_a_pin_goes_to_the_first_broker_a_connection_is_made_to(brokers):
    _, second = brokers
    with connect([refused_target(), second.target]) as horizon:
        assert horizon.pin("t", renew=False).snapshot == 400


def test_when_every_broker_is_gone_the_call_fails_unavailable():
    with connect([refused_target(), refused_target()]) as horizon, pytest.raises(Unavailable):
        horizon.tables()


def test_targets_parse_from_a_comma_list_and_refuse_none_or_a_repeat():
    assert parse_targets(" a:1, b:2 ,") == ["a:1", "b:2"]
    assert parse_targets(["a:1"]) == ["a:1"]
    with pytest.raises(InvalidArgument, match="no broker target"):
        parse_targets(" , ")
    with pytest.raises(InvalidArgument, match="named twice"):
        parse_targets("a:1,a:1")


def test_the_cli_takes_several_targets_from_the_environment(brokers, monkeypatch, capsys):
    _, second = brokers
    monkeypatch.setenv("HORIZON_TARGET", f"{refused_target()},{second.target}")
    assert cli_main(["tables", "--json"]) == 0
    assert '"t"' in capsys.readouterr().out
