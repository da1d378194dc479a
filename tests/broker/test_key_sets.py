"""Key sets: a file's sorted key column answers "may it hold these keys" exactly, is read once,
and stays within its memory budget (pure, on files written here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from horizon_broker.broker.direct_lookup.direct_read import DirectReader
from horizon_broker.broker.direct_lookup.key_sets import (
    CombinedKeys,
    ConcatenatedKeys,
    KeySets,
    holds_any,
    lookup_values,
)
from horizon_broker.broker.sql.model import KeyLookup, Predicate

SCHEMA = pa.schema([("id", pa.int64()), ("validFrom", pa.int64()), ("validUntil", pa.int64())])


@given(
    keys=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50),
    values=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=5),
)
def test_holds_any_is_set_membership(keys: list[int], values: list[int]) -> None:
    held = np.sort(np.asarray(keys, dtype=np.int64))
    assert holds_any(held, lookup_values(values)) == bool(set(keys) & set(values))


def _write(path: Path, ids: list[int | None]) -> str:
    rows = {"id": ids, "validFrom": [1] * len(ids), "validUntil": [None] * len(ids)}
    pq.write_table(pa.table(rows, schema=SCHEMA), path)
    return str(path)


def test_a_file_is_read_once_and_null_keys_never_match(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.parquet", [5, None, 3, 3])
    sets = KeySets()

    def opened() -> pq.ParquetFile:
        return pq.ParquetFile(path)

    assert sets.keys(path, "id", opened).tolist() == [3, 3, 5]
    assert sets.keys(path, "id", opened).tolist() == [3, 3, 5]
    assert sets.loads == 1


def test_the_cache_stays_within_its_byte_budget(tmp_path: Path) -> None:
    sets = KeySets(max_bytes=100)  # 12 int64 keys
    for number in range(5):
        path = _write(tmp_path / f"{number}.parquet", list(range(number, number + 5)))
        sets.keys(path, "id", lambda p=path: pq.ParquetFile(p))
        assert sets.bytes <= 100
    assert sets.bytes == 80  # the last two files' five keys each


def test_a_lookup_over_spread_files_answers_from_the_files_that_hold_the_key(
    tmp_path: Path,
) -> None:
    files = [_write(tmp_path / f"{n}.parquet", list(range(n, 200, 10))) for n in range(10)]
    reader = DirectReader()
    lookup = KeyLookup("t", ("id",), (Predicate("id", (42, 57)),))
    schema = pa.schema([("id", pa.int64())])
    answer = reader.read(lookup, files, 10, schema)
    assert answer is not None and sorted(answer.column("id").to_pylist()) == [42, 57]
    assert reader.key_sets.loads == 10  # every file's key range spans the keys: sets decide
    again = reader.read(lookup, files, 10, schema)
    assert again is not None and again.num_rows == 2 and reader.key_sets.loads == 10


@given(
    files=st.lists(
        st.one_of(st.none(), st.lists(st.integers(-50, 50), max_size=8)), min_size=1, max_size=8
    ),
    values=st.lists(st.integers(-60, 60), min_size=1, max_size=4),
)
def test_combined_keys_find_exactly_the_files_a_check_per_file_keeps(
    files: list[list[int] | None], values: list[int]
) -> None:
    arrays = {
        number: np.sort(np.asarray(keys, dtype=np.int64))
        for number, keys in enumerate(files)
        if keys is not None
    }
    combined = CombinedKeys.of(arrays, len(files))
    wanted = lookup_values(values)
    expected = [
        number
        for number in range(len(files))
        if number not in arrays or holds_any(arrays[number], wanted)
    ]
    assert combined.files_holding(wanted).tolist() == expected


@given(
    files=st.lists(st.lists(st.integers(-50, 50), max_size=40), max_size=12),
    values=st.lists(st.integers(-60, 60), min_size=1, max_size=4),
    numbers=st.randoms(use_true_random=False),
)
def test_concatenated_keys_find_exactly_the_files_a_check_per_file_keeps(
    files: list[list[int]], values: list[int], numbers: Any
) -> None:
    arrays = [np.sort(np.asarray(keys, dtype=np.int64)) for keys in files]
    chosen = sorted(numbers.sample(range(100), len(files)))  # the files' numbers in their set
    laid = ConcatenatedKeys.of(chosen, arrays)
    wanted = lookup_values(values)
    expected = [
        number for number, keys in zip(chosen, arrays, strict=True) if holds_any(keys, wanted)
    ]
    assert laid.holding(wanted).tolist() == expected


def test_a_set_looked_up_again_answers_from_its_combined_keys_with_the_same_rows(
    tmp_path: Path,
) -> None:
    """Keys spread over 41 files: the first lookups check the files' key sets laid end to end
    (41 files at a twentieth of a one-by-one check each); once they add up to a tenth of the
    set's 402 keys, a lookup builds the set's combined keys in the background, and later ones
    choose files from them; the answers never change, present keys or absent."""
    files = [_write(tmp_path / f"{n}.parquet", list(range(n, 400, 40))) for n in range(40)]
    files.append(_write(tmp_path / "again.parquet", [42, 43]))
    reader = DirectReader()
    schema = pa.schema([("id", pa.int64())])

    def ids(*keys: int) -> list[int]:
        lookup = KeyLookup("t", ("id",), (Predicate("id", keys),))
        answer = reader.read(lookup, files, 10, schema)
        assert answer is not None
        return sorted(answer.column("id").to_pylist())

    before = [ids(42), ids(200, 1000)]  # every file's range holds them: 41 and 40 candidates
    assert reader.laid_out.bytes > 0 and reader.combined.bytes == 0
    for _ in range(20):
        assert ids(42) == before[0]
    reader.settle()
    assert reader.combined.bytes > 0  # asked for by the twenty-first lookup
    assert [ids(42), ids(200, 1000)] == before == [[42, 42], [200]]
    assert ids(1000) == [] and ids(43) == [43, 43] and ids(42, 200) == [42, 42, 200]


def test_a_set_looked_up_rarely_keeps_checking_file_by_file(tmp_path: Path) -> None:
    """Building costs about a tenth of a key's check per key: 20 files of 500 keys need 500
    file checks first, and a few lookups (20 checks each) never pay for it."""
    files = [_write(tmp_path / f"{n}.parquet", list(range(n, 10_000, 20))) for n in range(20)]
    reader = DirectReader()
    schema = pa.schema([("id", pa.int64())])
    for key in (42, 4_242, 9_999):
        lookup = KeyLookup("t", ("id",), (Predicate("id", (key,)),))
        answer = reader.read(lookup, files, 10, schema)
        assert answer is not None and answer.column("id").to_pylist() == [key]
    reader.settle()
    assert reader.combined.bytes == 0


def test_a_set_whose_keys_would_not_fit_is_checked_file_by_file_with_the_same_answers(
    tmp_path: Path,
) -> None:
    files = [_write(tmp_path / f"{n}.parquet", list(range(n, 400, 20))) for n in range(20)]
    small = DirectReader(combined_max_bytes=100)  # 400 keys take 3,200 bytes laid end to end
    roomy = DirectReader()
    schema = pa.schema([("id", pa.int64())])
    for keys in ((42,), (7, 399), (1_000,)):
        lookup = KeyLookup("t", ("id",), (Predicate("id", keys),))
        answers = [reader.read(lookup, files, 10, schema) for reader in (small, roomy)]
        assert all(answer is not None for answer in answers)
        assert [sorted(a.column("id").to_pylist()) for a in answers] == [
            sorted(k for k in keys if k < 400)
        ] * 2
    assert small.layouts == 0 and roomy.layouts == 1  # laid out once, kept for later lookups
    assert small.key_sets.loads == 20  # each file's key set, read once and checked one by one


def test_a_lookup_whose_files_the_kept_layout_lacks_lays_out_its_own_and_finds_its_rows(
    tmp_path: Path,
) -> None:
    """Statistics leave a lookup of 42 the twenty files of keys under 400 (their key sets are
    laid out and kept), and a lookup of 1042 the twenty other files: the kept layout does not
    cover those, so the lookup lays out its own and answers from it."""
    low = [_write(tmp_path / f"low{n}.parquet", list(range(n, 400, 20))) for n in range(20)]
    high = [
        _write(tmp_path / f"high{n}.parquet", list(range(1000 + n, 1400, 20))) for n in range(20)
    ]
    reader = DirectReader()
    schema = pa.schema([("id", pa.int64())])

    def ids(key: int) -> list[int]:
        lookup = KeyLookup("t", ("id",), (Predicate("id", (key,)),))
        answer = reader.read(lookup, low + high, 10, schema)
        assert answer is not None
        return answer.column("id").to_pylist()

    assert ids(42) == [42] and reader.layouts == 1
    assert ids(1042) == [1042] and reader.layouts == 2
    assert ids(42) == [42]
