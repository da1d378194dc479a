"""A short fault-injection run (``python -m bench.chaos --short``) in every test run: real
processes (a Sentinel group, two brokers), every fault kind at least once (a full disk is
reported not runnable where the run may not mount a filesystem), and no anomaly in the recorded
history. One ingestion server, 12 s of workload before the last faults, and windows just past the heartbeat timeout keep
it to a few minutes on two cores; ``make chaos`` runs two servers longer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from chaos.faults import FAULT_KINDS


def test_a_short_run_with_every_fault_kind_records_no_anomaly(tmp_path: Path) -> None:
    results = tmp_path / "chaos.json"
    command = [
        sys.executable, "-m", "bench.chaos", "--duration", "12", "--seed", "1", "--servers", "1",
        "--short", "--no-results", "--json", str(results),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    # A run that did not settle says which writes it waited for and what every process and
    # broker was doing (bench/chaos_settle.py): its message is at the end of stderr.
    assert results.exists(), run.stdout[-3000:] + run.stderr[-8000:]
    report = json.loads(results.read_text())
    assert report["anomalies"] == {}, "\n".join(
        [*report["anomaly_details"], *report["fault_windows"], json.dumps(report["log_tails"])]
    )
    assert run.returncode == 0, run.stdout[-3000:]
    assert set(report["faults"]) | set(report["faults_not_runnable"]) == set(FAULT_KINDS)
    assert report["fault_failures"] == {}
    assert all(report["availability"][kind]["queries"] for kind in report["faults"])
    assert report["writes_acknowledged"] > 0
    assert {"lwm", "pinned", "travel", "self_join", "changes"} <= set(report["queries"])
    assert report["availability"]["no fault"]["answered"] > 0
