"""The console's live table in a real headless Chromium against a real broker: a subscription
run as the signed-in identity shows its first result, then the rows a batch ingested meanwhile
updates and deletes; it counts against the identity's subscription limit with gRPC streams and
gives its slot back when the page goes; bad SQL and an unreadable table show their error; the
event stream wants the page's CSRF token.

One broker for the module, its tables written by real ingestion jobs (Spark), one subscription
allowed per identity (``[limits] max_subscriptions_per_identity = 1``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from horizon_broker._core.errors import ResourceExhausted
from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.client import connect
from horizon_broker.ingest.job import IngestJob
from horizon_broker.watermark.server import ServerClient
from tests.broker.conftest import ADMIN, READER, broker_config
from tests.compaction.history import SCHEMA
from tests.ingest.conftest import COLUMNS, Change, accounts_table, broker_view
from tests.processes import RedisProcess
from tests.waiting import eventually

pytestmark = [pytest.mark.spark, pytest.mark.redis]

SQL = "SELECT user_id, balance FROM accounts"
MAX_ROWS = 3
"""``[console] max_rows``: the accounts fit, their pairs do not."""


@dataclass
class LiveEnv:
    redis: RedisProcess
    broker: BrokerServer
    jobs: dict[str, IngestJob]
    spark: Any

    def ingest(self, table: str, changes: list[Change]) -> int:
        """One batch through the table's ingestion job; the LWM the broker serves after it."""
        job = self.jobs[table]
        rows = [tuple(change.as_row()[name] for name in COLUMNS) for change in changes]
        job.run_batch(self.spark.createDataFrame(rows, SCHEMA))
        return int(broker_view(self.broker.follower, job.client, table).lwm)

    @property
    def url(self) -> str:
        assert self.broker.console is not None
        return self.broker.console.url.rstrip("/")


@pytest.fixture(scope="module")
def live_env(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveEnv]:  # type: ignore[no-untyped-def]
    redis = RedisProcess().start()
    config = broker_config(
        redis.url,
        console={"listen": "127.0.0.1:0", "refresh_s": 3600.0, "max_rows": MAX_ROWS},
        limits={"max_subscriptions_per_identity": 1},
    )
    broker = BrokerServer(config, spark=spark).start()  # type: ignore[arg-type]
    root: Path = tmp_path_factory.mktemp("live") / "store"
    clients = []
    jobs = {}
    for name in ("accounts", "ledger"):
        client = ServerClient(redis.url, f"server-{name}")
        clients.append(client)
        jobs[name] = IngestJob(spark, accounts_table(root, name=name, key_partitions=1), client)
    env = LiveEnv(redis, broker, jobs, spark)
    env.ingest("accounts", [Change("k1", 100, 1), Change("k2", 200, 1), Change("k3", 300, 1)])
    env.ingest("ledger", [Change("L1", 1, 1)])
    yield env
    broker.stop(0)
    broker.follower.stop()
    for client in clients:
        client.close()
    redis.close()


def sign_in(browser: Any, env: LiveEnv, token: str) -> None:
    browser.delete_all_cookies()
    browser.get(env.url + "/login")
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    eventually(lambda: browser.find_elements(By.ID, "identity"), "signed in")


def subscribe_in_page(browser: Any, env: LiveEnv, sql: str) -> None:
    browser.get(env.url + "/live")
    browser.find_element(By.ID, "sql").send_keys(sql)
    browser.find_element(By.ID, "subscribe").click()
    eventually(lambda: browser.find_elements(By.ID, "live-status"), "the live page")


def state(browser: Any) -> str:
    return str(browser.find_element(By.ID, "live-status").get_attribute("data-state"))


ROWS_SCRIPT = """
return Array.from(document.querySelectorAll("#live-rows tbody tr")).map((tr) =>
  [tr.dataset.change || null, ...Array.from(tr.cells).map((td) => td.textContent)]);
"""


def shown_rows(browser: Any) -> dict[str, str]:
    """user_id -> balance, as the page's table shows them (read in one go: the script
    replaces rows as deltas come)."""
    return {row[1]: row[2] for row in browser.execute_script(ROWS_SCRIPT)}


def change_of(browser: Any, user_id: str) -> str | None:
    """The last change the page applied to ``user_id``'s row (None: none since the first)."""
    return next((row[0] for row in browser.execute_script(ROWS_SCRIPT) if row[1] == user_id), None)


def grpc_subscription_opens(env: LiveEnv) -> bool:
    """Whether admin may open one more subscription over gRPC now (its first result comes)."""
    with connect(env.broker.target, token=ADMIN) as client:
        stream = client.subscribe(SQL, timeout=60)
        try:
            return next(stream).kind == "first_result"
        except ResourceExhausted:
            return False
        finally:
            stream.close()


def test_live_table_follows_an_ingested_update_and_delete_and_holds_the_identitys_slot(
    browser: Any, live_env: LiveEnv
) -> None:
    sign_in(browser, live_env, ADMIN)
    subscribe_in_page(browser, live_env, SQL)
    eventually(lambda: state(browser) == "live", "the first result in the page")
    assert shown_rows(browser) == {"k1": "100", "k2": "200", "k3": "300"}
    first = int(browser.find_element(By.ID, "live-snapshot").text)
    assert browser.find_element(By.ID, "live-strategy").text
    assert browser.find_element(By.ID, "live-token").text.startswith("hzs1.")
    # The page's subscription is admin's one: a gRPC stream of admin's is refused meanwhile.
    assert not grpc_subscription_opens(live_env)

    moved_to = live_env.ingest("accounts", [Change("k1", 150, 2), Change("k2", 0, 2, deleted=True)])
    eventually(
        lambda: shown_rows(browser) == {"k1": "150", "k3": "300"},
        "the batch's update and delete in the page",
    )
    assert change_of(browser, "k1") == "update" and change_of(browser, "k3") is None
    assert first < int(browser.find_element(By.ID, "live-snapshot").text) <= moved_to
    latest = browser.find_element(By.CSS_SELECTOR, "#live-changes li").text
    assert "0 inserted, 1 updated, 1 deleted" in latest and "k2" in latest
    assert browser.find_element(By.ID, "live-count").text == "2"

    browser.get(live_env.url + "/")  # the page goes: its subscription ends, the slot is free
    eventually(lambda: grpc_subscription_opens(live_env), "the page's subscription released")


def test_bad_sql_an_unreadable_table_and_a_result_past_max_rows_show_their_error(
    browser: Any, live_env: LiveEnv
) -> None:
    sign_in(browser, live_env, ADMIN)
    subscribe_in_page(browser, live_env, "SELECT no_such_column FROM accounts")
    eventually(lambda: state(browser) == "failed", "the bad query's error in the page")
    error = browser.find_element(By.ID, "live-error")
    assert error.is_displayed() and error.get_attribute("data-code") == "INVALID_ARGUMENT"
    assert "no_such_column" in error.text

    sign_in(browser, live_env, READER)  # may read accounts only
    subscribe_in_page(browser, live_env, "SELECT * FROM ledger")
    eventually(lambda: state(browser) == "failed", "the grant's refusal in the page")
    code = browser.find_element(By.ID, "live-error").get_attribute("data-code")
    assert code in ("PERMISSION_DENIED", "NOT_FOUND")
    assert not browser.find_elements(By.CSS_SELECTOR, "#live-rows tbody tr")

    pairs = "SELECT a.user_id, b.user_id AS other FROM accounts a CROSS JOIN accounts b"
    subscribe_in_page(browser, live_env, pairs)  # 4 or 9 rows, more than the page holds
    eventually(lambda: state(browser) == "failed", "the result past max_rows refused")
    error = browser.find_element(By.ID, "live-error")
    assert error.get_attribute("data-code") == "FAILED_PRECONDITION"
    assert f"max_rows = {MAX_ROWS}" in error.text


def test_the_event_stream_wants_the_pages_csrf_token(browser: Any, live_env: LiveEnv) -> None:
    sign_in(browser, live_env, ADMIN)
    browser.get(live_env.url + "/live")
    status = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('/live/events?sql=' + encodeURIComponent(arguments[0]),"
        " {credentials: 'same-origin'}).then((r) => done(r.status));",
        SQL,
    )
    assert status == 403
    assert grpc_subscription_opens(live_env)  # no subscription was started for it
