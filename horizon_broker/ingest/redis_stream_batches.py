"""A stream table's batches: entries read after the committed offsets, as one batch each.

The imperative shell around :mod:`horizon_broker.ingest.redis_stream_read`. A pass of the server
reads the entries after the table's offsets (at most ``max_events`` a batch, never past the
stream's head as the pass began, never across an owned partition's offset), flattens them on the
driver, dead-letters the malformed ones and hands the rows to :meth:`IngestJob.run_batch` as a
local frame named by the entries it holds; the commit records that name, and with it the offset
of every partition that consumed it. A crash before the commit leaves the offsets where they
were: the restarted server reads the same entries again (a dead attempt's files are removed
first), and a crash after it reads on after them. Nothing is lost or ingested twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import re
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from horizon_broker._core.errors import FailedPrecondition, Unavailable
from horizon_broker._core.redis_calls import TRANSIENT, connect
from horizon_broker.ingest.debezium_files import dead_letter_directory, rows_frame
from horizon_broker.ingest.debezium_truncate import KeysReader, expanded, keys_reader
from horizon_broker.ingest.redis_stream_read import (
    LAG_COUNT_CAP,
    Entry,
    Lag,
    dead_letter_line,
    head,
    judged_read,
    stream_rows,
)
from horizon_broker.ingest.redis_stream_source import StreamSource
from horizon_broker.ingest.redis_stream_trim import (
    Carry,
    StreamPosition,
    Witness,
    carried,
    carried_lag,
    judged_gap,
    stream_position,
    witness_of,
)
from horizon_broker.ingest.stream_offsets import batch_source, entry_key, entry_ms, read_bounds
from horizon_broker.watermark import tokens

if TYPE_CHECKING:
    from horizon_broker.ingest.job import BatchResult, IngestJob
    from horizon_broker.ingest.server_table import ServerTable

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_witnesses: weakref.WeakKeyDictionary[IngestJob, dict[str, Witness]] = weakref.WeakKeyDictionary()
"""Each job's witness of each stream it reads (:class:`Witness`): process memory, refreshed
whenever the lag is counted."""
_seen_deleted: weakref.WeakKeyDictionary[IngestJob, dict[str, str]] = weakref.WeakKeyDictionary()
"""Each job's last ``max-deleted-entry-id`` of each stream judged a gap and skipped."""


@dataclass(frozen=True, slots=True)
class StreamBatch:
    """Entries of a stream read for one batch, as the batch's frame."""

    name: str
    """The batch's source name (the entries' first and last ids)."""
    frame: Any
    dead_letters: int
    first_ms: int
    """When the oldest entry was added (Unix ms): the batch's arrival."""


def owned_offsets(job: IngestJob, key: str) -> dict[int, str | None]:
    """Each owned partition's offset in stream ``key`` (None: it has read nothing of it)."""
    return {p: job.state.offsets.get(p, {}).get(key) for p in job.partitions}


def stream_batch(
    server: ServerTable,
    source: StreamSource,
    entries: Sequence[Entry],
    current: KeysReader | None = None,
) -> StreamBatch:
    """The entries (at least one) as a batch: flattened, dead letters written beside the commit
    log (the batch fails past the table's ``max_dead_letters``), each truncate a delete of every
    key current at its place (``current``: the keys current before the batch)."""
    table = server.table
    name = batch_source(source.key, entries[0].id, entries[-1].id)
    flattened = expanded(stream_rows(entries, source, table, name), table.primary_key, current)
    letters = flattened.dead_letters
    if letters:
        directory = dead_letter_directory(server.root, server.server_id)
        path = f"{directory}/{dead_letter_file(source.key, entries[0].id)}"
        server.storage.write_atomically(
            path, "".join(dead_letter_line(letter, source) + "\n" for letter in letters)
        )
        if len(letters) > table.max_dead_letters:
            first = letters[0]
            raise FailedPrecondition(
                f"table {table.name!r}: {len(letters)} malformed events in entries "
                f"{entries[0].id}..{entries[-1].id} of stream {source.key!r}, more than "
                f"max_dead_letters = {table.max_dead_letters} (the first, entry "
                f"{first.place.source}: {first.reason}); they are in {path}"
            )
    frame = rows_frame(server.spark, table, flattened)
    return StreamBatch(name, frame, len(letters), entry_ms(entries[0].id))


def dead_letter_file(key: str, first: str) -> str:
    """A batch's dead-letter file: the stream key (made safe for a file name, with a hash of
    it) and the batch's first entry id. A batch read again after a crash starts at the same
    entry (the committed offset) and holds at least the entries it held, so it overwrites the
    dead attempt's file instead of adding a second copy of its letters."""
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return f"{_UNSAFE.sub('_', key)}.{digest}.{first}.jsonl"


def run_stream_pass(
    job: IngestJob,
    source: StreamSource,
    client: Any,
    on_batch: Callable[[BatchResult], None] | None = None,
) -> BatchResult:
    """Ingest every entry of the table's stream added before this pass, in batches of at most
    ``max_events``; returns the last batch's result with the lag after it, each earlier one
    going to ``on_batch`` as the next one starts (a pass with nothing new is a skipped result,
    and applies updates that are due, as a directory pass does)."""
    job.start()
    with stream_errors(source):
        return _pass(job, source, client, on_batch)


def _pass(
    job: IngestJob,
    source: StreamSource,
    client: Any,
    on_batch: Callable[[BatchResult], None] | None,
) -> BatchResult:
    trimmed = check_trimmed(job, source, client)
    end = head(client, source.key)
    carry = counted_carry(job, source)
    result = None
    while end is not None:
        after, through = read_bounds(owned_offsets(job, source.key), job.partitions)
        if after is not None and entry_key(after) >= entry_key(end):
            break
        if through is None or entry_key(through) > entry_key(end):
            through = end
        entries, position, gap = checked_read(job, source, client, after, through, carry)
        if gap:  # skipped: the carry is taken again from the gap's count
            trimmed, carry = trimmed + gap, counted_carry(job, source)
        if not entries:
            break
        if result is not None and on_batch is not None:
            behind, carry = passing_lag(job, source, client, carry, entries[0].id, position)
            on_batch(remembered(job, with_lag(result, behind)))
        job.follow_registered_schema()  # an alter since the last batch: flatten under it
        batch = stream_batch(job.server, source, entries, keys_reader(job))
        result = with_arrival(job.run_batch(batch.frame, sources=[batch.name]), batch)
        carry = carried(carry, after, entries[-1].id, len(entries))
    if result is None:
        state = job.state
        if state.pending and len(state.pending) >= job.table.update_cadence:
            job.flush_updates()
        from horizon_broker.ingest.job import BatchResult

        result = BatchResult(seq=0, rows=0, skipped=True, high=state.high, sources=())
    result = dataclasses.replace(result, stream_trimmed=trimmed)  # the pass's gaps, all told
    return remembered(job, with_lag(result, table_lag(job, source, client)))


def checked_read(
    job: IngestJob,
    source: StreamSource,
    client: Any,
    after: str | None,
    through: str | None,
    carry: Carry | None,
) -> tuple[list[Entry], StreamPosition, int]:
    """The next batch's entries (after ``after`` through ``through``, at most ``max_events``)
    and where ``after`` stood as they were read, judged as the pass's first trim check judges
    (1: a gap, skipped under ``on_stream_trimmed = "skip"``; raises under ``stop``): entries a
    producer trimmed since the last batch are found on the read that would skip them. The
    witness is the carry's while it holds (:func:`trusted_carry`), else the job's."""
    entries, position = judged_read(client, source.key, after, through, source.max_events)
    trusted = trusted_carry(carry, after, position)
    witness = trusted.witness if trusted is not None else None
    return entries, position, judge_position(job, source, after, position, witness)


def trusted_carry(carry: Carry | None, after: str | None, position: StreamPosition) -> Carry | None:
    """``carry`` if it witnesses ``after`` and no entry after the offset it was counted at was
    deleted since (its sum of entries read would count one that was not added after them)."""
    if carry is None or carry.witness.offset != after:
        return None
    deleted = position.max_deleted
    if deleted is not None and deleted != "0-0" and entry_key(deleted) > entry_key(carry.since):
        return None
    return carry


def table_lag(job: IngestJob, source: StreamSource, client: Any) -> Lag:
    """How far the table's slowest owned partition is behind the stream's head (counted by the
    one script that also refreshes the job's witness of its offset)."""
    after, position = _position(job, source, client)
    _remember_witness(job, source, after, position)
    if not position.after or position.oldest_after is None:
        return Lag(0, 0.0)
    waited = (time.time_ns() // 1_000_000 - entry_ms(position.oldest_after)) / 1000
    return Lag(position.after, max(0.0, waited))


def counted_carry(job: IngestJob, source: StreamSource) -> Carry | None:
    """The job's last counted witness of the stream, to carry along a pass's batches (None:
    it has counted nothing yet)."""
    witness = _witnesses.get(job, {}).get(source.key)
    return None if witness is None else Carry(witness.offset, witness)


def passing_lag(
    job: IngestJob,
    source: StreamSource,
    client: Any,
    carry: Carry | None,
    oldest: str,
    position: StreamPosition,
) -> tuple[Lag, Carry | None]:
    """The lag between two batches of a pass (``oldest``: the next batch's first entry, the
    oldest unread; ``position``: where the offset stood as it was read) and the carry for the
    batches after it: said by the carry without a count when it can be
    (:func:`horizon_broker.ingest.redis_stream_trim.carried_lag`), else counted as
    :func:`table_lag` does, once: the count's witness is carried on from there."""
    if carry is not None:
        after, _ = read_bounds(owned_offsets(job, source.key), job.partitions)
        events = carried_lag(carry, after, position)
        if events is not None:
            waited = (time.time_ns() // 1_000_000 - entry_ms(oldest)) / 1000
            return Lag(events, max(0.0, waited)), carry
    return table_lag(job, source, client), counted_carry(job, source)


def check_trimmed(job: IngestJob, source: StreamSource, client: Any) -> int:
    """Whether entries after the table's offset were removed from the stream unread (1, skipped
    under ``on_stream_trimmed = "skip"``, the gap then taken as seen) or not (0); raises
    :class:`horizon_broker.ingest.redis_stream_trim.StreamTrimmed` under ``stop``. Counts the
    entries after the offset only when its entry is gone (the lag after the pass counts)."""
    after, position = _position(job, source, client, count=False)
    return judge_position(job, source, after, position)


def judge_position(
    job: IngestJob,
    source: StreamSource,
    after: str | None,
    position: StreamPosition,
    witness: Witness | None = None,
) -> int:
    """:func:`check_trimmed`'s judgement of ``position`` (``witness``: None, the job's last of
    the stream). A gap skipped is taken as seen: its count as the offset's witness, its deletion
    by id (the same ``max-deleted-entry-id`` is not judged again)."""
    known = _seen_deleted.get(job, {}).get(source.key)
    judged = position
    if known is not None and position.max_deleted == known:
        judged = dataclasses.replace(position, max_deleted=None)
    if witness is None:
        witness = _witnesses.get(job, {}).get(source.key)
    gap = judged_gap(job.table.name, source.address, after, judged, witness, source.on_trimmed)
    if gap is None:
        _remember_witness(job, source, after, position)
        return 0
    if position.max_deleted is not None:
        _seen_deleted.setdefault(job, {})[source.key] = position.max_deleted
    if after is not None and position.entries_added is not None and position.counted:
        seen = Witness(after, position.entries_added - position.after)
        _witnesses.setdefault(job, {})[source.key] = seen
    else:
        _remember_witness(job, source, after, position)
    return 1


def _position(
    job: IngestJob, source: StreamSource, client: Any, *, count: bool = True
) -> tuple[str | None, StreamPosition]:
    after, _ = read_bounds(owned_offsets(job, source.key), job.partitions)
    return after, stream_position(client, source.key, after, LAG_COUNT_CAP, count=count)


def _remember_witness(
    job: IngestJob, source: StreamSource, after: str | None, position: StreamPosition
) -> None:
    found = witness_of(after, position)
    if found is not None:
        _witnesses.setdefault(job, {})[source.key] = found


def with_arrival(result: BatchResult, batch: StreamBatch) -> BatchResult:
    """``result`` with its batch's dead letters and how long its oldest entry waited."""
    return dataclasses.replace(
        result,
        dead_letters=batch.dead_letters,
        arrival_to_announced_s=None if result.skipped else time.time() - batch.first_ms / 1000,
    )


def with_lag(result: BatchResult, behind: Lag) -> BatchResult:
    return dataclasses.replace(result, stream_lag_events=behind.events, stream_lag_s=behind.seconds)


def remembered(job: IngestJob, result: BatchResult) -> BatchResult:
    """``result`` with its snapshot token, kept as the job's last result."""
    token = tokens.encode({job.table.name: result.high}) if result.high else ""
    job.last_result = dataclasses.replace(result, token=token)
    return job.last_result


@contextlib.contextmanager
def stream_errors(source: StreamSource) -> Iterator[None]:
    """Redis errors of the stream as Horizon's: the stream's server unreachable is UNAVAILABLE
    (the pass is retried), a key that is not a stream FAILED_PRECONDITION; both name it."""
    import redis

    try:
        yield
    except TRANSIENT as error:
        raise Unavailable(f"stream {source.address} cannot be read: {error}") from None
    except redis.ResponseError as error:
        if "WRONGTYPE" in str(error):
            raise FailedPrecondition(
                f"stream {source.address}: key {source.key!r} holds another type, not a stream"
            ) from None
        raise Unavailable(f"stream {source.address}: {error}") from None


class StreamClients:
    """One Redis connection per stream server URL, shared by the tables reading from it."""

    def __init__(self) -> None:
        self._clients: dict[str, Any] = {}

    def of(self, source: StreamSource) -> Any:
        if source.url not in self._clients:
            self._clients[source.url] = connect(source.url, socket_timeout=30.0)
        return self._clients[source.url]

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
