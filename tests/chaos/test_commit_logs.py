"""The run feeds ``segment_id_reused`` from the servers' commit logs as they lie in storage
(``<root>/<table>/_manifest/<server>/<seq>-<phase>.json``), read without Spark."""

from __future__ import annotations

import json
from pathlib import Path

from chaos.checker import segment_id_reused
from chaos.cluster import read_commit_logs
from horizon_broker.ingest.manifest import COMMIT, DONE, INGEST, PREPARE
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment


def write_log(storage: Path, server: str, partition: int) -> None:
    """One committed batch of ``server`` (prepare, commit, done) naming bank partition
    ``partition``, and a leftover temporary file a reader must skip."""
    directory = storage / "bank" / "_manifest" / server
    directory.mkdir(parents=True)
    segment = Segment(
        table="bank", interval=Interval(0, 3_600_000), version="v1", partition=partition,
        location=(f"{storage}/bank/{server}/p{partition}.parquet",),
    ).to_dict()  # fmt: skip
    bodies = {PREPARE: {"kind": INGEST}, COMMIT: {"kind": INGEST, "segments": [segment]},
              DONE: {"kind": INGEST}}  # fmt: skip
    for phase, body in bodies.items():
        (directory / f"{1:012d}-{phase}.json").write_text(json.dumps(body))
    (directory / f"{2:012d}-commit.json.tmp").write_text("{")


def test_the_servers_commit_logs_are_read_from_storage_and_checked(tmp_path: Path) -> None:
    write_log(tmp_path, "server-1", 3)
    write_log(tmp_path, "server-2", 3)
    logs = read_commit_logs(tmp_path, ["server-1", "server-2"], ("bank", "quiet"))
    assert [r.phase for r in logs[("server-1", "bank")]] == [PREPARE, COMMIT, DONE]
    assert logs[("server-1", "quiet")] == []  # no log yet: nothing committed
    (reused,) = segment_id_reused(logs)
    assert "server-1 and server-2" in reused.detail
