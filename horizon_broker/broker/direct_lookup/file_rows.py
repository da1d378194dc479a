"""The rows of one segment file a key lookup asks for (see :mod:`horizon_broker.broker.direct_lookup.direct_read`).

Large row groups are decoded once and kept (:mod:`horizon_broker.broker.direct_lookup.row_group_cache`): a lookup
bisects their sorted key positions and filters only the rows holding its keys. Those too large
to keep are read by pages (:mod:`horizon_broker.broker.direct_lookup.page_rows`). Small ones are
read in two passes: the filter columns of every candidate row group, then the result columns of
the row groups that hold a match. The visibility rule and the key predicates follow SQL's
three-valued logic, as Spark's filter would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from horizon_broker.broker.direct_lookup.file_sets import Footer, unreadable
from horizon_broker.broker.direct_lookup.key_sets import lookup_values
from horizon_broker.broker.direct_lookup.page_rows import read_key_rows
from horizon_broker.broker.direct_lookup.reading import local_path
from horizon_broker.broker.direct_lookup.row_group_cache import RowGroupCache
from horizon_broker.broker.sql.model import Predicate
from horizon_broker.watermark.catalog import VALID_FROM, VALID_UNTIL


@dataclass(frozen=True, slots=True)
class FilePlan:
    """What to read of one file: its row groups that may hold the keys, the file's column name
    for each result column, and for each predicate and validity column."""

    footer: Footer
    row_groups: tuple[int, ...]
    outputs: tuple[str, ...]
    filters: dict[str, str]


def read_file(
    path: str,
    plan: FilePlan,
    predicates: Sequence[Predicate],
    snapshot: int,
    schema: pa.Schema,
    cache: RowGroupCache,
) -> pa.Table:
    """The lookup's rows in one file: large row groups from ``cache`` (decoded once) or, too
    large to keep, by pages (:func:`_read_by_pages`); runs of the others in two passes
    (:func:`_read_groups`). In row-group order, the groups read by pages last."""
    metadata = plan.footer.metadata
    key = _integer_key(plan, predicates)
    pieces: list[pa.Table] = []
    run: list[int] = []
    paged: list[int] = []
    for group in plan.row_groups:
        group_metadata = metadata.row_group(group)
        rows, stored = group_metadata.num_rows, group_metadata.total_byte_size
        if not cache.keeps(rows):
            run.append(group)
            continue
        if (
            key is not None
            and cache.reads_pages(rows, stored)
            and not cache.hot(path, group, stored)
        ):
            paged.append(group)
            continue
        if run:
            pieces.append(_read_groups(path, replace(plan, row_groups=tuple(run)), predicates,
                                       snapshot, schema))  # fmt: skip
            run = []
        pieces.append(_read_kept_group(path, plan, group, predicates, snapshot, schema, cache))
    if run:
        pieces.append(_read_groups(path, replace(plan, row_groups=tuple(run)), predicates,
                                   snapshot, schema))  # fmt: skip
    if paged:
        pieces.append(_read_by_pages(path, replace(plan, row_groups=tuple(paged)), key,
                                     predicates, snapshot, schema, cache))  # fmt: skip
    return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)


def _integer_key(plan: FilePlan, predicates: Sequence[Predicate]) -> Predicate | None:
    """The first predicate on an integer column of the file (what row positions bisect)."""
    found = [p for p in predicates if _is_integer_column(plan.footer, p.column)]
    return found[0] if found else None


def _read_by_pages(
    path: str,
    plan: FilePlan,
    key: Predicate | None,
    predicates: Sequence[Predicate],
    snapshot: int,
    schema: pa.Schema,
    cache: RowGroupCache,
) -> pa.Table:
    """The lookup's rows in row groups too large to keep: only the rows holding its key, read
    by :func:`read_key_rows`, then the same filter as every other row; decoded in two passes
    when that reader declines."""
    if key is not None:
        columns = list(dict.fromkeys([*plan.outputs, *plan.filters.values()]))
        values = lookup_values(key.values).tolist()  # type: ignore[arg-type]
        rows = read_key_rows(
            path, plan.footer, plan.row_groups, columns, plan.filters[key.column], values
        )
        if rows is not None:
            try:
                keep = pc.fill_null(_condition(rows, plan, predicates, snapshot), False)
                answer = _as_schema(rows.filter(keep).column, plan.outputs, schema)
                cache.page_reads += 1
                return answer
            except pa.ArrowException:
                pass  # a type DuckDB gives otherwise than pyarrow: decoded as before
    return _read_groups(path, plan, predicates, snapshot, schema)


def _read_kept_group(
    path: str,
    plan: FilePlan,
    group: int,
    predicates: Sequence[Predicate],
    snapshot: int,
    schema: pa.Schema,
    cache: RowGroupCache,
) -> pa.Table:
    """The lookup's rows in one large row group, filtered from its kept decoded columns."""

    def decode() -> pa.Table:
        parquet = pq.ParquetFile(local_path(path), metadata=plan.footer.metadata)
        return parquet.read_row_group(group, use_threads=False)

    try:
        table = cache.group(path, group, decode)
    except (OSError, pa.ArrowException) as error:
        raise unreadable(path, f"cannot read the Parquet file: {error}") from None
    key = _integer_key(plan, predicates)
    if key is not None:  # only the rows holding a looked-up key can match: no scan of the group
        index = cache.positions(path, group, plan.filters[key.column], table)
        table = table.take(pa.array(index.rows_holding(lookup_values(key.values))))  # type: ignore[arg-type]
    selected = table.filter(pc.fill_null(_condition(table, plan, predicates, snapshot), False))
    return _as_schema(selected.column, plan.outputs, schema)


def _is_integer_column(footer: Footer, column: str) -> bool:
    found = footer.fields.get(column)
    return found is not None and pa.types.is_integer(found.type)


def _as_schema(
    column_of: Callable[[str], pa.ChunkedArray], outputs: Sequence[str], schema: pa.Schema
) -> pa.Table:
    """The file's columns ``outputs`` (by ``column_of``) as a table of the query's ``schema``."""
    arrays = []
    for name, target in zip(outputs, schema, strict=True):
        column = column_of(name)
        arrays.append(column if column.type == target.type else column.cast(target.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _read_groups(
    path: str, plan: FilePlan, predicates: Sequence[Predicate], snapshot: int, schema: pa.Schema
) -> pa.Table:
    """Two passes: the filter columns of every candidate row group, then the result columns of
    only the row groups that hold a match (in unsorted segments most hold none)."""
    filter_columns = list(dict.fromkeys(plan.filters.values()))
    try:
        parquet = pq.ParquetFile(local_path(path), metadata=plan.footer.metadata)
        filters = parquet.read_row_groups(
            list(plan.row_groups), columns=filter_columns, use_threads=False
        )
    except (OSError, pa.ArrowException) as error:
        raise unreadable(path, f"cannot read the Parquet file: {error}") from None
    # A NULL condition drops the row, as in SQL's WHERE.
    keep = pc.fill_null(_condition(filters, plan, predicates, snapshot), False)
    hit_groups, hit_masks = [], []
    offset = 0
    for group in plan.row_groups:
        rows = plan.footer.metadata.row_group(group).num_rows
        mask = keep.slice(offset, rows)
        offset += rows
        if pc.any(mask).as_py():
            hit_groups.append(group)
            hit_masks.extend(mask.chunks)
    if not hit_groups:
        return schema.empty_table()
    needed = [name for name in dict.fromkeys(plan.outputs) if name not in filter_columns]
    if needed:
        try:
            values = parquet.read_row_groups(hit_groups, columns=needed, use_threads=False)
        except (OSError, pa.ArrowException) as error:
            raise unreadable(path, f"cannot read the Parquet file: {error}") from None
        selected_values = values.filter(pa.chunked_array(hit_masks, pa.bool_()))
    selected_filters = filters.filter(keep)
    return _as_schema(
        lambda name: (selected_filters if name in filter_columns else selected_values).column(name),
        plan.outputs,
        schema,
    )


def _condition(
    table: pa.Table, plan: FilePlan, predicates: Sequence[Predicate], snapshot: int
) -> pa.ChunkedArray:
    """The visibility rule and the key predicates, with SQL's three-valued AND/OR."""
    valid_from = table.column(plan.filters[VALID_FROM.lower()])
    valid_until = table.column(plan.filters[VALID_UNTIL.lower()])
    condition = pc.and_kleene(
        pc.less_equal(valid_from, snapshot),
        pc.or_kleene(pc.is_null(valid_until), pc.greater(valid_until, snapshot)),
    )
    for predicate in predicates:
        column = table.column(plan.filters[predicate.column])
        if len(predicate.values) == 1:
            match = pc.equal(column, pa.scalar(predicate.values[0], column.type))
        else:
            match = pc.is_in(column, value_set=pa.array(predicate.values, column.type))
        condition = pc.and_kleene(condition, match)
    return condition
