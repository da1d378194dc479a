"""From the follower's table views to the rewriter's catalog (pure).

Each table view is one atomic picture of a table (descriptor, timeline generation, visible
segments, LWM, retention horizon); the catalog entry names the temp view(s) that will hold exactly
those segments (:func:`broker.spark.scan_layout.scan_layout`, which the view cache uses too), so the
rewritten SQL and the files Spark reads always belong together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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
) -> Catalog:
    """The rewriter's catalog: one entry per table view, plus placeholders for ``unavailable``
    descriptors. ``layout_of`` gives a table view's layout (a cache's), else it is derived."""
    entries = [
        catalog_table(view, namespace, layout=layout_of(view) if layout_of else None)
        for view in table_views
    ]
    entries += [unavailable_table(descriptor) for descriptor in unavailable]
    return Catalog(entries)
