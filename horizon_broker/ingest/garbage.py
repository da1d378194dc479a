"""Garbage collection: files of segments an update replaced, and private files nothing needs.

The updater replaces a segment by announcing its rewrite and withdrawing it in one step; queries
planned just before may still read the old files, so they are deleted only after a grace period.
What to delete comes from the commit log (an update's commit names the segments it removed, its
``done`` the time the replacement was published), so collection survives restarts. A file still
used by an announced segment (of any server) is never deleted.

A server's private files (its key index and its pending validUntil updates) are read by that server
alone, so they go as soon as its commit log no longer references them: after each transaction, every
directory of one batch that the state does not name is swept (:func:`sweep_unreferenced`). Without
this, key index levels replaced by a full index would fill the disk at the rate of the table's size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from horizon_broker.ingest.manifest import Garbage
from horizon_broker.ingest.segments import (
    CHUNK_DIR_COLUMN,
    SEGMENT_DIR_COLUMN,
    segment_directory_of,
)
from horizon_broker.ingest.storage import Storage
from horizon_broker.watermark.server import ServerClient

_CHUNK = f"{CHUNK_DIR_COLUMN}="
_SEGMENT = f"{SEGMENT_DIR_COLUMN}="


@dataclass(frozen=True, slots=True)
class Collection:
    """What one collection deletes: the updates whose replaced files all go, and those files."""

    seqs: tuple[int, ...]
    locations: tuple[str, ...]


def collectable(
    garbage: Mapping[int, Garbage],
    now_ms: int,
    grace_ms: int,
    in_use: Iterable[str],
    held: Callable[[int], bool] = lambda released_ms: False,
) -> Collection:
    """The garbage whose grace period is over, none of whose files an announced segment uses and
    that no snapshot pin holds (``held(released_ms)``, see :func:`horizon_broker.pins.rules.holds_release`)
    (pure). Files are compared by the segment directory they live in (see :mod:`horizon_broker.ingest.segments`).
    """
    used = {segment_directory(location) for location in in_use}
    seqs: list[int] = []
    locations: list[str] = []
    for seq, item in sorted(garbage.items()):
        if item.released_ms is None or item.released_ms + grace_ms > now_ms:
            continue
        if held(item.released_ms):
            continue
        if any(segment_directory(location) in used for location in item.locations):
            continue
        seqs.append(seq)
        locations.extend(item.locations)
    return Collection(tuple(seqs), tuple(locations))


def segment_directory(location: str) -> str:
    """The ``_chunk=<chunk>/_seg=<partition>`` directory of a segment file (the file itself if it
    is not in one): every file below that directory belongs to the one segment."""
    directory = segment_directory_of(location)
    return location if directory is None else directory


def delete_files(storage: Storage, locations: Iterable[str]) -> None:
    """Delete the files, their segment directories, and the chunk and attempt directories above
    them that are left with no segment.

    Idempotent: absent files are fine, so a collection interrupted by a crash is simply redone.
    """
    chunks: set[str] = set()
    for directory in sorted({segment_directory(location) for location in locations}):
        storage.delete(directory)
        if segment_directory_of(directory + "/") is not None:
            chunks.add(directory.rsplit("/", 1)[0])
    attempts = {
        chunk.rsplit("/", 1)[0] for chunk in chunks if _delete_if_without(storage, chunk, _SEGMENT)
    }
    for attempt in sorted(attempts):
        _delete_if_without(storage, attempt, _CHUNK)


def announced_paths(client: ServerClient, table: str) -> frozenset[str]:
    """The segment directories (see :func:`segment_directory`) of every segment announced for
    ``table`` by any server, read from the state store now."""
    return frozenset(
        segment_directory(location)
        for segment in client.announced_segments(table)
        for location in segment.location
    )


def delete_unannounced(storage: Storage, client: ServerClient, table: str, directory: str) -> bool:
    """Clean up after a failed publish of what was written under ``directory``: delete only the
    segment directories no announcement names. Returns whether the whole directory went.

    A failed publish may have taken effect: Redis runs a script and the reply can be lost (the
    client retries, then says UNAVAILABLE), and a retry of a script that had run can be refused
    (a lock lost in between). Deleting everything then would leave announced, visible segments
    without files, the segments they replaced withdrawn or overshadowed: neither the old data
    nor the new readable. So the state store decides; when it cannot be read, nothing is deleted
    and :class:`Unavailable` is raised (a file too many is only disk; an announced segment
    without files is a broken table).
    """
    base = directory.rstrip("/")
    announced = announced_paths(client, table)
    kept = {path for path in announced if path.startswith(base + "/")}
    if not kept:
        storage.delete(base)
        return True
    written = [
        segment.path.rstrip("/")
        for chunk in storage.list_dir(base)
        for segment in storage.list_dir(chunk.path)
    ]
    delete_files(storage, [path for path in written if path not in kept])
    return False


def _delete_if_without(storage: Storage, directory: str, prefix: str) -> bool:
    """Delete ``directory`` unless one of its entries' names starts with ``prefix``; whether it
    went."""
    children = storage.list_dir(directory)
    if any(c.path.rstrip("/").rsplit("/", 1)[-1].startswith(prefix) for c in children):
        return False
    storage.delete(directory)
    return True


def collection_due(garbage: Mapping[int, Garbage], now_ms: int, grace_ms: int) -> bool:
    """Whether to collect now (pure): some garbage is past its grace period by a slack of a tenth
    of it (at most a minute), so collections, each a commit log transaction and a read of the
    announced segments, come in bunches rather than after every update."""
    slack = min(grace_ms // 10, 60_000)
    return any(
        item.released_ms is not None and item.released_ms + grace_ms + slack <= now_ms
        for item in garbage.values()
    )


def unreferenced(
    listed: Iterable[str], children: Mapping[str, Iterable[str]], referenced: Iterable[str]
) -> list[str]:
    """The directories to delete (pure): each listed batch directory that is not referenced, or
    only the unreferenced children of one that has a referenced child (``children`` maps a batch
    directory to its entries)."""
    keep = {path.rstrip("/") for path in referenced}
    doomed: list[str] = []
    for directory in listed:
        directory = directory.rstrip("/")
        if directory in keep:
            continue
        entries = [entry.rstrip("/") for entry in children.get(directory, ())]
        if any(entry in keep for entry in entries):
            doomed.extend(entry for entry in entries if entry not in keep)
        else:
            doomed.append(directory)
    return doomed


def sweep_unreferenced(storage: Storage, base: str, referenced: Iterable[str]) -> int:
    """Delete the batch directories under ``base`` (and their children) that ``referenced`` does
    not name; returns how many paths went. Idempotent, like every delete here."""
    keep = {path.rstrip("/") for path in referenced}
    listed = [info.path.rstrip("/") for info in storage.list_dir(base)]
    children = {  # listed only where a child can be kept
        path: [info.path for info in storage.list_dir(path)]
        for path in listed
        if any(kept.startswith(path + "/") for kept in keep)
    }
    doomed = unreferenced(listed, children, keep)
    for path in doomed:
        storage.delete(path)
    return len(doomed)
