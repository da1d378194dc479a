"""Is the store's log still the history this follower applied? (rule F3 of
``docs/design/contract/failover.md``).

A promoted replica can lack the last events the follower already applied, and the events written
after the failover then take the same sequence numbers (stream ids are ``<seq>-0``): reading on
from the old position would skip them. So after a change of primary the follower compares the
entry at its position with the one it applied there (its *fingerprint*: the event's store time
and server), and after a sync it notes the fingerprint of the snapshot's position.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import redis

from horizon_broker._core.keys import Keys

Fingerprint = tuple[bytes, bytes]
"""An applied event's store time and server: what tells two histories' events apart."""
History = Literal["same", "rewound", "unknown"]


def fingerprint(fields: dict[bytes, bytes]) -> Fingerprint:
    return fields.get(b"t", b""), fields.get(b"s", b"")


def follows(fields: dict[bytes, bytes], applied: Fingerprint | None) -> bool:
    """Whether an event names the one applied last as its predecessor (its ``p`` field; an
    event written before it existed, or no event applied yet, passes)."""
    previous = fields.get(b"p")
    return previous is None or applied is None or previous == b"|".join(applied)


def fingerprint_at(client: redis.Redis, keys: Keys, seq: int) -> Fingerprint | None:
    """The fingerprint of the log's event ``seq`` (None: none there, or trimmed)."""
    if seq <= 0:
        return None
    entries: Any = client.xrange(keys.log, f"{seq}-0", f"{seq}-0")
    return fingerprint(entries[0][1]) if entries else None


def history_at(client: redis.Redis, keys: Keys, seq: int, applied: Fingerprint | None) -> History:
    """``same``: the store's log holds the event this follower applied at ``seq`` (read on);
    ``rewound``: the store went back below it or wrote another event there (resync, hold what
    was served); ``unknown``: trimmed or never noted (resync)."""
    if seq <= 0:
        return "same"
    found = fingerprint_at(client, keys, seq)
    if found is None:
        current: Any = client.get(keys.seq)
        return "rewound" if int(current or 0) < seq else "unknown"
    if applied is None:
        return "unknown"
    return "same" if found == applied else "rewound"


def segment_events(
    client: redis.Redis, keys: Keys, through: int, page: int = 2_000
) -> Iterator[dict[str, Any]]:
    """The data of every segments event the log still holds up to event ``through``, in order
    (read after a resync that held segments: which of them the new history replaced)."""
    start = "-"
    while True:
        entries: Any = client.xrange(keys.log, start, f"{through}-0", count=page)
        for _, fields in entries:
            if fields.get(b"k") == b"segments":
                yield json.loads(fields[b"d"])
        if len(entries) < page:
            return
        last = entries[-1][0]
        start = "(" + (last.decode() if isinstance(last, bytes) else str(last))
