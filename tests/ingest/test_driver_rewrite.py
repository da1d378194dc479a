"""The driver's segment rewrite applies updates as the Spark updater's join does.

:func:`horizon_broker.ingest.update_rewrite.applied` joins the updates with the open rows only and keeps the rest
of them in their order; a reference model here applies ``coalesce(validUntil, new validUntil)``
to every row, drops history before the retention horizon and splits and sorts the rows, as
:func:`horizon_broker.ingest.updater.rewrite_segments` does, on random segments. A segment's closed files stay
as they are (copied into the rewrite) until there would be too many or retention drops a row of
them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from horizon_broker._core.errors import Internal
from horizon_broker.ingest.segment_files import copy_into
from horizon_broker.ingest.table import TableDefinition
from horizon_broker.ingest.update_rewrite import MAX_CLOSED_FILES, applied, closed_files_stay

TABLE = TableDefinition.from_dict(
    {"name": "t", "columns": {"k": "string", "v": "bigint"}, "primary_key": ["k"],
     "comparison": ["v"]}
)  # fmt: skip
SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64()), ("validFrom", pa.int64()),
                    ("validUntil", pa.int64())])  # fmt: skip
UPDATES = pa.schema([("k", pa.string()), ("validFrom", pa.int64()), ("_newUntil", pa.int64())])


def _reference(rows: list[dict[str, Any]], updates: list[dict[str, Any]], horizon: int | None):
    new = {(u["k"], u["validFrom"]): u["_newUntil"] for u in updates}
    result = []
    for row in rows:
        until = row["validUntil"]
        if until is None:
            until = new.get((row["k"], row["validFrom"]))
        if horizon and until is not None and until <= horizon:
            continue
        result.append({**row, "validUntil": until})
    still_open = sorted((r for r in result if r["validUntil"] is None),
                        key=lambda r: (r["k"], r["validFrom"]))  # fmt: skip
    closed = [r for r in result if r["validUntil"] is not None]
    return still_open, sorted(closed, key=lambda r: (r["validFrom"], r["k"], r["validUntil"]))


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(st.text("abcdef", min_size=1, max_size=3), unique=True, max_size=12),
    history=st.lists(
        st.tuples(st.text("abc", min_size=1, max_size=2), st.integers(0, 50), st.integers(1, 60)),
        max_size=8,
    ),
    chosen=st.data(),
    horizon=st.one_of(st.none(), st.integers(0, 80)),
    sorted_open=st.booleans(),
)
def test_updates_close_exactly_the_open_versions_they_name(
    keys: list[str], history: list[tuple[str, int, int]], chosen: Any,
    horizon: int | None, sorted_open: bool,
) -> None:  # fmt: skip
    open_rows = [
        {"k": k, "v": i, "validFrom": 10 + i, "validUntil": None} for i, k in enumerate(keys)
    ]
    if sorted_open:
        open_rows.sort(key=lambda r: (r["k"], r["validFrom"]))
    closed_rows = sorted(
        ({"k": k, "v": -1, "validFrom": start, "validUntil": start + length}
         for k, start, length in history),
        key=lambda r: r["validFrom"],
    )  # fmt: skip
    targets = (
        chosen.draw(st.lists(st.sampled_from(open_rows), unique_by=lambda r: r["k"]))
        if open_rows
        else []
    )
    updates = [{"k": r["k"], "validFrom": r["validFrom"], "_newUntil": r["validFrom"] + 5}
               for r in targets]  # fmt: skip
    updates.append({"k": "zz", "validFrom": 1, "_newUntil": 3})  # a version the segment lacks
    still_open, closed = applied(
        pa.Table.from_pylist(open_rows, SCHEMA), pa.Table.from_pylist(closed_rows, SCHEMA),
        pa.Table.from_pylist(updates, UPDATES), TABLE, horizon, open_sorted=sorted_open,
    )  # fmt: skip
    expected_open, expected_closed = _reference(open_rows + closed_rows, updates, horizon)
    assert still_open.to_pylist() == expected_open
    got_closed = closed.to_pylist()
    assert [r["validFrom"] for r in got_closed] == sorted(r["validFrom"] for r in got_closed)
    key = lambda r: (r["validFrom"], r["k"], r["validUntil"])  # noqa: E731
    assert sorted(got_closed, key=key) == expected_closed


def test_two_updates_of_one_version_are_refused_not_applied_twice() -> None:
    rows = pa.Table.from_pylist([{"k": "a", "v": 1, "validFrom": 5, "validUntil": None}], SCHEMA)
    twice = pa.Table.from_pylist([{"k": "a", "validFrom": 5, "_newUntil": 9}] * 2, UPDATES)
    with pytest.raises(Internal, match="same version"):
        applied(rows, rows.slice(0, 0), twice, TABLE, None, open_sorted=True)


def _closed_file(directory: Path, until: list[int], statistics: bool = True) -> str:
    rows = pa.Table.from_pylist(
        [{"k": f"k{i}", "v": i, "validFrom": u - 1, "validUntil": u} for i, u in enumerate(until)],
        SCHEMA,
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"part-{len(list(directory.iterdir()))}.parquet"
    pq.write_table(rows, path, write_statistics=statistics, row_group_size=2)
    return str(path)


def test_closed_files_stay_as_they_are_until_a_rewrite_would_leave_too_many(
    tmp_path: Path,
) -> None:
    paths = [_closed_file(tmp_path, [10 + i, 20]) for i in range(MAX_CLOSED_FILES)]
    assert not closed_files_stay([], None)  # nothing to keep: the rewrite writes what it has
    for count in range(1, MAX_CLOSED_FILES):
        assert closed_files_stay(paths[:count], None)
    assert not closed_files_stay(paths, None)  # one more file would pass the bound: merged


def test_closed_files_are_merged_once_retention_drops_any_of_their_rows(tmp_path: Path) -> None:
    # validUntil 30, 12 and 50 across row groups: the least, 12, decides.
    path = _closed_file(tmp_path, [30, 50, 12, 40])
    assert closed_files_stay([path], 11)
    assert not closed_files_stay([path], 12)  # validUntil <= horizon: retention drops the row
    assert not closed_files_stay([path], 45)
    unknown = _closed_file(tmp_path / "bare", [30, 50], statistics=False)
    assert closed_files_stay([unknown], None)
    assert not closed_files_stay([unknown], 1)  # no statistics: cannot tell, so merged


def test_a_kept_closed_file_is_a_copy_of_its_own(tmp_path: Path) -> None:
    original = _closed_file(tmp_path / "old", [7, 8, 9])
    copied = copy_into(original, str(tmp_path / "new" / "_rows=closed"))
    assert Path(copied).name == Path(original).name
    assert [p.name for p in Path(copied).parent.iterdir()] == [Path(original).name]
    expected = pq.ParquetFile(original).read().to_pylist()
    # Damage to the replaced segment's file in place (as the fault harness cuts files short)
    # leaves the rewrite's copy whole, and deleting it (the collector) too.
    with open(original, "r+b") as handle:
        handle.truncate(10)
    assert os.stat(copied).st_ino != os.stat(original).st_ino
    assert pq.ParquetFile(copied).read().to_pylist() == expected
    Path(original).unlink()
    assert pq.ParquetFile(copied).read().to_pylist() == expected


def test_a_closed_file_cut_short_is_refused_not_copied(tmp_path: Path) -> None:
    original = _closed_file(tmp_path / "old", [7, 8, 9])
    with open(original, "r+b") as handle:
        handle.truncate(os.path.getsize(original) // 2)
    target = tmp_path / "new" / "_rows=closed"
    with pytest.raises(pa.ArrowInvalid):
        copy_into(original, str(target))
    assert list(target.iterdir()) == []
