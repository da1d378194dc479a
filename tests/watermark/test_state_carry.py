"""A broker keeps a lost data set's state until each server has re-published (pure ServerState)."""

from __future__ import annotations

import dataclasses
import json

from horizon_broker.timeline.segment import Segment
from horizon_broker.watermark.carry import release_replaced
from horizon_broker.watermark.records import segment_key
from horizon_broker.watermark.state import ServerState
from tests.watermark.conftest import segment, table_descriptor

NOW_MS = 1_000_000


def snapshot(
    epoch: str,
    *,
    servers: tuple[str, ...] = (),
    progress: dict[int, str] | None = None,
    segments: tuple[Segment, ...] = (),
    with_table: bool = True,
) -> list:
    """A SNAPSHOT script reply: one table ``accounts`` (when registered) with its state."""
    flat_servers = [v for s in servers for v in (s, "live")]
    flat_heartbeats = [v for s in servers for v in (s, str(NOW_MS))]
    if not with_table:
        return [epoch, 0, NOW_MS, [], flat_servers, flat_heartbeats, []]
    descriptor = table_descriptor()
    values = [json.dumps(s.to_dict()) for s in segments]
    pairs = [v for p, text in sorted((progress or {}).items()) for v in (str(p), text)]
    return [
        epoch,
        0,
        NOW_MS,
        ["accounts", descriptor.to_json()],
        flat_servers,
        flat_heartbeats,
        [["accounts", values, pairs, []]],
    ]


def reported(owner: str, value: int) -> str:
    return f"{owner}|{value}|{value}|{NOW_MS}|"


def claimed(owner: str) -> str:
    return f"{owner}||||"


def visible_servers(state: ServerState) -> list[str]:
    return sorted(s.server or "" for s in state.timelines["accounts"].visible_segments())


SEG_0 = segment(chunk=1, partition=0, server="s0")
SEG_1 = segment(chunk=1, partition=1, server="s1")


def before_the_loss() -> ServerState:
    return ServerState.from_snapshot(
        snapshot(
            "e1",
            servers=("s0", "s1"),
            progress={0: reported("s0", 5), 1: reported("s1", 6)},
            segments=(SEG_0, SEG_1),
        )
    )


def test_a_server_that_has_not_re_published_keeps_holding_the_lwm_through_every_snapshot():
    state = before_the_loss()
    assert state.served["accounts"].served == 5
    lost = ServerState.from_snapshot(snapshot("", with_table=False), previous=state)
    assert visible_servers(lost) == ["s0", "s1"] and lost.served["accounts"].served == 5
    # s0 re-published everything and moved on; s1 has re-announced nothing yet.
    partway = ServerState.from_snapshot(
        snapshot("e2", servers=("s0",), progress={0: reported("s0", 9)}, segments=(SEG_0,)),
        previous=lost,
    )
    assert visible_servers(partway) == ["s0", "s1"]
    assert partway.served["accounts"].served == 6  # s1's partition still holds it
    # Another snapshot of the same data set: s1 has claimed its partition, not reported.
    claiming = ServerState.from_snapshot(
        snapshot(
            "e2",
            servers=("s0",),
            progress={0: reported("s0", 9), 1: claimed("s1")},
            segments=(SEG_0, SEG_1),
        ),
        previous=partway,
    )
    assert visible_servers(claiming) == ["s0", "s1"]
    assert claiming.served["accounts"].served == 6 and claiming.served["accounts"].computed is None
    done = ServerState.from_snapshot(
        snapshot(
            "e2",
            servers=("s0", "s1"),
            progress={0: reported("s0", 9), 1: reported("s1", 8)},
            segments=(SEG_0, SEG_1),
        ),
        previous=claiming,
    )
    assert done.served["accounts"].served == 8
    for step in (lost, partway, claiming, done):
        assert step.served["accounts"].history == []


def test_a_re_published_server_is_not_carried_any_more():
    """What the server re-published replaces the old state: a segment it no longer has is gone."""
    state = before_the_loss()
    republished = ServerState.from_snapshot(
        snapshot(
            "e2",
            servers=("s0", "s1"),
            progress={0: reported("s0", 7), 1: reported("s1", 7)},
            segments=(SEG_0,),
        ),
        previous=state,
    )
    assert visible_servers(republished) == ["s0"]
    assert republished.served["accounts"].served == 7


def test_a_decommissioned_server_is_not_carried_into_a_new_data_set():
    state = before_the_loss()
    state.apply("decommission", {}, "s1", NOW_MS)
    assert state.progress["accounts"].get(1).owner is None
    fresh = ServerState.from_snapshot(
        snapshot("e2", servers=("s0",), progress={0: reported("s0", 7)}, segments=(SEG_0,)),
        previous=state,
    )
    assert "s1" not in fresh.servers and fresh.progress["accounts"].get(1) is None
    assert fresh.served["accounts"].served == 7


def _rooted_snapshot(segments: tuple[Segment, ...]) -> list:
    """A SNAPSHOT reply whose table keeps its files under /data (located segments are read)."""
    reply = snapshot("e1", servers=("s1", "s2"), progress={0: reported("s1", 50)})
    descriptor = dataclasses.replace(table_descriptor(), storage_root="/data")
    reply[3] = ["accounts", descriptor.to_json()]
    reply[6][0][1] = [json.dumps(s.to_dict()) for s in segments]
    return reply


def test_a_held_segment_stays_when_the_store_gives_its_id_to_other_files():
    """A failover that handed a partition number out twice must not swap the served segment
    for another server's under the same id, neither at the resync nor by a later event."""
    served = segment(chunk=1, partition=2, server="s2", location=("/data/s2/x.parquet",))
    other = dataclasses.replace(served, server="s1", location=("/data/s1/b1.parquet",))
    before = ServerState.from_snapshot(_rooted_snapshot((served,)))
    after = ServerState.from_snapshot(_rooted_snapshot((other,)), previous=before, rewound=True)

    def files() -> list[tuple[str, ...]]:
        return [s.location for s in after.timelines["accounts"].visible_segments()]

    assert files() == [served.location]
    assert after.held == {"accounts": {segment_key(served)}}
    third = dataclasses.replace(served, server="s1", location=("/data/s1/b2.parquet",))
    after.apply("segments", {"add": [third.to_dict()], "remove": []}, "s1", NOW_MS + 1)
    after.apply("segments", {"add": [], "remove": [other.to_dict()]}, "s1", NOW_MS + 2)
    assert files() == [served.location]
    assert after.held == {"accounts": {segment_key(served)}}
    after.apply("segments", {"add": [served.to_dict()], "remove": []}, "s2", NOW_MS + 3)
    assert after.held == {}
    assert files() == [served.location]


def test_held_segments_the_stores_history_replaced_are_let_go_and_the_rest_stay_held():
    """A resync past an update's event holds what the update removed; no later event names it
    again, so the hold would never end (a fault run's broker froze a table that way)."""
    replaced = segment(chunk=1, partition=2, server="s2", location=("/data/s2/x.parquet",))
    lost = segment(chunk=1, partition=3, server="s2", location=("/data/s2/y.parquet",))
    readded = segment(chunk=1, partition=4, server="s2", location=("/data/s2/z.parquet",))
    before = ServerState.from_snapshot(_rooted_snapshot((replaced, lost, readded)))
    after = ServerState.from_snapshot(_rooted_snapshot(()), previous=before, rewound=True)
    assert after.held == {"accounts": {segment_key(s) for s in (replaced, lost, readded)}}
    history = [
        {"add": [replaced.to_dict(), readded.to_dict()], "remove": []},
        {"add": [], "remove": [replaced.to_dict(), readded.to_dict()]},
        {"add": [readded.to_dict()], "remove": []},  # its last mention is an add: still held
    ]
    assert release_replaced(after, history) == 1
    assert after.held == {"accounts": {segment_key(lost), segment_key(readded)}}
    visible = {s.location for s in after.timelines["accounts"].visible_segments()}
    assert visible == {lost.location, readded.location}


def _rewrite_of(original: Segment, partition: int, location: str) -> Segment:
    """The owner's overwrite of ``original``'s root (what its updater announces)."""
    return dataclasses.replace(
        original,
        partition=partition,
        root_start=original.partition,
        root_end=original.partition + 1,
        minor_version=original.minor_version + 1,
        location=(location,),
    )


def test_a_held_segment_the_store_has_a_newer_rewrite_of_is_let_go_at_the_resync():
    """The store lost a segment and the update that replaced it; the owner published its newer
    state again. Nothing names the old segment again, so held it would freeze the table for
    good (a broker of a 600 s fault run held bank for 7 minutes); the rewrite answers alike."""
    served = segment(chunk=1, partition=2, server="s1", location=("/data/s1/b.parquet",))
    rewrite = _rewrite_of(served, 32768, "/data/s1/u.parquet")
    before = ServerState.from_snapshot(_rooted_snapshot((served,)))
    after = ServerState.from_snapshot(_rooted_snapshot((rewrite,)), previous=before, rewound=True)
    assert after.held == {}
    assert [s.location for s in after.timelines["accounts"].visible_segments()] == [
        rewrite.location
    ]


def test_a_held_segment_is_let_go_when_an_event_brings_a_segment_that_overshadows_it():
    served = segment(chunk=1, partition=2, server="s1", location=("/data/s1/b.parquet",))
    lost = segment(chunk=1, partition=3, server="s1", location=("/data/s1/c.parquet",))
    before = ServerState.from_snapshot(_rooted_snapshot((served, lost)))
    after = ServerState.from_snapshot(_rooted_snapshot(()), previous=before, rewound=True)
    assert after.held == {"accounts": {segment_key(served), segment_key(lost)}}
    rewrite = _rewrite_of(served, 32768, "/data/s1/u.parquet")
    after.apply("segments", {"add": [rewrite.to_dict()], "remove": []}, "s1", NOW_MS + 1)
    assert after.held == {"accounts": {segment_key(lost)}}  # the other one is still missing
    visible = {s.location for s in after.timelines["accounts"].visible_segments()}
    assert visible == {rewrite.location, lost.location}
