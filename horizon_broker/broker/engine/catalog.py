"""From the follower's table views to the rewriter's catalog (pure).

Each table view is one atomic picture of a table (descriptor, timeline generation, visible
segments, LWM, retention horizon); the catalog entry names the temp view(s) that will hold exactly
those segments (:func:`horizon_broker.broker.spark.scan_layout.scan_layout`, which the view cache uses too), so the
rewritten SQL and the files Spark reads always belong together.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from horizon_broker._core.lru import Lru
from horizon_broker.broker.spark.scan_layout import (
    ScanLayout,
    scan_layout,
    segment_files,
    view_name,
)
from horizon_broker.broker.spark.segment_schema import storage_column_names
from horizon_broker.broker.sql.catalog import Catalog, CatalogTable
from horizon_broker.broker.sql.feed_files import FileValidity, file_validity


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    """What a catalog entry says of a table's visible segments: their ids, files and rows.
    It costs in proportion to the segments and changes only with the timeline's generation."""

    segments: tuple[str, ...]
    files: tuple[str, ...]
    rows: int
    validity: tuple[FileValidity, ...] = ()
    """Each file's validity bounds (the change feed's file pruning)."""

    @staticmethod
    def of(visible_segments: Iterable[Any]) -> SegmentFacts:
        segments = tuple(visible_segments)
        return SegmentFacts(
            tuple(str(segment.id) for segment in segments),
            segment_files(segments),
            sum(int(segment.row_count or 0) for segment in segments),
            file_validity(segments),
        )


def catalog_table(
    table_view: Any,
    namespace: str = "",
    *,
    layout: ScanLayout | None = None,
    facts: SegmentFacts | None = None,
) -> CatalogTable:
    """The catalog entry of one follower table view (``layout``: its view layout, ``facts``:
    its segments', when the caller has them already)."""
    if layout is None:
        layout = scan_layout(table_view, namespace)
    if facts is None:
        facts = SegmentFacts.of(table_view.visible_segments)
    return CatalogTable.from_descriptor(
        table_view.descriptor,
        lwm=table_view.lwm,
        retention_horizon=int(table_view.retention_horizon or 0),
        source_view=layout.rest.name if layout.rest is not None else "",
        segments=facts.segments,
        files=facts.files,
        settled_view=layout.settled.name if layout.settled is not None else "",
        settled_through=layout.settled_through,
        open_view=layout.open.name if layout.open is not None else "",
        closed_view=layout.closed.name if layout.closed is not None else "",
        closed_through=layout.closed_through,
        rows=facts.rows,
        file_validity=facts.validity,
        view_columns=storage_column_names(table_view.descriptor),
    )


ENTRIES_KEPT = 1_024
"""Catalog entries kept (one per table and state; a pinned read of a table is a state of its own)."""


class CatalogEntries:
    """Catalog entries built once per table state, not once per query.

    An entry lists every visible segment and file of its table, which costs in proportion to the
    table's segments (tens of milliseconds at 1,000) and changes only with the timeline's
    generation: those facts are kept per (table, descriptor, generation). The entry itself also
    holds the LWM and retention horizon, which move every second under ingestion; it is kept per
    full state, and rebuilt from the kept facts (cheaply) when only the LWM moved.
    """

    def __init__(self, capacity: int = ENTRIES_KEPT) -> None:
        self.capacity = capacity
        self._entries: Lru[Hashable, CatalogTable] = Lru(capacity)
        self._facts: Lru[Hashable, SegmentFacts] = Lru(capacity)

    @property
    def built(self) -> int:
        """Entries built (a test probe: a repeated query leaves it flat)."""
        return self._entries.misses

    @property
    def facts_built(self) -> int:
        """Segment facts gathered (a probe: a moving LWM leaves it flat)."""
        return self._facts.misses

    def _segment_facts(self, table_view: Any) -> SegmentFacts:
        key = (table_view.table.lower(), table_view.descriptor, int(table_view.generation))
        return self._facts.get_or_load(key, lambda: SegmentFacts.of(table_view.visible_segments))

    def entry(self, table_view: Any, namespace: str, layout: ScanLayout) -> CatalogTable:
        key = (
            table_view.table.lower(),
            table_view.descriptor,
            int(table_view.generation),
            table_view.lwm,
            int(table_view.retention_horizon or 0),
            namespace,
        )
        return self._entries.get_or_load(
            key,
            lambda: catalog_table(
                table_view, namespace, layout=layout, facts=self._segment_facts(table_view)
            ),
        )


def unavailable_table(descriptor: Any) -> CatalogTable:
    """A catalog entry for a table whose state cannot be served right now (no LWM, no files):
    the rewriter still resolves the name, and the broker reports the table's own error."""
    return CatalogTable.from_descriptor(
        descriptor, lwm=None, retention_horizon=0, source_view=view_name(descriptor.name, 0)
    )


def build_catalog(
    table_views: Iterable[Any],
    unavailable: Iterable[Any] = (),
    *,
    namespace: str = "",
    layout_of: Callable[[Any], ScanLayout] | None = None,
    kept: CatalogEntries | None = None,
) -> Catalog:
    """The rewriter's catalog: one entry per table view, plus placeholders for ``unavailable``
    descriptors. ``layout_of`` gives a table view's layout (a cache's), else it is derived;
    ``kept`` keeps entries between queries."""
    entries = []
    for view in table_views:
        layout = layout_of(view) if layout_of else scan_layout(view, namespace)
        entries.append(
            kept.entry(view, namespace, layout)
            if kept is not None
            else catalog_table(view, namespace, layout=layout)
        )
    entries += [unavailable_table(descriptor) for descriptor in unavailable]
    return Catalog(entries)
