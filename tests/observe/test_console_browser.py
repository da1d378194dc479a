"""The web console in a real headless Chromium against a real broker: signing in (and being
refused), the tables with their LWM and laggard, a timeline picture that matches the gRPC
inspection answer, a segment's details on click, the query box running and explaining SQL, a
lock showing while a compaction job holds it, and the grants applied as on the gRPC API."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections import Counter

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait

from horizon_broker.locks.client import JobLocks, LockClient
from horizon_broker.render import STATE_NAMES
from horizon_broker.timeline.interval import Interval
from horizon_broker.timeline.segment import Segment
from tests.broker.data import CHUNK, VERSION
from tests.observe.conftest import ADMIN, BLIND, LWM, READER, WatchedBroker


def url(watched: WatchedBroker, path: str = "") -> str:
    assert watched.broker.console is not None
    return watched.broker.console.url.rstrip("/") + path


def sign_in(browser, watched: WatchedBroker, token: str) -> None:  # type: ignore[no-untyped-def]
    browser.delete_all_cookies()
    browser.get(url(watched, "/login"))
    browser.find_element(By.ID, "token").send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    WebDriverWait(browser, 30).until(
        lambda b: b.find_elements(By.ID, "identity") or b.find_elements(By.ID, "error")
    )


def texts(browser, selector: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [element.text for element in browser.find_elements(By.CSS_SELECTOR, selector)]


def test_refused_without_a_token_and_with_a_wrong_one(browser, watched: WatchedBroker):
    browser.delete_all_cookies()
    browser.get(url(watched, "/tables/accounts"))
    assert browser.current_url.endswith("/login")
    assert not browser.find_elements(By.ID, "timeline")
    sign_in(browser, watched, "not-a-token")
    assert "unknown bearer token" in browser.find_element(By.ID, "error").text
    assert not browser.find_elements(By.ID, "identity")
    # Scripts without a session get 401, not the login page.
    request = urllib.request.Request(
        url(watched, "/"), headers={"Authorization": "Bearer not-a-token"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401


def test_tables_with_lwm_lag_and_laggard_as_the_grants_allow(browser, watched: WatchedBroker):
    sign_in(browser, watched, ADMIN)
    assert browser.find_element(By.ID, "identity").text == "admin"
    rows = browser.find_elements(By.CSS_SELECTOR, "#tables tbody tr")
    assert [row.get_attribute("data-table") for row in rows] == ["accounts", "secret"]
    accounts = browser.find_element(By.CSS_SELECTOR, "tr[data-table=accounts]")
    assert accounts.find_element(By.CLASS_NAME, "lwm").text.startswith(str(LWM))
    assert accounts.find_element(By.CLASS_NAME, "laggard").text == "srv-a / partition 0"
    assert accounts.find_element(By.CLASS_NAME, "lag").text.endswith(" s")

    sign_in(browser, watched, READER)  # may read accounts only: secret is not even listed
    assert texts(browser, "#tables tbody tr td:first-child") == ["accounts"]
    browser.get(url(watched, "/tables/secret"))
    assert browser.find_element(By.ID, "error").get_attribute("data-code") in (
        "NOT_FOUND",
        "PERMISSION_DENIED",
    )
    sign_in(browser, watched, BLIND)  # may read accounts, may not inspect
    assert texts(browser, "#tables tbody tr td:first-child") == ["accounts"]
    browser.get(url(watched, "/tables/accounts"))
    assert browser.find_element(By.ID, "error").get_attribute("data-code") == "PERMISSION_DENIED"


def test_timeline_picture_matches_the_inspection_answer(browser, watched: WatchedBroker):
    with watched.client() as client:
        answer = client.timeline("accounts", include_overshadowed=True)
    expected: Counter[str] = Counter()
    for chunk in answer.chunks:
        for group in chunk.groups:
            expected[STATE_NAMES[group.state]] += len(group.segments)
    sign_in(browser, watched, ADMIN)
    browser.get(url(watched, "/tables/accounts"))
    WebDriverWait(browser, 30).until(ready.presence_of_element_located((By.ID, "timeline")))
    chunks = browser.find_elements(By.CSS_SELECTOR, "#timeline rect.chunk")
    groups = browser.find_elements(By.CSS_SELECTOR, "#timeline rect.group")
    shown: Counter[str] = Counter()
    for group in groups:
        shown[group.get_attribute("data-state")] += int(group.get_attribute("data-segments"))
    assert len(chunks) == len(answer.chunks) == 1
    assert shown == expected and shown["visible"] == 2 and shown["overshadowed"] == 1
    assert browser.find_element(By.ID, "lwm").text == str(LWM)
    assert browser.find_element(By.ID, "laggard").text == "srv-a / partition 0"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 2

    visible = next(g for g in groups if g.get_attribute("data-state") == "visible")
    visible.click()
    detail = browser.find_element(By.ID, "segment-detail").text
    assert detail.startswith("visible group") and "accounts_" in detail


def test_unreadable_segments_are_marked_on_the_picture(browser, watched: WatchedBroker):
    with watched.unreadable(watched.tables["accounts"].o0, "test: the file went away"):
        sign_in(browser, watched, ADMIN)
        browser.get(url(watched, "/tables/accounts"))
        marks = browser.find_elements(By.CSS_SELECTOR, "#timeline text.unreadable")
        assert [mark.get_attribute("data-segments") for mark in marks] == ["1"]
        assert "test: the file went away" in browser.find_element(By.ID, "unreadable").text


def test_query_box_runs_and_explains_sql_and_the_query_is_listed(browser, watched: WatchedBroker):
    sign_in(browser, watched, READER)
    browser.get(url(watched, "/query"))
    box = browser.find_element(By.ID, "sql")
    box.send_keys("SELECT id, balance FROM accounts WHERE id <= 5 ORDER BY id")
    browser.find_element(By.ID, "run").click()
    WebDriverWait(browser, 60).until(ready.presence_of_element_located((By.ID, "rows")))
    assert browser.find_element(By.ID, "snapshot").text == str(LWM)
    assert browser.find_element(By.ID, "row-count").text == "5"
    cells = texts(browser, "#rows tbody tr td:first-child")
    assert cells == ["1", "2", "3", "4", "5"]
    assert "validFrom" in browser.find_element(By.ID, "rewritten").text
    query_id = browser.find_element(By.ID, "query-id").text

    browser.find_element(By.ID, "explain").click()
    WebDriverWait(browser, 60).until(ready.presence_of_element_located((By.ID, "plan")))
    assert browser.find_element(By.ID, "snapshot").text == str(LWM)
    assert "validFrom" in browser.find_element(By.ID, "rewritten").text

    browser.find_element(By.ID, "sql").clear()
    browser.find_element(By.ID, "sql").send_keys("SELECT * FROM secret")
    browser.find_element(By.ID, "run").click()
    WebDriverWait(browser, 60).until(ready.presence_of_element_located((By.ID, "error")))
    assert browser.find_element(By.ID, "error").get_attribute("data-code") in (
        "NOT_FOUND",
        "PERMISSION_DENIED",
    )

    browser.get(url(watched, "/queries"))
    row = browser.find_element(By.CSS_SELECTOR, f"tr[data-query-id='{query_id}']")
    assert "console" in row.text and "done" in row.text and "accounts" in row.text


def test_a_compactions_lock_shows_while_held_and_goes_after(browser, watched: WatchedBroker):
    locks = LockClient(watched.redis.url)
    job = JobLocks(locks, "accounts", "compact-run-7", 25, lease_s=30.0, wait_s=0.0)
    sign_in(browser, watched, ADMIN)
    try:
        job.lock_time_chunk(CHUNK)
        browser.get(url(watched, "/locks"))
        held = browser.find_elements(By.CSS_SELECTOR, "#locks tr.lock")
        assert [row.get_attribute("data-job") for row in held] == ["compact-run-7"]
        assert "held" in held[0].text and "exclusive" in held[0].text
        browser.get(url(watched, "/tables/accounts"))
        locked = browser.find_elements(By.CSS_SELECTOR, "#timeline rect.chunk[data-locked='1']")
        assert len(locked) == 1
    finally:
        job.release()
        locks.close()
    browser.get(url(watched, "/locks"))
    assert browser.find_elements(By.CSS_SELECTOR, "#locks tr.lock") == []
    browser.get(url(watched, "/tables/accounts"))
    assert browser.find_elements(By.CSS_SELECTOR, "#timeline rect.chunk[data-locked='1']") == []


def test_a_live_page_refreshes_its_state_in_place_without_a_reload(browser, watched: WatchedBroker):
    locks = LockClient(watched.redis.url)
    job = JobLocks(locks, "accounts", "compact-run-8", 25, lease_s=30.0, wait_s=0.0)
    sign_in(browser, watched, ADMIN)
    browser.get(url(watched, "/locks"))
    assert browser.find_elements(By.CSS_SELECTOR, "#locks tr.lock") == []
    browser.execute_script("window.stillThisPage = true;")  # a reload would forget it
    refresh = "const done = arguments[arguments.length - 1]; refreshLive().then(() => done());"
    try:
        job.lock_time_chunk(CHUNK)
        browser.execute_async_script(refresh)  # what the page's timer runs every refresh_s
        held = browser.find_elements(By.CSS_SELECTOR, "#locks tr.lock")
        assert [row.get_attribute("data-job") for row in held] == ["compact-run-8"]
    finally:
        job.release()
        locks.close()
    browser.execute_async_script(refresh)
    assert browser.find_elements(By.CSS_SELECTOR, "#locks tr.lock") == []
    assert browser.execute_script("return window.stillThisPage === true;")


def test_timeline_page_of_a_thousand_segments(browser, watched: WatchedBroker, tmp_path):
    """Renders every segment; the time Chromium took is printed (not asserted)."""
    from tests.broker.data import descriptor

    desc = descriptor("wide", storage_root=watched.root)
    watched.server.register_table(desc)
    day = CHUNK.end_ms
    segments = [
        Segment(
            table="wide",
            interval=Interval(chunk * day, (chunk + 1) * day),
            version=VERSION,
            partition=partition,
            core_partitions=4,
            location=(str(watched.root / "wide" / f"c{chunk}-p{partition}.parquet"),),
            row_count=10,
        )
        for chunk in range(250)
        for partition in range(4)
    ]
    watched.server.announce(segments)
    watched.server.report("wide", {p: (LWM, LWM) for p in range(4)})
    assert watched.broker.follower.wait_for(
        lambda f: "wide" in f.tables() and len(f.view("wide").visible_segments) == 1000, 30
    )
    sign_in(browser, watched, ADMIN)
    browser.get(url(watched, "/tables/wide"))
    took_ms = browser.execute_script(
        "const t = performance.getEntriesByType('navigation')[0];"
        "return t.loadEventEnd - t.startTime;"
    )
    groups = browser.find_elements(By.CSS_SELECTOR, "#timeline rect.group")
    total = sum(int(group.get_attribute("data-segments")) for group in groups)
    assert total == 1000
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline rect.chunk")) == 250
    print(f"\nconsole timeline page of 1000 segments (250 chunks): {took_ms:.0f} ms in Chromium")
    zoomed = url(watched, "/tables/wide?start=1970-01-01T00:00:00Z&end=1970-01-03T00:00:00Z")
    browser.get(zoomed)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline rect.chunk")) == 2
    browser.save_screenshot(str(tmp_path / "timeline.png"))
