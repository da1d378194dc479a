"""The records compactions leave under ``<table root>/_compaction/``, as ingest and compaction both read them.

A compaction (:mod:`horizon_broker.compaction.run`) writes one JSON record per published run naming its inputs
and outputs; :mod:`horizon_broker.compaction.collect` withdraws and deletes the inputs from them once their grace
period is over. Ingestion reads them too: a commit rolled forward after a crash must not announce
again a segment a compaction took in meanwhile (:func:`compacted_inputs`). This module lives in
``ingest/`` because compaction sits above ingestion: both may import it.
"""

from __future__ import annotations

import json

from horizon_broker.ingest.storage import Storage
from horizon_broker.timeline.segment import Segment, SegmentId


def compaction_record_dir(table_root: str) -> str:
    """Where the compaction records of a table live."""
    return f"{table_root}/_compaction"


def compacted_inputs(storage: Storage, table_root: str) -> set[SegmentId]:
    """Every segment a compaction record names as an input (not collected yet)."""
    found: set[SegmentId] = set()
    for info in storage.list_files(compaction_record_dir(table_root), suffix=".json"):
        body = json.loads(storage.read_text(info.path))
        found.update(Segment.from_dict(item).id for item in body["inputs"])
    return found
