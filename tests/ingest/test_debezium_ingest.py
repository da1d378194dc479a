"""Debezium change events ingested from files (format ``debezium``) through the real pipeline:
on every road (driver rows, driver columns, Spark) every snapshot answers the reference model
(the newest after-image per key by log position, deleted keys absent), malformed events are
dead-lettered beside the commit log and counted, and a truncate the table does not allow or too
many dead letters stop the batch with a clear error.

Transactions may change a key several times, their events interleaved in the file with changes
from outside them: a transaction commits at its first event's timestamp, so an outside change of
one of its keys later in the file commits after all of it and shows only if its log position is
newer than the transaction's newest change of the key (the commit-order rule of the visibility
contract). A real Debezium log cannot interleave them so (the row is locked), but the files can.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from horizon_broker._core.errors import FailedPrecondition, InvalidArgument
from horizon_broker.ingest.debezium_files import dead_letter_directory
from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.metrics import IngestMetrics
from tests.ingest.conftest import broker_view
from tests.ingest.debezium_events import customers_table, lines, postgres_event, wrapped

ROADS = {
    "driver rows": {},
    "driver columns": {"driver_batch_rows": 1},
    "spark": {"driver_batch_rows": 0},
}
_example = itertools.count()


@dataclass(frozen=True)
class Event:
    """One drawn change: its key, op, log position, name and transaction (None: alone)."""

    key: int
    op: str
    lsn: int
    name: str
    tx: str | None

    def envelope(self) -> dict[str, Any]:
        image = {"id": self.key, "name": self.name, "balance": "1.25"}
        if self.op == "d":
            return postgres_event("d", lsn=self.lsn, before={"id": self.key}, transaction=self.tx)
        return postgres_event(self.op, lsn=self.lsn, after=image, transaction=self.tx)


@st.composite
def histories(draw: Any) -> list[list[Event | str | None]]:
    """Batches (one file each) of events with distinct, shuffled log positions, tombstones
    (None) after some deletes, and malformed lines (str). A transaction may change a key several
    times, and its events are interleaved with other events, of its keys too (see the module's
    note on transactions)."""
    count = draw(st.integers(1, 10))
    positions = iter(draw(st.permutations(range(1, count + 1))))
    events: list[Event | str | None] = []
    for _ in range(count):
        key = draw(st.sampled_from([1, 2, 3]))
        tx = draw(st.sampled_from([None, "t0", "t1"]))
        op = draw(st.sampled_from(["c", "u", "r", "d"]))
        lsn = next(positions)
        events.append(Event(key, op, lsn, f"n{lsn}", tx))
        if op == "d" and draw(st.booleans()):
            events.append(None)
        if draw(st.integers(0, 9)) == 0:
            events.append('{"op": "c", "after": {"name": "no key"}}')
    cuts = draw(st.lists(st.integers(1, len(events) - 1), max_size=2)) if len(events) > 1 else []
    bounds = sorted({0, *cuts, len(events)})
    return [events[start:end] for start, end in itertools.pairwise(bounds)]


AROUND_AN_OUTSIDE_CHANGE: list[list[Event | str | None]] = [
    [Event(1, "c", 1, "n1", "t0"), Event(1, "u", 2, "n2", None), Event(1, "u", 3, "n3", "t0")]
]
"""A transaction changing key 1 twice, a change from outside it between them in the file and by
log position: the transaction's newest change shows from its commit on."""


def commit_times(batch: list[Event | str | None], base: int) -> list[tuple[int, Event]]:
    """Each row's commit timestamp in a one-file batch: base + its place among the rows, or
    that of its transaction's first change."""
    rows = [event for event in batch if isinstance(event, Event)]
    first: dict[str, int] = {}
    stamped = []
    for place, event in enumerate(rows):
        if event.tx is not None:
            place = first.setdefault(event.tx, place)
        stamped.append((base + place, event))
    return stamped


def reference(log: list[tuple[int, Event]], snapshot: int) -> dict[int, str]:
    """The table at ``snapshot``: per key, the event with the greatest log position among those
    committed by then (ties cannot happen: positions are distinct); deleted keys absent."""
    newest: dict[int, Event] = {}
    for ts, event in log:
        if ts <= snapshot and (event.key not in newest or event.lsn > newest[event.key].lsn):
            newest[event.key] = event
    return {key: event.name for key, event in newest.items() if event.op != "d"}


def stored_rows(view: Any) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    columns = ["id", "name", "lsn", "deleted", "validFrom", "validUntil"]
    return [
        row
        for segment in view.visible_segments
        for location in segment.location
        for row in pq.read_table(location.removeprefix("file:"), columns=columns).to_pylist()
    ]


def table_at(rows: list[dict[str, Any]], snapshot: int) -> dict[int, str]:
    visible = [
        row
        for row in rows
        if row["validFrom"] <= snapshot
        and (row["validUntil"] is None or row["validUntil"] > snapshot)
    ]
    keys = [row["id"] for row in visible]
    assert len(keys) == len(set(keys)), f"a key is visible twice at {snapshot}: {keys}"
    return {row["id"]: row["name"] for row in visible}


def write_file(directory: Path, number: int, batch: list[Event | str | None]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    text = "".join(
        (
            event
            if isinstance(event, str)
            else json.dumps(None if event is None else event.envelope())
        )
        + "\n"
        for event in batch
    )
    (directory / f"{number:04d}.json").write_text(text)


@settings(
    max_examples=9,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories(), road=st.sampled_from(sorted(ROADS)))
@example(history=AROUND_AN_OUTSIDE_CHANGE, road="driver rows")
@example(history=AROUND_AN_OUTSIDE_CHANGE, road="driver columns")
@example(history=AROUND_AN_OUTSIDE_CHANGE, road="spark")
def test_every_snapshot_of_an_ingested_debezium_history_is_the_newest_after_image_by_lsn(
    spark: Any, server: Any, follower: Any, tmp_path: Path, history: Any, road: str
) -> None:
    n = next(_example)
    name = f"dbz{n}"
    table = customers_table(tmp_path / name, name=name, **ROADS[road])
    client = server(f"d{n}")
    job = IngestJob(spark, table, client).start()
    log: list[tuple[int, Event]] = []
    for number, batch in enumerate(history):
        write_file(tmp_path / f"{name}-changes", number, batch)
        result = job.run_directory(str(tmp_path / f"{name}-changes"), "debezium")
        assert result.dead_letters == sum(isinstance(event, str) for event in batch)
        log.extend(commit_times(batch, result.base))
        view = broker_view(follower, client, name)
        rows = stored_rows(view)
        for snapshot in sorted({ts for ts, _ in log if ts <= view.lwm} | {view.lwm}):
            assert table_at(rows, snapshot) == reference(log, snapshot), (road, snapshot)


def test_malformed_events_are_dead_lettered_beside_the_commit_log_and_counted(
    spark: Any, server: Any, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    table = customers_table(tmp_path / "store", name="dead")
    client = server("dl")
    job = IngestJob(spark, table, client).start()
    changes = tmp_path / "changes"
    changes.mkdir()
    good = postgres_event("c", lsn=10, after={"id": 1, "name": "a", "balance": "2.00"})
    (changes / "001.json").write_text(
        lines([wrapped(good), None]) + "{oops\n" + lines([{"op": "c", "after": {"name": "x"}}])
    )
    result = job.run_directory(str(changes), "debezium")
    assert (result.rows, result.dead_letters) == (1, 2)
    [letters] = Path(dead_letter_directory(str(tmp_path / "store" / "dead"), "dl")).iterdir()
    written = [json.loads(line) for line in letters.read_text().splitlines()]
    assert [(w["position"], w["reason"][:8]) for w in written] == [
        (3, "not JSON"), (4, "key colu")
    ]  # fmt: skip
    assert all(w["source"].endswith("changes/001.json") for w in written)
    stored = [
        pq.read_table(location.removeprefix("file:"), columns=["_sourceFile"]).to_pylist()
        for segment in result.segments
        for location in segment.location
    ]
    assert [row["_sourceFile"][-16:] for rows in stored for row in rows] == ["changes/001.json"]
    metrics = IngestMetrics()
    metrics.observe_batch("dead", result)
    assert (
        metrics.registry.get_sample_value("horizon_ingest_dead_letters_total", {"table": "dead"})
        == 2
    )


def test_more_dead_letters_than_the_table_allows_fail_the_batch_naming_the_first(
    spark: Any, server: Any, tmp_path: Path
) -> None:
    table = customers_table(tmp_path / "store", name="strict", max_dead_letters=1)
    job = IngestJob(spark, table, server("st")).start()
    (tmp_path / "changes").mkdir()
    (tmp_path / "changes" / "001.json").write_text("not json\n[]\n")
    before = job.state.next_seq
    with pytest.raises(FailedPrecondition, match=r"2 malformed.*max_dead_letters = 1.*001\.json:1"):
        job.run_directory(str(tmp_path / "changes"), "debezium")
    assert job.state.next_seq == before  # nothing committed


def test_a_truncate_event_fails_the_batch_unless_the_table_allows_truncation(
    spark: Any, server: Any, tmp_path: Path
) -> None:
    job = IngestJob(spark, customers_table(tmp_path / "s", name="trunc"), server("tr")).start()
    (tmp_path / "changes").mkdir()
    (tmp_path / "changes" / "001.json").write_text(lines([postgres_event("t", lsn=3)]))
    with pytest.raises(FailedPrecondition, match="does not allow truncation"):
        job.run_directory(str(tmp_path / "changes"), "debezium")


def test_debezium_files_are_refused_as_a_spark_stream(
    spark: Any, server: Any, tmp_path: Path
) -> None:
    job = IngestJob(spark, customers_table(tmp_path / "s", name="stream"), server("sm"))
    with pytest.raises(InvalidArgument, match="not as a Spark stream yet"):
        job.stream_directory(str(tmp_path), "debezium")
