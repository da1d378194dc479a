"""The rows of a few large row groups that hold a lookup's integer keys, read page by page.

pyarrow decodes a row group whole: a lookup in scale factor 1's lineitem took about 37 ms in
row groups of 8 MiB (250,000 rows), 146 ms in groups of 32 MiB, and more memory than the
row-group cache can keep (:mod:`horizon_broker.broker.direct_lookup.row_group_cache`). DuckDB's
Parquet reader applies the key filter first and decodes the other columns only where it matched,
skipping whole pages by the page index that Spark's writer stores: the same lookups took 7-8 ms,
whatever the group's size (``bench/runs/2026-11-29-direct-lookup-pages/``). So a row group too large to keep whole
is read here, and only its rows whose key is looked up come back; the caller applies the
visibility rule and every predicate exactly as on any other rows.

Anything this reader cannot do the same way (no DuckDB, column names that differ only in case,
a DuckDB error) returns None, and the caller decodes the row group with pyarrow as before.

>>> import pyarrow as pa, pyarrow.parquet as pq, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "f.parquet")
>>> pq.write_table(pa.table({"id": [1, 2, 3, 2], "v": ["a", "b", "c", "d"]}), path)
>>> footer = Footer.of(pq.read_metadata(path))
>>> read_key_rows(path, footer, (0,), ["id", "v"], "id", [2]).to_pydict()
{'id': [2, 2], 'v': ['b', 'd']}
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from horizon_broker.broker.direct_lookup.file_sets import Footer
from horizon_broker.broker.direct_lookup.reading import local_path

MEMORY_LIMIT = "512MB"
"""DuckDB's own buffers (a lookup's pages are a few MiB; the broker's memory is Spark's)."""

_lock = threading.Lock()
_database: list[Any] = []
"""The one in-process DuckDB database (empty until first use, ``[None]`` without DuckDB)."""


def read_key_rows(
    path: str,
    footer: Footer,
    row_groups: Sequence[int],
    columns: Sequence[str],
    key: str,
    values: Sequence[int],
) -> pa.Table | None:
    """The rows of ``row_groups`` of the file at ``path`` (its ``footer``) whose integer
    column ``key`` is one of ``values``, columns ``columns`` (the file's names), in file order;
    None when DuckDB cannot read them exactly as pyarrow would (the caller decodes the groups).
    A file that cannot be read also gives None: pyarrow's read then names the problem."""
    if footer.schema.case_twins:
        return None  # DuckDB binds names without case: it could pick the other column
    database = _duckdb()
    if database is None:
        return None
    import duckdb

    sql = _key_rows_sql(columns, key, values, _row_ranges(footer.metadata, row_groups))
    with _lock:
        cursor = database.cursor()
    try:
        return cursor.sql(sql, params=[local_path(path)]).to_arrow_table()
    except (duckdb.Error, pa.ArrowException):
        return None
    finally:
        cursor.close()


def _key_rows_sql(
    columns: Sequence[str], key: str, values: Sequence[int], ranges: Sequence[tuple[int, int]]
) -> str:
    """The query: the key as a literal list (integers only, so the filter reaches the scan and
    its page index, which a bound list does not), the row groups as file row ranges.

    >>> _key_rows_sql(["id", 'a"b'], "id", [3, 1], [(0, 9)])  # doctest: +NORMALIZE_WHITESPACE
    'SELECT "id", "a""b" FROM read_parquet(?, file_row_number = true)
     WHERE "id" IN (3, 1) AND (file_row_number BETWEEN 0 AND 9) ORDER BY file_row_number'
    """
    selected = ", ".join(_quoted(name) for name in columns)
    listed = ", ".join(str(int(value)) for value in values)
    within = " OR ".join(f"file_row_number BETWEEN {first} AND {last}" for first, last in ranges)
    return (
        f"SELECT {selected} FROM read_parquet(?, file_row_number = true) "
        f"WHERE {_quoted(key)} IN ({listed}) AND ({within}) ORDER BY file_row_number"
    )


def _row_ranges(metadata: Any, row_groups: Sequence[int]) -> list[tuple[int, int]]:
    """The file rows (first, last) of each of ``row_groups``, adjacent groups joined.

    >>> class Group:
    ...     def __init__(self, rows): self.num_rows = rows
    >>> class Footer:
    ...     num_row_groups = 3
    ...     def row_group(self, index): return Group(10)
    >>> _row_ranges(Footer(), [0, 2]), _row_ranges(Footer(), [1, 2])
    ([(0, 9), (20, 29)], [(10, 29)])
    """
    starts = [0]
    for index in range(metadata.num_row_groups):
        starts.append(starts[-1] + metadata.row_group(index).num_rows)
    ranges: list[tuple[int, int]] = []
    for group in sorted(set(row_groups)):
        first, last = starts[group], starts[group + 1] - 1
        if ranges and ranges[-1][1] + 1 == first:
            ranges[-1] = (ranges[-1][0], last)
        else:
            ranges.append((first, last))
    return ranges


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _duckdb() -> Any:
    """The process's DuckDB database, opened on first use (None when DuckDB is not installed).
    One thread: a lookup reads a few pages, and the broker's cores are Spark's."""
    with _lock:
        if not _database:
            try:
                import duckdb
            except ImportError:
                _database.append(None)
            else:
                _database.append(_opened(duckdb))
        return _database[0]


def _opened(duckdb: Any) -> Any:
    """A database of one thread, no extension loads, its settings locked; timestamps with a
    time zone come back in UTC (pyarrow's reading)."""
    database = duckdb.connect(
        config={
            "threads": 1,
            "memory_limit": MEMORY_LIMIT,
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
        }
    )
    database.execute("SET TimeZone = 'UTC'")
    database.execute("SET lock_configuration = true")
    return database
