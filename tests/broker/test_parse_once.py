"""A query's SQL is tokenized and parsed once: the rewrite's plan carries everything later stages
ask of it (key lookup, order, determinism), a query prepared again after waiting in the queue
binds its first parse again, and a text sent again is neither parsed nor (on an unchanged state)
bound again, yet answers at the newest snapshot once the state moves."""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest
from sqlglot.dialects.dialect import Dialect
from sqlglot.parser import Parser

from horizon_broker.client import connect
from tests.broker.conftest import ADMIN, broker_config
from tests.broker.data import UpsertTable
from tests.broker.spark_jobs import ExtraBroker, engine_group, wait_for_jobs
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
def test_a_query_is_tokenized_and_parsed_once_however_often_it_is_sent(client, counts, sql):
    sql += f"\n-- {uuid.uuid4().hex}"  # a text this broker has not seen yet
    first = client.query(sql, cache=False)
    assert counts == {"tokenize": 1, "parse": 1}
    assert client.query(sql, cache=False).num_rows == first.num_rows
    assert counts == {"tokenize": 1, "parse": 1}


def test_a_repeated_text_binds_once_per_state_and_answers_at_the_newest_snapshot(
    broker_env, client
):
    table = UpsertTable("texts_t", broker_env.root)
    server = broker_env.server_client
    server.register_table(table.desc)
    server.announce(table.segments)
    server.report(table.name, {0: (999, 999), 1: (1500, 1500)})
    follower = broker_env.broker.follower
    assert follower.wait_for(
        lambda f: table.name in f.tables() and f.view(table.name).lwm == 999, 10
    )
    texts = broker_env.broker.engine.texts
    sql = f"SELECT sum(balance) AS s, count(*) AS n FROM {table.name}"
    binds = texts.binds
    for _ in range(3):
        result = client.execute(sql, cache=False)
        assert result.snapshot == 999
        assert result.table.to_pylist() == [{"s": 50_500, "n": 100}]
    assert texts.binds == binds + 1

    server.report(table.name, {0: (1200, 1200)})  # the ten updates at 1000 become visible
    assert follower.wait_for(lambda f: f.view(table.name).lwm == 1200, 10)
    result = client.execute(sql, cache=False)
    assert result.snapshot == 1200
    assert result.table.to_pylist() == [{"s": 50_510, "n": 100}]
    assert texts.binds == binds + 2


def test_a_query_prepared_again_after_queueing_is_not_parsed_again(broker_env, spark, counts):
    config = broker_config(broker_env.redis.url, limits={"max_concurrent": 1, "queue_size": 4})
    with (
        ExtraBroker(config, spark, broker_env) as server,
        connect(server.target, token=ADMIN) as horizon,
    ):
        hog = horizon.start_query(SLOW_SQL, query_id="parse-hog", cache=False)
        wait_for_jobs(spark, engine_group(server, "parse-hog"))
        counts.clear()
        queued = horizon.start_query("SELECT count(*) AS n FROM accounts", cache=False)
        time.sleep(1.5)  # queued past the broker's re-prepare threshold (1 s)
        hog.cancel()
        result = queued.result()
        assert result.table.to_pylist() == [{"n": 100}]
        assert result.trailer.timings.queued_ms > 1000  # it did wait, so it was prepared again
        assert counts == {"tokenize": 1, "parse": 1}
