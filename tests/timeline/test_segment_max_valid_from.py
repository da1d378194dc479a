"""``Segment.max_valid_from``, ``open_files`` and ``max_valid_until``: optional payload fields that
survive the round trip, are left out of descriptions that do not know them, are validated, and
never change a segment's shard identity."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment

BASE = Segment(
    table="t",
    interval=Interval(0, 86_400_000),
    version="v1",
    partition=3,
    core_partitions=4,
    location=("/data/t/p3.parquet",),
    row_count=10,
)


def test_a_segment_without_max_valid_from_round_trips_and_its_description_is_unchanged():
    data = BASE.to_dict()
    assert "max_valid_from" not in data
    back = Segment.from_dict(json.loads(json.dumps(data)))
    assert back == BASE and back.max_valid_from is None


@pytest.mark.parametrize("value", [0, 1_200, (1_700_000_000_000 << 16) | 42])
def test_a_known_max_valid_from_round_trips_through_json(value):
    segment = replace(BASE, max_valid_from=value)
    data = json.loads(json.dumps(segment.to_dict()))
    assert data["max_valid_from"] == value
    back = Segment.from_dict(data)
    assert back == segment and back.max_valid_from == value


def test_max_valid_from_is_payload_not_shard_identity():
    known = replace(BASE, max_valid_from=900)
    assert known.same_shard(BASE) and BASE.same_shard(known)
    assert known.shard_key() == BASE.shard_key()
    assert known != BASE, "still part of the description"


def test_numpy_integers_become_plain_ints():
    segment = replace(BASE, max_valid_from=np.int64(77))
    assert type(segment.max_valid_from) is int and segment.max_valid_from == 77
    json.dumps(segment.to_dict())


@pytest.mark.parametrize("value", [1.5, 900.0, "900", True, [900]])
def test_a_max_valid_from_that_is_not_an_integer_is_refused(value):
    with pytest.raises(InvalidArgument, match="max_valid_from"):
        replace(BASE, max_valid_from=value)
    data = {**BASE.to_dict(), "max_valid_from": value}
    with pytest.raises(InvalidArgument, match="max_valid_from"):
        Segment.from_dict(data)


def test_a_negative_max_valid_from_is_refused():
    with pytest.raises(InvalidArgument, match="negative"):
        replace(BASE, max_valid_from=-1)


# -- open files and the closed files' greatest validUntil ----------------------------------------

APART = replace(
    BASE,
    location=("/data/t/p3/_rows=open/a.parquet", "/data/t/p3/_rows=closed/a.parquet"),
    open_files=["/data/t/p3/_rows=open/a.parquet"],
    max_valid_until=np.int64(1_150),
)


def test_open_files_and_max_valid_until_round_trip_and_are_left_out_when_unknown():
    assert APART.open_files == ("/data/t/p3/_rows=open/a.parquet",)
    assert type(APART.max_valid_until) is int
    data = json.loads(json.dumps(APART.to_dict()))
    assert data["open_files"] == ["/data/t/p3/_rows=open/a.parquet"]
    assert data["max_valid_until"] == 1_150
    assert Segment.from_dict(data) == APART
    assert "open_files" not in BASE.to_dict() and "max_valid_until" not in BASE.to_dict()
    assert APART.same_shard(BASE) and APART.shard_key() == BASE.shard_key()


def test_an_open_file_outside_the_location_is_refused():
    with pytest.raises(InvalidArgument, match="not in the segment's location"):
        replace(APART, open_files=("/data/t/p4/_rows=open/a.parquet",))


@pytest.mark.parametrize("value", [-1, 2.5, "1150"])
def test_a_max_valid_until_that_is_negative_or_not_an_integer_is_refused(value):
    with pytest.raises(InvalidArgument, match="max_valid_until"):
        replace(APART, max_valid_until=value)
