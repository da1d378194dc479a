"""``main_compact``: the command behind ``horizon compact``."""

from __future__ import annotations

from compaction.cli import main_compact
from ingest.cli import main_ingest
from tests.ingest.cli_test_table import TABLE
from tests.ingest.conftest import Change, assert_broker_sees, broker_view, write_changelog


def test_the_compact_command_compacts_reclaims_and_reports(
    spark, redis_server, server, follower, tmp_path, capsys
):
    (tmp_path / "accounts.toml").write_text(TABLE)
    history = []
    for number in range(4):
        changes = [Change(f"k{i}", 10 * number + i, number + 1) for i in range(4)]
        write_changelog(tmp_path / "changelog", f"{number:03d}.json", changes)
        history += [(100 * number + i, c) for i, c in enumerate(changes)]
        argv = [
            "--table", str(tmp_path / "accounts.toml"), "--source", str(tmp_path / "changelog"),
            "--format", "json", "--server-id", "s1", "--redis", redis_server.url,
            "--storage-root", str(tmp_path / "store"),
        ]  # fmt: skip
        assert main_ingest(argv) == 0
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
