"""Which Spark temp views hold a table's visible segments, and under which names (pure).

A segment is *settled* when its greatest ``validFrom`` (``Segment.max_valid_from``) is known and
at or below the table's LWM. Let T be the greatest maximum among the settled segments: at any
snapshot ``S >= T`` every row of a settled segment passes ``validFrom <= S``, so a scan of those
segments needs only the ``validUntil`` test, and Spark need not decode ``validFrom`` for them.
The settled segments are therefore read through a view of their own; the others (the *rest*)
through the table's usual view, which keeps the full visibility predicate.

A table without settled segments keeps exactly one view, ``__horizon_<table>_g<generation>``.
With settled segments the names carry T as well, ``..._g<generation>_t<T>`` (rest) and
``..._g<generation>_t<T>_s`` (settled): the LWM moves without a new timeline generation, so one
generation can be split at several thresholds, and each split must have names of its own (a
query rewritten for one split must never read the views of another).

The rewriter's catalog, the view cache and the passthrough file lists all derive the layout
from the same table view with :func:`view_layout`, so they always agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

VIEW_PREFIX = "__horizon_"
SETTLED_SUFFIX = "_s"


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
class ViewPart:
    """One temp view of a table: its name and the segments whose files it reads."""

    name: str
    segments: tuple[Any, ...]
    settled: bool

    @property
    def files(self) -> tuple[str, ...]:
        return segment_files(self.segments)


@dataclass(frozen=True, slots=True)
class ViewLayout:
    """How a table view's visible segments are split between temp views.

    ``rest`` holds the segments that keep the full predicate (every segment when nothing is
    settled; None when every segment is settled); ``settled`` the settled ones (None when there
    are none), and ``settled_through`` is their greatest ``max_valid_from`` (T).
    """

    rest: ViewPart | None
    settled: ViewPart | None = None
    settled_through: int | None = None

    @property
    def parts(self) -> tuple[ViewPart, ...]:
        """The views to build and register, rest first."""
        return tuple(part for part in (self.rest, self.settled) if part is not None)

    @property
    def main_view(self) -> str:
        """The view named in a query's metadata: the rest view, or the settled one if alone."""
        return self.parts[0].name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(part.name for part in self.parts)


def split_layout(
    table: str, generation: int, segments: Iterable[Any], lwm: int | None, namespace: str = ""
) -> ViewLayout:
    """The layout of ``segments`` (a table's visible set at ``generation``) at LWM ``lwm``."""
    segments = tuple(segments)
    base = view_name(table, generation, namespace)
    settled = tuple(segment for segment in segments if is_settled(segment, lwm))
    if not settled:
        return ViewLayout(rest=ViewPart(base, segments, settled=False))
    threshold = max(segment.max_valid_from for segment in settled)
    rest = tuple(segment for segment in segments if not is_settled(segment, lwm))
    split = f"{base}_t{threshold}"
    return ViewLayout(
        rest=ViewPart(split, rest, settled=False) if rest else None,
        settled=ViewPart(split + SETTLED_SUFFIX, settled, settled=True),
        settled_through=threshold,
    )


def view_layout(table_view: Any, namespace: str = "") -> ViewLayout:
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
