"""What a fault-injection run records, for the checker: the writes it committed, the reads it
made (with the broker's answer or error), and when faults were in force.

Rows name the version they show (``version``: for the bank, the transaction that last wrote
the account; for a register, the value), so the checker can tell which write a read saw without
trusting anything the broker says about it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from horizon_broker.ingest.manifest import Record

Key = Hashable
Version = Hashable


@dataclass(frozen=True, slots=True)
class Write:
    """One key's new version, acknowledged by the ingestion server that committed it."""

    table: str
    key: Key
    version: Version
    commit_ts: int
    deleted: bool = False
    txn: str | None = None
    """Writes sharing a transaction (a bank transfer's two accounts) commit together."""
    started: float | None = None
    """When the batch that committed it began (the reads' clock; None: unknown, e.g. committed
    before a crash): no snapshot served before then may be at or above its commit timestamp."""


@dataclass(frozen=True, slots=True)
class Row:
    """One row of an answer: the key, the version it shows, and the value checked (balance)."""

    key: Key
    version: Version
    value: int = 0


@dataclass(frozen=True, slots=True)
class Read:
    """One query and what came back: rows, or an error status (``UNAVAILABLE``...)."""

    client: str
    table: str
    query: str
    kind: str
    """``lwm`` (the broker chose the snapshot), ``pinned`` (``VERSION AS OF``), ``travel``,
    ``self_join`` (rows must still be one per key) or ``changes`` (a change feed)."""
    started: float
    ended: float
    snapshot: int | None = None
    rows: tuple[Row, ...] = ()
    error: str | None = None
    message: str = ""
    window: tuple[int, int] | None = None
    """For ``changes``: the feed's ``(from, to]`` commit range; ``rows`` are its postimages."""
    broker: str = ""
    """The broker that answered (its address): a broker's served LWM never goes down, across
    its restarts; across brokers a client's session token keeps its own reads monotonic."""
    session: bool = True
    """Whether the client sent its session token (its own reads monotonic across brokers); a
    client without one (a stateless caller) reads whatever the broker serves."""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault in force from ``started`` to ``ended`` (the clock of the reads)."""

    kind: str
    started: float
    ended: float


@dataclass(slots=True)
class History:
    """Everything one run recorded."""

    writes: list[Write] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    bank_tables: frozenset[str] = frozenset()
    """Tables whose values must sum to ``bank_total`` at every snapshot."""
    bank_total: int = 0
    commit_logs: Mapping[tuple[str, str], Sequence[Record]] = field(default_factory=dict)
    """``(server, table)`` -> that server's commit log of that table at the end of the run:
    which segment ids each server committed (none may be committed twice)."""

    def faults_during(self, started: float, ended: float) -> list[Fault]:
        """The faults in force at some moment of ``[started, ended]``."""
        return [f for f in self.faults if f.started <= ended and started <= f.ended]


@dataclass(frozen=True, slots=True)
class LoggedSegment:
    """A segment as one commit record of one server's log names it."""

    server: str
    seq: int
    """The commit record's sequence number in that server's log of the table."""
    kind: str
    """``ingest`` (a batch) or ``update`` (a validUntil rewrite)."""
    segment: tuple[str, str, str, int]
    """Its id: (table, interval, version, partition)."""
    location: tuple[str, ...]

    def __str__(self) -> str:
        where = ", ".join(self.location[:2]) + (" ..." if len(self.location) > 2 else "")
        return f"{self.server} {self.kind} record {self.seq} at {where or 'no files'}"


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One violation, with what a reader needs to find it."""

    kind: str
    detail: str
    read: Read | None = None
    rows: Sequence[Any] = ()

    def describe(self) -> str:
        where = ""
        if self.read is None and self.rows:
            where = f" [{'; '.join(str(row) for row in self.rows[:4])}]"
        if self.read is not None:
            where = (
                f" [{self.read.client} {self.read.kind} read of {self.read.table} at snapshot "
                f"{self.read.snapshot}: {self.read.query}]"
            )
        return f"{self.kind}: {self.detail}{where}"
