"""Planted bugs that prove the checker: each one a small, plausible mistake in one function of the
product, patched in at start-up into the processes a fault-injection run starts, never present in
the product's code paths.

A mutated run starts the processes a mutation names through :mod:`chaos.mutant`, which applies it
and then runs the real entry point. A mutation the checker does not catch (no anomaly of one of
its ``expected`` kinds) means the checker, or the workload, has a blind spot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BROKER = "broker"
SERVER = "server"
COMPACTOR = "compactor"


@dataclass(frozen=True, slots=True)
class Mutation:
    name: str
    process: str
    """Which processes it is patched into: the broker, the ingestion servers or the compactor."""
    bug: str
    """The mistake, as a developer could write it."""
    expected: frozenset[str]
    """Anomaly kinds of :mod:`chaos.checker` that name what it breaks."""
    apply: Callable[[], None]
    faults: tuple[str, ...] = ()
    """Fault kinds (:data:`chaos.faults.FAULT_KINDS`, or ``kind:variant``) its run injects
    first: the path it breaks is only taken under them."""
    compaction: bool = False
    """Its run needs a compaction that completes (one pass, from a quarter of the run in)."""


# -- the broker -----------------------------------------------------------------------------------


def _until_inclusive() -> None:
    """``validUntil > S`` written ``>=``: at a snapshot equal to a replacement's commit timestamp
    both the replaced and the new version are visible."""
    from horizon_broker.broker.sql import derived
    from horizon_broker.watermark.catalog import VALID_UNTIL

    def alive_predicate(snapshot: int, qualifier: str = "") -> str:
        valid_until = qualifier + derived.quote(VALID_UNTIL)
        return f"({valid_until} IS NULL OR {valid_until} >= {snapshot})"

    derived.alive_predicate = alive_predicate


def _floor_ignored() -> None:
    """The served LWM follows the computed one down (the regression branch dropped), and a
    restarted broker never reads back the floor it persisted."""
    from horizon_broker.broker.engine.floor import SnapshotFloor
    from horizon_broker.watermark.lwm import MonotonicLwm

    def observe(self: MonotonicLwm, laggard: Any, now_s: float) -> int | None:
        self.computed = None if laggard is None else laggard.lwm
        if laggard is None or laggard.lwm is None:
            return self.served
        self.served = laggard.lwm
        self.active = None
        return self.served

    MonotonicLwm.observe = observe  # type: ignore[method-assign]
    SnapshotFloor.floor = lambda self: {}  # type: ignore[method-assign]


def _change_feed_off_by_one() -> None:
    """The change feed's window ``(from, to]`` read as ``[from, to]``: a change committed exactly
    at ``from`` is in two consecutive feeds."""
    from horizon_broker.broker.sql.passes import expand_table_changes

    original = expand_table_changes.change_feed_sql  # type: ignore[attr-defined]
    expand_table_changes.change_feed_sql = (  # type: ignore[attr-defined]
        lambda table, start, end: original(table, start - 1, end)
    )


def _fallback_unchecked() -> None:
    """A segment found unreadable is removed and the timeline's fallback read without asking
    whether it answers exactly (missing rows where nothing is left, a key twice after updates)."""
    from horizon_broker.broker.engine import fallbacks

    fallbacks.fallback_problem = lambda lost, before, after, snapshot: None


# -- the ingestion servers ------------------------------------------------------------------------


def _lwm_reported_at_reserve() -> None:
    """A batch reports its owned partitions ingested (and applied) through its last commit
    timestamp as soon as it takes its timestamps, not once its segments are announced: the LWM
    runs ahead of what the server has committed while the batch writes its files."""
    import threading

    from horizon_broker.ingest import batch, job

    current = threading.local()
    write_batch, reserve_timestamps = job.write_batch, batch.reserve_timestamps

    def writing(protocol: Any, frame: Any, seq: int, sources: Any, partitions: Any) -> Any:
        current.protocol, current.partitions = protocol, list(partitions)
        try:
            return write_batch(protocol, frame, seq, sources, partitions)
        finally:
            current.protocol = None

    def reserve(clock: Any, count: Any) -> tuple[int, int]:
        base, high = reserve_timestamps(clock, count)
        protocol = getattr(current, "protocol", None)
        if protocol is not None and current.partitions:
            progress = {p: (high, high) for p in current.partitions}
            protocol.server.client.report(protocol.server.table.name, progress)
        return base, high

    job.write_batch = writing
    batch.reserve_timestamps = reserve


def _resume_skipped() -> None:
    """A batch on a quiet partition takes its commit timestamps without resuming it first: its
    LWM keeps following the server's heartbeats past stamps not yet announced."""
    from horizon_broker.ingest.commit import CommitProtocol

    CommitProtocol.resume = lambda self: None  # type: ignore[method-assign]


ANNOUNCE_AHEAD_S = 1.0
"""How long the announced segment's files stay incomplete."""


def _announced_before_files() -> None:
    """A batch's segments are announced before their files are in place (the rename into place
    moved after the announcement)."""
    from horizon_broker.ingest.commit import CommitProtocol
    from horizon_broker.ingest.manifest import INGEST
    from horizon_broker.timeline.segment import Segment

    original = CommitProtocol.publish

    def publish(self: CommitProtocol, record: Any) -> None:
        paths = []
        if record.kind == INGEST and self.transaction_locks().held:
            for item in record.body["segments"]:
                paths += [Path(p.removeprefix("file:")) for p in Segment.from_dict(item).location]
        staged = [(path, path.with_name(path.name + ".inprogress")) for path in paths]
        for path, aside in staged:
            path.rename(aside)
        try:
            original(self, record)
            time.sleep(ANNOUNCE_AHEAD_S)
        finally:
            for path, aside in staged:
                aside.rename(path)

    CommitProtocol.publish = publish  # type: ignore[method-assign]


# -- the compactor --------------------------------------------------------------------------------


def _compaction_drops_versions() -> None:
    """The compactor takes the table's LWM for its retention horizon: it drops every version
    closed at or below the LWM, which time travel still reads."""
    from horizon_broker.watermark.server import ServerClient

    def retention_horizon(self: ServerClient, table: str) -> int:
        found = self.table_lwm(table)
        return 0 if found is None or found.lwm is None else found.lwm

    ServerClient.retention_horizon = retention_horizon  # type: ignore[method-assign]


MUTATIONS: dict[str, Mutation] = {
    m.name: m
    for m in (
        Mutation(
            "visibility_until_inclusive", BROKER,
            "the visibility predicate's validUntil > S written >= S",
            frozenset({"duplicate_key", "bank_total", "unrepeatable_read"}), _until_inclusive,
        ),
        Mutation(
            "served_floor_ignored", BROKER,
            "the served LWM follows the computed one down; the persisted floor is not read",
            frozenset({"lwm_backwards", "snapshot_below_served"}), _floor_ignored,
            # The store going back (a replica promoted without the last heartbeats) lowers the
            # quiet table's computed LWM under the served one: the broker's hold covers a table
            # that lost a segment, not a quiet one, and the servers paused across the promotion
            # keep it low for seconds (their next heartbeat puts it back). The stateless reader
            # (no session token to hide it) is then served below what it, or another, was.
            faults=("primary_failover:servers_paused",) * 3,
        ),
        Mutation(
            "announced_before_files", SERVER,
            "a segment announced before its files are in place",
            frozenset({"lost_write", "half_applied_transfer", "bank_total", "unexpected_error"}),
            _announced_before_files,
        ),
        Mutation(
            "compaction_drops_versions", COMPACTOR,
            "the compactor's retention horizon is the LWM: versions time travel reads dropped",
            frozenset({"lost_write", "half_applied_transfer", "bank_total", "phantom_row"}),
            _compaction_drops_versions, compaction=True,
        ),
        Mutation(
            "lwm_reported_at_reserve", SERVER,
            "a batch reports its progress when it takes its commit timestamps, not once announced",
            frozenset({"lost_write", "half_applied_transfer", "bank_total", "unrepeatable_read",
                       "duplicate_key"}),
            _lwm_reported_at_reserve,
        ),
        Mutation(
            "change_feed_off_by_one", BROKER,
            "the change feed's window (from, to] read as [from, to]",
            frozenset({"change_feed"}), _change_feed_off_by_one,
        ),
        Mutation(
            "resume_skipped", SERVER,
            "a quiet partition not resumed before its batch takes commit timestamps",
            frozenset({"lost_write", "half_applied_transfer", "bank_total",
                       "commit_below_served", "unrepeatable_read"}),
            _resume_skipped,
            # No fault: a restarted server's claim resumes its parked partitions by itself. What
            # shows it is a batch on an idle partition (the quiet table's, seconds long on Spark,
            # written every ten seconds): heartbeats carry its LWM past the batch's stamps, and a
            # read at that LWM misses the batch (lost_write).
        ),
        Mutation(
            "fallback_unchecked", BROKER,
            "the timeline's fallback after an unreadable segment read without the check",
            frozenset({"lost_write", "half_applied_transfer", "bank_total", "duplicate_key"}),
            _fallback_unchecked,
            faults=("segment_file:vanish",) * 3,
        ),
    )
}  # fmt: skip


def mutations(names: str) -> list[Mutation]:
    """The mutations of ``A`` or ``A+B`` (several planted in one run: a test's way to run them
    at the price of one, when their expected kinds do not overlap)."""
    return [mutation(name) for name in names.split("+")]


def mutation(name: str) -> Mutation:
    """The mutation called ``name``, or ValueError naming the known ones."""
    try:
        return MUTATIONS[name]
    except KeyError:
        raise ValueError(f"no mutation {name!r}: known are {', '.join(MUTATIONS)}") from None
