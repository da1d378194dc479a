"""The demo's change-data step on its own: a shop's Debezium stream in Redis, mirrored by a real
``horizon ingest`` process, must equal the shop's rows now (a column added halfway by
``horizon table alter`` included) and at the earlier snapshot (without it)."""

from __future__ import annotations

import io
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import redis
from rich.console import Console

from demo.cdc import show_change_data
from demo.run import Demo, DemoOptions


def test_the_mirrored_shop_equals_the_database_now_and_at_an_earlier_snapshot(
    spark: Any, redis_client: redis.Redis, redis_server: Any, tmp_path: Path
) -> None:
    output = io.StringIO()
    options = DemoOptions.quick(redis_url=redis_server.url, workdir=tmp_path)
    with ExitStack() as stack:
        demo = Demo(options, Console(file=output, width=120), stack, spark)
        demo._start_services()
        show_change_data(demo)
    failed = [f"{check.name}: {check.detail}" for check in demo.report.checks if not check.passed]
    assert not failed, "\n".join(failed) + "\n" + output.getvalue()
    names = {check.name for check in demo.report.checks}
    for table in ("customers", "orders"):
        assert f"change data: the current {table} equals the database row by row" in names
        assert (
            f"change data: {table} at the first half's snapshot equals the database row by row"
            in names
        )
    assert "change data: the transaction over both tables is in both, one commit per table" in names
    assert "change data: the added column is refused at a snapshot before it, naming it" in names
