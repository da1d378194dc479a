"""The console's ingestion page in a real headless Chromium: each Redis-stream table's lag
behind its stream's head (events and seconds), per server, as the servers reported it to the
state store, shown to inspectors for the tables they may read only."""

from __future__ import annotations

import time
from typing import Any

import redis
from selenium.webdriver.common.by import By

from horizon_broker.ingest.redis_stream_read import lag
from horizon_broker.watermark.stream_lag import StreamLag, record
from tests.observe.conftest import ADMIN, BLIND, READER, WatchedBroker
from tests.observe.test_console_browser import sign_in, texts, url


def test_the_ingestion_page_shows_each_streams_lag_per_table_as_the_grants_allow(
    browser: Any, watched: WatchedBroker
) -> None:
    client = redis.Redis.from_url(watched.redis.url)
    try:
        for number in range(7):  # entries after the table's offset, as a server counts them
            client.xadd("shop.public.accounts", {"value": f'{{"n": {number}}}'})
        now_ms = time.time_ns() // 1_000_000
        behind = lag(client, "shop.public.accounts", None, now_ms + 4_000)
        prefix = "horizon"
        record(client, prefix, StreamLag("accounts", "srv-a", "shop.public.accounts",
                                         behind.events, behind.seconds, now_ms))  # fmt: skip
        record(client, prefix, StreamLag("secret", "srv-a", "shop.public.secret", 0, 0.0, now_ms))

        sign_in(browser, watched, ADMIN)
        browser.get(url(watched, "/ingestion"))
        rows = browser.find_elements(By.CSS_SELECTOR, "#stream-lag tbody tr")
        assert [row.get_attribute("data-table") for row in rows] == ["accounts", "secret"]
        accounts = browser.find_element(By.CSS_SELECTOR, "tr[data-table=accounts]")
        assert accounts.find_element(By.CLASS_NAME, "stream").text == "shop.public.accounts"
        assert accounts.find_element(By.CLASS_NAME, "server").text == "srv-a"
        assert accounts.find_element(By.CLASS_NAME, "events").text == "7"
        assert float(accounts.find_element(By.CLASS_NAME, "seconds").text) >= 4.0
        assert accounts.find_element(By.CLASS_NAME, "counted").text.endswith(" s ago")

        sign_in(browser, watched, READER)  # may read accounts only
        browser.get(url(watched, "/ingestion"))
        assert texts(browser, "#stream-lag tbody tr td:first-child") == ["accounts"]
        sign_in(browser, watched, BLIND)  # may read accounts, may not inspect
        browser.get(url(watched, "/ingestion"))
        assert browser.find_element(By.ID, "error").get_attribute("data-code") == (
            "PERMISSION_DENIED"
        )
        assert not browser.find_elements(By.ID, "stream-lag")
    finally:
        client.delete("shop.public.accounts", "horizon:t:accounts:streamlag",
                      "horizon:t:secret:streamlag")  # fmt: skip
        client.close()
