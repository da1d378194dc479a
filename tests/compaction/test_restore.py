"""Which outputs of a compaction record a failed-over store lost and may be announced again
(pure; the announcement itself is tested on Spark in test_minor_compaction.py)."""

from __future__ import annotations

import doctest

from horizon_broker.compaction import restore
from horizon_broker.compaction.restore import lost_outputs
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment

CHUNK = Interval(0, 3_600_000)


def seg(partition: int, location: str, **overwrite: int) -> Segment:
    return Segment(
        table="t", interval=CHUNK, version="v1", partition=partition, location=(location,),
        **overwrite,
    )  # fmt: skip


INPUTS = [seg(p, f"/in/{p}") for p in (0, 1)]
OUTPUT = seg(32768, "/out/a", root_start=0, root_end=2, minor_version=1)
RECORD = {"inputs": [s.to_dict() for s in INPUTS], "outputs": [OUTPUT.to_dict()]}


def stored(*segments: Segment) -> dict:
    return {s.id: tuple(s.location) for s in segments}


def test_outputs_are_lost_when_the_store_has_the_inputs_as_they_were_and_not_the_outputs():
    assert lost_outputs(RECORD, stored(*INPUTS)) == [OUTPUT]


def test_nothing_is_lost_when_the_outputs_are_announced():
    assert lost_outputs(RECORD, stored(*INPUTS, OUTPUT)) == []


def test_a_record_whose_inputs_moved_on_is_stale_not_lost():
    assert lost_outputs(RECORD, stored(INPUTS[0])) == []  # one input collected or replaced
    moved = seg(1, "/elsewhere")
    assert lost_outputs(RECORD, stored(INPUTS[0], moved)) == []


def test_an_output_id_the_store_gives_to_other_files_is_never_announced_over_it():
    taken = seg(32768, "/x", root_start=5, root_end=6, minor_version=1)
    assert lost_outputs(RECORD, stored(*INPUTS, taken)) == []


def test_the_docstring_example_holds():
    outcome = doctest.testmod(restore)
    assert outcome.attempted > 0 and outcome.failed == 0
