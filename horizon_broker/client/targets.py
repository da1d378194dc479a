"""The brokers a client may talk to, and when a failed call moves on to the next one.

Brokers keep nothing of a client's between calls (snapshots, pins, the served floor live in the
state store; the client carries its session token), so any of them may answer any call. The
client stays on one broker (its result cache stays warm) and moves to the next only when a call
fails in a way that says *this broker* is gone: UNAVAILABLE, or a deadline that ran out before
a connection was made. Every other error is the answer (a bad query is bad on every broker).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2_grpc

from horizon_broker._core.errors import DeadlineExceeded, HorizonError, Unavailable
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2_grpc as rpc

_T = TypeVar("_T")
CONNECT_TIMEOUT_S = 5.0
"""How long a call that must not be sent twice waits for a connection to one broker before it
tries the next (a call that may be repeated just goes, and fails over on UNAVAILABLE)."""
_SETTLED = (
    grpc.ChannelConnectivity.READY,
    grpc.ChannelConnectivity.TRANSIENT_FAILURE,
    grpc.ChannelConnectivity.SHUTDOWN,
)


@dataclass(eq=False)
class Broker:
    """One target: its channel, the stubs on it, and the channel's last connectivity state."""

    address: str
    channel: grpc.Channel
    query: Any = field(init=False)
    inspect: Any = field(init=False)
    health: Any = field(init=False)
    state: grpc.ChannelConnectivity | None = None

    def __post_init__(self) -> None:
        self.query = rpc.QueryServiceStub(self.channel)
        self.inspect = rpc.InspectionServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self._watched = False

    def watch(self) -> None:
        """Follow the channel's connectivity (a thread of gRPC's; only when there is another
        broker to move to)."""
        self.channel.subscribe(self._track, try_to_connect=False)
        self._watched = True

    def _track(self, state: grpc.ChannelConnectivity) -> None:
        self.state = state

    @property
    def connected(self) -> bool:
        return self.state == grpc.ChannelConnectivity.READY

    def wait_connected(self, timeout_s: float) -> bool:
        """Whether a connection is up within ``timeout_s`` (a channel that just failed to
        connect counts as down at once, so a dead broker costs no wait)."""
        if self.connected:
            return True
        if self.state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            return False
        outcome: list[grpc.ChannelConnectivity] = []
        settled = threading.Event()

        def watch(state: grpc.ChannelConnectivity) -> None:
            if state in _SETTLED:  # up, or the connect attempt failed (refused, reset)
                outcome.append(state)
                settled.set()

        self.channel.subscribe(watch, try_to_connect=True)
        try:
            settled.wait(timeout_s)
        finally:
            self.channel.unsubscribe(watch)
        return bool(outcome) and outcome[0] == grpc.ChannelConnectivity.READY

    def close(self) -> None:
        if self._watched:
            self.channel.unsubscribe(self._track)
        self.channel.close()


def says_broker_gone(error: HorizonError, broker: Broker) -> bool:
    """Whether ``error`` is the broker's absence rather than the call's answer: UNAVAILABLE
    (refused, reset, stopping, its state store out of reach), or DEADLINE_EXCEEDED while no
    connection to it was up (a host that never answered the connect)."""
    if isinstance(error, Unavailable):
        return True
    return isinstance(error, DeadlineExceeded) and not broker.connected


class Targets:
    """The brokers in the order given; calls go to the current one, which moves on failure."""

    def __init__(self, brokers: Sequence[Broker], *, connect_timeout_s: float) -> None:
        if not brokers:
            raise ValueError("a client needs at least one broker target")
        self.brokers = tuple(brokers)
        if len(self.brokers) > 1:
            for broker in self.brokers:
                broker.watch()
        self.connect_timeout_s = connect_timeout_s
        self._current = 0
        self._lock = threading.Lock()

    @property
    def current(self) -> Broker:
        return self.brokers[self._current]

    def in_order(self, first: Broker | None = None) -> list[Broker]:
        """Every broker once: ``first`` (default: the current one), then the rest in turn."""
        start = self.brokers.index(first) if first is not None else self._current
        count = len(self.brokers)
        return [self.brokers[(start + step) % count] for step in range(count)]

    def leave(self, broker: Broker) -> None:
        """Make the broker after ``broker`` the current one (if ``broker`` still is)."""
        with self._lock:
            if self.brokers[self._current] is broker:
                self._current = (self._current + 1) % len(self.brokers)

    def run(self, attempt: Callable[[Broker], _T], *, first: Broker | None = None) -> _T:
        """``attempt`` on the current broker, then on each next one while the failure says the
        broker is gone; the last such failure when none answered. Only for calls that may run
        twice (a read: the broker that went away may have run it already)."""
        failure: HorizonError | None = None
        for broker in self.in_order(first):
            try:
                return attempt(broker)
            except HorizonError as error:
                if not says_broker_gone(error, broker):
                    raise
                self.leave(broker)
                failure = error
        assert failure is not None
        raise failure

    def run_once(self, attempt: Callable[[Broker], _T]) -> _T:
        """``attempt`` sent to exactly one broker: the first one a connection is made to (within
        ``connect_timeout_s`` each). A call that must not run twice (it creates a pin) goes
        here: once sent it is never sent again, whatever its failure."""
        if len(self.brokers) == 1:
            return attempt(self.brokers[0])
        for broker in self.in_order():
            if broker.wait_connected(self.connect_timeout_s):
                try:
                    return attempt(broker)
                except HorizonError as error:
                    if says_broker_gone(error, broker):
                        self.leave(broker)  # the next call starts elsewhere; this one ends
                    raise
            self.leave(broker)
        addresses = ", ".join(broker.address for broker in self.brokers)
        raise Unavailable(f"no connection to any broker ({addresses})")

    def close(self) -> None:
        for broker in self.brokers:
            broker.close()
