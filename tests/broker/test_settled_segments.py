"""Through the gRPC API: a table whose settled segments (greatest validFrom known and <= the LWM)
skip the ``validFrom`` test answers exactly like the same segments announced without
``max_valid_from`` (elision off) and like the visibility rule, at snapshots below, at and above
the settled threshold, for time travel, table_changes, passthrough and direct key lookups; a
missing file or a vanished view still falls back and retries; the split follows the LWM."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from horizon_broker._core.errors import Unavailable
from horizon_broker.broker.spark.scan_layout import SETTLED_SUFFIX
from horizon_broker.timeline.segment import Segment
from tests.broker.conftest import LWM, BrokerEnv
from tests.broker.data import (
    CHUNK,
    VERSION,
    Row,
    UpsertTable,
    as_rows,
    descriptor,
    oracle,
    version,
    visible,
    write_rows,
)

SETTLED_MAX = 900
"""The greatest validFrom in the settled segment: the threshold T of the split."""
SNAPSHOTS = (800, SETTLED_MAX, 1000, 1150, LWM)


def _chain(id_: int, *lives: tuple[int, int | None]) -> list[Row]:
    return [
        version(id_, f"owner{id_}-{n}", id_ * 10 + n, start, until)
        for n, (start, until) in enumerate(lives)
    ]


def _rows() -> tuple[list[Row], list[Row], list[Row]]:
    """Versions of three segments; keys' chains cross segments, with deletes and empty versions.

    * ``a`` (settled, greatest validFrom 900): ids 1..10 first versions [500, 1000); ids 11..20
      [500, 900) then [900, -); ids 21..30 [700, -); id 31 [600, 1100) (deleted) and the empty
      [800, 800).
    * ``b`` (greatest validFrom unknown): ids 1..10 second versions [1000, -); ids 40..45
      [1100, -); the empty [1000, 1000) of id 46.
    * ``c`` (greatest validFrom 1300, above the LWM): id 56 [1150, 1300) then [1300, -); ids 50..55
      [1300, -) (not visible at any allowed snapshot yet).
    """
    a: list[Row] = []
    for i in range(1, 11):
        a += _chain(i, (500, 1000))
    for i in range(11, 21):
        a += _chain(i, (500, 900), (900, None))
    for i in range(21, 31):
        a += _chain(i, (700, None))
    a += _chain(31, (600, 1100), (800, 800))
    b: list[Row] = []
    for i in range(1, 11):
        b.append(version(i, f"owner{i}-new", i * 10 + 5, 1000, None))
    for i in range(40, 46):
        b += _chain(i, (1100, None))
    b += _chain(46, (1000, 1000))
    c = _chain(56, (1150, 1300), (1300, None))
    for i in range(50, 56):
        c += _chain(i, (1300, None))
    assert max(row["validFrom"] for row in a) == SETTLED_MAX
    return a, b, c


class SplitTables:
    """The same three segment files announced as four tables, and their rows written as
    ingestion does (open and closed versions apart) as a fifth:

    * ``settle_on``: ``a`` settled, ``b`` unknown, ``c`` above the LWM (a split with a rest view);
    * ``settle_off``: the same files without any ``max_valid_from`` (elision switched off);
    * ``settle_all``: ``a`` and ``b`` only, both with a known maximum (only a settled view);
    * ``settle_all_off``: ``a`` and ``b`` without maxima;
    * ``settle_apart``: ``a``, ``b`` (both settled, T = 1100) and ``c`` in open and closed files;
      the closed files of ``a`` and ``b`` end by 1100 (C), those of ``c`` at 1300.
    """

    def __init__(self, root: Path) -> None:
        self.a_rows, self.b_rows, self.c_rows = _rows()
        desc = descriptor("settle_files", storage_root=root)
        directory = root / "settle"
        parts = (("a", self.a_rows), ("b", self.b_rows), ("c", self.c_rows))
        self.paths = [write_rows(directory / f"{name}.parquet", desc, rows) for name, rows in parts]
        self.apart: list[tuple[str, str, int]] = []
        """Per segment: its open file, its closed file and their greatest validUntil."""
        for name, rows in parts:
            closed = [row for row in rows if row["validUntil"] is not None]
            self.apart.append(
                (
                    write_rows(
                        directory / f"{name}-open.parquet",
                        desc,
                        [row for row in rows if row["validUntil"] is None],
                    ),
                    write_rows(directory / f"{name}-closed.parquet", desc, closed),
                    max(row["validUntil"] for row in closed),
                )
            )
        self.rows = self.a_rows + self.b_rows + self.c_rows
        self.all_rows = self.a_rows + self.b_rows

    def segments(self, table: str) -> list[Segment]:
        apart = table == "settle_apart"
        known = not table.endswith("_off")
        maxima = (SETTLED_MAX, 1100, 1300) if known else (None, None, None)
        if table == "settle_on":
            maxima = (SETTLED_MAX, None, 1300)
        count = 2 if table.startswith("settle_all") else 3
        segments = []
        for partition in range(count):
            opened, closed, greatest_until = self.apart[partition]
            segments.append(
                Segment(
                    table=table,
                    interval=CHUNK,
                    version=VERSION,
                    partition=partition,
                    core_partitions=count,
                    location=(opened, closed) if apart else (self.paths[partition],),
                    row_count=1,
                    max_valid_from=maxima[partition],
                    open_files=(opened,) if apart else (),
                    max_valid_until=greatest_until if apart else None,
                )
            )
        return segments


def _publish(
    env: BrokerEnv, name: str, segments: Sequence[Segment], *, visible_count: int | None = None
) -> None:
    """Register and announce a table at the LWM; wait until the broker sees its segments."""
    lwm = LWM
    expected = len(segments) if visible_count is None else visible_count
    server = env.server_client
    server.register_table(descriptor(name, storage_root=env.root))
    server.announce(segments)
    server.report(name, {0: (lwm, lwm), 1: (1500, 1500)})

    def ready(follower) -> bool:  # type: ignore[no-untyped-def]
        if name not in follower.tables():
            return False
        view = follower.view(name)
        return view.lwm == lwm and len(view.visible_segments) == expected

    assert env.broker.follower.wait_for(ready, 10), f"the broker never saw {name}"


@pytest.fixture(scope="module")
def split(broker_env: BrokerEnv) -> SplitTables:
    tables = SplitTables(broker_env.root)
    for name in ("settle_on", "settle_off", "settle_all", "settle_all_off", "settle_apart"):
        _publish(broker_env, name, tables.segments(name))
    return tables


def _same_rows(a: pa.Table, b: pa.Table) -> bool:
    key = str
    return a.schema == b.schema and sorted(a.to_pylist(), key=key) == sorted(b.to_pylist(), key=key)


def _views(env: BrokerEnv, table: str) -> list[str]:
    return [name for name in env.broker.engine.views.names() if f"_{table}_g" in name]


# -- answers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("snapshot", SNAPSHOTS)
def test_time_travel_on_a_split_table_equals_the_unsplit_table_and_the_rule(
    broker_env, client, split, snapshot
):
    for on, off, rows in (
        ("settle_on", "settle_off", split.rows),
        ("settle_all", "settle_all_off", split.all_rows),
        ("settle_apart", "settle_off", split.rows),
    ):
        sql = "SELECT * FROM {} VERSION AS OF " + str(snapshot)
        got = client.query(sql.format(on))
        assert _same_rows(got, client.query(sql.format(off)).rename_columns(got.column_names))
        assert as_rows(got) == oracle(visible(rows, snapshot)), (on, snapshot)
        ids = got.column("id").to_pylist()
        assert len(ids) == len(set(ids)), "one version per key"


SPLITS = (
    ("settle_on", "settle_off"),
    ("settle_all", "settle_all_off"),
    ("settle_apart", "settle_off"),
)


def test_default_snapshot_and_aggregates_equal_the_unsplit_table(broker_env, client, split):
    for on, off in SPLITS:
        for sql in (
            "SELECT * FROM {}",
            "SELECT count(*) AS n, sum(balance) AS s, max(validFrom) AS f FROM {}",
            "SELECT x.id, y.balance FROM {0} x LEFT JOIN {0} VERSION AS OF 1200 y "
            "ON x.id = y.id + 1",
        ):
            result = client.execute(sql.format(on))
            assert result.snapshot == LWM
            assert _same_rows(result.table, client.query(sql.format(off))), sql
    expected = visible(split.rows, LWM)
    total = client.query("SELECT count(*) AS n, sum(balance) AS s FROM settle_on").to_pylist()
    assert total == [{"n": len(expected), "s": sum(row["balance"] for row in expected)}]


def test_table_changes_of_a_split_table_read_every_segment(broker_env, client, split):
    for on, off in SPLITS:
        for start, end in ((400, LWM), (899, 1000)):
            sql = (
                "SELECT id, owner, _change_type, _commit_timestamp "
                f"FROM table_changes('{{}}', {start}, {end})"
            )
            got = client.query(sql.format(on))
            assert got.num_rows > 0
            assert _same_rows(got, client.query(sql.format(off))), (on, start, end)


def test_direct_key_lookups_see_every_visible_segment(broker_env, client, split):
    engine = broker_env.broker.engine
    for table in ("settle_on", "settle_apart"):
        for snapshot in (800, SETTLED_MAX, 1000, 1150, LWM):
            for key in (5, 15, 31, 41, 56):
                sql = f"SELECT * FROM {table} VERSION AS OF {snapshot} WHERE id = {key}"
                before = engine.direct_answers
                got = client.query(sql)
                assert engine.direct_answers == before + 1, sql
                expected = [row for row in visible(split.rows, snapshot) if row["id"] == key]
                assert as_rows(got) == oracle(expected), sql


# -- what Explain and the metadata say -----------------------------------------------------------


def test_the_rewrite_skips_valid_from_only_for_settled_segments_at_or_above_their_maximum(
    broker_env, client, split
):
    explain = client.explain("SELECT id FROM settle_on")
    (table,) = explain.tables
    rest = table.read.view
    settled = rest + SETTLED_SUFFIX
    assert rest.endswith(f"_t{SETTLED_MAX}")
    sql = explain.rewritten_sql
    assert f"FROM {settled} WHERE (validUntil IS NULL OR validUntil > {LWM})" in sql
    assert f"FROM {rest} WHERE validFrom <= {LWM} AND (validUntil" in sql
    assert table.read.segment_count == 3 and table.read.file_count == 3
    reasons = {chosen.segment.partition: chosen.reason for chosen in table.segments}
    assert f"read through view {settled}" in reasons[0]
    assert f"read through view {rest}" in reasons[1] and "unknown" in reasons[1]
    assert f"read through view {rest}" in reasons[2] and "1300" in reasons[2]
    maxima = {c.segment.partition: c.segment.HasField("max_valid_from") for c in table.segments}
    assert maxima == {0: True, 1: False, 2: True}

    below = client.explain(f"SELECT id FROM settle_on VERSION AS OF {SETTLED_MAX - 1}")
    full = f"validFrom <= {SETTLED_MAX - 1} AND (validUntil IS NULL OR validUntil > 899)"
    assert below.rewritten_sql.count(full) == 2, "below T both branches keep the full predicate"

    unsplit = client.explain("SELECT id FROM settle_off")
    assert unsplit.tables[0].read.view.endswith(
        f"_g{broker_env.broker.follower.view('settle_off').generation}"
    )
    assert SETTLED_SUFFIX + " " not in unsplit.rewritten_sql
    executed = client.execute("SELECT id FROM settle_on")
    assert executed.metadata.tables[0].view == rest


def test_open_files_are_read_without_a_test_and_closed_ones_not_past_their_end(
    broker_env, client, split
):
    explain = client.explain("SELECT id FROM settle_apart")
    (table,) = explain.tables
    rest = table.read.view
    assert rest.endswith("_t1100_u1100")
    columns = "id, owner, balance, validFrom, validUntil"
    sql = explain.rewritten_sql
    assert f"SELECT {columns} FROM {rest}_o UNION ALL" in sql, "no test on settled open files"
    assert f"FROM {rest} WHERE validFrom <= {LWM} AND (validUntil" in sql, "c keeps its test"
    assert f"{rest}_c" not in sql, "closed files ending by the LWM are not read"
    assert table.read.segment_count == 3 and table.read.file_count == 6
    reasons = {chosen.segment.partition: chosen.reason for chosen in table.segments}
    for partition in (0, 1):
        assert f"file of open versions read through view {rest}_o" in reasons[partition]
        assert f"file of closed versions read through view {rest}_c" in reasons[partition]
    assert reasons[2].count(f"read through view {rest} with the full") == 1
    bounds = {c.segment.partition: c.segment.max_valid_until for c in table.segments}
    assert bounds == {0: 1100, 1: 1000, 2: 1300}
    opened = {c.segment.partition: list(c.segment.open_files) for c in table.segments}
    assert opened == {partition: [files[0]] for partition, files in enumerate(split.apart)}

    below = client.explain("SELECT id FROM settle_apart VERSION AS OF 1050")
    assert f"FROM {rest}_o WHERE validFrom <= 1050 UNION ALL" in below.rewritten_sql
    full = "validFrom <= 1050 AND (validUntil IS NULL OR validUntil > 1050)"
    assert f"FROM {rest}_c WHERE {full}" in below.rewritten_sql
    assert below.rewritten_sql.count(full) == 2


def test_only_settled_segments_have_a_single_settled_view(broker_env, client, split):
    rewritten = client.rewrite("SELECT * FROM settle_all")
    (entry,) = rewritten.tables
    assert entry.view.endswith("_t1100" + SETTLED_SUFFIX)
    assert rewritten.metadata.tables[0].view == entry.view
    assert "validFrom <=" not in rewritten.sql
    assert sorted(entry.files) == sorted(split.paths[:2])


# -- passthrough ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM settle_on",
        f"SELECT id, owner, balance FROM settle_on VERSION AS OF {SETTLED_MAX - 1} WHERE id < 40",
        "SELECT a.id, b.balance FROM settle_on a JOIN settle_all b ON a.id = b.id",
        f"SELECT * FROM table_changes('settle_on', 500, {LWM})",
        "SELECT count(*) AS n FROM settle_all VERSION AS OF 1000",
        "SELECT * FROM settle_apart",
        "SELECT id, balance FROM settle_apart VERSION AS OF 1050 WHERE id < 50",
    ],
)
def test_passthrough_registers_each_view_and_gets_the_brokers_answer(
    broker_env, client, split, spark, sql
):
    rewritten = client.rewrite(sql)
    views = [entry.view for entry in rewritten.tables]
    assert len(views) == len(set(views))
    for entry in rewritten.tables:
        assert set(entry.files) <= {path for s in entry.segments for path in s.location}
        assert entry.view in rewritten.sql
    on = [entry for entry in rewritten.tables if entry.table == "settle_on"]
    if on:
        assert len(on) == 2, "settle_on is read through its rest and its settled view"
        assert {len(entry.segments) for entry in on} == {1, 2}
        assert sorted(p for entry in on for p in entry.files) == sorted(split.paths)
    own_session = spark.newSession()
    frame = client.passthrough(own_session, sql)
    passthrough = pa.Table.from_pylist([row.asDict() for row in frame.collect()])
    brokered = client.query(sql)
    assert sorted(map(str, passthrough.to_pylist())) == sorted(map(str, brokered.to_pylist()))


# -- the views follow the LWM; failures still fall back ------------------------------------------


def test_a_moving_lwm_resplits_one_generation_under_new_view_names(broker_env, client, split):
    env = broker_env
    segments = [replace(s, table="settle_move") for s in split.segments("settle_all")]
    segments[1] = replace(segments[1], max_valid_from=1300)  # b as if it held a later version
    _publish(env, "settle_move", segments)
    follower = env.broker.follower
    generation = follower.view("settle_move").generation
    first = client.execute("SELECT * FROM settle_move")
    assert first.metadata.tables[0].view.endswith(f"_g{generation}_t{SETTLED_MAX}")
    assert as_rows(first.table) == oracle(visible(split.all_rows, LWM))

    env.server_client.report("settle_move", {0: (1400, 1400), 1: (1500, 1500)})
    assert follower.wait_for(lambda f: f.view("settle_move").lwm == 1400, 10)
    assert follower.view("settle_move").generation == generation
    second = client.execute("SELECT * FROM settle_move")
    assert second.snapshot == 1400
    assert second.metadata.tables[0].view.endswith(f"_g{generation}_t1300{SETTLED_SUFFIX}")
    assert as_rows(second.table) == oracle(visible(split.all_rows, 1400))
    again = client.query(f"SELECT * FROM settle_move VERSION AS OF {LWM}")
    assert as_rows(again) == oracle(visible(split.all_rows, LWM))
    assert _views(env, "settle_move") == [second.metadata.tables[0].view], "old split dropped"


def test_a_missing_settled_file_falls_back_where_the_fallback_is_exact(broker_env, client):
    table = UpsertTable("settle_fallback", broker_env.root)
    segments = [
        replace(table.p0, max_valid_from=500),
        table.p1,  # greatest validFrom unknown: keeps the full predicate
        replace(table.o0, max_valid_from=500),
    ]
    _publish(broker_env, "settle_fallback", segments, visible_count=2)
    before = client.execute("SELECT * FROM settle_fallback")
    assert before.metadata.tables[0].view.endswith("_t500")
    assert as_rows(before.table) == oracle(table.rows_visible_at(LWM))
    os.remove(table.o0.location[0])
    with pytest.raises(Unavailable) as refused:
        client.execute("SELECT * FROM settle_fallback", cache=False)
    assert str(table.o0.id) in str(refused.value)
    at_900 = client.execute("SELECT * FROM settle_fallback VERSION AS OF 900")
    assert as_rows(at_900.table) == oracle(table.rows_visible_at(900, overwrite=False))


def test_a_vanished_settled_view_is_rebuilt_and_the_query_answers(broker_env, client, split):
    engine = broker_env.broker.engine
    client.query("SELECT count(*) FROM settle_on")
    settled = [name for name in _views(broker_env, "settle_on") if name.endswith(SETTLED_SUFFIX)]
    assert len(settled) == 1
    for session in (engine.spark, *engine.executor.mirrors):
        session.catalog.dropTempView(settled[0])
    result = client.execute("SELECT * FROM settle_on", cache=False)  # runs on the views
    assert result.metadata.retried
    assert as_rows(result.table) == oracle(visible(split.rows, LWM))
