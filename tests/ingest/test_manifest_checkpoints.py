"""Commit log checkpoints: a checkpoint plus the records after it says what the whole log says.

The reference is the full log's derivation (:meth:`ManifestState.from_records` over every record
ever written); logs are random sequences of ingest, update and collect transactions, the last one
possibly unfinished, with checkpoints between transactions at random points.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from horizon_broker.ingest.manifest import (
    CHECKPOINT,
    COLLECT,
    COMMIT,
    DONE,
    INGEST,
    PREPARE,
    UPDATE,
    Garbage,
    ManifestState,
    Record,
    live_names,
)

PARTITIONS = 4


def _json(body: dict[str, Any]) -> dict[str, Any]:
    """What a reader gets back from storage."""
    return json.loads(json.dumps(body, sort_keys=True))


class LogBuilder:
    """Writes a plausible commit log, transaction by transaction, as the job would."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.checkpoints: list[Record] = []
        self.seq = 0
        self.high = 0
        self.clock_ms = 1_000

    def state(self) -> ManifestState:
        return ManifestState.from_records(self.records)

    def _transaction(self, body: dict[str, Any], finish: str, *, prepare: bool = True) -> None:
        self.seq += 1
        self.clock_ms += 7
        if prepare:
            self.records.append(Record(self.seq, PREPARE, _json({"kind": body["kind"]})))
        if finish == "prepare":
            return
        self.records.append(Record(self.seq, COMMIT, _json(body)))
        if finish == "commit":
            return
        done = {"kind": body["kind"], "at_ms": self.clock_ms}
        self.records.append(Record(self.seq, DONE, _json(done)))

    def ingest(self, draw: Any, finish: str) -> None:
        partitions = sorted(draw(st.sets(st.integers(0, PARTITIONS - 1), max_size=PARTITIONS)))
        consumed = [p for p in partitions if draw(st.booleans())]
        sources = [f"file:{self.seq + 1}-{i}" for i in range(draw(st.integers(0, 2)))]
        base = self.high + 1
        self.high = base + draw(st.integers(0, 50))
        updates = draw(st.booleans()) and bool(partitions)
        self._transaction(
            {
                "kind": INGEST,
                "sources": sources,
                "consumed_partitions": consumed,
                "base": base,
                "high": self.high,
                "rows": 3,
                "partitions": partitions,
                "segments": [{"location": [f"/s/b{self.seq + 1}/{p}.parquet"]} for p in partitions],
                "key_index": {str(p): f"/k/b{self.seq + 1}/{p}" for p in consumed},
                "updates": f"/u/b{self.seq + 1}" if updates else None,
                "pending_min": {str(p): base + p for p in partitions} if updates else {},
                "targets": [[0, p] for p in partitions] if updates else [],
            },
            finish,
        )

    def update(self, draw: Any, finish: str) -> None:
        pending = sorted(self.state().pending)
        applied = sorted(draw(st.sets(st.sampled_from(pending), max_size=3))) if pending else []
        removed = draw(st.integers(0, 2))
        horizon = draw(st.one_of(st.none(), st.integers(0, max(self.high, 1))))
        self._transaction(
            {
                "kind": UPDATE,
                "applied": applied,
                "add": [],
                "remove": [
                    {
                        "location": [
                            f"file:/s/u{self.seq + 1}/_chunk=0/_seg={32768 + i}/_rows=open/f.parquet"
                        ]
                    }
                    for i in range(removed)
                ],
                "retention_horizon": horizon,
            },
            finish,
        )

    def collect(self, draw: Any, finish: str) -> None:
        released = sorted(s for s, g in self.state().garbage.items() if g.released_ms is not None)
        chosen = sorted(draw(st.sets(st.sampled_from(released), max_size=3))) if released else []
        self._transaction({"kind": COLLECT, "collected": chosen}, finish, prepare=False)

    def checkpoint(self) -> None:
        state = self.state()
        assert state.unpublished is None and state.dangling is None
        record = Record(state.next_seq - 1, CHECKPOINT, _json(state.to_checkpoint()))
        self.checkpoints.append(record)


@st.composite
def logs(draw: Any) -> LogBuilder:
    builder = LogBuilder()
    steps = draw(st.integers(0, 25))
    for index in range(steps):
        last = index == steps - 1
        finish = draw(st.sampled_from(["done", "done", "commit", "prepare"])) if last else "done"
        kind = draw(st.sampled_from(["ingest", "ingest", "update", "collect"]))
        if kind == "collect" and finish == "prepare":
            finish = "done"  # a collect has no prepare
        getattr(builder, kind)(draw, finish)
        if finish == "done" and draw(st.integers(0, 3)) == 0:
            builder.checkpoint()
    return builder


def _ordered(records: list[Record]) -> list[Record]:
    order = {PREPARE: 0, COMMIT: 1, DONE: 2, CHECKPOINT: 3}
    return sorted(records, key=lambda r: (r.seq, order[r.phase]))


@settings(max_examples=150, deadline=None)
@given(logs())
def test_the_newest_checkpoint_and_later_records_derive_the_full_log_state(builder):
    full = ManifestState.from_records(builder.records)
    everything = _ordered(builder.records + builder.checkpoints)
    wanted = live_names((r.seq, r.phase) for r in everything)
    by_name = {(r.seq, r.phase): r for r in everything}
    compacted = ManifestState.from_records(by_name[name] for name in wanted)
    assert compacted == full
    if builder.checkpoints:
        assert wanted[0] == (builder.checkpoints[-1].seq, CHECKPOINT)
        assert all(seq > wanted[0][0] for seq, _ in wanted[1:])
    # Killed before the covered records were deleted: the leftovers change nothing.
    assert ManifestState.from_records(everything) == full
    assert full.next_seq == compacted.next_seq == builder.seq + 1


@settings(max_examples=60, deadline=None)
@given(logs())
def test_a_checkpoint_round_trips_through_json(builder):
    state = builder.state()
    if state.unpublished is not None or state.dangling is not None:
        return
    record = Record(state.next_seq - 1, CHECKPOINT, _json(state.to_checkpoint()))
    restored = ManifestState.from_checkpoint(record)
    assert restored == state
    assert restored.progress(range(PARTITIONS)) == state.progress(range(PARTITIONS))


def test_an_update_done_starts_the_grace_of_the_segments_it_replaced():
    remove = [{"location": ["file:/s/b1/_chunk=0/_seg=0/_rows=open/a.parquet"]}]
    commit = Record(2, COMMIT, {"kind": UPDATE, "applied": [], "add": [], "remove": remove})
    state = ManifestState.from_records([commit])
    assert state.garbage == {2: Garbage(("file:/s/b1/_chunk=0/_seg=0/_rows=open/a.parquet",), None)}
    state = ManifestState.from_records([commit, Record(2, DONE, {"kind": UPDATE, "at_ms": 99})])
    assert state.garbage[2].released_ms == 99
    collect = Record(3, COMMIT, {"kind": COLLECT, "collected": [2]})
    assert ManifestState.from_records([commit, collect]).garbage == {}


def test_checkpoints_are_due_every_interval_of_finished_transactions_only_between_them():
    builder = LogBuilder()
    for _ in range(3):
        builder._transaction({"kind": COLLECT, "collected": []}, "done", prepare=False)
    state = builder.state()
    assert state.checkpoint_due(3) and not state.checkpoint_due(4)
    builder._transaction({"kind": COLLECT, "collected": []}, "commit", prepare=False)
    assert not builder.state().checkpoint_due(3)  # a transaction is in flight
