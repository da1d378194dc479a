"""What the console trusts a browser with, through a real console (uvicorn on loopback) and
plain HTTP: the Host allow-list (DNS rebinding), the Origin and CSRF token of every POST, the
session cookie's attributes (Secure under TLS) and the limit on failed sign-ins.

These consoles have no inspection service nor engine: every request here is decided before a
page would need them (a POST /query that passes the guard with no SQL is 400, "write a query
first"; with tokens and no session, a redirect to the sign-in page)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from horizon_broker._core.errors import InvalidArgument
from horizon_broker.broker.config import config_from_mapping
from horizon_broker.broker.console.guard import CsrfTokens, HostPolicy
from horizon_broker.broker.console.server import ConsoleServer
from horizon_broker.broker.console.throttle import SignInLimit, TooManySignIns
from tests.certificates import mutual_tls_certificates
from tests.observe.console_http import ConsoleHttp

TOKEN = "admin-secret-token-9"
TOKENS = [{"name": "admin", "token": TOKEN, "inspect": True}]
TEMPLATES = (
    Path(__file__).resolve().parents[2] / "horizon_broker" / "broker" / "console" / "templates"
)


@contextmanager
def console(
    console: dict[str, Any] | None = None,
    *,
    tokens: list[dict[str, Any]] | None = None,
    server: dict[str, Any] | None = None,
) -> Iterator[ConsoleServer]:
    config = config_from_mapping(
        {
            "server": {"listen": "127.0.0.1:0", **(server or {})},
            "console": {"listen": "127.0.0.1:0", **(console or {})},
            "tokens": tokens or [],
        }
    )
    served = ConsoleServer(config, None, None).start()  # type: ignore[arg-type]
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="module")
def anonymous() -> Iterator[ConsoleServer]:
    """A console with no tokens (everyone is the anonymous principal), as on a laptop."""
    with console({"allowed_hosts": "console.example.org, other.example.org:8443"}) as served:
        yield served


def passed_the_guard(answer: Any) -> bool:
    return answer.status == 400 and "write a query first" in answer.text


# -- Host allow-list -------------------------------------------------------------------------


def test_a_host_name_the_console_does_not_answer_to_is_refused_against_dns_rebinding(anonymous):
    http = ConsoleHttp(anonymous.url)
    port = anonymous.port
    for host in (f"attacker.example:{port}", "attacker.example", f"localhost:{port + 1}"):
        refused = http.request("GET", "/query", headers={"Host": host})
        assert refused.status == 421, host
        assert "does not answer to the host" in refused.text
        assert "allowed_hosts" in refused.text
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "localhost"):
        assert http.request("GET", "/query", headers={"Host": host}).status == 200, host
    # Configured names: without a port any port (a proxy's), with a port only that one.
    for host in ("console.example.org", "console.example.org:443", "other.example.org:8443"):
        assert http.request("GET", "/query", headers={"Host": host}).status == 200, host
    assert http.request("GET", "/query", headers={"Host": "other.example.org"}).status == 421
    # A rebound POST carries the page's own Origin, so the Host check alone must refuse it.
    rebound = http.post(
        "/query",
        {"sql": "SELECT 1"},
        headers={"Host": f"attacker.example:{port}", "Origin": f"http://attacker.example:{port}"},
    )
    assert rebound.status == 421


def test_the_host_policy_defaults_to_the_bound_address_and_loopback_names_on_its_port():
    policy = HostPolicy.of("10.1.2.3", ["console.example.org"])
    assert policy.check("10.1.2.3:50053", 50053) is None
    assert policy.check("LOCALHOST:50053", 50053) is None
    assert policy.check("10.1.2.3:50054", 50053) is not None
    assert policy.check("", 50053) is not None
    assert HostPolicy.of("0.0.0.0", []).check("0.0.0.0:50053", 50053) is not None


# -- Origin ----------------------------------------------------------------------------------


def test_a_post_from_another_origin_is_refused_even_with_a_valid_token(anonymous):
    http = ConsoleHttp(anonymous.url)
    token = http.page_token("/query")
    form = {"sql": "", "csrf_token": token}
    other = f"http://127.0.0.1:{anonymous.port + 1}"
    for headers in (
        {"Origin": other},
        {"Origin": "null"},
        {"Origin": f"https://{http.host}"},
        {"Origin": None, "Referer": other + "/attack.html"},
        {"Origin": None},
    ):
        refused = http.post("/query", form, headers=headers)
        assert refused.status == 403, headers
        assert "must come from its own pages" in refused.text
    assert passed_the_guard(http.post("/query", form))
    own_page = {"Origin": None, "Referer": http.origin + "/query"}
    assert passed_the_guard(http.post("/query", form, headers=own_page))


# -- CSRF token ------------------------------------------------------------------------------


def test_a_post_without_its_pages_csrf_token_is_refused(anonymous):
    http = ConsoleHttp(anonymous.url)
    token = http.page_token("/query")
    missing = http.post("/query", {"sql": ""})
    assert missing.status == 403 and "no CSRF token" in missing.text
    wrong = http.post("/query", {"sql": "", "csrf_token": token[:-2] + "xx"})
    assert wrong.status == 403 and "does not match" in wrong.text
    stranger = ConsoleHttp(anonymous.url)  # another browser: its own cookie, not this token
    stranger.page_token("/query")
    other = stranger.post("/query", {"sql": "", "csrf_token": token})
    assert other.status == 403 and "does not match" in other.text
    no_cookie = ConsoleHttp(anonymous.url).post("/query", {"sql": "", "csrf_token": token})
    assert no_cookie.status == 403 and "cookie is missing" in no_cookie.text
    assert passed_the_guard(http.post("/query", {"sql": "", "csrf_token": token}))
    assert passed_the_guard(http.post("/query", {"sql": ""}, headers={"X-CSRF-Token": token}))


def test_every_post_form_the_templates_render_carries_the_csrf_token():
    for template in TEMPLATES.glob("*.html"):
        text = template.read_text()
        forms = text.split("<form")[1:]
        for form in forms:
            if 'method="post"' in form.split(">", 1)[0]:
                body = form.split("</form>", 1)[0]
                assert 'name="csrf_token" value="{{ csrf_token }}"' in body, template.name


def test_a_tokens_console_binds_the_csrf_token_to_the_session_and_lets_bearer_scripts_post():
    with console(tokens=TOKENS) as served:
        browser = ConsoleHttp(served.url)
        before = browser.page_token("/login")
        signed_in = browser.post("/login", {"token": TOKEN, "csrf_token": before})
        assert signed_in.status == 303
        browser.cookies["horizon_session"] = signed_in.cookie_value("horizon_session")
        # The token of the sign-in page was bound to the CSRF cookie, not to the session.
        stale = browser.post("/query", {"sql": "", "csrf_token": before})
        assert stale.status == 403
        after = browser.page_token("/query")
        assert after != before
        assert passed_the_guard(browser.post("/query", {"sql": "", "csrf_token": after}))
        # A script with a bearer header is no cross-origin form: neither Origin nor token.
        script = ConsoleHttp(served.url).request(
            "POST", "/query", form={"sql": ""}, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert passed_the_guard(script)


def test_csrf_tokens_are_bound_to_their_cookie_and_to_the_process_key():
    tokens = CsrfTokens(b"k" * 32)
    session = {"horizon_session": "abc", "horizon_csrf": "def"}
    assert tokens.check(session, tokens.token_for("abc")) is None
    assert tokens.check(session, tokens.token_for("def")) is not None
    assert tokens.check({"horizon_csrf": "def"}, tokens.token_for("def")) is None
    assert CsrfTokens(b"j" * 32).check(session, tokens.token_for("abc")) is not None


# -- cookies ---------------------------------------------------------------------------------


def test_the_session_cookie_is_httponly_and_strict_and_secure_under_tls(tmp_path):
    certs = mutual_tls_certificates(tmp_path)
    tls = {"tls_cert": str(certs["server"]), "tls_key": str(certs["server_key"])}
    context = ssl.create_default_context(cafile=str(certs["ca"]))
    with console(tokens=TOKENS, server=tls) as served:
        assert served.url.startswith("https://")
        browser = ConsoleHttp(served.url, tls=context)
        token = browser.page_token("/login")
        signed_in = browser.post("/login", {"token": TOKEN, "csrf_token": token})
        assert signed_in.status == 303
        for cookie in (signed_in.cookies["horizon_session"], browser_cookie(served, context)):
            attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
            assert {"httponly", "samesite=strict", "secure"} <= attributes, cookie
    with console(tokens=TOKENS) as plain:
        browser = ConsoleHttp(plain.url)
        token = browser.page_token("/login")
        cookie = browser.post("/login", {"token": TOKEN, "csrf_token": token})
        attributes = {p.strip().lower() for p in cookie.cookies["horizon_session"].split(";")[1:]}
        assert {"httponly", "samesite=strict"} <= attributes and "secure" not in attributes


def browser_cookie(served: ConsoleServer, context: ssl.SSLContext) -> str:
    """The CSRF cookie a first visit gets."""
    return ConsoleHttp(served.url, tls=context).request("GET", "/login").cookies["horizon_csrf"]


# -- failed sign-ins -------------------------------------------------------------------------


def test_failed_sign_ins_are_limited_per_client_address_then_429_with_retry_after():
    with console({"login_failures_per_minute": 3}, tokens=TOKENS) as served:
        guesser = ConsoleHttp(served.url)
        token = guesser.page_token("/login")
        for attempt in range(3):
            wrong = guesser.post("/login", {"token": f"guess-{attempt}", "csrf_token": token})
            assert wrong.status == 401
        for headers in ({}, {"X-Forwarded-For": "10.9.8.7"}):
            refused = guesser.post("/login", {"token": TOKEN, "csrf_token": token}, headers)
            assert refused.status == 429, headers
            assert 1 <= int(refused.headers["Retry-After"]) <= 60
            assert "login_failures_per_minute" in refused.text
        bearer = guesser.request("GET", "/", headers={"Authorization": f"Bearer {TOKEN}"})
        assert bearer.status == 429  # the bearer header is no way around it
        # Another client address is not held back.
        neighbour = ConsoleHttp(served.url, source="127.0.0.2")
        token = neighbour.page_token("/login")
        assert neighbour.post("/login", {"token": TOKEN, "csrf_token": token}).status == 303


def test_unknown_bearer_tokens_count_as_failed_sign_ins():
    with console({"login_failures_per_minute": 2}, tokens=TOKENS) as served:
        guesser = ConsoleHttp(served.url)
        for attempt in range(2):
            answer = guesser.request("GET", "/", headers={"Authorization": f"Bearer g{attempt}"})
            assert answer.status == 401
        token = guesser.page_token("/login")
        assert guesser.post("/login", {"token": TOKEN, "csrf_token": token}).status == 429


def test_the_sign_in_limit_slides_forgets_on_success_and_bounds_its_memory():
    now = [1000.0]
    limit = SignInLimit(2, max_addresses=3, clock=lambda: now[0])
    limit.failed("10.0.0.1")
    now[0] += 30
    limit.failed("10.0.0.1")
    with pytest.raises(TooManySignIns) as held:
        limit.check("10.0.0.1")
    assert held.value.retry_after_s == 30
    now[0] += 30  # the first failure is a minute old
    limit.check("10.0.0.1")
    limit.failed("10.0.0.1")
    with pytest.raises(TooManySignIns):
        limit.check("10.0.0.1")
    limit.succeeded("10.0.0.1")
    limit.check("10.0.0.1")
    # An IPv6 client is counted by its /64.
    limit.failed("2001:db8::1")
    limit.failed("2001:db8::ffff")
    with pytest.raises(TooManySignIns):
        limit.check("2001:db8::2")
    for address in range(100):
        limit.failed(f"10.1.0.{address}")
    assert len(limit) == 3


def test_console_guard_settings_are_validated():
    base = {"server": {"listen": "127.0.0.1:0"}}
    with pytest.raises(InvalidArgument, match="login_failures_per_minute"):
        config_from_mapping({**base, "console": {"login_failures_per_minute": 0}})
    with pytest.raises(InvalidArgument, match="allowed_hosts"):
        config_from_mapping({**base, "console": {"allowed_hosts": "http://evil/"}})
    config = config_from_mapping(
        {**base, "console": {}}, env={"HORIZON_CONSOLE_ALLOWED_HOSTS": "a.example, b:1"}
    )
    assert config.console.allowed_host_names == ("a.example", "b:1")
