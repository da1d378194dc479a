"""Row groups too large to keep whole are read by pages (DuckDB's reader): the rows, their types
and the visibility rule are exactly what decoding the group with pyarrow gives; a hot group is
then kept; whatever DuckDB cannot read the same way is decoded by pyarrow as before."""

from __future__ import annotations

import datetime
import decimal
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from horizon_broker.broker.direct_lookup.direct_read import DirectReader
from horizon_broker.broker.direct_lookup.file_sets import Footer
from horizon_broker.broker.direct_lookup.page_rows import read_key_rows
from horizon_broker.broker.direct_lookup.row_group_cache import RowGroupCache
from horizon_broker.broker.spark.failures import UnreadableFiles
from horizon_broker.broker.sql.model import KeyLookup, Predicate

ROWS = 3_000
WIDE = pa.schema(
    [
        ("id", pa.int64()),
        ("small", pa.int32()),
        ("tiny", pa.int8()),
        ("ratio", pa.float64()),
        ("flag", pa.bool_()),
        ("name", pa.string()),
        ("blob", pa.binary()),
        ("price", pa.decimal128(12, 2)),
        ("wide_price", pa.decimal128(38, 10)),
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("local_at", pa.timestamp("us")),
        ("tags", pa.list_(pa.int64())),
        ("address", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
        ("attributes", pa.map_(pa.string(), pa.int64())),
        ("validFrom", pa.int64()),
        ("validUntil", pa.int64()),
    ]
)


def _wide_rows(rng: random.Random) -> list[dict]:
    """Three versions of each of ROWS / 3 keys, sorted by key (compaction's layout), every type
    with NULLs among its values."""
    rows = []
    for number in range(ROWS):
        key = number // 3
        null = rng.random() < 0.1
        rows.append(
            {
                "id": key,
                "small": None if null else rng.randrange(-(2**31), 2**31),
                "tiny": None if null else rng.randrange(-128, 128),
                "ratio": None if null else rng.choice([rng.random(), float("inf"), -0.0]),
                "flag": None if null else rng.random() < 0.5,
                "name": None if null else f"name-{rng.randrange(10**6)}-é",
                "blob": None if null else bytes(rng.randrange(256) for _ in range(5)),
                "price": None if null else decimal.Decimal(rng.randrange(10**9)) / 100,
                "wide_price": None
                if null
                else decimal.Decimal(rng.randrange(10**20)) / decimal.Decimal(10**10),
                "day": None if null else datetime.date(2020, 1, 1) + datetime.timedelta(number),
                "at": None
                if null
                else datetime.datetime(2024, 3, 1, tzinfo=datetime.UTC)
                + datetime.timedelta(microseconds=rng.randrange(10**12)),
                "local_at": None
                if null
                else datetime.datetime(1969, 12, 31) + datetime.timedelta(seconds=number),
                "tags": None if null else [rng.randrange(9) for _ in range(rng.randrange(3))],
                "address": None if null else {"city": f"c{key}", "zip": None},
                "attributes": None if null else [("a", number), ("b", None)],
                "validFrom": 100 * (number % 3),
                "validUntil": None if number % 3 == 2 else 100 * (number % 3 + 1),
            }
        )
    return rows


def _versions(rows: list[dict]) -> pa.Table:
    """``rows`` with int64 validity columns (all-NULL ``validUntil`` would be typed null)."""
    table = pa.Table.from_pylist(rows)
    return table.set_column(
        table.schema.get_field_index("validUntil"),
        "validUntil",
        table.column("validUntil").cast(pa.int64()),
    )


def _write(path: Path, table: pa.Table, **options: object) -> str:
    """One row group, small data pages and a page index (as Spark's writer stores them)."""
    pq.write_table(
        table,
        path,
        row_group_size=len(table),
        data_page_size=4096,
        write_page_index=True,
        **options,  # type: ignore[arg-type]
    )
    return str(path)


def _answers(path: str, keys: list[int], snapshot: int, by_pages: bool) -> tuple[pa.Table, int]:
    cache = RowGroupCache(min_rows=100, max_whole_bytes=0 if by_pages else None)
    reader = DirectReader(row_groups=cache)
    answer = reader.read(KeyLookup("t", None, (Predicate("id", tuple(keys)),)), [path], snapshot,
                         pq.read_schema(path))  # fmt: skip
    assert answer is not None
    return answer, cache.page_reads


@pytest.mark.parametrize("int96", [False, True], ids=["micros", "int96-timestamps"])
def test_rows_read_by_pages_equal_pyarrow_s_decoding_for_every_column_type(tmp_path, int96):
    rng = random.Random(7)
    table = pa.Table.from_pylist(_wide_rows(rng), schema=WIDE)
    options = {"use_deprecated_int96_timestamps": True} if int96 else {}
    path = _write(tmp_path / "wide.parquet", table, **options)
    for keys, snapshot in (([0], 0), ([5, 999, 400], 150), ([17], 250), ([-1, 999, 2_000], 100)):
        by_pages, page_reads = _answers(path, keys, snapshot, by_pages=True)
        decoded, none = _answers(path, keys, snapshot, by_pages=False)
        assert page_reads == 1 and none == 0, "one answer read by pages, the other decoded"
        assert by_pages.schema == decoded.schema
        assert by_pages.to_pylist() == decoded.to_pylist()
        assert by_pages.num_rows == len([k for k in keys if 0 <= k < ROWS // 3])


def test_a_group_too_large_to_keep_is_never_decoded_and_its_lookups_stay_right(tmp_path):
    rows = [
        {"id": key, "owner": f"o{key}", "validFrom": 1, "validUntil": None} for key in range(5000)
    ]
    path = _write(tmp_path / "compacted.parquet", _versions(rows))
    cache = RowGroupCache(min_rows=100, max_whole_bytes=1_000, promote_after=1_000)
    reader = DirectReader(row_groups=cache)
    schema = pa.schema([("owner", pa.string())])
    for key in (3, 4_999, 2_500, 3):
        lookup = KeyLookup("t", ("owner",), (Predicate("id", (key,)),))
        assert reader.read(lookup, [path], 10, schema).to_pylist() == [{"owner": f"o{key}"}]
    assert cache.decodes == 0 and cache.bytes == 0 and cache.page_reads == 4


def test_a_group_read_by_pages_often_is_decoded_once_and_kept(tmp_path):
    rows = [{"id": key, "v": key, "validFrom": 1, "validUntil": None} for key in range(2000)]
    path = _write(tmp_path / "hot.parquet", _versions(rows))
    cache = RowGroupCache(min_rows=100, max_whole_bytes=1_000, promote_after=3)
    reader = DirectReader(row_groups=cache)
    schema = pa.schema([("v", pa.int64())])
    for key in range(6):
        lookup = KeyLookup("t", ("v",), (Predicate("id", (key,)),))
        assert reader.read(lookup, [path], 10, schema).to_pylist() == [{"v": key}]
    assert cache.page_reads == 2 and cache.decodes == 1, "the third lookup decoded it"


def test_lookups_spread_over_many_groups_never_make_them_hot(tmp_path):
    """Hot is a rate: read by pages often *lately*, not ever (random keys over a large table
    would otherwise decode every group in time, and churn the cache)."""
    rows = [{"id": key, "v": key, "validFrom": 1, "validUntil": None} for key in range(1000)]
    path = str(tmp_path / "spread.parquet")
    pq.write_table(_versions(rows), path, row_group_size=200, write_page_index=True)
    cache = RowGroupCache(min_rows=100, max_whole_bytes=100, promote_after=3, promote_window=4)
    reader = DirectReader(row_groups=cache)
    schema = pa.schema([("v", pa.int64())])
    for key in [group * 200 for _ in range(4) for group in range(5)]:  # 4 reads of each group
        lookup = KeyLookup("t", ("v",), (Predicate("id", (key,)),))
        assert reader.read(lookup, [path], 10, schema).to_pylist() == [{"v": key}]
    assert cache.decodes == 0 and cache.page_reads == 20


def test_columns_whose_names_differ_only_in_case_are_left_to_pyarrow(tmp_path):
    path = _write(tmp_path / "cases.parquet", pa.table({"id": [1, 2], "ID": [3, 4]}))
    assert (
        read_key_rows(path, Footer.of(pq.read_metadata(path)), (0,), ["id", "ID"], "id", [1])
        is None
    )
    other = _write(tmp_path / "plain.parquet", pa.table({"id": [1, 2], "Name": ["a", "b"]}))
    found = read_key_rows(other, Footer.of(pq.read_metadata(other)), (0,), ["Name"], "id", [2])
    assert found is not None and found.to_pylist() == [{"Name": "b"}]


def test_a_missing_file_read_by_pages_is_still_reported_unreadable(tmp_path):
    rows = [{"id": key, "validFrom": 1, "validUntil": None} for key in range(500)]
    path = _write(tmp_path / "gone.parquet", _versions(rows))
    reader = DirectReader(row_groups=RowGroupCache(min_rows=100, max_whole_bytes=0))
    lookup = KeyLookup("t", None, (Predicate("id", (1,)),))
    schema = pq.read_schema(path)
    assert reader.read(lookup, [path], 10, schema).num_rows == 1
    Path(path).unlink()
    with pytest.raises(UnreadableFiles):
        reader.read(lookup, [path], 10, schema)
