"""The console's guards in a real headless Chromium against a real broker: the operator still
signs in, runs a query and signs out, while a page from another origin (a second small HTTP
server on another loopback port) that auto-submits a form to ``POST /query`` is refused and runs
nothing, with tokens (the SameSite cookie goes along: the other port is the same site) and on
an anonymous loopback console; and a name rebound to 127.0.0.1 is not served (DNS rebinding,
played by Chromium's host resolver rules)."""

from __future__ import annotations

import html
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import WebDriverWait

from horizon_broker.broker.config import config_from_mapping
from horizon_broker.broker.console.server import ConsoleServer
from tests.observe.browser import start_chromium
from tests.observe.conftest import ADMIN, LWM, READER, WatchedBroker
from tests.observe.test_console_browser import sign_in, texts

FORGED_SQL = "SELECT id AS forged_by_another_site FROM accounts"
REBOUND = "rebound.test"


@contextmanager
def foreign_site(pages: dict[str, str]) -> Iterator[str]:
    """Another origin: a plain HTTP server on another loopback port serving ``pages``."""

    class Pages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the http.server hook
            body = pages.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def auto_submitting_form(console_url: str) -> str:
    """A page that, once opened, posts a query to the console as the visitor's browser."""
    action = html.escape(console_url.rstrip("/") + "/query")
    return (
        f'<form id="attack" method="post" action="{action}">'
        f'<input name="sql" value="{html.escape(FORGED_SQL)}">'
        '<input name="action" value="run"></form>'
        '<script>document.getElementById("attack").submit();</script>'
    )


def run_query(browser, console_url: str, sql: str) -> None:  # type: ignore[no-untyped-def]
    browser.get(console_url.rstrip("/") + "/query")
    browser.find_element(By.ID, "sql").send_keys(sql)
    browser.find_element(By.ID, "run").click()
    WebDriverWait(browser, 60).until(ready.presence_of_element_located((By.ID, "rows")))


def visit_attack(browser, console_url: str) -> str:  # type: ignore[no-untyped-def]
    """Open the other origin's page; the text the console answered its forged POST with."""
    with foreign_site({"/attack.html": auto_submitting_form(console_url)}) as site:
        browser.get(site + "/attack.html")
        WebDriverWait(browser, 30).until(lambda b: b.current_url.startswith(console_url))
        return browser.find_element(By.TAG_NAME, "body").text


def forged_queries(watched: WatchedBroker) -> list[str]:
    with watched.client(ADMIN) as client:
        return [q.sql for q in client.queries(limit=1000) if "forged" in q.sql]


def test_operator_queries_and_a_page_of_another_origin_cannot_post_a_query(
    browser, watched: WatchedBroker
):
    assert watched.broker.console is not None
    console_url = watched.broker.console.url
    sign_in(browser, watched, READER)
    run_query(browser, console_url, "SELECT id FROM accounts WHERE id <= 3 ORDER BY id")
    assert texts(browser, "#rows tbody tr td:first-child") == ["1", "2", "3"]
    assert browser.find_element(By.ID, "snapshot").text == str(LWM)

    refused = visit_attack(browser, console_url)
    assert forged_queries(watched) == []
    assert "must come from its own pages" in refused

    browser.get(console_url)  # still signed in: the refusal changed nothing
    assert browser.find_element(By.ID, "identity").text == "reader"
    browser.find_element(By.CSS_SELECTOR, "header form button").click()  # sign out (a POST)
    WebDriverWait(browser, 30).until(lambda b: b.current_url.endswith("/login"))
    browser.get(console_url)
    assert browser.current_url.endswith("/login")


@pytest.fixture
def anonymous_console(watched: WatchedBroker) -> Iterator[ConsoleServer]:
    """The laptop default: a console on loopback with no tokens, on the watched broker."""
    config = config_from_mapping(
        {
            "server": {"listen": "127.0.0.1:0"},
            "console": {"listen": "127.0.0.1:0", "refresh_s": 3600.0},
        }
    )
    broker = watched.broker
    served = ConsoleServer(config, broker.inspection, broker.engine).start()  # type: ignore[arg-type]
    yield served
    served.stop()


def test_an_anonymous_loopback_console_refuses_a_post_from_another_origin(
    browser, watched: WatchedBroker, anonymous_console: ConsoleServer
):
    browser.delete_all_cookies()
    run_query(browser, anonymous_console.url, "SELECT id FROM accounts WHERE id <= 2 ORDER BY id")
    assert texts(browser, "#rows tbody tr td:first-child") == ["1", "2"]

    refused = visit_attack(browser, anonymous_console.url)
    assert forged_queries(watched) == []
    assert "must come from its own pages" in refused


def test_a_name_rebound_to_loopback_is_not_served(anonymous_console: ConsoleServer):
    port = anonymous_console.port
    rebinding = start_chromium(f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1")
    try:
        rebinding.get(f"http://{REBOUND}:{port}/query")
        body = rebinding.find_element(By.TAG_NAME, "body").text
        assert "does not answer to the host" in body
        assert not rebinding.find_elements(By.ID, "sql")
        rebinding.get(f"http://127.0.0.1:{port}/query")  # the same browser, the console's name
        assert rebinding.find_elements(By.ID, "sql")
    finally:
        rebinding.quit()
