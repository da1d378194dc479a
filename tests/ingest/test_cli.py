"""``main_ingest``: the command the lead wires into ``horizon ingest``."""

from __future__ import annotations

from horizon_broker.ingest.cli import main_ingest
from horizon_broker.watermark import tokens
from tests.ingest.cli_test_table import TABLE
from tests.ingest.conftest import Change, assert_broker_sees, write_changelog


def test_the_ingest_command_ingests_a_changelog_directory_once_and_prints_its_token(
    spark, redis_server, server, follower, tmp_path, capsys
):
    (tmp_path / "accounts.toml").write_text(TABLE)
    changes = [Change("a", 1, 1), Change("b", 2, 1), Change("a", 3, 2)]
    write_changelog(tmp_path / "changelog", "001.json", changes)
    argv = [
        "--table", str(tmp_path / "accounts.toml"), "--source", str(tmp_path / "changelog"),
        "--format", "json", "--server-id", "s1", "--redis", redis_server.url,
        "--storage-root", str(tmp_path / "store"),
    ]  # fmt: skip
    assert main_ingest(argv) == 0
    printed = capsys.readouterr().out
    token = printed.rsplit("token ", 1)[1].strip()
    assert "3 rows" in printed and tokens.decode(token)["accounts"] > 0
    assert main_ingest(argv) == 0  # nothing new: an empty batch, no duplicates
    history = [(i, c) for i, c in enumerate(changes)]
    assert_broker_sees(spark, follower, server("reader"), "accounts", history, exact_ts=False)


def test_the_ingest_command_reports_a_bad_table_file_and_fails(redis_server, tmp_path):
    (tmp_path / "bad.toml").write_text('name = "x"\n')
    argv = ["--table", str(tmp_path / "bad.toml"), "--source", str(tmp_path),
            "--server-id", "s1", "--redis", redis_server.url]  # fmt: skip
    assert main_ingest(argv) == 2
