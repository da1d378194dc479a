"""The per-server commit log that makes ingestion exactly-once.

Every batch (and every updater run) is a two-record transaction in storage, under
``<table_root>/_manifest/<server>/``:

1. ``<seq>-prepare.json`` is written (atomically) **before** any data file: it names the directories
   the attempt will write. A prepare without its commit marks a dead attempt: on restart its
   directories are deleted, then the prepare itself; nothing of it was ever announced.
2. ``<seq>-commit.json`` is written after every file is complete and **before** any announcement:
   the segments, the key index versions, the pending ``validUntil`` updates, the consumed sources
   and the commit-timestamp range. A commit is the point of no return: on restart a commit without
   its ``done`` is rolled forward (announce or replace, then report), which is idempotent.
3. ``<seq>-done.json`` is written once the commit is announced and reported.

The job never starts a new transaction before finishing the previous one, so only the *last*
commit can lack its ``done``.

:class:`ManifestState` derives everything the job needs from the records (pure, no I/O).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ingest.storage import Storage
from timeline.errors import Internal

PREPARE = "prepare"
COMMIT = "commit"
DONE = "done"
INGEST = "ingest"
UPDATE = "update"
_NAME = re.compile(r"^(\d{12})-(prepare|commit|done)\.json$")


@dataclass(frozen=True, slots=True)
class Record:
    seq: int
    phase: str  # prepare | commit | done
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body["kind"])


def manifest_dir(table_root: str, server_id: str) -> str:
    return f"{table_root}/_manifest/{server_id}"


class Manifest:
    """One server's commit log for one table, in storage."""

    def __init__(self, storage: Storage, table_root: str, server_id: str) -> None:
        self._storage = storage
        self._table_root = table_root
        self.directory = manifest_dir(table_root, server_id)

    def _path(self, seq: int, phase: str) -> str:
        return f"{self.directory}/{seq:012d}-{phase}.json"

    def write(self, seq: int, phase: str, body: dict[str, Any]) -> Record:
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        self._storage.write_atomically(self._path(seq, phase), text)
        return Record(seq, phase, body)

    def delete(self, record: Record) -> None:
        self._storage.delete(self._path(record.seq, record.phase))

    def records(self) -> list[Record]:
        return read_records(self._storage, self.directory)

    def other_servers(self) -> list[str]:
        """Every server with a commit log for this table (including this one)."""
        root = f"{self._table_root}/_manifest"
        return [info.path.rstrip("/").rsplit("/", 1)[-1] for info in self._storage.list_dir(root)]


def read_records(storage: Storage, directory: str) -> list[Record]:
    records = []
    for info in storage.list_dir(directory):
        match = _NAME.match(info.path.rsplit("/", 1)[-1])
        if not match:
            continue  # .tmp leftovers of a torn write, checksum files
        body = json.loads(storage.read_text(info.path))
        records.append(Record(int(match.group(1)), match.group(2), body))
    order = {PREPARE: 0, COMMIT: 1, DONE: 2}
    records.sort(key=lambda record: (record.seq, order[record.phase]))
    return records


@dataclass(frozen=True, slots=True)
class KeyIndexVersion:
    """Where the key index of one key partition is, and the last commit timestamp it covers."""

    path: str
    high: int


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
    key_index: dict[int, KeyIndexVersion] = field(default_factory=dict)
    pending: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Committed ingest batches (seq -> body) whose validUntil updates are not applied yet."""
    high: int = 0
    """The highest commit timestamp handed out by committed batches."""
    ingested: dict[int, int] = field(default_factory=dict)
    """Key partition -> the ``high`` of the last committed batch that covered it."""

    @classmethod
    def from_records(cls, records: Iterable[Record]) -> ManifestState:
        state = cls()
        prepared: dict[int, Record] = {}
        for record in records:
            state.next_seq = max(state.next_seq, record.seq + 1)
            if record.phase == PREPARE:
                prepared[record.seq] = record
            elif record.phase == DONE:
                if state.unpublished is not None and state.unpublished.seq == record.seq:
                    state.unpublished = None
            else:
                prepared.pop(record.seq, None)
                state.apply_commit(record)
        if len(prepared) > 1:
            raise Internal(f"commit log has several unfinished attempts: {sorted(prepared)}")
        state.dangling = next(iter(prepared.values()), None)
        return state

    def apply_commit(self, record: Record) -> None:
        body = record.body
        self.unpublished = record
        self.next_seq = max(self.next_seq, record.seq + 1)
        if record.kind == INGEST:
            for partition in body.get("consumed_partitions", ()):
                self.consumed.setdefault(int(partition), set()).update(body.get("sources", ()))
            high = int(body["high"])
            self.high = max(self.high, high)
            for partition in body["partitions"]:
                self.ingested[int(partition)] = high
            for partition, path in body.get("key_index", {}).items():
                self.key_index[int(partition)] = KeyIndexVersion(path, high)
            if body.get("updates"):
                self.pending[record.seq] = body
        elif record.kind == UPDATE:
            for seq in body["applied"]:
                self.pending.pop(int(seq), None)
        else:
            raise Internal(f"commit log record {record.seq} has unknown kind {record.kind!r}")

    def needs(self, partition: int, sources: Iterable[str]) -> bool:
        """Whether some of ``sources`` were not ingested for ``partition`` yet."""
        done = self.consumed.get(partition, set())
        return any(source not in done for source in sources)

    def pending_min(self) -> dict[int, int]:
        """Key partition -> the smallest commit timestamp of a validUntil update not applied yet."""
        lowest: dict[int, int] = {}
        for body in self.pending.values():
            for partition, value in body.get("pending_min", {}).items():
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
