"""Reading a key against a primary key, and placing segments from the timeline (pure)."""

from __future__ import annotations

import datetime as dt

import pytest

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.broker.explain_key.key_values import parse_key
from horizon_broker.broker.explain_key.places import Unreadable, segment_places
from horizon_broker.timeline import Interval, Segment, Timeline

DAY = Interval(0, 86_400_000)


def test_a_one_column_key_is_its_value_written_plainly_or_as_json():
    assert parse_key("alice", ["user_id"], ["string"]) == (("user_id", "alice"),)
    assert parse_key("42", ["user_id"], ["string"]) == (("user_id", "42"),)
    assert parse_key('"42"', ["user_id"], ["string"]) == (("user_id", "42"),)
    assert parse_key("42", ["id"], ["bigint"]) == (("id", 42),)
    assert parse_key("2026-01-02", ["d"], ["date"]) == (("d", dt.date(2026, 1, 2)),)


def test_a_composite_key_is_a_json_object_by_column_or_a_list_in_key_order():
    key, types = ["region", "id"], ["string", "int"]
    expected = (("region", "eu"), ("id", 7))
    assert parse_key('{"ID": 7, "region": "eu"}', key, types) == expected
    assert parse_key('["eu", 7]', key, types) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("seven", "key column id is bigint: 'seven' is not a bigint value"),
        ("[7.5]", "key column id is bigint: 7.5 is not an integer"),
        ('{"other": 1}', "missing id; not key columns: other"),
        ("[1, 2]", "the key lists 2 value(s); the primary key has 1: id"),
        ("", "the key is empty"),
        ("[null]", "key column id (bigint) cannot be null"),
    ],
)
def test_a_key_that_does_not_fit_is_refused_naming_the_column_and_the_type(text, words):
    with pytest.raises(InvalidArgument, match=words.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)").replace(".", r"\.")):  # fmt: skip
        parse_key(text, ["id"], ["bigint"])


def test_a_composite_key_given_as_one_plain_value_asks_for_json():
    with pytest.raises(InvalidArgument, match="JSON object"):
        parse_key("eu", ["region", "id"], ["string", "int"])


def _segment(partition: int, **fields) -> Segment:
    return Segment(table="t", interval=DAY, version=fields.pop("version", "v1"),
                   partition=partition, core_partitions=2, **fields)  # fmt: skip


def test_segments_are_placed_as_read_overshadowed_standby_or_unreadable():
    first, second = _segment(0), _segment(1)
    merged = _segment(32768, root_start=0, root_end=2, minor_version=1)
    newer = _segment(0, version="v2")  # version v2 lacks partition 1: not complete
    timeline = Timeline("t")
    timeline.add_all([first, second, merged, newer])
    lost = Unreadable("t_lost", "0/1", "v1", "file missing")
    places = segment_places(
        timeline.snapshot(),
        [str(s.id) for s in timeline.visible_segments()],
        [lost],
        {str(first.id): (str(merged.id),)},
    )
    assert places[str(merged.id)].state == "read"
    assert places[str(first.id)].state == "overshadowed"
    assert places[str(first.id)].compacted_into == (str(merged.id),)
    assert places[str(second.id)].state == "overshadowed"
    assert str(merged.id) in places[str(second.id)].why  # the group that replaces it
    assert places[str(newer.id)].state == "standby"
    assert "not complete" in places[str(newer.id)].why
    assert places["t_lost"].state == "unreadable"
