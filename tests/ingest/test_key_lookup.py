"""Finding keys in a level by sorted codes finds exactly the rows ``is_in`` finds.

:class:`horizon_broker.ingest.driver_columns.key_lookup.SortedKeys` replaces a filter of every level key by a binary
search of the batch's keys among the level's sorted 64-bit codes (hashes of strings), so a test
against the plain membership test guards the hashing (empty strings, multi-byte characters,
arrays that are slices of larger ones) and the collision check.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from horizon_broker.ingest.driver_columns import key_lookup
from horizon_broker.ingest.driver_columns.key_lookup import SortedKeys

texts = st.text(alphabet=st.sampled_from(["a", "b", "é", "\x00", "z", "1"]), max_size=5)
# Around the 16 bytes up to which a key is hashed as two padded words, and past them.
long_texts = st.text(alphabet=st.sampled_from(["a", "é", "\x00", "€"]), min_size=6, max_size=20)
keys = st.one_of(texts, long_texts)


def _expected(level: list, wanted: list) -> list[int]:
    asked = set(wanted)
    return [row for row, key in enumerate(level) if key in asked]


@settings(max_examples=300, deadline=None)
@given(
    level=st.lists(keys, max_size=40),
    wanted=st.lists(keys, max_size=20, unique=True),
    skip=st.integers(0, 3),
    kind=st.sampled_from([pa.string(), pa.large_string(), pa.binary()]),
)
def test_string_keys_are_found_exactly_where_they_are(
    level: list[str], wanted: list[str], skip: int, kind: pa.DataType
) -> None:
    def array(values: list[str]) -> pa.Array:
        items = [v.encode() for v in values] if kind == pa.binary() else values
        padding = [b"pad" if kind == pa.binary() else "pad"] * skip
        return pa.array(padding + items, kind).slice(skip)  # a slice: buffers start elsewhere

    level_keys, wanted_keys = array(level), array(wanted)
    found = SortedKeys.of(level_keys).rows_holding(level_keys, wanted_keys)
    assert found.tolist() == _expected(level, wanted)


@settings(max_examples=200, deadline=None)
@given(
    level=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40),
    wanted=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20, unique=True),
)
def test_integer_keys_are_found_exactly_where_they_are(level: list[int], wanted: list[int]) -> None:
    keys = pa.chunked_array([pa.array(level, pa.int64())])
    found = SortedKeys.of(keys).rows_holding(keys, pa.array(wanted, pa.int64()))
    assert found.tolist() == _expected(level, wanted)


def test_a_hash_collision_never_matches_the_wrong_key(monkeypatch: pytest.MonkeyPatch) -> None:
    level = pa.array(["a", "b", "c"])
    index = SortedKeys.of(level)
    # Every key given the same code: only the key comparison tells them apart.
    colliding = SortedKeys(np.zeros(3, np.uint64), index.rows)
    monkeypatch.setattr(key_lookup, "key_codes", lambda column: np.zeros(len(column), np.uint64))
    assert colliding.rows_holding(level, pa.array(["c", "x"])).tolist() == [2]


@settings(max_examples=200, deadline=None)
@given(values=st.lists(keys, min_size=1, max_size=30), skip=st.integers(0, 3))
def test_a_string_key_s_code_depends_on_its_bytes_alone(values: list[str], skip: int) -> None:
    # A level's codes and a batch's are computed over different arrays (other keys, other
    # lengths, slices, string or binary): each key's code must be the same in all of them.
    together = pa.array(["pad"] * skip + values).slice(skip)
    codes = key_lookup.key_codes(together).tolist()
    for value, code in zip(values, codes, strict=True):
        assert key_lookup.key_codes(pa.array([value])).tolist() == [code]
        assert key_lookup.key_codes(pa.array([value], pa.large_string())).tolist() == [code]
        assert key_lookup.key_codes(pa.array([value.encode()], pa.binary())).tolist() == [code]


def test_short_keys_that_differ_only_by_trailing_zero_bytes_get_different_codes() -> None:
    codes = key_lookup.key_codes(pa.array(["a", "a\x00", "a\x00\x00", "", "\x00"]))
    assert len(set(codes.tolist())) == 5


def test_string_codes_spread_distinct_keys() -> None:
    for width in (1, 12, 30):  # short keys, keys of two words, keys hashed byte by byte
        keys = pa.array([f"u{i:0{width}d}" for i in range(200_000)])
        assert len(np.unique(key_lookup.key_codes(keys))) == 200_000
