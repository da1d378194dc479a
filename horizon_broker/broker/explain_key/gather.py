"""What explaining a key reads: the key's rows in every stored segment's files (pyarrow, with
the key as a row-group filter), and the compaction records naming what each input became.

Every segment the timeline holds is read (read, overshadowed and standby ones alike) and every
one the broker keeps out as unreadable, so that each copy of each version of the key is found;
a file that cannot be read is reported, not skipped silently. The rule itself is
:mod:`~horizon_broker.broker.explain_key.verdicts`'.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from horizon_broker.broker.direct_lookup.reading import is_local, local_path
from horizon_broker.broker.explain_key.key_values import KeyValue
from horizon_broker.broker.explain_key.places import Unreadable, segment_places
from horizon_broker.broker.explain_key.verdicts import (
    ReadPoint,
    StoredVersion,
    Verdict,
    explain_versions,
    summary,
)
from horizon_broker.timeline.interval import format_instant
from horizon_broker.timeline.results import TimelineSnapshot
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL

COMPACTION_RECORDS = "_compaction"
"""Where compactions leave their records under a table's root (see
:mod:`horizon_broker.ingest.compaction_records`)."""


@dataclass(frozen=True, slots=True)
class KeyExplanation:
    """A key's stored versions with their verdicts at one snapshot, and what could not be read."""

    table: str
    key: tuple[tuple[str, KeyValue], ...]
    point: ReadPoint
    verdicts: tuple[Verdict, ...]
    summary: str
    not_listed: tuple[tuple[str, str], ...] = field(default=())
    """``(segment id, why)`` for segments whose files could not be read for the key."""


def explain_key(
    table: str,
    key: tuple[tuple[str, KeyValue], ...],
    columns: Sequence[str],
    point: ReadPoint,
    *,
    timeline: TimelineSnapshot,
    read: Iterable[Segment],
    unreadable: Iterable[tuple[Segment, str]] = (),
    storage_root: str = "",
) -> KeyExplanation:
    """Read the key's versions from every stored segment and judge each at ``point``."""
    held = [segment for chunk in timeline.chunks for g in chunk.groups for segment in g.segments]
    lost = [(segment, why) for segment, why in unreadable if segment.table == table]
    marks = [
        Unreadable(str(s.id), f"{format_instant(s.interval.start_ms)}/"
                   f"{format_instant(s.interval.end_ms)}", s.version, why)
        for s, why in lost
    ]  # fmt: skip
    places = segment_places(
        timeline,
        (str(segment.id) for segment in read),
        marks,
        compaction_lineage(storage_root, table),
    )
    versions: list[StoredVersion] = []
    not_listed: list[tuple[str, str]] = []
    for segment in [*held, *(segment for segment, _ in lost)]:
        found, failures = segment_versions(segment, key, columns)
        versions += found
        not_listed += [(str(segment.id), why) for why in failures]
    verdicts = explain_versions(versions, places, point)
    return KeyExplanation(
        table, key, point, tuple(verdicts), summary(verdicts, point), tuple(not_listed)
    )


class KeyFilesUnreadable(Exception):
    """A segment file the key's rows could not be read from (message: which and why)."""


def segment_versions(
    segment: Segment, key: tuple[tuple[str, KeyValue], ...], columns: Sequence[str]
) -> tuple[list[StoredVersion], list[str]]:
    """The key's rows in one segment's files, and why each file that could not be read was not
    (the others' rows are still listed)."""
    found: list[StoredVersion] = []
    failures: list[str] = []
    for path in segment.location:
        try:
            rows = _key_rows(path, key, columns)
        except KeyFilesUnreadable as error:
            failures.append(str(error))
            continue
        for row in rows:
            values = tuple((name, row.get(name)) for name in columns)
            found.append(
                StoredVersion(
                    int(row[VALID_FROM]),
                    None if row[VALID_UNTIL] is None else int(row[VALID_UNTIL]),
                    str(segment.id),
                    path,
                    values,
                )
            )
    return found, failures


def _key_rows(
    path: str, key: tuple[tuple[str, KeyValue], ...], columns: Sequence[str]
) -> list[dict[str, Any]]:
    if not is_local(path):
        raise KeyFilesUnreadable(f"{path} is not on this broker's file system")
    local = local_path(path)
    try:
        schema = pq.read_schema(local)
        stored = {name.lower(): name for name in schema.names}
        wanted = [*columns, VALID_FROM, VALID_UNTIL]
        missing = [name for name in wanted if name.lower() not in stored]
        if missing:
            raise KeyFilesUnreadable(f"{path} has no column(s) {', '.join(missing)}")
        filters = [(stored[column.lower()], "==", value) for column, value in key]
        table = pq.read_table(
            local, columns=[stored[name.lower()] for name in wanted], filters=filters
        )
    except (OSError, pa.ArrowException) as error:
        raise KeyFilesUnreadable(f"cannot read {path}: {error}") from None
    renamed = table.rename_columns(wanted)
    return list(renamed.to_pylist())


def compaction_lineage(storage_root: str, table: str) -> dict[str, tuple[str, ...]]:
    """``{input segment id: output segment ids}`` from the compaction records not collected yet
    (an input maps to the outputs of its run whose time chunk and root range hold its own)."""
    if not storage_root or not is_local(storage_root):
        return {}
    directory = os.path.join(local_path(storage_root), COMPACTION_RECORDS)
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".json"))
    except OSError:
        return {}
    lineage: dict[str, tuple[str, ...]] = {}
    for name in names:
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                body = json.load(handle)
            inputs = [Segment.from_dict(item) for item in body["inputs"]]
            outputs = [Segment.from_dict(item) for item in body["outputs"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a record being written or collected: the timeline's words suffice
        for segment in inputs:
            if segment.table != table:
                continue
            lineage[str(segment.id)] = tuple(
                str(output.id) for output in outputs if _took_in(output, segment)
            )
    return lineage


def _took_in(output: Segment, segment: Segment) -> bool:
    start, end = segment.root_range
    out_start, out_end = output.root_range
    return output.interval.overlaps(segment.interval) and out_start <= start and end <= out_end
