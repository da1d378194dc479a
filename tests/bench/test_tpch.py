"""The pure parts of ``bench.tpch``: the query texts, the generator, the changelog batches, the
plan summaries and the answer comparison (no Spark, no Redis)."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

from bench.tpch_answers import WrongAnswer, check, reference_answers
from bench.tpch_data import DELETED, KEYS, SEQUENCE, batches, generate, money
from bench.tpch_plans import summarize
from bench.tpch_queries import QUERIES, parse_numbers

TINY = 0.002


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return generate(TINY)


@pytest.mark.parametrize("number", sorted(QUERIES))
def test_each_query_text_parses_in_sparks_dialect_and_reads_only_tpch_tables(number: int) -> None:
    tree = sqlglot.parse_one(QUERIES[number], read="spark")
    ctes = {cte.alias for cte in tree.find_all(exp.CTE)}
    read = {table.name for table in tree.find_all(exp.Table)} - ctes
    assert read and read <= set(KEYS)


def test_all_22_queries_are_there_and_a_subset_is_chosen_by_number() -> None:
    assert sorted(QUERIES) == list(range(1, 23))
    assert parse_numbers("3, 17,21") == [3, 17, 21]
    assert parse_numbers(None) == list(range(1, 23))
    with pytest.raises(ValueError, match="1 to 22"):
        parse_numbers("23")


def test_the_generator_is_deterministic_and_the_seed_changes_it() -> None:
    first, again, other = generate(TINY), generate(TINY), generate(TINY, seed=7)
    assert all(first[name].equals(again[name]) for name in KEYS)
    assert not first["lineitem"].equals(other["lineitem"])


def test_every_query_has_an_answer_on_the_generated_data() -> None:
    """The value domains reach every query's filters at the default scale (an empty answer
    checks nothing)."""
    answers = reference_answers(generate(0.01), QUERIES)
    assert [number for number, rows in answers.items() if not rows] == []


def test_keys_are_unique_and_every_lineitem_has_its_part_and_supplier(
    tables: dict[str, pa.Table],
) -> None:
    for name, keys in KEYS.items():
        table = tables[name]
        assert table.group_by(list(keys)).aggregate([]).num_rows == table.num_rows, name
    pairs = set(zip(*(tables["partsupp"][c].to_pylist() for c in KEYS["partsupp"]), strict=True))
    lines = zip(tables["lineitem"]["l_partkey"].to_pylist(), tables["lineitem"]["l_suppkey"].to_pylist(), strict=True)  # fmt: skip
    assert set(lines) <= pairs


def _replay(name: str, changes: list[pa.Table]) -> list[dict[str, object]]:
    """Upsert semantics: per key the row of the greatest sequence wins; a delete removes it."""
    newest: dict[tuple[object, ...], dict[str, object]] = {}
    for batch in changes:
        for row in batch.to_pylist():
            key = tuple(row[k] for k in KEYS[name])
            if key not in newest or row[SEQUENCE] >= newest[key][SEQUENCE]:
                newest[key] = row
    kept = [row for row in newest.values() if not row[DELETED]]
    for row in kept:
        del row[SEQUENCE], row[DELETED]
    return sorted(kept, key=lambda row: tuple(str(row[k]) for k in KEYS[name]))


@pytest.mark.parametrize("name", sorted(KEYS))
def test_the_batches_replay_to_the_final_state_with_history_on_the_way(
    name: str, tables: dict[str, pa.Table]
) -> None:
    final = tables[name]
    changes = batches(name, final)
    expected = sorted(final.to_pylist(), key=lambda row: tuple(str(row[k]) for k in KEYS[name]))
    assert _replay(name, changes) == expected
    first = changes[0]  # bench.tpch_history reads it as a state: no key twice
    assert first.group_by(list(KEYS[name])).aggregate([]).num_rows == first.num_rows
    if final.num_rows >= 100:  # history: corrections, deletes of ghosts and real rows, late rows
        assert changes[1].num_rows > 0 and any(changes[1][DELETED].to_pylist())
        assert changes[2].num_rows > 0
        assert sum(batch.num_rows for batch in changes) > final.num_rows


def test_money_is_exact_cents_as_decimal() -> None:
    values = money(np.array([12345, -1, 0, -99999])).to_pylist()
    assert [str(value) for value in values] == ["123.45", "-0.01", "0.00", "-999.99"]


PLAN = """AdaptiveSparkPlan isFinalPlan=false
+- BroadcastHashJoin [o_orderkey#1L], [l_orderkey#2L], Cross, BuildRight, false, false
   :- FileScan parquet [o_orderkey#1L] Batched: true, Location: InMemoryFileIndex(3 paths)[file:/a], PushedFilters: [IsNotNull(o_orderkey)], ReadSchema: struct<>
   +- BroadcastExchange HashedRelationBroadcastMode(List(input[0, bigint, true]),false), [plan_id=1]
      +- Union
         :- FileScan parquet [l_orderkey#2L,validFrom#3L] Batched: true, Location: InMemoryFileIndex(2 paths)[file:/b], PushedFilters: [LessThanOrEqual(validFrom,5)], ReadSchema: struct<>
         +- FileScan parquet [l_orderkey#4L] Batched: true, Location: InMemoryFileIndex(1 paths)[file:/c], PushedFilters: [], ReadSchema: struct<>
"""


def test_a_plan_summary_names_joins_scans_files_and_pushed_filters_per_table() -> None:
    rows = summarize(PLAN).rows()
    assert rows["joins (strategy, keys, build side)"] == (
        "BroadcastHash [o_orderkey] [l_orderkey] Inner BuildRight"
    )
    assert rows["broadcasts / shuffles / unions"] == "1 / 0 / 1"
    assert rows["scans per table"] == "lineitem 2, orders 1"
    assert rows["files listed per table"] == "lineitem 3, orders 3"
    assert "lineitem: (validity) LessThanOrEqual(validFrom,5)" in rows["filters pushed to Parquet"]


def test_answers_compare_as_numbers_within_a_tolerance_and_in_any_order() -> None:
    from decimal import Decimal

    check(1, "test", [("b", Decimal("2.00")), ("a", 1.0000000000001)], [("a", 1), ("b", 2.0)])
    with pytest.raises(WrongAnswer, match="Q01 from test: row"):
        check(1, "test", [("a", Decimal("1.01"))], [("a", 1.0)])
    with pytest.raises(WrongAnswer, match="1 rows, DuckDB 2"):
        check(1, "test", [("a", 1)], [("a", 1), ("b", 2)])


def test_the_rounds_rotate_the_three_sides_so_each_runs_in_each_place_equally_often() -> None:
    """A side always timed first (or always right after another) would carry an order effect
    into the ratio or the A/A control."""
    from bench.tpch_measure import SIDES, side_order

    orders = [side_order(index) for index in range(6)]
    assert all(sorted(order) == sorted(SIDES) for order in orders)
    for place in range(3):
        assert sorted(order[place] for order in orders) == sorted(SIDES * 2)
    followers = Counter((a, b) for order in orders for a, b in itertools.pairwise(order))
    assert set(followers.values()) == {2} and len(followers) == 6


def test_spark_metric_texts_read_as_totals() -> None:
    """Size, count and timing metrics print differently for driver- and task-level values."""
    from bench.tpch_metrics import parse_count, parse_ms, parse_size

    assert parse_size("459.2 KiB") == round(459.2 * 1024)
    assert (
        parse_size("total (min, med, max (stageId: taskId))\n2.0 MiB (1.0 MiB, ...)") == 2 * 2**20
    )
    assert parse_count("100,000") == 100_000
    assert (
        parse_count("total (min, med, max (stageId: taskId))\n12 (3, 4, 5 (stage 1.0: task 2))")
        == 12
    )
    assert parse_ms("total (min, med, max (stageId: taskId))\n1.5 s (26 ms, 32 ms, ...)") == 1500
    assert parse_ms("58 ms") == 58


def test_reads_differ_names_the_tables_whose_files_or_bytes_differ_and_the_noise_is_a_factor() -> (
    None
):
    from bench.tpch_measure import noise, reads_differ

    side = {
        "tasks": 7,
        "files": {"lineitem": 4, "orders": 2},
        "bytes": {"lineitem": 2**20, "orders": 100},
    }
    ours = {**side, "files": {"lineitem": 12, "orders": 2}, "tasks": 9}
    assert (
        reads_differ({"horizon": ours, "plain": side})
        == "lineitem files 12/4, 1.00/1.00 MiB; tasks 9/7"
    )
    assert reads_differ({"horizon": side, "plain": side}) == ""
    figures = noise(
        {
            "Q01": {"plain_ms": 100, "plain_again_ms": 80, "aa_ratio": 0.8},
            "Q02": {"plain_ms": 100, "plain_again_ms": 110, "aa_ratio": 1.1},
        }
    )
    assert figures["aa_total_ratio"] == 0.95 and figures["aa_max_spread"] == 1.25


def test_a_query_subset_ingests_only_the_tables_it_reads() -> None:
    from bench.tpch_queries import tables_read

    assert tables_read([1]) == {"lineitem"}
    assert tables_read([3, 19]) == {"customer", "orders", "lineitem", "part"}
    assert tables_read(sorted(QUERIES)) == set(KEYS)


def test_the_phase_lock_excludes_others_while_taken_and_only_then(tmp_path: Path) -> None:
    """``bench.tpch --lock`` holds the shared Spark lock per phase: another flock of the file
    is refused while a phase holds it and granted once it lets go (twice is harmless)."""
    import fcntl

    from bench.tpch import PhaseLock

    path = tmp_path / "spark.lock"
    gate = PhaseLock(path)
    gate.take()
    with open(path, "a") as other:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        gate.let_go()
        gate.let_go()
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free now
        fcntl.flock(other, fcntl.LOCK_UN)
    PhaseLock(None).take()  # no path: nothing to hold


def test_a_held_phase_lock_stays_between_phases_and_goes_at_the_end(tmp_path: Path) -> None:
    """``bench.tpch --lock F --hold-lock`` keeps the shared Spark lock from the first phase to
    the end of the run: the end of a phase does not let it go (another flock stays refused),
    taking it again does nothing, and the run's end lets it go."""
    import fcntl

    from bench.tpch import PhaseLock

    path = tmp_path / "spark.lock"
    gate = PhaseLock(path, hold=True)
    gate.take()
    with open(path, "a") as other:
        gate.let_go()  # the end of the first phase
        with pytest.raises(BlockingIOError):  # still held between the phases
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        gate.take()  # the second phase: already held
        gate.close()  # the end of the run
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free now
        fcntl.flock(other, fcntl.LOCK_UN)


def test_a_bounded_phase_lock_lets_others_in_between_queries_once_held_long_enough(
    tmp_path: Path,
) -> None:
    """``bench.tpch --lock F --hold-minutes M`` (scale factor 1, phases longer than one hold):
    between two queries a hold older than M lets go, leaves a gap in which another run's flock
    is granted, and takes it again; a younger hold, or one held for the whole run, stays."""
    import fcntl

    from bench.tpch import PhaseLock

    path = tmp_path / "spark.lock"
    granted: list[bool] = []
    with open(path, "a") as other:

        def another_run() -> None:  # in the gap: another engineer's flock
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                granted.append(False)
                return
            granted.append(True)
            fcntl.flock(other, fcntl.LOCK_UN)

        for hold, most_s in ((False, 3600.0), (True, 0.0)):  # young; held for the whole run
            kept = PhaseLock(path, hold=hold, most_s=most_s, gap=another_run)
            kept.take()
            kept.breathe()
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            kept.close()
        assert granted == []  # no gap
        gate = PhaseLock(path, most_s=0.0, gap=another_run)
        gate.take()
        gate.breathe()
        assert granted == [True]  # the other run got in between
        with pytest.raises(BlockingIOError):  # and the gate holds it again for the next query
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        gate.close()


def _rounds(horizon: list[float], plain: list[float], again: list[float]) -> dict[str, list[float]]:
    return {"horizon": horizon, "plain": plain, "again": again}


def test_a_ratio_above_its_target_is_within_noise_when_the_queries_own_aa_spread_covers_it() -> (
    None
):
    """A 1.4x ratio against a 1.3x target, on a query whose plain side timed twice lands 1.2x
    apart, is not a miss: the same query measured against itself moves that much."""
    from bench.tpch_stats import MET, MISSED, WITHIN_NOISE, query_noise, verdict

    noisy = _rounds([140, 141, 139, 142, 140], [100, 101, 99, 100, 100], [120, 121, 119, 120, 122])
    figures = query_noise(noisy, seed=1)
    assert figures["aa_spread"] >= 1.2
    assert verdict(1.4, tuple(figures["ratio_range"]), figures["aa_spread"], 1.3) == WITHIN_NOISE
    quiet = _rounds([140, 141, 139, 142, 140], [100, 101, 99, 100, 100], [100, 100, 101, 99, 100])
    figures = query_noise(quiet, seed=1)
    assert verdict(1.4, tuple(figures["ratio_range"]), figures["aa_spread"], 1.3) == MISSED
    assert verdict(1.2, (1.1, 1.3), 1.0, 1.3) == MET


def test_a_ratio_whose_range_reaches_below_the_target_is_within_noise() -> None:
    """One slow round of five must not make a miss: the range drawn over the rounds says how
    far the ratio of medians moves with the rounds it happened to get."""
    from bench.tpch_stats import WITHIN_NOISE, bootstrap_range, verdict

    horizon, plain = [100, 180, 100, 175, 102], [100, 100, 101, 99, 100]
    low, high = bootstrap_range(horizon, plain, seed=3)
    assert low <= 1.02 and high >= 1.7
    assert bootstrap_range(horizon, plain, seed=3) == (low, high)  # repeatable
    assert verdict(1.45, (low, high), 1.0, 1.3) == WITHIN_NOISE


def test_the_phase_summary_names_misses_and_queries_within_noise_and_judges_the_total() -> None:
    from bench.tpch_measure import totals

    def query(horizon: float, again: float) -> dict[str, object]:
        samples = _rounds([horizon] * 4, [100.0] * 4, [again] * 4)
        return {
            "horizon_ms": horizon, "plain_ms": 100.0, "plain_again_ms": again,
            "ratio": horizon / 100, "aa_ratio": again / 100, "ratio_range": [horizon / 100] * 2,
            "aa_spread": max(again / 100, 100 / again), "samples_ms": samples,
            "plans_differ_in": [], "reads_differ": "",
        }  # fmt: skip

    per_query = {"Q01": query(150, 100), "Q02": query(150, 130), "Q03": query(90, 100)}
    before = totals(per_query, "before")
    assert before["missed"] == ["Q01"] and before["within_noise"] == ["Q02"]
    assert [w["query"] for w in before["worst"]][:2] == ["Q01", "Q02"]
    assert before["total_range"] == [1.3, 1.3] and before["total_verdict"] == "missed"
    after = totals(per_query, "after")
    assert after["target"] == 1.15 and "total_verdict" not in after


def test_a_query_gets_its_least_rounds_then_more_only_within_its_budget_and_ceiling() -> None:
    """A cheap query gets more rounds for the same time; an expensive one stops at its least."""
    from bench.tpch_measure import Rounds, another_round

    rounds = Rounds(least=3, budget_s=10.0, most=6)
    assert another_round(rounds, 2, seconds=60.0)  # the least, whatever the time
    assert another_round(rounds, 3, seconds=4.0)
    assert not another_round(rounds, 3, seconds=10.5)  # budget spent
    assert not another_round(rounds, 6, seconds=1.0)  # the ceiling
    assert not another_round(Rounds(3), 3, seconds=0.0)  # no budget: exactly the least


def test_the_compaction_row_group_probe_sets_the_size_for_its_block_only() -> None:
    """``bench.tpch --compaction-row-group-mib`` changes what the compaction writes and nothing
    after it; without a size nothing changes."""
    from bench.tpch import compaction_row_groups
    from horizon_broker.compaction import run as compaction_run

    product = compaction_run.COMPACTED_ROW_GROUP_BYTES
    with compaction_row_groups(64 * 2**20):
        assert compaction_run.COMPACTED_ROW_GROUP_BYTES == 64 * 2**20
    assert product == compaction_run.COMPACTED_ROW_GROUP_BYTES
    with compaction_row_groups(None):
        assert product == compaction_run.COMPACTED_ROW_GROUP_BYTES
