"""Which Spark temp views hold a table's visible segment files, and under which names (pure).

A segment is *settled* when its greatest ``validFrom`` (``Segment.max_valid_from``) is known and
at or below the table's LWM. Let T be the greatest maximum among the settled segments: at any
snapshot ``S >= T`` every row of a settled segment passes ``validFrom <= S``. Ingestion also writes
a segment's *open* versions (``validUntil IS NULL``) and its *closed* ones in separate files
(``Segment.open_files``, ``Segment.max_valid_until``). The files are therefore read through up to
four views, each with the least test that is still exact:

* ``open`` – open files of settled segments: at ``S >= T`` every row is visible, no test at all;
* ``settled`` – other files of settled segments that mix open and closed rows: only the
  ``validUntil`` test at ``S >= T``;
* ``closed`` – closed files of any segment whose greatest ``validUntil`` is known and at or
  below the LWM: let C be the greatest; at ``S >= C`` no row is visible and the view is not read
  at all (so at the LWM it never is);
* ``rest`` – everything else (unsettled segments' other files): the full visibility predicate.

Below T (or C) each view falls back to the full predicate, so one layout serves time travel too.
A table whose files all belong to the rest keeps exactly one view, ``__horizon_<table>_g<gen>``;
a split names the rest ``..._g<gen>_t<T>_u<C>`` (each bound omitted when there is none) and the
others after it with a suffix: the LWM moves without a new timeline generation, so one
generation can be split at several thresholds, and each split must have names of its own (a
query rewritten for one split must never read the views of another).

The rewriter's catalog, the view cache and the passthrough file lists all derive the layout
from the same table view with :func:`scan_layout`, so they always agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

VIEW_PREFIX = "__horizon_"
SETTLED_SUFFIX = "_s"
OPEN_SUFFIX = "_o"
CLOSED_SUFFIX = "_c"

REST = "rest"
SETTLED = "settled"
OPEN = "open"
CLOSED = "closed"
"""The kinds of :class:`ScanPart`, in the order their views are registered."""


def view_name(table: str, generation: int, namespace: str = "") -> str:
    """The temp view that holds ``table``'s visible segments at timeline ``generation``.

    ``namespace`` separates brokers that share one Spark session (each follows its own state).
    """
    return f"{VIEW_PREFIX}{namespace}{table.lower()}_g{generation}"


def segment_files(segments: Iterable[Any]) -> tuple[str, ...]:
    """Every file of ``segments``, in segment order, without duplicates."""
    seen: dict[str, None] = {}
    for segment in segments:
        for path in segment.location:
            seen.setdefault(path, None)
    return tuple(seen)


def is_settled(segment: Any, lwm: int | None) -> bool:
    """True when no row of ``segment`` can have been committed after ``lwm`` (both known)."""
    max_valid_from = getattr(segment, "max_valid_from", None)
    return lwm is not None and max_valid_from is not None and max_valid_from <= lwm


@dataclass(frozen=True, slots=True)
class ScanPart:
    """One temp view of a table: its name, kind, and which files of which segments it reads."""

    name: str
    kind: str
    segments: tuple[Any, ...]
    files: tuple[str, ...]

    @property
    def settled(self) -> bool:
        """True when the part holds only settled segments' files (no ``validFrom`` test above T)."""
        return self.kind in (SETTLED, OPEN)


@dataclass(frozen=True, slots=True)
class ScanLayout:
    """How a table view's visible segment files are split between temp views.

    Each part is None when it would read no file. ``settled_through`` is the greatest
    ``max_valid_from`` of the settled segments (T; None when none is settled),
    ``closed_through`` the greatest ``max_valid_until`` of the closed part's files (C).
    """

    rest: ScanPart | None
    settled: ScanPart | None = None
    open: ScanPart | None = None
    closed: ScanPart | None = None
    settled_through: int | None = None
    closed_through: int | None = None

    @property
    def parts(self) -> tuple[ScanPart, ...]:
        """The views to build and register, rest first."""
        return tuple(
            part for part in (self.rest, self.settled, self.open, self.closed) if part is not None
        )

    @property
    def main_view(self) -> str:
        """The view named in a query's metadata: the rest view, or the first other one."""
        return self.parts[0].name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(part.name for part in self.parts)


def split_layout(
    table: str, generation: int, segments: Iterable[Any], lwm: int | None, namespace: str = ""
) -> ScanLayout:
    """The layout of ``segments`` (a table's visible set at ``generation``) at LWM ``lwm``.

    ``lwm`` None splits nothing (an append-only table tests no validity column anyway).
    """
    segments = tuple(segments)
    base = view_name(table, generation, namespace)
    if lwm is None:
        return ScanLayout(rest=ScanPart(base, REST, segments, segment_files(segments)))
    files: dict[str, dict[str, None]] = {kind: {} for kind in (REST, SETTLED, OPEN, CLOSED)}
    owners: dict[str, dict[int, Any]] = {kind: {} for kind in files}
    closed_bounds: list[int] = []
    for segment in segments:
        settled = is_settled(segment, lwm)
        open_files = set(getattr(segment, "open_files", ()))
        max_valid_until = getattr(segment, "max_valid_until", None)
        for path in segment.location:
            if path in open_files:
                kind = OPEN if settled else REST
            elif max_valid_until is not None and max_valid_until <= lwm:
                kind = CLOSED
                closed_bounds.append(max_valid_until)
            else:
                kind = SETTLED if settled else REST
            files[kind].setdefault(path, None)
            owners[kind].setdefault(id(segment), segment)
    settled_through = max(
        (segment.max_valid_from for segment in segments if is_settled(segment, lwm)), default=None
    )
    if not any(files[kind] for kind in (SETTLED, OPEN, CLOSED)):
        return ScanLayout(rest=ScanPart(base, REST, segments, tuple(files[REST])))
    closed_through = max(closed_bounds, default=None)
    split = base
    if settled_through is not None:
        split += f"_t{settled_through}"
    if closed_through is not None:
        split += f"_u{closed_through}"
    suffixes = {REST: "", SETTLED: SETTLED_SUFFIX, OPEN: OPEN_SUFFIX, CLOSED: CLOSED_SUFFIX}
    parts = {
        kind: ScanPart(split + suffixes[kind], kind, tuple(owners[kind].values()), tuple(paths))
        if paths
        else None
        for kind, paths in files.items()
    }
    return ScanLayout(
        rest=parts[REST],
        settled=parts[SETTLED],
        open=parts[OPEN],
        closed=parts[CLOSED],
        settled_through=settled_through,
        closed_through=closed_through,
    )


def scan_layout(table_view: Any, namespace: str = "") -> ScanLayout:
    """The layout of one follower table view (``follower.view(t)``), at its own LWM.

    Append-only tables are never split: their scans test no validity column anyway.
    """
    upsert = bool(getattr(table_view.descriptor, "upsert", True))
    return split_layout(
        table_view.table,
        int(table_view.generation),
        table_view.visible_segments,
        table_view.lwm if upsert else None,
        namespace,
    )
