"""Entries trimmed from a table's Redis stream before the table read them: found, never skipped
silently.

A Redis stream forgets its oldest entries when a producer caps it (``XADD ... MAXLEN``,
``XTRIM``) and any entry ``XDEL`` names. A table reads by id after its committed offset, so an
entry removed before the table reached it would simply never be read. Every pass (and every
micro-batch of ``--stream``) first asks the stream where the offset stands
(:func:`stream_position`: one script, XINFO STREAM and, only when the offset's entry is gone, a
count of the entries after it) and judges (:func:`trim_gap`); so does every batch's read
(:func:`read_position`, the same script), which starts at the offset's own entry: a producer
trimming *during* a pass, between its batches or between a micro-batch's check and its Spark
task's read, is judged on the very read that would otherwise skip the entries. The rules:

- an entry deleted after the offset (``max-deleted-entry-id`` past it) was lost;
- a table that has read nothing (no offset, or ``0-0``, which no entry has) lost every entry ever
  removed (``entries-added`` minus ``length``);
- while the offset's entry is still in the stream, nothing after it was trimmed (trimming
  removes the oldest entries first);
- the offset's entry deleted alone (``XDEL``, the stream still holding an entry before it, so no
  trim reached it, and nothing after it deleted) lost nothing;
- once it is gone, the entries lost are those ever added after it minus those still there: the
  server remembers how many entries had been added up to its offset (a :class:`Witness`, taken
  whenever it counts the lag, while the offset's entry is still there, and carried along a
  pass's batches). A server that started after its offset's entry was trimmed has no witness and
  cannot tell: it says entries *may* have been lost. A stream deleted entirely (``DEL``; its
  ``entries-added`` falls below the witness's) lost what it held unread, how much unknown.

Counting walks up to the count cap (1M entries) in Redis, so a pass counts once: its last lag,
which refreshes the witness; the trim check counts only in the one case it needs the count (the
offset's entry gone), and the lag between a pass's batches is carried (:class:`Carry`: the
witness plus the entries each batch read) instead of counted, after one count if the server had
no witness of its offset yet.

A gap stops the table (:class:`StreamTrimmed`, FAILED_PRECONDITION, naming the stream, the offset
and what was lost) unless its entry sets ``on_stream_trimmed = "skip"``: then the gap is logged
and counted and the table reads on from the stream's first entry. Either way the metric
``horizon_ingest_stream_trimmed`` counts it. Under ``skip`` a gap is counted once: a deletion
is taken as seen by its id (``max-deleted-entry-id``), so a later ``XDEL`` of an older unread
entry in the same stretch is not told apart. Redis before 7.0 lacks the counters: nothing is
checked there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from horizon_broker._core.errors import FailedPrecondition
from horizon_broker._core.lua import lua_file
from horizon_broker.ingest.stream_offsets import entry_key

log = logging.getLogger(__name__)

_STREAM_POSITION = lua_file(__package__, "stream_position")


class OnTrimmed(StrEnum):
    """What a stream table does when entries were trimmed before it read them."""

    STOP = "stop"
    """Fail the pass (the table stops, the others go on) with :class:`StreamTrimmed`."""
    SKIP = "skip"
    """Log and count the gap, then read on from the stream's first entry."""


class StreamTrimmed(FailedPrecondition):
    """Entries of a table's stream were removed before the table read them."""


@dataclass(frozen=True, slots=True)
class StreamPosition:
    """Where an offset stands in a stream (:func:`stream_position`)."""

    entries_added: int | None
    """Entries ever added to the stream (None: Redis before 7.0)."""
    length: int
    first: str | None
    """The stream's first entry's id (None: empty)."""
    max_deleted: str | None
    """The newest id ``XDEL`` removed (``0-0``: none; None: Redis before 7.0)."""
    offset_present: bool
    """Whether the offset's entry is still in the stream."""
    after: int
    """Entries after the offset (at most the count asked for)."""
    oldest_after: str | None
    capped: bool
    """Whether :attr:`after` stopped at the count asked for."""
    counted: bool = True
    """Whether :attr:`after` and :attr:`oldest_after` were counted (else 0 and None)."""


@dataclass(frozen=True, slots=True)
class Witness:
    """How many entries had been added to the stream up to and including ``offset``."""

    offset: str
    added_through: int


@dataclass(frozen=True, slots=True)
class Gap:
    """Entries removed before the table read them."""

    reason: str
    lost: int | None
    """How many (None: unknown)."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def stream_position(
    client: Any, key: str, offset: str | None, cap: int, *, count: bool = True
) -> StreamPosition:
    """Where ``offset`` (None: before the first entry) stands in stream ``key`` (one script);
    ``count=False``: the entries after it counted only if its entry is gone (a trim check)."""
    mode = "always" if count else "if-gone"
    reply = client.eval(_STREAM_POSITION, 1, key, _anchor(offset), cap, mode)
    return _position_of(reply, cap)


def read_position(
    client: Any, key: str, offset: str | None, through: str | None, most: int | None, cap: int
) -> tuple[StreamPosition, list[tuple[str, dict[str, str]]]]:
    """The entries after ``offset`` through ``through`` (None: the head), at most ``most``
    (None: every one), and where ``offset`` stood as they were read (as a trim check sees it):
    one script, reading from the offset's own entry, so no trim falls between the two."""
    reply = client.eval(
        _STREAM_POSITION,
        1,
        key,
        _anchor(offset),
        cap,
        "if-gone",
        through or "+",
        "" if most is None else most,
    )
    entries = [
        (_text(entry_id), {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)})
        for entry_id, flat in reply[8]
    ]
    return _position_of(reply, cap), entries


def _position_of(reply: list[Any], cap: int) -> StreamPosition:
    added, length, first, deleted, here, after, oldest, counted = reply[:8]
    added, deleted = int(added), _text(deleted)
    return StreamPosition(
        entries_added=None if added < 0 else added,
        length=int(length),
        first=_text(first) or None,
        max_deleted=deleted or None,
        offset_present=bool(here),
        after=int(after),
        oldest_after=_text(oldest) or None,
        capped=bool(counted) and int(after) >= cap,
        counted=bool(counted),
    )


def _anchor(offset: str | None) -> str:
    """An offset as the script takes it: '' for none, and for ``0-0`` (no entry has that id:
    an offset there is before the first entry, with no entry of its own to look up)."""
    return "" if offset is None or offset == "0-0" else offset


def witness_of(offset: str | None, position: StreamPosition) -> Witness | None:
    """The witness ``position`` gives of ``offset``: only while its entry is still there and
    every entry after it was counted (and nothing after it was deleted: the count would miss
    those)."""
    if (
        offset is None
        or position.entries_added is None
        or not position.counted
        or not position.offset_present
        or position.capped
        or _after(position.max_deleted, offset)
    ):
        return None
    return Witness(offset, position.entries_added - position.after)


@dataclass(frozen=True, slots=True)
class Carry:
    """A counted witness carried along a pass's batches without counting again."""

    since: str
    """The offset it was counted at: an entry deleted after it voids the carry."""
    witness: Witness
    """The witness of the last offset it was carried to."""


def carried(carry: Carry | None, offset: str | None, last: str, read: int) -> Carry | None:
    """``carry`` once a batch read ``read`` entries right after ``offset`` through ``last``:
    a stream holds its entries contiguously, so ``read`` more had been added through ``last``
    (None: no carry, or not one of ``offset``).

    >>> carried(Carry("3-0", Witness("3-0", 3)), "3-0", "6-0", 2)
    Carry(since='3-0', witness=Witness(offset='6-0', added_through=5))
    """
    if carry is None or carry.witness.offset != offset:
        return None
    return Carry(carry.since, Witness(last, carry.witness.added_through + read))


def carried_lag(carry: Carry, offset: str | None, position: StreamPosition) -> int | None:
    """The entries after ``offset`` without counting them: entries ever added minus those added
    through it (the carry's witness). None when that cannot be trusted: a witness of another
    offset, Redis before 7.0, the offset's entry gone, or an entry deleted after the carry was
    counted (the carried sum would miss it).

    >>> here = StreamPosition(20, 20, "1-0", "0-0", True, 0, None, False, counted=False)
    >>> carry = Carry("3-0", Witness("9-0", 9))
    >>> carried_lag(carry, "9-0", here), carried_lag(carry, "8-0", here)
    (11, None)
    """
    if (
        offset is None
        or carry.witness.offset != offset
        or position.entries_added is None
        or not position.offset_present
        or _after(position.max_deleted, carry.since)
    ):
        return None
    return max(0, position.entries_added - carry.witness.added_through)


def trim_gap(offset: str | None, position: StreamPosition, witness: Witness | None) -> Gap | None:
    """The entries after ``offset`` (the last entry the table read; None: none) removed from the
    stream unread, if any (pure; ``witness``: the server's last of this stream).

    >>> here = StreamPosition(10, 4, "7-0", "0-0", False, 4, "7-0", False)
    >>> trim_gap("3-0", here, Witness("3-0", 3)).lost, trim_gap("3-0", here, Witness("3-0", 6))
    (3, None)
    """
    added = position.entries_added
    if added is None:
        return None
    if offset is None or not _anchor(offset):
        lost = added - position.length
        return Gap(f"{lost} entries were removed before the table read any", lost) if lost else None
    if _after(position.max_deleted, offset):
        return Gap(f"entries up to {position.max_deleted} were deleted (XDEL) unread", None)
    if witness is not None and witness.offset == offset and added < witness.added_through:
        return Gap(
            f"the stream was deleted (its entries-added fell from {witness.added_through} to "
            f"{added}): what it held after the offset is unknown",
            None,
        )
    if position.offset_present or _only_its_entry_deleted(offset, position):
        return None
    if (
        witness is not None
        and witness.offset == offset
        and position.counted
        and not position.capped
    ):
        lost = added - witness.added_through - position.after
        if lost <= 0:
            return None
        return Gap(f"{lost} entries after it were trimmed unread", lost)
    first = position.first or "none (the stream is empty)"
    return Gap(
        f"its entry is no longer in the stream (the first is {first}) and this server did not "
        "see how many entries followed it: entries after it may have been trimmed unread",
        None,
    )


def judged_gap(
    table: str,
    address: str,
    offset: str | None,
    position: StreamPosition,
    witness: Witness | None,
    policy: OnTrimmed,
) -> Gap | None:
    """The gap, if any: raised as :class:`StreamTrimmed` under ``stop``, logged under ``skip``."""
    gap = trim_gap(offset, position, witness)
    if gap is None:
        return None
    where = f"offset {offset}" if offset else "no offset yet"
    message = (
        f"table {table!r}: stream {address} lost entries before the table read them ({where}: "
        f"{gap.reason})"
    )
    if policy is OnTrimmed.STOP:
        raise StreamTrimmed(
            f"{message}. The table stops rather than skip them: re-snapshot the source, or set "
            "on_stream_trimmed = \"skip\" on the table's entry to read on from the stream's "
            "first entry; cap the stream (MAXLEN/MINID) above the table's lag"
        )
    log.warning("%s; reading on from the stream's first entry (on_stream_trimmed = skip)", message)
    return gap


def _only_its_entry_deleted(offset: str, position: StreamPosition) -> bool:
    """Whether the offset's entry alone is gone: the stream still holds an entry before it, so
    no trim reached it (trims remove the oldest entries first), and nothing after it was
    deleted (checked before): it was deleted itself (XDEL), after the table read it."""
    first = position.first
    return first is not None and entry_key(first) < entry_key(offset)


def _after(deleted: str | None, offset: str) -> bool:
    return deleted is not None and deleted != "0-0" and entry_key(deleted) > entry_key(offset)
