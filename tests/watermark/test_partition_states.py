"""Idle and parked partitions (rule 7 of ``docs/design/contract/watermarks.md``), pure: the LWM
arithmetic against a plain scan, and the protocol's promise (nothing committed later is ever at or
below a snapshot already served) against a model of servers, brokers and clocks."""

from __future__ import annotations

import doctest

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

import horizon_broker.watermark.partition_states
from horizon_broker._core.hlc import hlc_from_ms, last_hlc_of_ms
from horizon_broker.watermark.lwm import (
    ACTIVE,
    IDLE,
    PARKED,
    Clocks,
    Laggard,
    MonotonicLwm,
    PartitionProgress,
    TableProgress,
    breakdown,
    compute_lwm,
)
from horizon_broker.watermark.partition_states import claimed, parked, released, reported, resumed


def test_the_module_docstring_example_holds() -> None:
    outcome = doctest.testmod(horizon_broker.watermark.partition_states)
    assert outcome.attempted > 0 and outcome.failed == 0


def test_an_idle_partition_follows_its_owners_clock_and_a_parked_one_the_stores() -> None:
    progress = TableProgress(
        {
            0: PartitionProgress("busy", hlc_from_ms(5_000), hlc_from_ms(5_000)),
            1: PartitionProgress("quiet", hlc_from_ms(1_000), hlc_from_ms(1_000), state=IDLE),
            2: PartitionProgress("gone", hlc_from_ms(900), hlc_from_ms(900), state=PARKED),
        }
    )
    assert progress.minimum() == Laggard("gone", 2, hlc_from_ms(900), PARKED)
    clocks = Clocks({"quiet": hlc_from_ms(4_000)}, store_ms=3_000)
    assert progress.minimum(clocks) == Laggard("gone", 2, last_hlc_of_ms(3_000), PARKED)
    clocks = Clocks({"quiet": hlc_from_ms(4_000)}, store_ms=4_500)
    assert progress.minimum(clocks) == Laggard("quiet", 1, hlc_from_ms(4_000), IDLE)
    clocks = Clocks({"quiet": hlc_from_ms(6_000)}, store_ms=7_000)
    assert progress.minimum(clocks) == Laggard("busy", 0, hlc_from_ms(5_000), ACTIVE)


def test_an_idle_partition_never_reads_below_its_own_progress() -> None:
    entry = PartitionProgress("s", 800, 800, state=IDLE)
    assert entry.effective(Clocks({"s": 10})) == 800
    assert PartitionProgress("s", 800, 700, state=ACTIVE).effective(Clocks({"s": 10**9})) == 700


def test_resuming_lands_above_the_clock_and_the_brokers_floor_and_raises_the_progress() -> None:
    idle = PartitionProgress("s", 100, 100, state=IDLE, since_ms=3)
    entry, r = resumed(idle, Clocks({"s": 400}), served_floor=350)
    assert r == 400 and (entry.ingested, entry.applied, entry.state, entry.floor) == (
        400,
        400,
        ACTIVE,
        400,
    )
    parked_entry = PartitionProgress("s", 100, 100, state=PARKED)
    entry, r = resumed(parked_entry, Clocks(store_ms=7), served_floor=10**12)
    assert r == 10**12 and entry.lwm == 10**12
    active = PartitionProgress("s", 100, 90)
    assert resumed(active, Clocks({"s": 400})) == (active, None)


def test_a_report_below_the_resume_floor_is_raised_to_it() -> None:
    entry, _ = resumed(PartitionProgress("s", 100, 100, state=IDLE), Clocks({"s": 400}))
    again, r = reported(entry, "s", 100, 100, idle=True, now_ms=9)
    assert r is None and again.lwm == 400 and again.state == IDLE and again.since_ms == 9


def test_an_idle_partition_reported_busy_is_resumed_and_one_still_idle_keeps_its_start() -> None:
    idle = PartitionProgress("s", 100, 100, state=IDLE, since_ms=5)
    busy, r = reported(idle, "s", 100, 100, idle=False, now_ms=9, clocks=Clocks({"s": 300}))
    assert r == 300 and busy.state == ACTIVE and busy.lwm == 300
    still, r = reported(idle, "s", 100, 100, idle=True, now_ms=9, clocks=Clocks({"s": 300}))
    assert r is None and still.since_ms == 5


def test_only_an_idle_partition_can_be_parked_and_its_lwm_never_starts_lower() -> None:
    assert parked(PartitionProgress("s", 100, 90), now_ms=1) is None
    assert parked(PartitionProgress("s"), now_ms=1) is None
    entry = parked(
        PartitionProgress("s", 100, 100, state=IDLE), now_ms=1, clocks=Clocks({"s": 900})
    )
    assert entry is not None and (entry.state, entry.lwm, entry.since_ms) == (PARKED, 900, 1)
    assert parked(entry, now_ms=5) == entry


def test_a_claim_resumes_a_parked_partition_and_a_release_makes_it_count_no_more() -> None:
    entry, r = claimed(
        PartitionProgress("old", 10, 10, state=PARKED), "new", Clocks(store_ms=2), served_floor=5
    )
    assert entry.owner == "new" and r == last_hlc_of_ms(2) and entry.state == ACTIVE
    gone = released(entry)
    assert gone.owner is None and not gone.counts


def test_stale_servers_exclude_parked_partitions_and_rows_show_states() -> None:
    progress = TableProgress(
        {
            0: PartitionProgress("parked-one", 10, 10, 1_000, PARKED, 1_000),
            1: PartitionProgress("dead", 20, 20, 1_000, IDLE, 1_000),
        }
    )
    clocks = Clocks({"dead": 50}, store_ms=1)
    result = breakdown(progress, {"dead": 1_000}, frozenset({"parked-one"}), 20_000, 5_000, clocks)
    assert result.stale_servers == ("dead",)
    rows = {row.partition: row for row in result.partitions}
    assert (rows[0].state, rows[0].lwm) == (PARKED, last_hlc_of_ms(1))
    assert (rows[1].state, rows[1].lwm, rows[1].since_ms) == (IDLE, 50, 1_000)


entries = st.builds(
    PartitionProgress,
    owner=st.sampled_from([None, "a", "b", "c"]),
    ingested=st.one_of(st.none(), st.integers(0, 60)),
    applied=st.integers(0, 60),
    state=st.sampled_from([ACTIVE, ACTIVE, IDLE, PARKED]),
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.integers(0, 7), entries),
        st.tuples(st.just("clock"), st.sampled_from(["a", "b", "c"]), st.integers(0, 80)),
        st.tuples(st.just("store"), st.integers(0, 80), st.none()),
    ),
    max_size=80,
)


def _normalized(entry: PartitionProgress) -> PartitionProgress:
    if entry.ingested is None:
        return PartitionProgress(entry.owner, None, None, state=entry.state)
    return entry


@settings(max_examples=300, deadline=None)
@given(steps)
def test_the_incremental_minimum_with_quiet_partitions_matches_a_plain_scan(ops: list) -> None:
    progress = TableProgress()
    model: dict[int, PartitionProgress] = {}
    servers: dict[str, int] = {}
    store = 0
    for kind, first, second in ops:
        if kind == "set":
            entry = _normalized(second)
            progress.set(first, entry)
            model[first] = entry
        elif kind == "clock":
            servers[first] = max(servers.get(first, 0), second)
        else:
            store = max(store, first)
        clocks = Clocks(dict(servers), store_ms=store)
        found, expected = progress.minimum(clocks), compute_lwm(model, clocks)
        assert (found is None) == (expected is None)
        if found is not None and expected is not None:
            assert found.lwm == expected.lwm
            assert model[found.partition].effective(clocks) == found.lwm
            assert found.lwm is None or found.state == model[found.partition].state
        assert progress.has_parked == any(e.counts and e.state == PARKED for e in model.values())
        for server in ("a", "b", "c"):
            assert progress.follows(server) == any(
                e.counts and e.state == IDLE and e.owner == server for e in model.values()
            )


class Protocol(RuleBasedStateMachine):
    """Three servers share one table of four partitions; a broker serves its LWM. Servers commit
    (resuming first), heartbeat, go idle, park, die, restart and take over each other's
    partitions, while the store's clock runs. The promise of rule 7: every commit lands above
    every snapshot served before it, and the served LWM never decreases."""

    SERVERS = ("s1", "s2", "s3")

    @initialize()
    def start(self) -> None:
        self.wall = 1_000  # ms, shared by the servers and the store (one machine)
        self.store_ms = self.wall
        self.clocks = {server: hlc_from_ms(self.wall) for server in self.SERVERS}
        self.heartbeats: dict[str, int] = {}
        self.status = dict.fromkeys(self.SERVERS, "live")
        self.entries = {
            p: PartitionProgress(self.SERVERS[p % 3], 0, 0, state=IDLE) for p in range(4)
        }
        self.tracker = MonotonicLwm("t")
        self.served_high = 0
        self.floor = 0

    def _clocks(self) -> Clocks:
        return Clocks(dict(self.heartbeats), self.store_ms)

    def _tick(self, server: str) -> int:
        self.clocks[server] = max(self.clocks[server] + 1, hlc_from_ms(self.wall))
        return self.clocks[server]

    @rule(ms=st.integers(0, 5))
    def time_passes(self, ms: int) -> None:
        self.wall += ms

    @rule()
    def store_event(self) -> None:
        self.store_ms = max(self.store_ms, self.wall)

    @rule(server=st.sampled_from(SERVERS))
    def heartbeat(self, server: str) -> None:
        if self.status[server] == "live":
            self.heartbeats[server] = max(self.heartbeats.get(server, 0), self._tick(server))
            self.store_ms = max(self.store_ms, self.wall)

    @rule(partition=st.integers(0, 3), rows=st.integers(1, 3), busy=st.booleans())
    def commit(self, partition: int, rows: int, busy: bool) -> None:
        entry = self.entries[partition]
        server = entry.owner
        if server is None or self.status[server] != "live":
            return
        self.store_ms = max(self.store_ms, self.wall)
        entry, r = reported(
            entry,
            server,
            entry.ingested or 0,
            entry.applied or 0,
            idle=False,
            now_ms=self.store_ms,
            clocks=self._clocks(),
            served_floor=self.floor,
        )
        if r is not None:
            self.clocks[server] = max(self.clocks[server], r)
        stamps = [self._tick(server) for _ in range(rows)]
        assert min(stamps) > self.served_high, (stamps, self.served_high)
        high = max(stamps)
        entry, _ = reported(
            entry, server, high, high, idle=not busy, now_ms=self.store_ms, clocks=self._clocks()
        )
        self.entries[partition] = entry

    @rule(server=st.sampled_from(SERVERS))
    def park(self, server: str) -> None:
        if self.status[server] != "live":
            return
        self.store_ms = max(self.store_ms, self.wall)
        for partition, entry in self.entries.items():
            if entry.owner == server:
                self.entries[partition] = parked(entry, self.store_ms, self._clocks()) or entry
        self.status[server] = "parked"

    @rule(server=st.sampled_from(SERVERS))
    def die(self, server: str) -> None:
        if self.status[server] == "live":
            self.status[server] = "dead"

    @precondition(lambda self: any(s != "live" for s in self.status.values()))
    @rule(server=st.sampled_from(SERVERS))
    def restart(self, server: str) -> None:
        """A restarted process (same id): its clock starts from the wall clock again."""
        if self.status[server] != "live":
            self.status[server] = "live"
            self.clocks[server] = hlc_from_ms(self.wall)
            self._claim(server, [p for p, e in self.entries.items() if e.owner == server])

    @rule(server=st.sampled_from(SERVERS), partition=st.integers(0, 3))
    def take_over(self, server: str, partition: int) -> None:
        owner = self.entries[partition].owner
        if self.status[server] == "live" and (owner is None or self.status[owner] != "live"):
            self._claim(server, [partition])

    def _claim(self, server: str, partitions: list[int]) -> None:
        self.store_ms = max(self.store_ms, self.wall)
        for partition in partitions:
            entry, _ = claimed(self.entries[partition], server, self._clocks(), self.floor)
            # A (re)started server's clock moves above what its partitions reported.
            self.clocks[server] = max(self.clocks[server], entry.ingested or 0, entry.applied or 0)
            self.entries[partition] = entry

    @rule()
    def serve(self) -> None:
        laggard = compute_lwm(self.entries, self._clocks())
        before = self.tracker.served
        served = self.tracker.observe(laggard, 0.0)
        assert before is None or (served is not None and served >= before)
        if served is not None:
            self.served_high = max(self.served_high, served)
            self.floor = max(self.floor, served)


Protocol.TestCase.settings = settings(max_examples=200, stateful_step_count=60, deadline=None)
test_nothing_committed_after_a_snapshot_is_served_lands_at_or_below_it = Protocol.TestCase
