"""Planted bugs prove the checker (``python -m bench.chaos --mutations ...``): the cheapest ones,
planted together in one short seeded run without faults, are each caught by an anomaly kind of
their own. The unmutated control of the suite is ``test_chaos_run`` (the same seed and workload,
with every fault kind, and no anomaly), so a catch here is not the checker firing on everything;
``--mutations all`` runs its own control before every bug apart (see
``docs/design/consistency-under-faults.md``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.chaos_mutations import CONTROL, names
from chaos.mutations import MUTATIONS

CHEAPEST = ("visibility_until_inclusive", "change_feed_off_by_one")
"""Broker bugs that a few seconds of reads exercise (time travel to a write's own commit
timestamp, a change feed starting at one), with expected anomaly kinds that do not overlap."""


def test_the_cheapest_planted_bugs_are_each_caught_by_their_own_anomaly_kinds(
    tmp_path: Path,
) -> None:
    results = tmp_path / "mutations.json"
    planted = "+".join(CHEAPEST)
    command = [
        sys.executable, "-m", "bench.chaos", "--mutations", planted,
        "--no-faults", "--brokers", "1", "--duration", "16", "--seed", "1", "--servers", "1", "--no-results",
        "--json", str(results),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert results.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    outcomes = json.loads(results.read_text())
    assert outcomes[planted]["writes_acknowledged"] > 0 and outcomes[planted]["queries"]
    caught_by = outcomes[planted]["caught_by"]
    for name in CHEAPEST:
        assert caught_by[name], f"{name} not caught: {outcomes[planted]['anomalies']}"
        assert set(caught_by[name]) <= MUTATIONS[name].expected
    assert run.returncode == 0, run.stdout[-3000:]


def test_all_runs_every_mutation_after_the_control_and_bad_names_are_refused() -> None:
    assert names("all") == [CONTROL, *MUTATIONS]
    assert len(MUTATIONS) >= 8
    assert names("none, visibility_until_inclusive+change_feed_off_by_one") == [
        CONTROL,
        "visibility_until_inclusive+change_feed_off_by_one",
    ]
    with pytest.raises(ValueError, match="no mutation 'nope': known are"):
        names("none,nope")
    with pytest.raises(ValueError, match="overlap"):
        names("lwm_reported_at_reserve+resume_skipped")
