"""Fair admission (pure): identities share the slots and the waiting room, each identity's queries
go first come first served, no slot idles while a query that may run waits, and per-identity
concurrency and rate quotas hold. A hypothesis state machine drives the real FairShares and
checks every step against these rules; a few threaded tests go through Admission itself."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from horizon_broker._core.errors import InvalidArgument, ResourceExhausted
from horizon_broker.broker.config import config_from_mapping
from horizon_broker.broker.engine.admission import Admission, admission_of
from horizon_broker.broker.engine.fair_share import FairShares, IdentityLimits

IDENTITIES = ("a", "b", "c")
CAPPED = {"c": IdentityLimits(max_concurrent=1)}


class FairSharesMachine(RuleBasedStateMachine):
    """Arrivals, ends and give-ups in any order, on 3 slots and a waiting room of 4."""

    def __init__(self) -> None:
        super().__init__()
        self.shares = FairShares(3, 4, CAPPED)
        self.running: dict[str, list[int]] = {name: [] for name in IDENTITIES}
        self.waiting: dict[str, list[int]] = {name: [] for name in IDENTITIES}
        """Tickets by arrival number, oldest first (the model's queue of each identity)."""
        self.next_ticket = 0

    def _eligible(self, identity: str) -> bool:
        cap = CAPPED.get(identity, IdentityLimits()).max_concurrent
        return cap is None or len(self.running[identity]) < cap

    def _collect_grants(self, before: dict[str, int]) -> None:
        """Move granted tickets from waiting to running, checking who was chosen."""
        for identity in IDENTITIES:
            for ticket in list(self.waiting[identity]):
                try:
                    granted = self.shares.granted(ticket)
                except ResourceExhausted:  # pushed out of the waiting room
                    self.waiting[identity].remove(ticket)
                    self.shares.leave(identity, ticket)
                    continue
                if granted:
                    # first come first served within an identity: only its oldest may go
                    assert ticket == self.waiting[identity][0], "FIFO within an identity"
                    self.waiting[identity].remove(ticket)
                    self.running[identity].append(ticket)
        for chosen in IDENTITIES:
            if len(self.running[chosen]) <= before[chosen]:
                continue
            for other in IDENTITIES:
                if other != chosen and self.waiting[other] and self._eligible(other):
                    # a slot went to `chosen` while `other` waited: chosen ran no more than other
                    assert before[chosen] <= len(self.running[other]), (
                        f"{chosen} got a slot beyond its share while {other} waited"
                    )

    def _counts(self) -> dict[str, int]:
        return {name: len(self.running[name]) for name in IDENTITIES}

    @rule(identity=st.sampled_from(IDENTITIES))
    def arrive(self, identity: str) -> None:
        before = self._counts()
        self.next_ticket += 1
        ticket = self.next_ticket
        try:
            admitted = self.shares.arrive(identity, ticket, 0.0)
        except ResourceExhausted:
            room = sum(len(queue) for queue in self.waiting.values())
            assert room >= 4, "refused while the waiting room had space"
            # refused only when no other caller holds more of the room than it would
            assert len(self.waiting[identity]) + 1 >= max(len(q) for q in self.waiting.values())
            return
        if admitted:
            self.running[identity].append(ticket)
        else:
            self.waiting[identity].append(ticket)
        self._collect_grants(before)

    @precondition(lambda self: any(self.running.values()))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        identity = data.draw(st.sampled_from([n for n in IDENTITIES if self.running[n]]))
        before = self._counts()
        self.running[identity].pop(0)
        before[identity] -= 1
        self.shares.release(identity)
        self._collect_grants(before)

    @precondition(lambda self: any(self.waiting.values()))
    @rule(data=st.data())
    def give_up(self, data: st.DataObject) -> None:
        identity = data.draw(st.sampled_from([n for n in IDENTITIES if self.waiting[n]]))
        ticket = data.draw(st.sampled_from(self.waiting[identity]))
        before = self._counts()
        self.waiting[identity].remove(ticket)
        self.shares.leave(identity, ticket)
        self._collect_grants(before)

    @invariant()
    def bounded(self) -> None:
        assert self.shares.running == sum(map(len, self.running.values())) <= 3
        assert self.shares.queued == sum(map(len, self.waiting.values())) <= 4
        assert len(self.running["c"]) <= 1, "c's own max_concurrent"

    @invariant()
    def no_slot_idles_while_work_that_may_run_waits(self) -> None:
        if self.shares.running < 3:
            assert not any(self.waiting[n] and self._eligible(n) for n in IDENTITIES)


TestFairShares = FairSharesMachine.TestCase
TestFairShares.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


def test_an_identity_holding_every_slot_gets_no_more_while_another_waits():
    shares = FairShares(2, 8)
    assert shares.arrive("hog", 1, 0.0) and shares.arrive("hog", 2, 0.0)
    assert not shares.arrive("hog", 3, 0.0)
    assert not shares.arrive("fair", 4, 0.0)
    shares.release("hog")
    assert shares.granted(4) and not shares.granted(3)


def test_a_full_waiting_room_pushes_out_the_newest_query_of_the_caller_queued_most():
    shares = FairShares(1, 2)
    assert shares.arrive("hog", 1, 0.0)
    assert not shares.arrive("hog", 2, 0.0) and not shares.arrive("hog", 3, 0.0)
    assert not shares.arrive("other", 4, 0.0)  # queued; the hog's newest makes way
    with pytest.raises(ResourceExhausted, match=r"token 'hog' has 1 queued, the most"):
        shares.granted(3)
    with pytest.raises(ResourceExhausted, match=r"token 'other' has 1 queued"):
        shares.arrive("other", 5, 0.0)  # an even split: the newcomer is refused


def test_the_rate_quota_refuses_past_its_bucket_and_refills_with_time():
    shares = FairShares(4, 4, {"fast": IdentityLimits(queries_per_second=2)})
    assert shares.arrive("fast", 1, 0.0) and shares.arrive("fast", 2, 0.0)
    with pytest.raises(ResourceExhausted, match=r"token 'fast'.*2 queries a second"):
        shares.arrive("fast", 3, 0.0)
    assert shares.arrive("other", 4, 0.0)  # other identities are not limited by it
    assert shares.arrive("fast", 5, 0.5)  # half a second: one more token


def test_admission_hands_a_freed_slot_to_the_waiting_identity_with_fewer_running():
    gate = Admission(max_concurrent=2, queue_size=8)
    order: list[str] = []
    hog_keeps, hog_holds = gate.slot(identity="hog"), gate.slot(identity="hog")
    hog_keeps.__enter__()
    hog_holds.__enter__()

    def run(identity: str) -> None:
        with gate.slot(identity=identity):
            order.append(identity)

    waiters = [threading.Thread(target=run, args=("hog",))]
    waiters[0].start()
    while gate.stats().queued < 1:
        time.sleep(0.01)
    waiters.append(threading.Thread(target=run, args=("fair",)))
    waiters[1].start()
    while gate.stats().queued < 2:
        time.sleep(0.01)
    hog_holds.__exit__(None, None, None)  # the hog still runs one: the freed slot is fair's
    waiters[1].join(10)
    hog_keeps.__exit__(None, None, None)
    waiters[0].join(10)
    assert order == ["fair", "hog"]


def test_tokens_set_per_identity_concurrency_and_rate():
    config = config_from_mapping(
        {
            "tokens": [
                {"name": "lane", "token": "t1", "max_concurrent": 1, "queries_per_second": 0.5},
                {"name": "free", "token": "t2"},
            ]
        }
    )
    gate = admission_of(config)
    with gate.slot(identity="lane"):
        over_rate = gate.slot(identity="lane", deadline=time.monotonic() + 0.5)
        with pytest.raises(ResourceExhausted, match="queries_per_second"), over_rate:
            pass
        with gate.slot(identity="free"):
            assert gate.running_of("free") == 1


@pytest.mark.parametrize(
    "entry",
    [{"max_concurrent": 0}, {"max_concurrent": 1.5}, {"queries_per_second": -1}],
)
def test_a_bad_per_identity_quota_is_refused_naming_it(entry):
    with pytest.raises(InvalidArgument, match=next(iter(entry))):
        config_from_mapping({"tokens": [{"name": "x", "token": "t", **entry}]})
