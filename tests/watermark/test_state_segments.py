"""Segment announcements applied to the broker's state (pure ServerState): an update's many
replacements land as one batch, and a conflicting announcement among others is rejected alone."""

from __future__ import annotations

import json

from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.state import ServerState
from tests.watermark.conftest import segment, table_descriptor
from tests.watermark.test_state_carry import NOW_MS, reported

HOUR = 3_600_000


def _state(*segments: Segment) -> ServerState:
    values = [json.dumps(s.to_dict()) for s in segments]
    return ServerState.from_snapshot(
        [
            "e1", 0, NOW_MS, ["accounts", table_descriptor().to_json()], ["s0", "live"],
            ["s0", str(NOW_MS)], [["accounts", values, ["0", reported("s0", 5)], []]],
        ]
    )  # fmt: skip


def _visible(state: ServerState) -> list[tuple[int, int, int]]:
    return sorted(
        (s.interval.start_ms, s.partition, s.minor_version)
        for s in state.timelines["accounts"].visible_segments()
    )


def _overwrite(partition: int, root: int, minor: int) -> Segment:
    return segment(
        chunk=0, partition=partition, core_partitions=3, root_start=root, root_end=root + 1,
        minor_version=minor,
    )  # fmt: skip


def test_an_update_s_replacements_leave_the_timeline_one_by_one_would() -> None:
    roots = [segment(chunk=0, partition=p, core_partitions=3) for p in range(3)]
    first = [_overwrite(32768 + p, p, 1) for p in range(3)]
    state = _state(*roots, *first)
    assert _visible(state) == [(0, 32768, 1), (0, 32769, 1), (0, 32770, 1)]
    generation = state.timelines["accounts"].generation
    second = [_overwrite(32771 + p, p, 2) for p in range(2)]
    event = {"add": [s.to_dict() for s in second], "remove": [s.to_dict() for s in first[:2]]}
    assert state.apply("segments", event, "s0", NOW_MS + 1) >= {"accounts"}
    assert _visible(state) == [(0, 32770, 1), (0, 32771, 2), (0, 32772, 2)]
    assert state.timelines["accounts"].generation == generation + 2  # one removal, one addition
    assert not state.rejected


def test_a_conflicting_announcement_is_rejected_alone() -> None:
    state = _state(segment(chunk=0))
    # The middle one overlaps both other hours' chunks of its version: a timeline refuses it.
    straddling = Segment(
        table="accounts", interval=Interval(HOUR // 2, HOUR + HOUR // 2), version="v1", partition=0
    )
    event = {"add": [s.to_dict() for s in (segment(chunk=1), straddling, segment(chunk=2))]}
    state.apply("segments", event, "s0", NOW_MS + 1)
    assert _visible(state) == [(0, 0, 0), (HOUR, 0, 0), (2 * HOUR, 0, 0)]
    assert len(state.rejected) == 1 and str(straddling.id) in state.rejected[0]
    assert all(
        stored.interval != straddling.interval for stored in state.segments["accounts"].values()
    )
