"""`horizon demo` end to end (quick size): every check it makes on the system must pass."""

from __future__ import annotations

import io

import redis
from rich.console import Console

from demo.run import DemoOptions, run_demo


def test_quick_demo_passes_every_consistency_check(
    spark, redis_client: redis.Redis, redis_server, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    output = io.StringIO()
    report = run_demo(
        DemoOptions.quick(redis_url=redis_server.url, workdir=tmp_path),
        console=Console(file=output, width=120),
        spark=spark,
    )
    failed = [f"{check.name}: {check.detail}" for check in report.checks if not check.passed]
    assert not failed, "\n".join(failed)
    text = output.getvalue()
    assert "checks passed" in text
    assert (tmp_path / "accounts-timeline.svg").read_text().startswith("<svg")
    # the demo must show each part the issue asks for
    for heading in (
        "Pinot", "lagging", "Time travel", "timeline", "rewritten SQL", "Flight SQL", "Compaction",
        "Standing queries", "Why is this row", "Change data",
    ):  # fmt: skip
        assert heading in text
    assert (tmp_path / "accounts-compacted.svg").read_text().startswith("<svg")
    names = {check.name for check in report.checks}
    assert "answers at pinned snapshots did not change during or after compaction" in names
    assert "Flight SQL (ADBC) answers as ExecuteQuery at the same snapshot" in names
    assert "subscription: the bank's total is the same in the first result and every delta" in names
    assert "subscription: the first result plus every delta is the query's answer" in names
    assert (
        "ExplainKey: an updated then closed account shows a superseded and a deleted version"
        in names
    )
    # step 10: the shop mirrored from its Debezium streams by a real horizon ingest process
    for table in ("customers", "orders"):
        assert f"change data: the current {table} equals the database row by row" in names
        assert (
            f"change data: {table} at the first half's snapshot equals the database row by row"
            in names
        )
    assert "change data: the transaction over both tables is in both, one commit per table" in names
    assert "change data: the added column is refused at a snapshot before it, naming it" in names
