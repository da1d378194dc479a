"""Reading a key's rows from segment files with pyarrow (no Spark): every readable file's rows
are listed, and a file that cannot be read is reported, not skipped."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from horizon_broker.broker.explain_key.gather import segment_versions
from horizon_broker.timeline import Interval, Segment


def _write(path, rows) -> str:  # type: ignore[no-untyped-def]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_the_key_rows_of_each_readable_file_are_listed_and_an_unreadable_file_is_reported(
    tmp_path,
):
    open_file = _write(tmp_path / "open.parquet", [
        {"user_id": "k1", "balance": 2, "validFrom": 20, "validUntil": None},
        {"user_id": "k2", "balance": 9, "validFrom": 5, "validUntil": None},
    ])  # fmt: skip
    closed_file = _write(tmp_path / "closed.parquet", [
        {"user_id": "k1", "balance": 1, "validFrom": 10, "validUntil": 20},
    ])  # fmt: skip
    missing = str(tmp_path / "gone.parquet")
    segment = Segment(table="t", interval=Interval(0, 10), version="v", partition=0,
                      location=(f"file:{open_file}", closed_file, missing))  # fmt: skip
    versions, failures = segment_versions(segment, (("user_id", "k1"),), ["user_id", "balance"])
    assert [(v.valid_from, v.valid_until, dict(v.values)["balance"]) for v in versions] == [
        (20, None, 2),
        (10, 20, 1),
    ]
    assert [v.file for v in versions] == [f"file:{open_file}", closed_file]
    [failure] = failures
    assert missing in failure
