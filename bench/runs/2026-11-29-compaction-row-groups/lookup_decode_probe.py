"""What a compaction-only row-group size would cost the broker's direct key lookups (diagnosis
only, no Spark). The direct reader (``horizon_broker/broker/direct_lookup/file_rows.py``)
decodes whole the one row group that may hold a key (pyarrow reads no page index) and keeps
row groups of >= 50,000 rows decoded in an LRU of 256 MiB (``row_group_cache.py``). So per row
group size: the cold lookup's cost (decode one group + build its key index + find the key),
the warm one (key index only), and how many decoded groups the cache holds.

Scale factor 1's lineitem (``bench.tpch_data``, 5,999,522 rows) with the validity columns,
sorted by key as compaction writes it, written by pyarrow at the row counts Spark's writer put
in a row group at ``parquet.block.size`` 8 MiB (24 groups: 250,000 rows) and 32 MiB (6 groups:
1,000,000 rows), ``bench/runs/2026-11-29-tpch-gaps/row-group-probe-sf1.log``.

Run: .venv/bin/python bench/runs/2026-11-29-compaction-row-groups/lookup_decode_probe.py
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.tpch_data import generate
from horizon_broker.broker.direct_lookup.row_group_cache import DEFAULT_MAX_BYTES, KeyPositions

SIZES = {"8 MiB": 250_000, "32 MiB": 1_000_000}
REPS = 5


def main() -> None:
    started = time.perf_counter()
    lineitem = generate(1.0)["lineitem"]
    rows = lineitem.num_rows
    lineitem = lineitem.append_column("validFrom", pa.array(np.full(rows, 5, np.int64)))
    lineitem = lineitem.append_column("validUntil", pa.nulls(rows, pa.int64()))
    lineitem = lineitem.sort_by([("l_orderkey", "ascending"), ("l_linenumber", "ascending")])
    print(f"generated {rows:,} rows in {time.perf_counter() - started:.0f} s", flush=True)
    work = Path(tempfile.mkdtemp(prefix="h49-lookup-"))
    keys = lineitem["l_orderkey"].to_numpy()
    chooser = random.Random(1)
    for label, group_rows in SIZES.items():
        path = work / f"{group_rows}.parquet"
        pq.write_table(lineitem, path, row_group_size=group_rows, store_decimal_as_integer=True)
        parquet = pq.ParquetFile(path)
        groups = parquet.metadata.num_row_groups
        cold, warm, decoded = [], [], 0
        for _ in range(REPS):
            group = chooser.randrange(groups)
            first = group * group_rows
            wanted = np.array([keys[first + chooser.randrange(group_rows)]])
            begun = time.perf_counter()
            table = pq.ParquetFile(path).read_row_group(group, use_threads=False)
            index = KeyPositions.of(table.column("l_orderkey"))
            found = table.take(pa.array(index.rows_holding(wanted)))
            cold.append((time.perf_counter() - begun) * 1000)
            begun = time.perf_counter()
            found = table.take(pa.array(index.rows_holding(wanted)))
            warm.append((time.perf_counter() - begun) * 1000)
            assert found.num_rows >= 1
            decoded = table.nbytes + index.nbytes
        print(
            f"{label}: {groups} row groups of {group_rows:,} rows; cold lookup (decode + key "
            f"index + take) p50 {statistics.median(cold):.0f} ms (min {min(cold):.0f}, max "
            f"{max(cold):.0f}); warm {statistics.median(warm):.2f} ms; one decoded group "
            f"{decoded / 2**20:.0f} MiB, {DEFAULT_MAX_BYTES // decoded} of the {groups} groups "
            f"fit the 256 MiB cache ({REPS} lookups)",
            flush=True,
        )
        path.unlink()
    work.rmdir()


if __name__ == "__main__":
    main()
