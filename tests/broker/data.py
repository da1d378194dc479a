"""Test data for the broker: row versions written as Parquet segments, and the visibility oracle.

Rows are plain Python dicts; files are written with pyarrow (not Spark), and the oracle filters the
same dicts with the visibility rule in plain Python, so a query's answer is checked against a
computation that shares nothing with the broker's path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.catalog import ColumnSpec, TableDescriptor

DAY_MS = 86_400_000
CHUNK = Interval(0, DAY_MS)
VERSION = "2026-01-01T00:00:00.000Z"

Row = dict[str, Any]

ACCOUNT_COLUMNS = (
    ColumnSpec("id", "bigint"),
    ColumnSpec("owner", "string"),
    ColumnSpec("balance", "bigint"),
)
_ARROW_TYPES = {"bigint": pa.int64(), "string": pa.string(), "double": pa.float64()}
ACCOUNT_FILE_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("owner", pa.string()),
        ("balance", pa.int64()),
        ("validFrom", pa.int64()),
        ("validUntil", pa.int64()),
    ]
)
"""What :func:`write_rows` writes for an account table (``descriptor(name)``)."""


def descriptor(
    name: str, columns: Sequence[ColumnSpec] = ACCOUNT_COLUMNS, *, storage_root: str | Path = ""
) -> TableDescriptor:
    """A test table; its segment files must lie under ``storage_root`` (the broker refuses
    any other announced file)."""
    return TableDescriptor(
        name=name,
        columns=tuple(columns),
        primary_key=(columns[0].name,),
        storage_root=str(storage_root),
    )


def write_rows(path: Path, desc: TableDescriptor, rows: Iterable[Row]) -> str:
    """Write ``rows`` (user columns + validFrom/validUntil) to one Parquet file; return its path."""
    rows = list(rows)
    fields = [pa.field(c.name, _ARROW_TYPES[c.type]) for c in desc.columns]
    fields += [pa.field("validFrom", pa.int64()), pa.field("validUntil", pa.int64())]
    schema = pa.schema(fields)
    columns = {f.name: [row.get(f.name) for row in rows] for f in fields}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns, schema=schema), path)
    return str(path)


def version(id_: int, owner: str, balance: int, valid_from: int, valid_until: int | None) -> Row:
    return {
        "id": id_,
        "owner": owner,
        "balance": balance,
        "validFrom": valid_from,
        "validUntil": valid_until,
    }


def visible(rows: Iterable[Row], snapshot: int) -> list[Row]:
    """The visibility rule: validFrom <= S and (validUntil is null or validUntil > S)."""
    return [
        row
        for row in rows
        if row["validFrom"] <= snapshot
        and (row["validUntil"] is None or row["validUntil"] > snapshot)
    ]


class UpsertTable:
    """One test table: a complete time chunk of two partitions and an overwrite of partition 0.

    * ``p0``: ids 1..50 inserted at 500 (ids 1..10 still open: the original, before the update).
    * ``p1``: ids 51..100 inserted at 600, and the new versions of ids 1..10 at 1000.
    * ``o0``: overwrite of ``p0`` (minor 1, root [0, 1)): the same rows, ids 1..10 closed at 1000.

    The timeline shows ``o0`` + ``p1``; if ``o0``'s file disappears it falls back to ``p0``, which
    answers as ``o0`` at snapshots up to 999 only (``applied_through``): from 1000 on it would
    show ids 1..10 twice.
    """

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.desc = descriptor(name, storage_root=root)
        base = [version(i, f"owner{i}", i * 10, 500, None) for i in range(1, 51)]
        self.p0_rows = base
        self.o0_rows = [{**row, "validUntil": 1000 if row["id"] <= 10 else None} for row in base]
        self.p1_rows = [version(i, f"owner{i}", i * 10, 600, None) for i in range(51, 101)]
        self.p1_rows += [version(i, f"owner{i}", i * 10 + 1, 1000, None) for i in range(1, 11)]
        directory = root / name
        self.p0 = Segment(
            table=name,
            interval=CHUNK,
            version=VERSION,
            partition=0,
            core_partitions=2,
            location=(write_rows(directory / "p0.parquet", self.desc, self.p0_rows),),
            row_count=len(self.p0_rows),
            applied_through=999,
        )
        self.p1 = Segment(
            table=name,
            interval=CHUNK,
            version=VERSION,
            partition=1,
            core_partitions=2,
            location=(write_rows(directory / "p1.parquet", self.desc, self.p1_rows),),
            row_count=len(self.p1_rows),
        )
        self.o0 = Segment(
            table=name,
            interval=CHUNK,
            version=VERSION,
            partition=32_768,
            core_partitions=2,
            root_start=0,
            root_end=1,
            minor_version=1,
            atomic_update_group_size=1,
            location=(write_rows(directory / "o0.parquet", self.desc, self.o0_rows),),
            row_count=len(self.o0_rows),
        )

    @property
    def segments(self) -> tuple[Segment, ...]:
        return (self.p0, self.p1, self.o0)

    def rows_visible_at(self, snapshot: int, *, overwrite: bool = True) -> list[Row]:
        first = self.o0_rows if overwrite else self.p0_rows
        return visible(first + self.p1_rows, snapshot)


def as_rows(table: pa.Table, columns: Sequence[str] = ("id", "owner", "balance")) -> list[tuple]:
    """A query result as sorted tuples of ``columns``."""
    data = table.select(list(columns)).to_pylist()
    return sorted(tuple(row[c] for c in columns) for row in data)


def oracle(rows: Iterable[Row], columns: Sequence[str] = ("id", "owner", "balance")) -> list[tuple]:
    return sorted(tuple(row[c] for c in columns) for row in rows)


def big_table(
    name: str, root: Path, *, rows: int, files: int
) -> tuple[TableDescriptor, list[Segment]]:
    """A wide-open table of ``rows`` keys (one version each, from 500) in ``files`` partitions:
    big enough that a cross join with it runs for minutes, in interruptible scan batches."""
    desc = descriptor(name, storage_root=root)
    per_file = rows // files
    segments = []
    for partition in range(files):
        ids = np.arange(partition * per_file, (partition + 1) * per_file, dtype=np.int64)
        table = pa.table(
            {
                "id": pa.array(ids),
                "owner": pa.array(["o"] * per_file, pa.string()),
                "balance": pa.array(ids % 1000),
                "validFrom": pa.array([500] * per_file, pa.int64()),
                "validUntil": pa.nulls(per_file, pa.int64()),
            }
        )
        path = root / name / f"p{partition}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        segments.append(
            Segment(
                table=name,
                interval=CHUNK,
                version=VERSION,
                partition=partition,
                core_partitions=files,
                location=(str(path),),
                row_count=per_file,
            )
        )
    return desc, segments
