"""The key index entries of a batch's keys, from its partitions' levels (pyarrow, no Spark).

Each level file holds one key partition's entries; a batch looks up, in each file, only its own
keys of that partition, and of several levels keeps each key's newest entry
(:func:`horizon_broker.ingest.driver_columns.resolution.newest_entries`). Files are read once and kept decoded
(:mod:`horizon_broker.ingest.driver_columns.level_cache`); a one-column key is found in a cached level by binary search
of its code (:mod:`horizon_broker.ingest.driver_columns.key_lookup`), a composite key by a semi-join. Files are looked
up one per core at a time (pyarrow works outside the GIL).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from horizon_broker.ingest import segment_files as files
from horizon_broker.ingest.driver_columns import key_lookup, level_cache, resolution
from horizon_broker.ingest.manifest import KeyIndexVersion
from horizon_broker.ingest.storage import Storage
from horizon_broker.ingest.table import TableDefinition


class _Wanted:
    """One key partition's distinct keys of the batch, ready to look up."""

    def __init__(self, keys: Any, key: Sequence[str]) -> None:
        import pyarrow.compute as pc

        self.codes = None
        if len(key) == 1:
            self.keys: Any = pc.unique(keys[key[0]].combine_chunks())
            if key_lookup.supports(self.keys.type):
                self.keys, self.codes = key_lookup.sorted_by_code(self.keys)
        else:
            self.keys = keys.group_by(list(key), use_threads=False).aggregate([])

    def found_in(self, cached: level_cache.CachedLevel, key: Sequence[str]) -> Any:
        """The entries of a cached level whose key is one of these."""
        import pyarrow as pa
        import pyarrow.compute as pc

        level = cached.entries
        if len(key) > 1:
            asked = self.keys.cast(level.select(list(key)).schema)
            return level.join(asked, keys=list(key), join_type="left semi", use_threads=False)
        name = key[0]
        asked = self.keys.cast(level.schema.field(name).type)
        sorted_keys = cached.sorted_keys(name) if self.codes is not None else None
        if sorted_keys is None:
            return level.filter(pc.is_in(level[name], value_set=asked))
        return level.take(pa.array(sorted_keys.rows_holding(level[name], asked, self.codes)))


def batch_entries(
    table: TableDefinition,
    storage: Storage,
    key_index: Mapping[int, KeyIndexVersion],
    stamped: Any,
    partitions: Sequence[int],
    workers: int,
) -> Any | None:
    """The current entry of each of the batch's keys that has one (None: no key has)."""
    import pyarrow.compute as pc

    key = list(table.primary_key)
    wanted = {
        kp: _Wanted(stamped.filter(pc.equal(stamped["_kp"], kp)).select(key), key)
        for kp in partitions
    }
    return _newest_of(
        table, storage, key_index, partitions, workers,
        lambda kp, cached: wanted[kp].found_in(cached, key),
    )  # fmt: skip


def partition_entries(
    table: TableDefinition,
    storage: Storage,
    key_index: Mapping[int, KeyIndexVersion],
    partitions: Sequence[int],
    workers: int,
) -> Any | None:
    """Every key's current entry in the partitions (their whole index: a batch whose level
    replaces the stack carries the keys it has no record of); None: no entries."""
    return _newest_of(
        table, storage, key_index, partitions, workers, lambda kp, cached: cached.entries
    )


def _newest_of(
    table: TableDefinition,
    storage: Storage,
    key_index: Mapping[int, KeyIndexVersion],
    partitions: Sequence[int],
    workers: int,
    pick: Callable[[int, level_cache.CachedLevel], Any],
) -> Any | None:
    """Of the entries ``pick`` takes from each level file of the partitions, each key's newest."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = files.level_columns(table)
    lookups: list[tuple[int, int, str]] = []  # (depth, partition, file)
    for kp in partitions:
        version = key_index.get(kp)
        for depth, level in enumerate(version.levels if version is not None else ()):
            paths = files.local_parquet_files(storage, level) or []
            lookups.extend((depth, kp, path) for path in paths)

    def look_up(item: tuple[int, int, str]) -> Any:
        _, kp, path = item

        def read() -> Any:
            return resolution.level_entries(pq.read_table(path, columns=columns), table)

        return pick(kp, level_cache.cached_level(path, table, read))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        found = list(pool.map(look_up, lookups))
    depths = max((depth for depth, _, _ in lookups), default=-1) + 1
    stacked: list[list[Any]] = [[] for _ in range(depths)]
    for (depth, _, _), entries in zip(lookups, found, strict=True):
        stacked[depth].append(entries)
    levels = [pa.concat_tables(parts, promote_options="permissive") for parts in stacked if parts]
    return resolution.newest_entries(levels, table)
