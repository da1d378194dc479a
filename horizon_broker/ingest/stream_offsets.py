"""Where a table is in a Redis stream: entry ids, the source names of stream batches, and the
range the next batch may read (pure).

A batch of stream entries names itself as one source, ``redis-stream:<stream key>:<first
id>..<last id>``; the commit log reads the last id as the consumer offset of every key partition
that consumed the batch (:class:`horizon_broker.ingest.manifest.ManifestState`), instead of
remembering the name forever as it does a file's. A restart reads on after that offset, so an
entry is neither lost nor ingested twice. Partitions may stand at different offsets (after a
handover): a batch never straddles one (:func:`read_bounds`), so each partition either needs the
whole batch or none of it.

>>> name = batch_source("orders", "1-0", "5-2")
>>> name, parse_batch_source(name)
('redis-stream:orders:1-0..5-2', ('orders', '1-0', '5-2'))
>>> read_bounds({0: "5-2", 1: None, 2: "9-0"}, [0, 1, 2])
(None, '5-2')
>>> read_bounds({0: "5-2", 2: "9-0"}, [0, 2])
('5-2', '9-0')
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from horizon_broker._core.errors import InvalidArgument

PREFIX = "redis-stream:"
_ENTRY_ID = re.compile(r"^(\d+)-(\d+)$")


def entry_key(entry_id: str) -> tuple[int, int]:
    """An entry id ``<ms>-<seq>`` as a tuple that sorts as Redis orders entries."""
    match = _ENTRY_ID.match(entry_id)
    if match is None:
        raise InvalidArgument(f"{entry_id!r} is not a Redis stream entry id (<ms>-<seq>)")
    return int(match.group(1)), int(match.group(2))


def entry_ms(entry_id: str) -> int:
    """The time (Unix ms) Redis gave an entry when it was added (the id's first part)."""
    return entry_key(entry_id)[0]


def later(first: str | None, second: str | None) -> str | None:
    """The later of two entry ids (None: before the first entry)."""
    if first is None:
        return second
    if second is None:
        return first
    return first if entry_key(first) >= entry_key(second) else second


def batch_source(stream: str, first: str, last: str) -> str:
    """The source name of a batch of the entries ``first`` to ``last`` of ``stream``."""
    return f"{PREFIX}{stream}:{first}..{last}"


def parse_batch_source(source: str) -> tuple[str, str, str] | None:
    """``(stream key, first id, last id)`` of a stream batch's source name, None for any other
    source (a file, a Spark micro-batch)."""
    if not source.startswith(PREFIX):
        return None
    stream, _, span = source[len(PREFIX) :].rpartition(":")
    first, _, last = span.partition("..")
    if not stream or not _ENTRY_ID.match(first) or not _ENTRY_ID.match(last):
        return None
    return stream, first, last


def consumed_through(offset: str | None, last: str) -> bool:
    """Whether a partition at ``offset`` already ingested the entries up to ``last``."""
    return offset is not None and entry_key(offset) >= entry_key(last)


def read_bounds(
    offsets: Mapping[int, str | None], partitions: Iterable[int]
) -> tuple[str | None, str | None]:
    """``(after, through)``: the next batch reads the entries after ``after`` (None: from the
    stream's first) and at most through ``through`` (None: no bound), the next offset of an
    owned partition, so no batch straddles a partition's offset."""
    owned = [offsets.get(partition) for partition in partitions]
    if any(offset is None for offset in owned):
        after = None
    else:
        after = min((offset for offset in owned if offset), key=entry_key, default=None)
    ahead = [
        offset
        for offset in owned
        if offset is not None and (after is None or entry_key(offset) > entry_key(after))
    ]
    return after, min(ahead, key=entry_key, default=None)


def unconsumed_runs(
    ids: Sequence[str], offsets: Mapping[int, str | None], partitions: Iterable[int]
) -> list[tuple[int, int]]:
    """Index ranges ``[start, end)`` of the entries ``ids`` (in stream order) some owned
    partition has not ingested, cut at every owned partition's offset (so each range is needed
    whole by the partitions that need it); entries every partition ingested are left out.

    >>> unconsumed_runs(["1-0", "2-0", "3-0", "4-0"], {0: "1-0", 1: "3-0"}, [0, 1])
    [(1, 3), (3, 4)]
    """
    owned = list(partitions)
    after, _ = read_bounds(offsets, owned)
    stops = sorted(
        {entry_key(o) for p in owned if (o := offsets.get(p)) is not None},
    )
    runs: list[tuple[int, int]] = []
    start: int | None = None
    for index, entry_id in enumerate(ids):
        key = entry_key(entry_id)
        if after is not None and key <= entry_key(after):
            continue
        if start is None:
            start = index
        if key in stops or (
            index + 1 < len(ids) and _crosses(key, entry_key(ids[index + 1]), stops)
        ):
            runs.append((start, index + 1))
            start = None
    if start is not None:
        runs.append((start, len(ids)))
    return runs


def _crosses(
    key: tuple[int, int], following: tuple[int, int], stops: Sequence[tuple[int, int]]
) -> bool:
    """Whether an owned partition's offset lies between two consecutive entries."""
    return any(key < stop < following for stop in stops)
