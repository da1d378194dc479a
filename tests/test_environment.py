"""The real dependencies every integration test relies on actually work."""

import redis


def test_shared_redis_server_answers_on_loopback(redis_client: redis.Redis) -> None:
    redis_client.set("horizon:probe", "1")
    assert redis_client.get("horizon:probe") == b"1"


def test_shared_spark_session_runs_sql(spark) -> None:  # type: ignore[no-untyped-def]
    assert spark.sql("SELECT 1 + 1 AS two").collect()[0]["two"] == 2


def test_a_command_run_in_a_test_leaves_no_log_handler_on_a_stream_closed_after_it() -> None:
    import argparse
    import io
    import logging
    import sys

    from horizon_broker._core.commands import run_command
    from tests.logging_state import logging_kept

    root = logging.getLogger()
    before = list(root.handlers)
    capture, stderr = io.StringIO(), sys.stderr
    with logging_kept():
        sys.stderr = capture  # as capsys replaces it
        try:
            run_command("probe", argparse.ArgumentParser(), lambda args: 0, [])
        finally:
            sys.stderr = stderr
        assert any(getattr(h, "stream", None) is capture for h in root.handlers)
    capture.close()
    assert root.handlers == before
    assert not any(getattr(h, "stream", None) is capture for h in root.handlers)
