"""The per-server commit log that makes ingestion exactly-once.

Every batch (and every updater run) is a two-record transaction in storage, under
``<table_root>/_manifest/<server>/``:

1. ``<seq>-prepare.json`` is written (atomically) **before** any data file: it names the directories
   the attempt will write. A prepare without its commit marks a dead attempt: on restart its
   directories are deleted, then the prepare itself; nothing of it was ever announced.
2. ``<seq>-commit.json`` is written after every file is complete and **before** any announcement:
   the segments, the key index levels, the pending ``validUntil`` updates, the consumed sources
   and the commit-timestamp range. A commit is the point of no return: on restart a commit without
   its ``done`` is rolled forward (announce or replace, then report), which is idempotent.
3. ``<seq>-done.json`` is written once the commit is announced and reported (with the wall-clock
   time, from which the grace period of the segments an update replaced runs).

The job never starts a new transaction before finishing the previous one, so only the *last*
commit can lack its ``done``. A ``collect`` transaction (commit and done, no prepare) records that
the files of segments replaced by earlier updates were deleted (see :mod:`horizon_broker.ingest.garbage`); an
``abandon`` transaction (commit and done) that an unpublished update was given up (its segments
were replaced by a compaction while the server was down) and its updates are pending again.

**Checkpoints** keep the log short: ``<seq>-checkpoint.json`` holds the :class:`ManifestState`
derived from every record up to ``seq`` (written only between transactions). Readers start from the
newest checkpoint and read only the records after it, so the records it covers are deleted once it
is durable; a crash between writing it and deleting them leaves records a reader skips.

:class:`ManifestState` derives everything the job needs from the records (pure, no I/O).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from horizon_broker._core.errors import Internal, Unavailable
from horizon_broker.ingest.storage import Storage
from horizon_broker.ingest.stream_offsets import consumed_through, later, parse_batch_source

PREPARE = "prepare"
COMMIT = "commit"
DONE = "done"
CHECKPOINT = "checkpoint"
INGEST = "ingest"
UPDATE = "update"
COLLECT = "collect"
ABANDON = "abandon"
_NAME = re.compile(r"^(\d{12})-(prepare|commit|done|checkpoint)\.json$")
_PHASE_ORDER = {PREPARE: 0, COMMIT: 1, DONE: 2, CHECKPOINT: 3}
_PENDING_KEYS = ("updates", "pending_min", "targets")
"""What the state keeps of an ingest commit with pending updates (all the updater needs)."""
_READ_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class Record:
    seq: int
    phase: str  # prepare | commit | done | checkpoint
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body["kind"])


def wall_ms() -> int:
    """Wall-clock milliseconds: when a transaction finished, from which grace periods of replaced
    files run (never a commit timestamp)."""
    return time.time_ns() // 1_000_000


def manifest_dir(table_root: str, server_id: str) -> str:
    return f"{table_root}/_manifest/{server_id}"


def record_name(seq: int, phase: str) -> str:
    return f"{seq:012d}-{phase}.json"


class Manifest:
    """One server's commit log for one table, in storage."""

    def __init__(self, storage: Storage, table_root: str, server_id: str) -> None:
        self._storage = storage
        self._table_root = table_root
        self.directory = manifest_dir(table_root, server_id)

    def _path(self, seq: int, phase: str) -> str:
        return f"{self.directory}/{record_name(seq, phase)}"

    def write(self, seq: int, phase: str, body: dict[str, Any]) -> Record:
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        self._storage.write_atomically(self._path(seq, phase), text)
        return Record(seq, phase, body)

    def write_transaction(
        self, state: ManifestState, body: dict[str, Any], *, at_ms: int
    ) -> Record:
        """A transaction that writes no data file (a ``collect`` or an ``abandon``): its commit
        and its ``done`` at once, applied to ``state``; returns the commit."""
        seq = state.next_seq
        commit = self.write(seq, COMMIT, body)
        state.apply_commit(commit)
        state.apply_done(self.write(seq, DONE, {"kind": body["kind"], "at_ms": at_ms}))
        return commit

    def delete(self, record: Record) -> None:
        self._storage.delete(self._path(record.seq, record.phase))

    def records(self) -> list[Record]:
        """The newest checkpoint (if any) and every record after it."""
        return read_records(self._storage, self.directory)

    def write_checkpoint(self, state: ManifestState) -> Record:
        """Persist ``state`` (derived from every record before ``state.next_seq``) atomically."""
        if state.unpublished is not None or state.dangling is not None:
            raise Internal("a checkpoint can only be written between transactions")
        return self.write(state.next_seq - 1, CHECKPOINT, state.to_checkpoint())

    def prune(self, checkpoint: Record) -> int:
        """Delete every record ``checkpoint`` covers (older checkpoints too); returns how many.

        Only call it once the checkpoint is durable: until then those records are the log.
        """
        deleted = 0
        for info in self._storage.list_dir(self.directory):
            parsed = parse_name(info.path)
            if parsed is None or parsed[0] > checkpoint.seq:
                continue
            if parsed == (checkpoint.seq, CHECKPOINT):
                continue
            self._storage.delete(info.path)
            deleted += 1
        return deleted

    def other_servers(self) -> list[str]:
        """Every server with a commit log for this table (including this one)."""
        root = f"{self._table_root}/_manifest"
        return [info.path.rstrip("/").rsplit("/", 1)[-1] for info in self._storage.list_dir(root)]


def parse_name(path: str) -> tuple[int, str] | None:
    """``(seq, phase)`` of a commit log file, None for anything else (``.tmp`` leftovers, ...)."""
    match = _NAME.match(path.rstrip("/").rsplit("/", 1)[-1])
    return (int(match.group(1)), match.group(2)) if match else None


def live_names(names: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    """The names a reader needs, in log order: the newest checkpoint, then what follows it."""
    ordered = sorted(names, key=lambda name: (name[0], _PHASE_ORDER[name[1]]))
    start = 0
    for index, (_, phase) in enumerate(ordered):
        if phase == CHECKPOINT:
            start = index
    return ordered[start:]


def read_records(storage: Storage, directory: str) -> list[Record]:
    """The newest checkpoint of a commit log and the records after it.

    Another server may compact its log while this reads it (a file listed a moment ago is gone):
    the read then starts over from a fresh listing.
    """
    for _ in range(_READ_ATTEMPTS):
        listing = {}
        for info in storage.list_dir(directory):
            parsed = parse_name(info.path)
            if parsed is not None:
                listing[parsed] = info.path
        try:
            return [
                Record(seq, phase, json.loads(storage.read_text(listing[(seq, phase)])))
                for seq, phase in live_names(listing)
            ]
        except Exception:  # a compacted file: FileNotFound through Py4J
            if all(storage.exists(path) for path in listing.values()):
                raise
    raise Unavailable(f"commit log {directory} kept changing while it was read")


@dataclass(frozen=True, slots=True)
class KeyIndexVersion:
    """Where the key index of one key partition is, and the last commit timestamp it covers.

    The index is a stack of levels, oldest first: a full index, then the entries later batches
    changed (a batch writes only those, not the whole index again). A key's entry is the one in
    the newest level holding it. A batch that finds too many levels writes a full index again.
    """

    levels: tuple[str, ...]
    high: int


def key_index_levels(value: str | list[str]) -> tuple[str, ...]:
    """The levels a commit or checkpoint names (a single path: a full index, the older form)."""
    return (value,) if isinstance(value, str) else tuple(str(level) for level in value)


@dataclass(frozen=True, slots=True)
class Garbage:
    """The files of the segments one update replaced, not deleted yet."""

    locations: tuple[str, ...]
    released_ms: int | None = None
    """Wall-clock time (ms) of the update's ``done``: the replacement was announced by then, so the
    grace period runs from it. None while the update is not published."""


@dataclass(slots=True)
class ManifestState:
    """What one server's commit log says (pure: built from records)."""

    next_seq: int = 1
    dangling: Record | None = None
    """A prepare with no commit: a dead attempt to clean up."""
    unpublished: Record | None = None
    """The newest commit if it has no ``done`` record: it may still need announcing."""
    consumed: dict[int, set[str]] = field(default_factory=dict)
    """Key partition -> the sources whose rows of that partition were ingested (by this server,
    or by an earlier owner: handovers carry them)."""
    offsets: dict[int, dict[str, str]] = field(default_factory=dict)
    """Key partition -> Redis stream key -> the last entry ingested for that partition (a
    stream batch's source is not kept in ``consumed``: its last entry id says it all, see
    :mod:`horizon_broker.ingest.stream_offsets`)."""
    key_index: dict[int, KeyIndexVersion] = field(default_factory=dict)
    pending: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Committed ingest batches (seq -> what the updater needs) not applied yet."""
    high: int = 0
    """The highest commit timestamp handed out by committed batches."""
    ingested: dict[int, int] = field(default_factory=dict)
    """Key partition -> the ``high`` of the last committed batch that covered it."""
    garbage: dict[int, Garbage] = field(default_factory=dict)
    """Update seq -> the files of the segments it replaced, until a collect deletes them."""
    retention_horizon: int = 0
    """The highest retention horizon an update dropped history below (reported to brokers
    before that update was published)."""
    checkpoint_seq: int = field(default=0, compare=False)
    """The seq of the checkpoint the state was read from (0: none)."""
    finished_since_checkpoint: int = field(default=0, compare=False)
    """Transactions finished (``done``) after that checkpoint."""

    @classmethod
    def from_records(cls, records: Iterable[Record]) -> ManifestState:
        state = cls()
        prepared: dict[int, Record] = {}
        for record in records:
            if record.phase == CHECKPOINT:
                state = cls.from_checkpoint(record)
                prepared = {seq: r for seq, r in prepared.items() if seq > record.seq}
                continue
            if record.seq <= state.checkpoint_seq:
                continue  # covered by the checkpoint: left by a crash before the prune
            state.next_seq = max(state.next_seq, record.seq + 1)
            if record.phase == PREPARE:
                prepared[record.seq] = record
            elif record.phase == DONE:
                state.apply_done(record)
            else:
                prepared.pop(record.seq, None)
                state.apply_commit(record)
        if len(prepared) > 1:
            raise Internal(f"commit log has several unfinished attempts: {sorted(prepared)}")
        state.dangling = next(iter(prepared.values()), None)
        return state

    def apply_commit(self, record: Record) -> None:
        """A transaction committed: what it changed, by its kind (it is unpublished until done)."""
        self.unpublished = record
        self.next_seq = max(self.next_seq, record.seq + 1)
        if record.kind == INGEST:
            self._apply_ingest(record)
        elif record.kind == UPDATE:
            self._apply_update(record)
        elif record.kind == COLLECT:
            for seq in record.body["collected"]:
                self.garbage.pop(int(seq), None)
        elif record.kind == ABANDON:
            # An unpublished update whose segments another job replaced meanwhile: its updates
            # are pending again, and what it would have replaced is not its garbage.
            for seq, item in record.body["pending"].items():
                self.pending[int(seq)] = dict(item)
            self.garbage.pop(int(record.body["update"]), None)
        else:
            raise Internal(f"commit log record {record.seq} has unknown kind {record.kind!r}")

    def _apply_ingest(self, record: Record) -> None:
        """A batch: the sources it consumed, its high stamp, its key index, its pending updates."""
        body = record.body
        for partition in body.get("consumed_partitions", ()):
            self.consume(int(partition), body.get("sources", ()))
        high = int(body["high"])
        self.high = max(self.high, high)
        for partition in body["partitions"]:
            self.ingested[int(partition)] = high
        for partition, levels in body.get("key_index", {}).items():
            self.key_index[int(partition)] = KeyIndexVersion(key_index_levels(levels), high)
        if body.get("updates"):
            self.pending[record.seq] = {key: body[key] for key in _PENDING_KEYS if key in body}

    def consume(self, partition: int, sources: Iterable[str]) -> None:
        """``partition`` ingested ``sources``: a file is remembered, a stream batch moves the
        partition's offset in its stream."""
        for source in sources:
            batch = parse_batch_source(source)
            if batch is None:
                self.consumed.setdefault(partition, set()).add(source)
                continue
            streams = self.offsets.setdefault(partition, {})
            offset = later(streams.get(batch[0]), batch[2])
            if offset is not None:
                streams[batch[0]] = offset

    def _apply_update(self, record: Record) -> None:
        """An update rewrite: the batches it applied, the files it replaced, the horizon."""
        body = record.body
        for seq in body["applied"]:
            self.pending.pop(int(seq), None)
        locations = tuple(
            location for segment in body.get("remove", ()) for location in segment["location"]
        )
        if locations:
            self.garbage[record.seq] = Garbage(locations)
        self.retention_horizon = max(
            self.retention_horizon, int(body.get("retention_horizon") or 0)
        )

    def apply_done(self, record: Record) -> None:
        """A transaction finished: it is published, and the grace of what it replaced starts."""
        self.next_seq = max(self.next_seq, record.seq + 1)
        if self.unpublished is not None and self.unpublished.seq == record.seq:
            self.unpublished = None
        replaced = self.garbage.get(record.seq)
        if replaced is not None and replaced.released_ms is None:
            # A done without a time was written before grace periods existed: long ago.
            released = int(record.body.get("at_ms") or 0)
            self.garbage[record.seq] = Garbage(replaced.locations, released)
        self.finished_since_checkpoint += 1

    # -- checkpoints -------------------------------------------------------------------------

    def to_checkpoint(self) -> dict[str, Any]:
        """The state as a JSON-able checkpoint body (between transactions only)."""
        return {
            "kind": CHECKPOINT,
            "next_seq": self.next_seq,
            "consumed": {str(p): sorted(sources) for p, sources in sorted(self.consumed.items())},
            "offsets": {str(p): dict(sorted(s.items())) for p, s in sorted(self.offsets.items())},
            "key_index": {
                str(p): [list(version.levels), version.high]
                for p, version in sorted(self.key_index.items())
            },
            "pending": {str(seq): body for seq, body in sorted(self.pending.items())},
            "high": self.high,
            "ingested": {str(p): high for p, high in sorted(self.ingested.items())},
            "garbage": {
                str(seq): {"locations": list(item.locations), "released_ms": item.released_ms}
                for seq, item in sorted(self.garbage.items())
            },
            "retention_horizon": self.retention_horizon,
        }

    @classmethod
    def from_checkpoint(cls, record: Record) -> ManifestState:
        body = record.body
        return cls(
            next_seq=max(int(body["next_seq"]), record.seq + 1),
            consumed={int(p): set(sources) for p, sources in body["consumed"].items()},
            offsets={int(p): dict(streams) for p, streams in body.get("offsets", {}).items()},
            key_index={
                int(p): KeyIndexVersion(key_index_levels(levels), int(high))
                for p, (levels, high) in body["key_index"].items()
            },
            pending={int(seq): dict(item) for seq, item in body["pending"].items()},
            high=int(body["high"]),
            ingested={int(p): int(high) for p, high in body["ingested"].items()},
            garbage={
                int(seq): Garbage(
                    tuple(item["locations"]),
                    None if item["released_ms"] is None else int(item["released_ms"]),
                )
                for seq, item in body.get("garbage", {}).items()
            },
            retention_horizon=int(body.get("retention_horizon", 0)),
            checkpoint_seq=record.seq,
        )

    def checkpoint_due(self, interval: int) -> bool:
        """Whether ``interval`` transactions finished since the last checkpoint, and none is
        in flight (a checkpoint covers whole transactions only)."""
        return (
            self.finished_since_checkpoint >= interval
            and self.unpublished is None
            and self.dangling is None
        )

    def checkpointed(self, record: Record) -> None:
        self.checkpoint_seq = record.seq
        self.finished_since_checkpoint = 0

    # -- queries -----------------------------------------------------------------------------

    def needs(self, partition: int, sources: Iterable[str]) -> bool:
        """Whether some of ``sources`` were not ingested for ``partition`` yet."""
        done = self.consumed.get(partition, set())
        streams = self.offsets.get(partition, {})
        for source in sources:
            batch = parse_batch_source(source)
            if batch is None and source not in done:
                return True
            if batch is not None and not consumed_through(streams.get(batch[0]), batch[2]):
                return True
        return False

    def pending_min(self) -> dict[int, int]:
        """Key partition -> the smallest commit timestamp of a validUntil update not applied yet."""
        lowest: dict[int, int] = {}
        for body in self.pending.values():
            for partition, value in (body.get("pending_min") or {}).items():
                key = int(partition)
                lowest[key] = min(lowest.get(key, value), int(value))
        return lowest

    def progress(self, partitions: Iterable[int]) -> dict[int, tuple[int, int]]:
        """``partition -> (ingested, applied)`` for the given key partitions.

        ``applied`` is just below the oldest update still pending, else equal to ``ingested``.
        """
        lowest = self.pending_min()
        result = {}
        for partition in partitions:
            if partition not in self.ingested:
                continue
            ingested = self.ingested[partition]
            applied = lowest[partition] - 1 if partition in lowest else ingested
            result[partition] = (ingested, min(applied, ingested))
        return result
