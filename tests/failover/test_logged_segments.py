"""What the commit log says is announced (the fold :mod:`horizon_broker.ingest.reconcile`
re-announces from, rule F4 of docs/design/contract/failover.md): a batch's segments count, an
update's removals take them out, and an abandoned update counts for nothing."""

from __future__ import annotations

from horizon_broker.ingest.manifest import COMMIT, DONE, Record
from horizon_broker.ingest.reconcile import logged_segments
from tests.watermark.conftest import segment


def _raw(**kwargs):  # type: ignore[no-untyped-def]
    return segment(**kwargs).to_dict()


def test_a_batch_counts_an_update_replaces_it_and_an_abandoned_update_counts_for_nothing():
    batch, rewrite, abandoned_rewrite = (
        _raw(chunk=0, version="v1"),
        _raw(chunk=0, version="v2"),
        _raw(chunk=1, version="v3"),
    )
    other = _raw(chunk=1, version="v1")
    records = [
        Record(1, COMMIT, {"kind": "ingest", "segments": [batch, other]}),
        Record(1, DONE, {"kind": "ingest"}),
        Record(2, COMMIT, {"kind": "update", "add": [rewrite], "remove": [batch]}),
        Record(3, COMMIT, {"kind": "update", "add": [abandoned_rewrite], "remove": [other]}),
        Record(4, COMMIT, {"kind": "abandon", "update": 3, "pending": {}}),
    ]
    kept, withdrawn = logged_segments(records)
    assert sorted(s.version for s in kept.values()) == ["v1", "v2"]
    assert {s.interval.start_ms for s in kept.values() if s.version == "v1"} == {3_600_000}
    assert [s.version for s in withdrawn.values()] == ["v1"]
    assert next(iter(withdrawn.values())).interval.start_ms == 0
