"""The broker's log lines, captured from the real process logging as ``[logging]`` configures it:
one JSON line per query end with its fields, one per state change, and no secret in any line."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from horizon_broker._core.errors import HorizonError
from horizon_broker.broker.observe.wiring import PYSPARK_LOGGERS, configure_broker_logging
from horizon_broker.client import connect
from horizon_broker.locks.client import JobLocks, LockClient
from tests.broker.data import CHUNK
from tests.broker.spark_jobs import ExtraBroker
from tests.observe.conftest import (
    ADMIN,
    BLIND,
    LWM,
    READER,
    TOKENS,
    WatchedBroker,
    watched_config,
)

Line = dict[str, Any]


class Captured:
    """Every line the process logs while the test runs, in the configured format."""

    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream
        self._lock = threading.Lock()

    def text(self) -> str:
        return self.stream.getvalue()

    def lines(self) -> list[Line]:
        return [json.loads(line) for line in self.text().splitlines() if line.strip()]

    def wait_for(self, match: Callable[[Line], bool], timeout: float = 15.0) -> Line:
        """The first line ``match`` accepts, once it is written (fails when none comes)."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines():
                if match(line):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"no such line; lines were: {self.text()[-3000:]}")
            time.sleep(0.05)


@contextmanager
def logging_as(config: Any) -> Iterator[Captured]:
    """The process logs as ``config`` says into a captured stream while the block runs."""
    stream = io.StringIO()
    handler = configure_broker_logging(config, stream=stream)
    try:
        yield Captured(stream)
    finally:
        logging.getLogger().removeHandler(handler)
        for name in PYSPARK_LOGGERS:  # back to the defaults' silence
            logging.getLogger(name).disabled = True


@pytest.fixture
def captured(watched: WatchedBroker) -> Iterator[Captured]:
    with logging_as(watched_config(watched.redis.url, logging={"format": "json"})) as lines:
        yield lines


def test_one_json_line_per_query_end_with_the_fields_a_log_system_indexes(
    watched: WatchedBroker, captured: Captured
):
    with watched.client(READER) as client:
        result = client.execute("SELECT id, balance FROM accounts WHERE id <= 3")
        with pytest.raises(HorizonError):
            client.query("SELECT * FROM secret")
    query_id = result.metadata.query_id
    done = captured.wait_for(lambda line: line.get("query_id") == query_id)
    assert done["event"] == "query_end" and done["level"] == "INFO"
    assert done["logger"] == "horizon.query" and done["ts"].endswith("Z")
    assert done["identity"] == "reader" and done["rpc"] == "ExecuteQuery"
    assert done["tables"] == ["accounts"] and done["status"] == "OK"
    assert done["snapshot"] == LWM and done["snapshot_kind"] == "lwm"
    assert done["rows"] == 3 and done["bytes"] > 0 and done["cache"]
    assert set(done["timings_ms"]) == {"queued", "rewrite", "views", "spark", "serialize", "total"}
    assert done["timings_ms"]["total"] > 0
    assert "sql" not in done and "SELECT" not in json.dumps(done)
    refused = captured.wait_for(
        lambda line: line.get("event") == "query_end" and line.get("status") != "OK"
    )
    assert refused["level"] == "WARNING" and refused["identity"] == "reader"
    assert refused["status"] in ("NOT_FOUND", "PERMISSION_DENIED")
    assert "error" not in refused  # messages only when configured


LITERAL = "not-a-number-literal-7731"
"""A caller's literal Spark's error message quotes (CAST_INVALID_INPUT)."""


def test_a_failed_querys_line_keeps_its_status_and_condition_but_not_its_message(
    watched: WatchedBroker, captured: Captured
):
    with watched.client(READER) as client, pytest.raises(HorizonError) as failed:
        client.query(f"SELECT CAST('{LITERAL}' AS INT) AS n FROM accounts")
    assert LITERAL in str(failed.value)  # the caller is told; the log is not
    line = captured.wait_for(
        lambda line: line.get("event") == "query_end" and line["status"] == "INVALID_ARGUMENT"
    )
    assert line["error_condition"] == "CAST_INVALID_INPUT" and "error" not in line
    assert LITERAL not in captured.text()


def test_error_messages_are_logged_when_configured_and_still_redacted(watched: WatchedBroker):
    settings = {"format": "json", "error_messages": True}
    config = watched_config(watched.redis.url, logging=settings)
    with (
        logging_as(config) as captured,
        ExtraBroker(config, watched.broker.engine.spark, watched) as broker,  # type: ignore[arg-type]
        connect(broker.target, token=READER) as client,
        pytest.raises(HorizonError),
    ):
        client.query(f"SELECT CAST('{LITERAL} {ADMIN}' AS INT) AS n FROM accounts")
    line = captured.wait_for(lambda line: LITERAL in line.get("error", ""))
    assert line["error_condition"] == "CAST_INVALID_INPUT"
    assert line["status"] == "INVALID_ARGUMENT"
    # PySpark's own logger of analysis errors comes through the redacting handler.
    assert any(line["logger"] == "SQLQueryContextLogger" for line in captured.lines())
    assert ADMIN not in captured.text() and "[redacted]" in captured.text()


def test_the_engine_probe_writes_no_py4j_line_at_info(watched: WatchedBroker):
    """Each probe runs on a thread of its own, whose py4j connection closes with an INFO line
    that buried the broker's own lines every 2 s."""
    for name in ("py4j", "py4j.clientserver"):
        logging.getLogger(name).setLevel(logging.NOTSET)  # as in a process just started
    stream = io.StringIO()
    handler = configure_broker_logging(watched_config(watched.redis.url), stream=stream)  # type: ignore[arg-type]
    try:
        supervisor = watched.broker.supervisor
        assert supervisor is not None
        for _ in range(3):  # three probe intervals' worth of probes, as the supervisor runs them
            assert supervisor.check()
        logging.getLogger("horizon.test").info("the broker's own line")
    finally:
        logging.getLogger().removeHandler(handler)
    text = stream.getvalue()
    assert "the broker's own line" in text
    assert "py4j" not in text and "Closing down clientserver connection" not in text


def test_text_format_writes_the_same_fields_as_key_value_pairs(watched: WatchedBroker):
    config = watched_config(watched.redis.url, logging={"format": "text"})
    stream = io.StringIO()
    handler = configure_broker_logging(config, stream=stream)  # type: ignore[arg-type]
    try:
        with watched.client() as client:
            query_id = client.execute("SELECT count(*) FROM accounts").metadata.query_id
        deadline = time.monotonic() + 15
        while query_id not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        logging.getLogger().removeHandler(handler)
    (line,) = [line for line in stream.getvalue().splitlines() if f"query_id={query_id}" in line]
    assert "INFO horizon.query: query" in line
    assert "identity=admin" in line and "status=OK" in line and 'tables=["accounts"]' in line


def test_state_changes_are_logged_as_they_happen(watched: WatchedBroker, captured: Captured):
    with watched.unreadable(watched.tables["secret"].o0, "test: the file went away"):
        line = captured.wait_for(lambda line: line.get("event") == "segment_unreadable")
        assert line["table"] == "secret" and line["level"] == "WARNING"
    captured.wait_for(lambda line: line.get("event") == "segment_readable")

    # A server reports a position older than the LWM served: a regression, logged once.
    watched.server.report("accounts", {0: (LWM - 100, LWM - 100)})
    line = captured.wait_for(lambda line: line.get("event") == "lwm_regression")
    assert (line["table"], line["server"], line["partition"]) == ("accounts", "srv-a", 0)
    assert (line["from_lwm"], line["to_lwm"]) == (LWM, LWM - 100)
    watched.server.report("accounts", {0: (LWM, LWM)})

    # A streaming ingestion preempts a compaction's lock: the revocation is logged.
    locks = LockClient(watched.redis.url)
    compaction = JobLocks(locks, "accounts", "compact-1", 25, lease_s=20.0, wait_s=0.0)
    ingestion = JobLocks(locks, "accounts", "srv-stream", 75, lease_s=20.0, wait_s=0.0)
    try:
        compaction.lock_time_chunk(CHUNK)
        ingestion.lock_time_chunk(CHUNK)
        line = captured.wait_for(lambda line: line.get("event") == "lock_revoked")
        assert (line["table"], line["job"], line["revoked_by"]) == (
            "accounts",
            "compact-1",
            "srv-stream",
        )
    finally:
        ingestion.release()
        compaction.release()
        locks.close()
    assert len([x for x in captured.lines() if x.get("event") == "lwm_regression"]) == 1


def test_no_token_or_secret_appears_in_any_log_line(watched: WatchedBroker, captured: Captured):
    secrets = [ADMIN, READER, BLIND]
    with watched.client(BLIND) as client:
        with pytest.raises(HorizonError):
            client.timeline("accounts")  # no inspect grant
        # A query whose text and error quote a token: neither may reach a log line.
        with pytest.raises(HorizonError):
            client.query(f"SELECT * FROM `{ADMIN}`")
        with pytest.raises(HorizonError):
            client.query(f"SELECT '{READER}' AS t FROM accounts WHERE nonsense_column = 1")
    with watched.client("wrong-" + ADMIN) as stranger, pytest.raises(HorizonError):
        stranger.tables()
    logging.getLogger("horizon.test").warning(
        "a careless line quoting %s and Authorization: Bearer %s", BLIND, "some-bearer-credential"
    )
    captured.wait_for(lambda line: line.get("logger") == "horizon.test")
    captured.wait_for(lambda line: line.get("event") == "query_end" and line["status"] != "OK")
    text = captured.text()
    assert text.strip()
    # PySpark's own logger of analysis errors (it prints the plan, literals included) is silent
    # unless error messages are asked for (then redacted: see the test above).
    assert not any(line["logger"] in PYSPARK_LOGGERS for line in captured.lines())
    for secret in [*secrets, "some-bearer-credential"]:
        assert secret not in text
    assert "[redacted]" in text


def test_the_spark_jvm_is_never_given_a_token_or_the_state_stores_password() -> None:
    """The JVM writes its own log (log4j, text): it must never hold a secret of Horizon's.
    Secrets a user puts in ``[spark.conf]`` are Spark's to redact (``spark.redaction.regex``)."""
    from horizon_broker.broker.api.server import spark_conf

    config = watched_config("redis://:hunter2-secret@127.0.0.1:6390/0")
    settings = " ".join(f"{key}={value}" for key, value in spark_conf(config).items())  # type: ignore[arg-type]
    assert "hunter2-secret" not in settings and "6390" not in settings
    for grant in TOKENS:
        assert grant["token"] not in settings
