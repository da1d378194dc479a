"""One run of the segment updater for an ingestion job: a transaction of the job's commit log.

The updater applies every pending ``validUntil`` update by rewriting the segments the updates are
for (see :mod:`horizon_broker.ingest.updater` for the rewrite itself). Before it writes anything it locks those
segments and the overwrite partitions it writes (:func:`horizon_broker.ingest.locking.locked_update_plan`), so no
compaction can publish another minor version over them meanwhile; its publish is guarded by the
same locks. It goes through the job's commit protocol (:class:`horizon_broker.ingest.commit.CommitProtocol`)
like a batch: prepare, write, commit, publish, report, done.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from horizon_broker._core.errors import Internal
from horizon_broker.ingest import retention, updater
from horizon_broker.ingest import update_rewrite as driver_rewrite
from horizon_broker.ingest.bucketing import allow_partial_cluster_keys
from horizon_broker.ingest.commit import CommitProtocol
from horizon_broker.ingest.key_index import read_resolutions
from horizon_broker.ingest.locking import locked_update_plan
from horizon_broker.ingest.manifest import UPDATE
from horizon_broker.ingest.resolve import pending_updates
from horizon_broker.ingest.segments import footer_summaries


def run_updater(protocol: CommitProtocol) -> int:
    """Apply every pending update now; returns how many segments were rewritten."""
    server, state = protocol.server, protocol.state
    if not state.pending:
        return 0
    table, steps = server.table, server.steps
    seq = state.next_seq
    applied = sorted(state.pending)
    paths = [state.pending[s]["updates"] for s in applied]

    def updates() -> Any:
        return pending_updates(read_resolutions(server.spark, table, paths), table)

    per_target = pending_targets(protocol, applied, updates)
    locks = protocol.transaction_locks()
    try:
        plan = locked_update_plan(
            locks,
            sorted(per_target),
            table,
            lambda: server.client.announced_segments(table.name),
            lambda interval, version, count: server.client.allocate_overwrite_partitions(
                table.name, interval, version, count
            ),
            server=server.server_id,
        )
        allow_partial_cluster_keys(server.spark)
        horizon = retention_horizon(protocol)
        directory = server.update_directory(seq)
        on_driver = None
        if driver_rewrite.may_take(server.spark, server.storage, table, server.root, plan):
            with steps.action("updater reads on the driver"):
                on_driver = driver_rewrite.prepare(
                    server.spark, server.storage, table, paths, plan, horizon
                )
        protocol.prepare(seq, UPDATE, [directory])
        steps.step("update_after_prepare")
        with steps.action("updater rewrite"):
            written = None
            if on_driver is not None:
                written = on_driver.write(plan, directory, server.storage)
            if written is None:
                written = updater.rewrite_segments(
                    server.spark,
                    updates(),
                    plan,
                    table,
                    directory,
                    server.storage,
                    keep=retention.kept_rows(horizon) if horizon else None,
                    rows=sum(per_target.values()),
                )
        steps.step("update_after_files")
        # Overwrite partition numbers are allocated per time chunk: two chunks' rewrites can
        # share one, so a rewrite is found by its chunk and number.
        rewrites = []
        for key, replaced in sorted(plan.inputs.items()):
            item = written.get((key[0], plan.new_partition[key]))
            if item is None:
                raise Internal(f"the rewrite of segment {replaced[0]} wrote no file")
            rewrites.append((replaced, item))
        summaries = footer_summaries(server.storage, [item for _, item in rewrites])
        # Every committed batch's updates are pending or applied, and all pending ones are
        # applied now: the rewrites hold every update up to the last commit.
        add = [
            updater.overwrite_segment(replaced, item, summary, server.server_id, table, state.high)
            for (replaced, item), summary in zip(rewrites, summaries, strict=True)
        ]
        remove = [old for replaced, _ in rewrites for old in replaced]
        body = {
            "kind": UPDATE,
            "applied": applied,
            "add": [segment.to_dict() for segment in add],
            "remove": [segment.to_dict() for segment in remove],
            "retention_horizon": horizon,
            # What the updates were, so that an abandon can make them pending again.
            "pending": {str(seq): state.pending[seq] for seq in applied},
        }
        record = protocol.commit(seq, body)
        steps.step("update_after_commit")
        protocol.publish(record)
        steps.step("update_after_replace")
        protocol.report()
        protocol.done(record)
    finally:
        protocol.release_transaction_locks()
    return len(add)


def pending_targets(
    protocol: CommitProtocol, applied: Sequence[int], updates: Callable[[], Any]
) -> dict[tuple[int, int], int]:
    """How many of the pending updates each segment ``(chunk start, root partition)`` gets:
    summed from what the batches' commits recorded, or counted by a job over the updates when a
    commit predates that record."""
    recorded = [protocol.state.pending[seq].get("targets") for seq in applied]
    counts: dict[tuple[int, int], int] = {}
    if all(item is not None for item in recorded):
        for items in recorded:
            for chunk, partition, count in items or ():
                key = (int(chunk), int(partition))
                counts[key] = counts.get(key, 0) + int(count)
        return counts
    with protocol.server.steps.action("updater targets"):
        rows = updates().groupBy("_chunk", "_seg").count().collect()
    return {(int(row["_chunk"]), int(row["_seg"])): int(row["count"]) for row in rows}


def retention_horizon(protocol: CommitProtocol) -> int:
    """The horizon below which this rewrite drops history, reported to brokers first (so they
    refuse snapshots below it before any rewrite without that history is announced)."""
    state, server = protocol.state, protocol.server
    table, client = server.table, server.client
    if table.retention_ms is None:
        return state.retention_horizon
    lwm = retention.table_lwm(client, table.name)
    horizon = retention.retention_horizon(lwm, table.retention_ms, state.retention_horizon)
    if horizon > state.retention_horizon:
        # A snapshot pin may hold the horizon lower: only history below the granted one goes.
        horizon = client.report_retention_horizon(table.name, horizon)
    return horizon
