"""From the follower's table views to the rewriter's catalog (pure).

Each table view is one atomic picture of a table (descriptor, timeline generation, visible
segments, LWM, retention horizon); the catalog entry names the temp view(s) that will hold exactly
those segments (:func:`broker.spark.scan_layout.scan_layout`, which the view cache uses too), so the
rewritten SQL and the files Spark reads always belong together.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from broker.spark.scan_layout import ScanLayout, scan_layout, segment_files, view_name
from broker.sql.catalog import Catalog, CatalogTable


def catalog_table(
    table_view: Any, namespace: str = "", *, layout: ScanLayout | None = None
) -> CatalogTable:
    """The catalog entry of one follower table view (``layout``: its view layout, when the
    caller has it already)."""
    segments = tuple(table_view.visible_segments)
    if layout is None:
        layout = scan_layout(table_view, namespace)
    return CatalogTable.from_descriptor(
        table_view.descriptor,
        lwm=table_view.lwm,
        retention_horizon=int(table_view.retention_horizon or 0),
        source_view=layout.rest.name if layout.rest is not None else "",
        segments=tuple(str(segment.id) for segment in segments),
        files=segment_files(segments),
        settled_view=layout.settled.name if layout.settled is not None else "",
        settled_through=layout.settled_through,
        open_view=layout.open.name if layout.open is not None else "",
        closed_view=layout.closed.name if layout.closed is not None else "",
        closed_through=layout.closed_through,
        rows=sum(int(segment.row_count or 0) for segment in segments),
    )


ENTRIES_KEPT = 1_024
"""Catalog entries kept (one per table and state; a pinned read of a table is a state of its own)."""


class CatalogEntries:
    """Catalog entries built once per table state, not once per query.

    An entry lists every visible segment and file of its table, so building it costs in
    proportion to the table's segments (tens of milliseconds at 1,000); a table's entry changes
    only with its descriptor, timeline generation (which names the visible segments), LWM or
    retention horizon, so it is kept until one of them moves.
    """

    def __init__(self, capacity: int = ENTRIES_KEPT) -> None:
        self.capacity = capacity
        self.built = 0
        """Entries built (a test probe: a repeated query leaves it flat)."""
        self._entries: OrderedDict[Hashable, CatalogTable] = OrderedDict()
        self._lock = threading.Lock()

    def entry(self, table_view: Any, namespace: str, layout: ScanLayout) -> CatalogTable:
        key = (
            table_view.table.lower(),
            table_view.descriptor,
            int(table_view.generation),
            table_view.lwm,
            int(table_view.retention_horizon or 0),
            namespace,
        )
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
        found = catalog_table(table_view, namespace, layout=layout)
        with self._lock:
            self._entries[key] = found
            self.built += 1
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return found


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
