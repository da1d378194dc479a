"""The subscriber's side: Subscribe messages as rows, and a result kept up to date with them. Pure.

>>> live = LiveResult()
>>> # for message in horizon.subscribe("SELECT ..."): live.apply(message); live.table ...
>>> # or: for live in horizon.follow("SELECT ..."): live.table, live.to_pandas(), live.changes
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from horizon_broker._core.errors import FailedPrecondition
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb

from .diff import apply_delta
from .messages import read_ipc

KINDS = {
    pb.SUBSCRIBE_MESSAGE_KIND_FIRST_RESULT: "first_result",
    pb.SUBSCRIBE_MESSAGE_KIND_DELTA: "delta",
    pb.SUBSCRIBE_MESSAGE_KIND_RESUMED: "resumed",
    pb.SUBSCRIBE_MESSAGE_KIND_PROGRESS: "progress",
}


@dataclass(frozen=True, slots=True)
class SubscriptionMessage:
    """One message of a subscription: ``kind`` is "first_result", "delta", "resumed" or
    "progress" (the snapshot moved, the answer did not: no rows, a new token);
    ``rows`` a delta's change rows (``_change_type`` first) or the first result's rows;
    ``resume_token`` is set on the last part of each step (send it back to go on from
    ``to_snapshot``)."""

    kind: str
    strategy: str
    from_snapshot: int
    to_snapshot: int
    rows: pa.Table
    key: tuple[str, ...]
    resume_token: str
    last_part: bool

    @classmethod
    def from_proto(cls, message: pb.SubscribeResponse) -> SubscriptionMessage:
        rows = read_ipc(message.arrow_ipc) if message.arrow_ipc else pa.table({})
        return cls(
            kind=KINDS.get(message.kind, "unknown"),
            strategy=message.strategy,
            from_snapshot=message.from_snapshot,
            to_snapshot=message.to_snapshot,
            rows=rows,
            key=tuple(message.key_columns),
            resume_token=message.resume_token,
            last_part=message.last_part,
        )


@dataclass
class LiveResult:
    """A query's answer kept up to date: ``table`` is its answer at ``snapshot`` once a step
    was applied whole (by ``key``, or as a multiset of rows when the result has no key);
    ``changes`` are that step's change rows. Keep the object (its ``table`` and
    ``resume_token``) to resume."""

    table: pa.Table | None = None
    snapshot: int | None = None
    resume_token: str = ""
    strategy: str = ""
    key: tuple[str, ...] = ()
    changes: pa.Table | None = None
    """The last step's change rows (``_change_type`` first; a first result's rows as they
    came), None before the first step or after a resumed header."""
    steps: int = 0
    """Steps applied whole (a first result, or a delta)."""
    _first: list[pa.Table] = field(default_factory=list)
    _parts: list[pa.Table] = field(default_factory=list)

    @property
    def token(self) -> str:
        """The resume token of the last step applied (``resume_token``)."""
        return self.resume_token

    def to_pandas(self) -> Any:
        """``table`` as a pandas DataFrame (an empty one before the first result)."""
        return (self.table if self.table is not None else pa.table({})).to_pandas()

    def apply(self, message: SubscriptionMessage) -> bool:
        """Take one message in; True when it completed a step (``table`` is the answer at
        ``snapshot`` now)."""
        self.strategy = message.strategy or self.strategy
        if message.kind == "first_result":
            self._first.append(message.rows)
            if message.last_part:
                self.table = pa.concat_tables(self._first)
                self._parts, self._first = self._first, []
        elif message.kind == "delta":
            if self.table is None:
                raise FailedPrecondition("a delta came before any first result to apply it to")
            self.table = apply_delta(self.table, message.rows, message.key)
            self._parts.append(message.rows)
        if message.last_part:
            self.snapshot = message.to_snapshot
            self.resume_token = message.resume_token
            self.key = message.key or self.key
            self.changes = pa.concat_tables(self._parts) if self._parts else None
            self._parts = []
            self.steps += message.kind in ("first_result", "delta")
        return message.last_part
