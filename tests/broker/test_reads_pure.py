"""The pure parts of the read controls: snapshot tokens, the required snapshot, the staleness
bound, read options, and the result cache's LRU against a simple model."""

from __future__ import annotations

import pyarrow as pa
import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from horizon_broker._core.errors import InvalidArgument, Unavailable
from horizon_broker._core.hlc import LOGICAL_BITS
from horizon_broker.broker.engine.freshness import check_staleness, required_snapshot, staleness_ms
from horizon_broker.broker.engine.read_options import ReadOptions
from horizon_broker.broker.engine.result_cache import ResultCache
from horizon_broker.broker.sql.passes import describe_shape
from horizon_broker.watermark import tokens

snapshots = st.dictionaries(
    st.sampled_from(["a", "B", "c", "Orders"]), st.integers(0, 2**63 - 1), max_size=4
)


@settings(deadline=None)
@given(snapshots, snapshots)
def test_a_merged_token_is_the_highest_snapshot_of_each_table(first, second):
    merged = tokens.decode(tokens.merge(tokens.encode(first), tokens.encode(second)))
    expected: dict[str, int] = {}
    for table, snapshot in [*first.items(), *second.items()]:
        expected[table.lower()] = max(snapshot, expected.get(table.lower(), 0))
    assert merged == expected


def test_an_empty_token_is_no_constraint_and_a_foreign_one_is_refused():
    assert tokens.decode("") == {}
    with pytest.raises(InvalidArgument, match="not a Horizon snapshot token"):
        tokens.decode("eyJhIjoxfQ")
    with pytest.raises(InvalidArgument, match="corrupt"):
        tokens.decode("hz1." + "eyJhIjoiMSJ9")  # {"a":"1"}: not an integer
    with pytest.raises(InvalidArgument, match="corrupt"):
        tokens.decode("hz1.eyJhIjotMX0")  # {"a":-1}


def test_the_required_snapshot_is_the_highest_floor_of_the_tables_read():
    assert required_snapshot(["a"], {"b": 9}) is None
    assert required_snapshot(["A", "b"], {"a": 3}, {"b": 5, "c": 99}) == 5


def test_a_snapshot_older_than_the_bound_is_refused_with_its_age_and_laggard():
    now_ms = 1_000_000
    fresh = (now_ms - 2_000) << LOGICAL_BITS
    assert staleness_ms(fresh, now_ms) == 2_000
    check_staleness(fresh, now_ms, 5.0, "x")
    check_staleness(fresh, now_ms, None, "x")
    with pytest.raises(Unavailable, match=r"2\.0s old .* over max_staleness 1s: held by s1"):
        check_staleness(fresh, now_ms, 1.0, "held by s1")


def test_read_options_refuse_a_bad_staleness_or_pin_id():
    assert ReadOptions.parse().max_staleness_s is None
    assert not ReadOptions.parse(bypass_cache=True).use_cache
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidArgument, match="max_staleness"):
            ReadOptions.parse(max_staleness_s=bad)
    with pytest.raises(InvalidArgument, match="not a pin id"):
        ReadOptions.parse(pin_id="a|b")


def test_queries_calling_non_deterministic_functions_are_not_cacheable():
    assert uncacheable_reason("SELECT uuid() FROM t") == "it calls uuid"
    assert uncacheable_reason("SELECT * FROM t TABLESAMPLE (10 PERCENT)") == "it calls tablesample"
    assert uncacheable_reason("SELECT now() FROM t") == "it calls now"
    assert uncacheable_reason("SELECT id, 'now' FROM t WHERE name = 'rand'") is None


def _batch(nbytes: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array([0] * (nbytes // 8), pa.int64())], names=["x"])


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["get", "put"]), st.integers(0, 5), st.integers(1, 40)),
        max_size=40,
    )
)
def test_the_cache_keeps_the_most_recently_used_answers_within_its_bytes(operations):
    cache = ResultCache(max_bytes=100 * 8, max_entry_bytes=40 * 8)
    model: list[tuple[int, int]] = []  # (key, bytes), least recently used first
    for op, key, size in operations:
        if op == "get":
            found = cache.get(key)
            held = [entry for entry in model if entry[0] == key]
            assert (found is not None) == bool(held)
            if held:
                model.remove(held[0])
                model.append(held[0])
        else:
            batch = _batch(size * 8)
            assert cache.put(key, batch.schema, [batch])
            model = [entry for entry in model if entry[0] != key] + [(key, batch.nbytes)]
            while sum(b for _, b in model) > 100 * 8:
                model.pop(0)
        assert cache.nbytes == sum(b for _, b in model) <= 100 * 8
        assert len(cache) == len(model)


def test_an_answer_over_the_entry_limit_or_cut_short_is_not_kept():
    cache = ResultCache(max_bytes=1_000, max_entry_bytes=100)
    big = _batch(200)
    assert not cache.put("k", big.schema, [big])
    recorder = cache.recorder("k", big.schema)
    recorder.add(_batch(64))
    recorder.add(_batch(64))
    assert not recorder.finish() and cache.get("k") is None
    whole = cache.recorder("k", big.schema)
    whole.add(_batch(64))
    assert whole.finish() and cache.get("k") is not None


def uncacheable_reason(sql: str) -> str | None:
    return describe_shape.uncacheable_reason(sqlglot.parse_one(sql, dialect="spark"))
