"""A query's SQL is tokenized and parsed once per query attempt: the rewrite's plan carries
everything later stages ask of it (key lookup, order, determinism), and a query prepared again
after waiting in the queue binds its first parse again."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from sqlglot.dialects.dialect import Dialect
from sqlglot.parser import Parser

from horizon.client import connect
from tests.broker.conftest import ADMIN, broker_config
from tests.broker.spark_jobs import ExtraBroker, wait_for_jobs
from tests.broker.test_status_codes import SLOW_SQL


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    seen: Counter[str] = Counter()
    parse, tokenize = Parser.parse, Dialect.tokenize

    def counted_parse(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen["parse"] += 1
        return parse(self, *args, **kwargs)

    def counted_tokenize(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen["tokenize"] += 1
        return tokenize(self, *args, **kwargs)

    monkeypatch.setattr(Parser, "parse", counted_parse)
    monkeypatch.setattr(Dialect, "tokenize", counted_tokenize)
    return seen


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id, balance FROM accounts WHERE id = 7",  # answered from the files
        "SELECT owner, count(*) AS n FROM accounts GROUP BY owner ORDER BY owner",
        "SELECT a.id FROM accounts a JOIN accounts b ON a.id = b.id WHERE a.id < 5",
        "SELECT count(*) AS n, rand() AS r FROM accounts",  # never cached
        "SELECT count(*) AS n FROM table_changes('accounts', 900, 1100)",
    ],
)
def test_a_query_is_tokenized_and_parsed_once(client, counts, sql):
    client.query(sql, cache=False)
    assert counts == {"tokenize": 1, "parse": 1}


def test_a_query_prepared_again_after_queueing_is_not_parsed_again(broker_env, spark, counts):
    config = broker_config(broker_env.redis.url, limits={"max_concurrent": 1, "queue_size": 4})
    with (
        ExtraBroker(config, spark, broker_env) as server,
        connect(server.target, token=ADMIN) as horizon,
    ):
        hog = horizon.start_query(SLOW_SQL, query_id="parse-hog", cache=False)
        wait_for_jobs(spark, "horizon-parse-hog")
        counts.clear()
        queued = horizon.start_query("SELECT count(*) AS n FROM accounts", cache=False)
        time.sleep(1.5)  # queued past the broker's re-prepare threshold (1 s)
        hog.cancel()
        result = queued.result()
        assert result.table.to_pylist() == [{"n": 100}]
        assert result.trailer.timings.queued_ms > 1000  # it did wait, so it was prepared again
        assert counts == {"tokenize": 1, "parse": 1}
