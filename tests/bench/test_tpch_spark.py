"""``bench.tpch`` end to end at a tiny scale: two TPC-H queries through a real broker over
tables that real ingestion batches built (corrections, deletes, re-inserts, late rows), before
and after a compaction, each answer equal to DuckDB's on the final state and at the first
batches' snapshot by ``VERSION AS OF`` and ``TIMESTAMP AS OF`` (the run raises ``WrongAnswer``
otherwise), and the plans written side by side.

Two queries, five tables: Q03 went (a three-table join with a limit, which Q21 also is, with
more tables), and with it the customer table's ingestion, plain copy and compaction (the call
took 40.6 s with three queries: plain tables 5.0 s, ingestion 7.0 s, phase before 16.3 s,
compaction 2.5 s, phase after 8.0 s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.tpch import run
from bench.tpch_queries import tables_read
from tests.processes import RedisProcess

QUERIES = [19, 21]
"""The OR-of-joins query; a four-table join with a limit, EXISTS and NOT EXISTS on lineitem."""


def test_tpch_queries_through_horizon_answer_as_duckdb_before_and_after_compaction(
    spark: Any, redis_server: RedisProcess, tmp_path: Path
) -> None:
    results = run(
        0.005,
        QUERIES,
        rounds=1,
        compaction=True,
        spark=spark,
        redis_url=redis_server.url,
        plans_dir=tmp_path,
    )
    assert set(results["rows"]) == tables_read(QUERIES)  # only the tables the queries read
    for phase in ("before", "after"):
        assert sorted(results[phase]["queries"]) == ["Q19", "Q21"]
        assert all(q["rows"] > 0 for q in results[phase]["queries"].values())
        # Spark's metrics of both sides' scans: every file a plan lists is read (the counts
        # name the tables the plans name), and the A/A control was timed beside them.
        for figures in results[phase]["queries"].values():
            for side in ("horizon", "plain"):
                reads = figures["reads"][side]
                listed = dict(
                    item.rsplit(" ", 1)
                    for item in figures[f"{side}_plan"]["files listed per table"].split(", ")
                )
                assert {table: str(count) for table, count in reads["files"].items()} == listed
                assert reads["tasks"] > 0 and all(size > 0 for size in reads["bytes"].values())
            assert figures["aa_ratio"] > 0
            # Each ratio is judged beside its own noise (bench.tpch_stats).
            assert figures["verdict"] in {"met", "within noise", "missed"}
            low, high = figures["ratio_range"]  # of unrounded medians: 0.01 either way
            assert low - 0.01 <= figures["ratio"] <= high + 0.01
        if phase == "after":  # one view per table, read whole: named directly (name_views)
            assert [q["derived_tables"] for q in results[phase]["queries"].values()] == [0, 0]
        plans = (tmp_path / f"tpch_plans_{phase}.md").read_text()
        assert plans.count("<summary>Horizon plan</summary>") == len(QUERIES)
    compacted = results["compaction"]
    assert compacted["lineitem"].startswith("published"), compacted
    assert not any(outcome.startswith("revoked") for outcome in compacted.values()), compacted
