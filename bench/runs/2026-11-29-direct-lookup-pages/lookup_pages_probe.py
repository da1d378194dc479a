"""The broker's direct key lookups in large row groups: decoded whole (and kept) against read by
pages (``horizon_broker/broker/direct_lookup/page_rows.py``), side by side on the same files, no
Spark (diagnosis only).

Files, each sorted by key as compaction writes them, with a page index (as Spark's writer
stores one), by pyarrow at the row counts Spark's writer put in a row group:
- scale factor 1's lineitem (``bench.tpch_data``, 5,999,522 rows, 16 columns and the validity
  columns) at 250,000 rows a group (``parquet.block.size`` 8 MiB) and 1,000,000 (32 MiB);
- a narrow table (id, owner, balance and the validity columns; 5,000,000 rows) at 1,500,000
  rows a group (about 8 MiB stored).

Per file and reader: lookups of random keys (one per call, ``SELECT *``) through one
``DirectReader`` in the broker's defaults, "whole" being the same reader with every large group
kept whole (the behaviour before page reads); then the same keys again (warm). Prints p50 / p99
of each, the groups decoded, the reads by pages.

Run: PYTHONPATH=. .venv/bin/python bench/runs/2026-11-29-direct-lookup-pages/lookup_pages_probe.py [lookups]
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.tpch_data import generate
from horizon_broker.broker.direct_lookup.direct_read import DirectReader
from horizon_broker.broker.direct_lookup.row_group_cache import RowGroupCache
from horizon_broker.broker.sql.model import KeyLookup, Predicate

LOOKUPS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
SNAPSHOT = 10**15


def with_validity(table: pa.Table) -> pa.Table:
    table = table.append_column("validFrom", pa.array([1] * len(table), pa.int64()))
    return table.append_column("validUntil", pa.nulls(len(table), pa.int64()))


def timed(reader: DirectReader, path: str, key_column: str, keys: list[int]) -> list[float]:
    schema = pq.read_schema(path)
    times = []
    for key in keys:
        lookup = KeyLookup("t", None, (Predicate(key_column, (key,)),))
        started = time.perf_counter()
        answer = reader.read(lookup, [path], SNAPSHOT, schema)
        times.append((time.perf_counter() - started) * 1000)
        assert answer is not None and answer.num_rows >= 1, (path, key)
    return times


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"p50 {statistics.median(times):6.1f} ms, p99 {p99:6.1f} ms"


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="lookup-pages-"))
    started = time.perf_counter()
    lineitem = generate(1.0)["lineitem"].sort_by([("l_orderkey", "ascending"),
                                                  ("l_linenumber", "ascending")])  # fmt: skip
    lineitem = with_validity(lineitem)
    narrow = with_validity(
        pa.table(
            {
                "id": pa.array(range(5_000_000), pa.int64()),
                "owner": pc.binary_join_element_wise(
                    "owner", pc.cast(pa.array(range(5_000_000)), pa.string()), ""
                ),
                "balance": pa.array([n % 1000 for n in range(5_000_000)], pa.int64()),
            }
        )
    )
    files = {
        "lineitem 8 MiB": (lineitem, 250_000, "l_orderkey"),
        "lineitem 32 MiB": (lineitem, 1_000_000, "l_orderkey"),
        "narrow 8 MiB": (narrow, 1_500_000, "id"),
    }
    rng = random.Random(29)
    for label, (table, group_rows, key_column) in files.items():
        path = str(work / f"{label.replace(' ', '-')}.parquet")
        pq.write_table(table, path, row_group_size=group_rows, write_page_index=True,
                       store_decimal_as_integer=True)  # fmt: skip
        metadata = pq.read_metadata(path)
        stored = metadata.row_group(0).total_byte_size / 2**20
        keys = [table.column(key_column)[rng.randrange(len(table))].as_py() for _ in range(LOOKUPS)]
        print(f"{label}: {metadata.num_row_groups} groups of {group_rows:,} rows, "
              f"{stored:.1f} MiB stored each (after {time.perf_counter() - started:.0f} s)")  # fmt: skip
        for name, cache in (
            ("by pages", RowGroupCache()),
            ("whole   ", RowGroupCache(max_whole_bytes=1 << 40)),
        ):
            reader = DirectReader(row_groups=cache, max_rows=10**8)
            timed(reader, path, key_column, keys[:1])  # opens the footer and DuckDB
            first = timed(reader, path, key_column, keys)
            again = timed(reader, path, key_column, keys)
            print(f"  {name}: first {summary(first)}; again {summary(again)}; "
                  f"decoded {cache.decodes}, by pages {cache.page_reads}")  # fmt: skip


if __name__ == "__main__":
    main()
