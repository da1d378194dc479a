"""New segment files of a table looked up by key are read before they become visible, so the first
lookup after an ingestion batch finds them cached; nothing else is read ahead, and nothing read
ahead changes an answer."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from horizon_broker.broker.direct_lookup.direct_read import DirectReader
from horizon_broker.broker.direct_lookup.file_sets import FooterCache
from horizon_broker.broker.direct_lookup.file_warming import warm_files
from horizon_broker.broker.direct_lookup.key_sets import KeySets
from horizon_broker.broker.sql.model import KeyLookup, Predicate
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from tests.broker.conftest import BrokerEnv, publish_table
from tests.broker.data import (
    ACCOUNT_FILE_SCHEMA,
    CHUNK,
    DAY_MS,
    VERSION,
    as_rows,
    descriptor,
    oracle,
    version,
    write_rows,
)

SCHEMA = ACCOUNT_FILE_SCHEMA


def _rows(residue: int) -> list[dict]:
    """Keys ``residue`` mod 3 over 0..300: every file's key range spans the others', so only
    key sets (not statistics) tell the files apart."""
    return [version(i, f"o{i}", i, 500, None) for i in range(residue, 300, 3)]


def _file(root: Path, name: str, residue: int, table: str = "t") -> str:
    return write_rows(root / table / f"{name}.parquet", descriptor(table), _rows(residue))


def test_warmed_files_answer_a_lookup_without_reading_a_footer_or_a_key_set(tmp_path):
    paths = [_file(tmp_path, f"f{residue}", residue) for residue in range(3)]
    footers, key_sets = FooterCache(), KeySets()
    assert warm_files(paths, ["id"], footers, key_sets, deadline=float("inf")) == 3
    reads, loads = footers.reads, key_sets.loads
    assert (reads, loads) == (3, 3)
    reader = DirectReader(footers=footers, key_sets=key_sets)
    for key in (4, 5, 299):
        lookup = KeyLookup("t", None, (Predicate("id", (key,)),))
        answer = reader.read(lookup, paths, 1000, SCHEMA)
        assert answer is not None
        assert answer.to_pylist() == [row for row in _rows(key % 3) if row["id"] == key]
    assert (footers.reads, key_sets.loads) == (reads, loads), "everything came from the caches"


def test_warming_stops_at_its_deadline_and_skips_files_it_cannot_or_may_not_read(tmp_path):
    paths = [_file(tmp_path, f"f{residue}", residue) for residue in range(3)]
    not_parquet = tmp_path / "t" / "notes.parquet"
    not_parquet.write_text("not a Parquet file")
    pipe = tmp_path / "t" / "pipe.parquet"
    os.mkfifo(pipe)  # opening it would wait for a writer forever
    mixed = [
        str(tmp_path / "t" / "gone.parquet"),
        "s3://bucket/t/remote.parquet",
        str(not_parquet),
        str(pipe),
        str(tmp_path / "t"),
        *paths,
    ]
    footers, key_sets = FooterCache(), KeySets()
    with _watching(pipe) as opened:
        assert warm_files(mixed, ["id"], footers, key_sets, deadline=float("inf")) == 3
    assert not opened, "a pipe is never opened: a read of it would wait for a writer"
    assert footers.cached(paths[0]) is not None and footers.cached(mixed[0]) is None

    ticks = itertools.count()
    footers, key_sets = FooterCache(), KeySets()
    done = warm_files(paths, ["id"], footers, key_sets, deadline=2, clock=lambda: next(ticks))
    assert done == 2 and footers.cached(paths[2]) is None, "the third file was past the deadline"


@contextlib.contextmanager
def _watching(pipe: Path) -> Iterator[list[bool]]:
    """Records whether anything opened ``pipe`` for reading meanwhile (and then lets that read
    end, so a broken warming fails this test instead of hanging it)."""
    opened: list[bool] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.01):
            try:
                writer = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)  # fails while no reader
            except OSError:
                continue
            opened.append(True)
            os.close(writer)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield opened
    finally:
        stop.set()
        watcher.join()


def test_a_lookup_over_a_pipe_leaves_it_to_spark_without_opening_it(tmp_path):
    pipe = tmp_path / "pipe.parquet"
    os.mkfifo(pipe)
    lookup = KeyLookup("t", None, (Predicate("id", (1,)),))
    with _watching(pipe) as opened:
        assert DirectReader().read(lookup, [str(pipe)], 1000, SCHEMA) is None
    assert not opened


def test_only_integer_key_columns_get_key_sets(tmp_path):
    path = _file(tmp_path, "f0", 0)
    footers, key_sets = FooterCache(), KeySets()
    warm_files([path], ["owner", "missing"], footers, key_sets, deadline=float("inf"))
    assert footers.cached(path) is not None and key_sets.loads == 0


# -- through the broker: the follower shows new files before applying them ------------------------


def _segment(table: str, path: str, chunk: Interval, partition: int, partitions: int) -> Segment:
    return Segment(
        table=table,
        interval=chunk,
        version=VERSION,
        partition=partition,
        core_partitions=partitions,
        location=(path,),
        row_count=100,
    )


@pytest.mark.parametrize("looked_up", [True, False])
def test_files_added_to_a_table_looked_up_lately_are_read_before_they_become_visible(
    broker_env: BrokerEnv, client, looked_up
):
    table = f"warm_{looked_up}".lower()
    root = Path(broker_env.root)
    first = [_file(root, f"p{residue}", residue, table) for residue in range(2)]
    publish_table(
        broker_env,
        descriptor(table, storage_root=root),
        [_segment(table, path, CHUNK, number, 2) for number, path in enumerate(first)],
    )
    sql = f"SELECT * FROM {table} WHERE id = {{}}"
    if looked_up:
        assert as_rows(client.query(sql.format(3))) == oracle(_rows(0)[1:2])
    reader = broker_env.broker.engine.direct.reader  # type: ignore[union-attr]
    added = _file(root, "later", 2, table)
    broker_env.server_client.announce([_segment(table, added, Interval(DAY_MS, 2 * DAY_MS), 0, 1)])

    def footer_when_visible(follower) -> bool:  # type: ignore[no-untyped-def]
        return len(follower.view(table).visible_segments) == 3

    assert broker_env.broker.follower.wait_for(footer_when_visible, 10)
    warmed = reader.footers.cached(added) is not None
    assert warmed == looked_up, "read ahead exactly for a table looked up lately"
    reads, loads = reader.footers.reads, reader.key_sets.loads
    assert as_rows(client.query(sql.format(5))) == oracle(r for r in _rows(2) if r["id"] == 5)
    if looked_up:
        assert (reader.footers.reads, reader.key_sets.loads) == (reads, loads)
    else:
        assert reader.footers.reads > reads
