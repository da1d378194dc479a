"""The locks an ingestion server takes, so nothing else writes a minor version of what it writes.

A batch locks the first-generation partition numbers it was allocated (segment locks: appending
never conflicts with a compaction of other segments of the same chunk); the updater locks the
segments it rewrites and the overwrite partitions it writes, then checks that they are still the
newest of their root ranges (a compaction may have replaced them while it waited). Each publish
carries a guard: the announce script refuses it if the locks were revoked or ran out, or if the
server no longer owns the batch's key partitions.

The job id is the server id: a restarted server's new locks and its dead process's old ones belong
to one job and never conflict (Druid shares locks within a task group in the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from horizon_broker._core.errors import Internal, LockConflict
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.ingest.updater import Target, UpdatePlan, current_segments, plan_updates
from horizon_broker.locks.client import DEFAULT_LEASE_S, JobLocks, LockClient, LockRenewer
from horizon_broker.locks.rules import PublishGuard
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.server import ServerClient


class TransactionLocks:
    """The locks of one transaction (a batch or an updater run) of one ingestion server."""

    def __init__(
        self,
        client: ServerClient,
        table: str,
        priority: int,
        *,
        lease_s: float = DEFAULT_LEASE_S,
        wait_s: float = 60.0,
        renewer: LockRenewer | None = None,
    ) -> None:
        self._locks = JobLocks(
            LockClient(client.redis, prefix=client.prefix),
            table,
            client.server_id,
            priority,
            lease_s=lease_s,
            wait_s=wait_s,
            renewer=renewer,
        )
        self.table = table

    def lock(self, segments: Iterable[Segment]) -> None:
        """Segment locks on ``segments`` (announced ones, or ones about to be written)."""
        segments = list(segments)
        if segments:
            self._locks.lock_covering(segments)

    def guard(
        self, segments: Sequence[Segment], key_partitions: Iterable[int] = ()
    ) -> PublishGuard:
        """The publish guard: every segment locked, every key partition still owned."""
        return self._locks.guard(segments, [(self.table, int(kp)) for kp in key_partitions])

    def release(self) -> None:
        self._locks.release()

    def lock_partitions(self, interval: Interval, version: str, partitions: Iterable[int]) -> None:
        """Segment locks on partition numbers of a chunk (allocated, not written yet)."""
        numbers = sorted(set(partitions))
        if numbers:
            self._locks.lock_segments(interval, version, numbers)

    @property
    def held(self) -> bool:
        return bool(self._locks.held)


def locked_update_plan(
    locks: TransactionLocks,
    targets: Sequence[Target],
    table: TableDefinition,
    announced: Callable[[], Sequence[Segment]],
    allocate: Callable[[Interval, str, int], list[int]],
    *,
    server: str = "",
    attempts: int = 5,
) -> UpdatePlan:
    """Plan an updater run and lock what it rewrites and writes: the segments covering the
    targets are locked, then looked up again until they are still the newest of their root ranges
    once locked (a compaction may publish over them meanwhile); so are the small segments the
    plan merges into the rewrites.

    While the updater holds them, no compaction can publish over them: it would need their locks.
    """
    for _ in range(attempts):
        segments = announced()
        covering = current_segments(segments, table, targets)
        locks.lock(covering.values())
        again = current_segments(announced(), table, targets)
        if {t: s.id for t, s in again.items()} != {t: s.id for t, s in covering.items()}:
            continue
        plan = plan_updates(targets, table, segments, allocate, server=server)
        # The small segments a rewrite merges are locked too, and must still be the newest of
        # their root ranges once locked.
        rewritten = {s.id for s in covering.values()}
        merged = [s for s in plan.segments if s.id not in rewritten]
        locks.lock(merged)
        if merged and _not_newest(merged, merged, table, announced()):
            continue
        for key, number in plan.new_partition.items():
            first = plan.inputs[key][0]
            locks.lock_partitions(first.interval, first.version, [number])
        return plan
    raise LockConflict(
        f"table {table.name!r}: the segments the updater must rewrite kept changing under it "
        f"({attempts} attempts); compactions are replacing them faster than it can lock them"
    )


def _not_newest(
    segments: Sequence[Segment],
    allowed: Sequence[Segment],
    table: TableDefinition,
    announced: Sequence[Segment],
) -> list[Segment]:
    """Those of ``segments`` whose root range's newest segment is none of ``allowed`` (all of
    them when one's root range has no segment left)."""
    targets = [(s.interval.start_ms, int(s.root_start)) for s in segments]  # type: ignore[arg-type]
    ids = {s.id for s in allowed}
    try:
        found = current_segments(announced, table, targets)
    except Internal:
        return list(segments)
    return [
        s
        for s, target in zip(segments, targets, strict=True)
        if target not in found or found[target].id not in ids
    ]


class UpdateSuperseded(LockConflict):
    """An unpublished update's segments were replaced by another job while its server was down."""


def check_still_current(
    replaced: Sequence[Segment],
    rewrites: Sequence[Segment],
    table: TableDefinition,
    announced: Sequence[Segment],
) -> None:
    """Before an unpublished update is rolled forward: each segment it replaces must still be the
    newest of its root range (or its rewrite must be, when the replace took effect before a
    crash). Otherwise a compaction published over it while the server was down, and the rewrite
    would be a second minor version of the same root range."""
    if not replaced:
        return
    stale = [str(s) for s in _not_newest(replaced, [*replaced, *rewrites], table, announced)]
    if stale:
        raise UpdateSuperseded(
            f"table {table.name!r}: an unpublished update of segment(s) {', '.join(stale[:3])} "
            "cannot be rolled forward: another job published a newer version of them while this "
            "server was down; the update must be applied again to the newer segments"
        )
