"""A transaction that changes a key twice, with a change from outside it in between.

The transaction's versions all commit at its one timestamp (its first change's); a change of the
key from outside it that commits later but compares below the transaction's newest version is
out of order. On every road (Spark, driver rows, driver columns) a plain JSON changelog with a
``transaction_column`` must leave exactly one visible version per key at every snapshot and no
inverted interval (validUntil < validFrom).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from horizon_broker.ingest.job import IngestJob
from tests.ingest.conftest import accounts_table, broker_view, segment_rows

ROADS = {
    "spark": {"driver_batch_rows": 0, "driver_columnar_rows": 0},
    "driver rows": {"driver_batch_rows": 10_000},
    "driver columns": {"driver_batch_rows": 1},
}
ROAD_ACTION = {"spark": None, "driver rows": "resolve on the driver",
               "driver columns": "resolve columns on the driver"}  # fmt: skip


@pytest.mark.parametrize("road", list(ROADS))
def test_a_transaction_touching_a_key_twice_around_an_outside_change_shows_one_version(
    spark: Any, server: Any, follower: Any, tmp_path: Path, road: str
) -> None:
    name = "tx_" + road.replace(" ", "_")
    columns = {"user_id": "string", "balance": "bigint", "seq": "bigint", "deleted": "boolean",
               "tx": "bigint"}  # fmt: skip
    table = accounts_table(
        tmp_path / "t", name=name, columns=columns, transaction_column="tx",
        out_of_order="store", **ROADS[road],
    )  # fmt: skip
    changelog = tmp_path / "changelog"
    changelog.mkdir()
    # By log position: the transaction's first change, an outside change committed after the
    # transaction (its first change) but comparing between its two changes, its second change.
    lines = [
        {"user_id": "k", "balance": 1, "seq": 1, "deleted": False, "tx": 7},
        {"user_id": "k", "balance": 2, "seq": 2, "deleted": False, "tx": None},
        {"user_id": "k", "balance": 3, "seq": 3, "deleted": False, "tx": 7},
    ]
    (changelog / "000.json").write_text("".join(json.dumps(line) + "\n" for line in lines))
    job = IngestJob(spark, table, server(name)).start()
    result = job.run_directory(str(changelog), "json")
    if ROAD_ACTION[road] is not None:
        assert ROAD_ACTION[road] in job.action_seconds
    else:
        assert not any("driver" in action for action in job.action_seconds if "resolve" in action)
    view = broker_view(follower, job.client, name)
    stored = segment_rows(spark, view.visible_segments)
    intervals = {row["seq"]: (row["validFrom"], row["validUntil"]) for row in stored}
    base = result.base
    # The transaction's first version is superseded at its own timestamp; the outside change
    # compares below the key's current version when it commits: an empty interval.
    assert intervals == {1: (base, base), 3: (base, None), 2: (base + 1, base + 1)}
    for snapshot in range(base, view.lwm + 1):
        visible = [
            row["seq"] for row in stored
            if row["validFrom"] <= snapshot
            and (row["validUntil"] is None or row["validUntil"] > snapshot)
        ]  # fmt: skip
        assert visible == [3], f"at {snapshot}: {visible}"
