"""Debezium change events as Debezium Server's Redis sink writes them, for the stream tests.

The sink adds one entry per event to a stream named after the event's topic: with
``message.format = extended`` the fields ``key`` and ``value``, with ``compact`` (its default)
one field, the key's JSON as the field's name and the envelope as its value; a tombstone's null
value is written as the sink's ``null.value``, ``"default"``. :func:`history` draws a
reproducible change history of a small table (every ``op``, tombstones after deletes,
transactions, malformed events, a truncate if asked) and :func:`reference` says what the table must hold after it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from tests.ingest.debezium_events import postgres_event

TOMBSTONE = "default"
"""What the sink writes for a tombstone's null value."""
MALFORMED = (
    "this is not an event",
    json.dumps({"after": {"id": 1, "name": "no op"}}),
    json.dumps(postgres_event("c", lsn=1, after={"name": "no key"})),
    json.dumps(postgres_event("u", lsn=1, after={"id": "seven", "name": "wrong type"})),
)


@dataclass(frozen=True)
class Change:
    """One drawn event: a change of ``key`` (None: a tombstone or a malformed event)."""

    key: int | None
    op: str | None
    text: str

    def fields(self, compact: bool) -> dict[str, str]:
        """The stream entry's fields, as the sink writes them in either message format."""
        key = json.dumps({"id": self.key})
        return {key: self.text} if compact else {"key": key, "value": self.text}


def history(seed: int, count: int, keys: int = 8, truncate_at: int | None = None) -> list[Change]:
    """A snapshot of ``keys`` rows (``r``), then ``count`` changes with increasing LSNs:
    creates, updates and deletes (each delete followed by its tombstone), runs of changes in one
    transaction (of distinct keys), and malformed events; a truncate of the table (``t``) once
    there are ``truncate_at`` changes (None: none)."""
    rng = random.Random(seed)
    lsn = 0
    live: set[int] = set()
    changes: list[Change] = []

    def event(op: str, key: int, tx: str | None) -> None:
        nonlocal lsn
        lsn += 1
        image = {"id": key, "name": f"{op}{lsn}", "balance": f"{lsn}.25"}
        if op == "d":
            envelope = postgres_event("d", lsn=lsn, before={"id": key}, transaction=tx)
            live.discard(key)
        else:
            envelope = postgres_event(op, lsn=lsn, after=image, transaction=tx)
            live.add(key)
        changes.append(Change(key, op, json.dumps(envelope)))
        if op == "d":
            changes.append(Change(None, None, TOMBSTONE))

    for key in range(1, keys + 1):
        event("r", key, None)
    while len(changes) < count:
        if truncate_at is not None and len(changes) >= truncate_at:
            lsn, truncate_at = lsn + 1, None
            changes.append(Change(None, "t", json.dumps(postgres_event("t", lsn=lsn))))
            live.clear()
        _draw(rng, keys, live, changes, event, f"tx{lsn}")
    return changes


def _draw(
    rng: random.Random,
    keys: int,
    live: set[int],
    changes: list[Change],
    event: Any,
    tx: str,
) -> None:
    """One drawn change: a malformed event, a transaction of three keys, or one key's change."""
    roll = rng.random()
    if roll < 0.05:
        changes.append(Change(None, None, rng.choice(MALFORMED)))
    elif roll < 0.15:
        for key in rng.sample(range(1, keys + 1), 3):
            event("u" if key in live else "c", key, tx)
    else:
        key = rng.randint(1, keys + 2)
        if key not in live:
            event("c", key, None)
        else:
            event(rng.choice("uud"), key, None)


def reference(changes: list[Change]) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
    """What the table holds after ``changes``: each live key's newest row (name and LSN), and
    how many versions each key has (one per create, update or snapshot read: a delete ends the
    current version without adding one)."""
    rows: dict[int, dict[str, Any]] = {}
    versions: dict[int, int] = {}
    for change in changes:
        if change.op == "t":  # every current version ends; none is added
            rows.clear()
            continue
        if change.key is None or change.op is None:
            continue
        if change.op == "d":
            rows.pop(change.key, None)
            continue
        after = json.loads(change.text)["after"]
        rows[change.key] = {"name": after["name"], "lsn": json.loads(change.text)["source"]["lsn"]}
        versions[change.key] = versions.get(change.key, 0) + 1
    return rows, versions


def malformed(changes: list[Change]) -> list[int]:
    """The positions (in ``changes``) of the malformed events."""
    return [i for i, c in enumerate(changes) if c.op is None and c.text != TOMBSTONE]
