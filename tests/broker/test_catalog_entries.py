"""Catalog entries are kept per table state: the same entry a fresh build gives, its segment
facts gathered once per timeline generation however often the LWM moves (pure)."""

from __future__ import annotations

import dataclasses
from typing import Any

from horizon_broker.broker.engine.catalog import CatalogEntries, catalog_table
from horizon_broker.broker.spark.scan_layout import scan_layout
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor

DESCRIPTOR = TableDescriptor(
    name="t", columns=(ColumnSpec("id", "bigint"), ColumnSpec("v", "string")), primary_key=("id",)
)


@dataclasses.dataclass(frozen=True)
class View:
    table: str
    descriptor: Any
    generation: int
    visible_segments: tuple[Segment, ...]
    lwm: int
    retention_horizon: int = 0


def _segments(count: int) -> tuple[Segment, ...]:
    return tuple(
        Segment(
            table="t", interval=Interval(i * 3_600_000, (i + 1) * 3_600_000), version="v1",
            partition=0, location=(f"/data/t/{i}.parquet",), row_count=10, max_valid_from=50,
        )
        for i in range(count)
    )  # fmt: skip


def test_a_kept_entry_equals_a_fresh_one_and_a_moving_lwm_reuses_the_segment_facts() -> None:
    entries = CatalogEntries()
    view = View("t", DESCRIPTOR, 1, _segments(20), lwm=100)
    for lwm in (100, 100, 120, 140, 100):
        moved = dataclasses.replace(view, lwm=lwm)
        layout = scan_layout(moved)
        assert entries.entry(moved, "", layout) == catalog_table(moved, layout=layout)
    assert entries.built == 3  # one per distinct LWM
    assert entries.facts_built == 1
    changed = dataclasses.replace(view, generation=2, visible_segments=_segments(21))
    layout = scan_layout(changed)
    entry = entries.entry(changed, "", layout)
    assert entry == catalog_table(changed, layout=layout) and len(entry.segments) == 21
    assert entries.facts_built == 2 and entry.rows == 210
