"""``main_compact``: the command behind ``horizon compact``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from horizon_broker.compaction.cli import main_compact
from horizon_broker.ingest.cli import main_ingest
from horizon_broker.watermark.embedded_redis import free_port
from tests.ingest.cli_test_table import TABLE as INGESTED_TABLE
from tests.ingest.conftest import Change, assert_broker_sees, broker_view, write_changelog

TABLE = INGESTED_TABLE.replace("key_partitions = 2", "key_partitions = 2\nrewrite_target_rows = 0")
"""Rewrites leave the small segments alone: the compaction has them to merge."""

HORIZON = str(Path(sys.executable).with_name("horizon"))


def _ingest_argv(tmp_path: Path, redis_url: str) -> list[str]:
    """``horizon ingest`` of ``tmp_path``'s changelog into its table, once."""
    return [
        "--table", str(tmp_path / "accounts.toml"), "--source", str(tmp_path / "changelog"),
        "--format", "json", "--server-id", "s1", "--redis", redis_url,
        "--storage-root", str(tmp_path / "store"),
    ]  # fmt: skip


def test_the_compact_command_compacts_reclaims_and_reports(
    spark, redis_server, server, follower, tmp_path, capsys
):
    (tmp_path / "accounts.toml").write_text(TABLE)
    history = []
    for number in range(4):
        changes = [Change(f"k{i}", 10 * number + i, number + 1) for i in range(4)]
        write_changelog(tmp_path / "changelog", f"{number:03d}.json", changes)
        history += [(100 * number + i, c) for i, c in enumerate(changes)]
        assert main_ingest(_ingest_argv(tmp_path, redis_server.url)) == 0
    reader = server("reader")
    before = len(broker_view(follower, reader, "accounts").visible_segments)
    common = ["--table", str(tmp_path / "accounts.toml"), "--redis", redis_server.url,
              "--storage-root", str(tmp_path / "store")]  # fmt: skip
    assert main_compact([*common, "--dry-run"]) == 0
    assert "<-" in capsys.readouterr().out
    assert main_compact([*common, "--reclaim"]) == 0
    out = capsys.readouterr().out
    assert "published" in out and "reclaimed" in out
    assert len(broker_view(follower, reader, "accounts").visible_segments) < before
    assert main_compact([*common, "--mode", "major"]) == 0
    assert_broker_sees(spark, follower, reader, "accounts", history, exact_ts=False)


def test_the_compact_command_refuses_bad_settings(redis_server, tmp_path, capsys):
    (tmp_path / "accounts.toml").write_text(TABLE)
    argv = ["--table", str(tmp_path / "accounts.toml"), "--redis", redis_server.url,
            "--target-rows", "0"]  # fmt: skip
    assert main_compact(argv) == 2
    assert "--target-rows must be at least 1" in capsys.readouterr().err


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return {}  # not listening yet
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_watching_compactor_process_serves_its_runs_and_locks_on_its_metrics_port(
    redis_server, tmp_path
):
    # A table of its own: the first test's "accounts" lives on in the session's Redis.
    (tmp_path / "accounts.toml").write_text(TABLE.replace('"accounts"', '"watched"'))
    for number in range(3):
        changes = [Change(f"k{i}", 10 * number + i, number + 1) for i in range(4)]
        write_changelog(tmp_path / "changelog", f"{number:03d}.json", changes)
        assert main_ingest(_ingest_argv(tmp_path, redis_server.url)) == 0
    url = f"http://127.0.0.1:{free_port()}/metrics"
    listen = url.removeprefix("http://").removesuffix("/metrics")
    process = subprocess.Popen(
        [HORIZON, "compact", "--table", str(tmp_path / "accounts.toml"), "--redis",
         redis_server.url, "--storage-root", str(tmp_path / "store"), "--spark-master",
         "local[1]", "--watch", "0.5", "--metrics-listen", listen],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    published = ("horizon_compaction_runs_total", (("outcome", "published"), ("table", "watched")))
    try:
        deadline = time.monotonic() + 240
        samples = _samples(url)
        while samples.get(published, 0) < 1:
            assert process.poll() is None, "the compactor exited"
            assert time.monotonic() < deadline, f"no published run on {url}: {samples}"
            time.sleep(0.5)
            samples = _samples(url)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)
    assert samples[("horizon_compaction_rows_total", (("direction", "in"), ("table", "watched")))]
    assert samples[("horizon_locks_acquired_total", ())] >= 1  # the run locked its inputs
    assert ("horizon_locks_lost_total", ()) in samples
