"""What a chaos run that did not settle says: the files no server acknowledged and the batches
above their table's LWM, by table, key, commit timestamp and server (without a cluster: no
process, broker or store to ask)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.chaos_settle import NotSettled, summary, unsettled, wait_for_writes
from chaos.cluster import BANK, TABLES
from chaos.workload import Writer


def test_a_run_that_did_not_settle_names_the_writes_it_waited_for(tmp_path: Path) -> None:
    writer = Writer(tmp_path, {0: "server-1", 1: "server-2"}, seed=1)
    writer.opening()
    bank_files = [file for file, (table, _) in writer.files.items() if table == BANK]
    acked = bank_files[0]
    (tmp_path / "acks").mkdir()
    entry = {"table": BANK, "file": acked, "base": 117_700_000_000, "started": 1.0}
    (tmp_path / "acks" / "server-1.jsonl").write_text(json.dumps(entry) + "\n")
    report = unsettled(writer, None, TABLES)
    assert {f["file"] for f in report["files_not_acknowledged"]} == set(writer.files) - {acked}
    (above,) = report["batches_above_lwm"]
    assert (above["table"], above["base"], above["server"]) == (BANK, 117_700_000_000, "server-1")
    assert above["keys"] == [0]
    text = summary(report)
    assert "files not acknowledged: 5" in text and "bank base 117700000000 by server-1" in text


def test_the_failure_message_carries_the_report(tmp_path: Path) -> None:
    writer = Writer(tmp_path, {0: "server-1"}, seed=1)
    writer.opening()
    with pytest.raises(NotSettled, match=r"within 0.0 s \(everything in .*not-settled.json\)"):
        wait_for_writes(None, writer, 0.0)  # no time left: no broker is asked
    report = json.loads((tmp_path / "not-settled.json").read_text())
    assert len(report["files_not_acknowledged"]) == len(writer.files)
