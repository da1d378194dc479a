"""The demo's first step: the example of Pinot's upsert design (see
``docs/design/contract/index.md``), the
average balance of two users with and without upsert, as two tables ingested side by side."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from horizon_broker.ingest.job import IngestJob
from horizon_broker.ingest.table import TableDefinition

PINOT_UPSERT = "pinot_balances"
PINOT_LOG = "pinot_balances_log"


def show_pinot_example(demo: Any) -> None:
    demo.heading("1. The Pinot design's example: average balance with and without upsert")
    columns = {"user_id": "string", "balance": "bigint", "seq": "bigint"}
    upsert = TableDefinition.from_dict(
        {
            "name": PINOT_UPSERT,
            "columns": columns,
            "primary_key": ["user_id"],
            "comparison": ["seq"],
            "storage_root": str(demo.storage),
        }
    )
    log = TableDefinition.from_dict(
        {
            "name": PINOT_LOG,
            "mode": "append",
            "columns": columns,
            "storage_root": str(demo.storage),
        }
    )
    server = demo.server_client("pinot-server")
    jobs = [IngestJob(demo.spark, table, server).start() for table in (upsert, log)]
    steps = [
        [("abc-12", 100, 1), ("abc-13", 102, 2)],
        [("abc-12", 200, 3)],
        [("abc-13", 300, 4)],
    ]
    expected = [(101.0, 101.0), (151.0, 134.0), (250.0, 175.5)]
    view = Table("after", "rows arrived", "avg with upsert", "avg without upsert", "expected")
    for number, (rows, (with_upsert, without)) in enumerate(
        zip(steps, expected, strict=True), start=1
    ):
        frame = demo.spark.createDataFrame(rows, "user_id string, balance bigint, seq bigint")
        for job in jobs:
            result = job.run_batch(frame, sources=[f"pinot-step-{number}"])
            demo.wait_for_progress(job.table.name, server.server_id, result.high)
        got_upsert = demo.scalar(f"SELECT AVG(balance) FROM {PINOT_UPSERT}")
        got_log = demo.scalar(f"SELECT AVG(balance) FROM {PINOT_LOG}")
        view.add_row(
            f"step {number}",
            ", ".join(f"{user}={balance}" for user, balance, _ in rows),
            f"{got_upsert:g}",
            f"{got_log:g}",
            f"{with_upsert:g} / {without:g}",
        )
        demo.check(
            f"Pinot example step {number}",
            (got_upsert, got_log) == (with_upsert, without),
            f"avg {got_upsert:g} with upsert, {got_log:g} without",
        )
    demo.console.print(view)
