"""Plain HTTP against a real console (uvicorn on loopback): requests with the headers a test
chooses (Host, Origin, cookies), and the CSRF token and cookie a page hands out."""

from __future__ import annotations

import http.client
import re
import ssl
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

TOKEN_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    text: str

    @property
    def cookies(self) -> dict[str, str]:
        """Each Set-Cookie's name -> its whole header (value and attributes)."""
        found = {}
        for header in self.headers.get_all("set-cookie") or []:
            found[header.split("=", 1)[0]] = header
        return found

    def cookie_value(self, name: str) -> str:
        return self.cookies[name].split("=", 1)[1].split(";", 1)[0]


@dataclass
class ConsoleHttp:
    """One console's address; each call opens its own connection."""

    url: str
    source: str | None = None
    """A loopback address to connect from (127.0.0.2 is another client)."""
    tls: ssl.SSLContext | None = None
    cookies: dict[str, str] = field(default_factory=dict)

    @property
    def host(self) -> str:
        """The console's own Host header value."""
        return urlsplit(self.url).netloc

    @property
    def origin(self) -> str:
        return self.url.rstrip("/")

    def request(
        self,
        method: str,
        path: str,
        *,
        form: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        parts = urlsplit(self.url)
        source = (self.source, 0) if self.source else None
        if self.tls is not None:
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                parts.hostname, parts.port, timeout=30, source_address=source, context=self.tls
            )
        else:
            connection = http.client.HTTPConnection(
                parts.hostname, parts.port, timeout=30, source_address=source
            )
        sent = {"Host": self.host, **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        body = None
        if form is not None:
            body = urlencode(form)
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            connection.request(method, path, body=body, headers=sent)
            response = connection.getresponse()
            return Answer(response.status, response.headers, response.read().decode())
        finally:
            connection.close()

    def page_token(self, path: str = "/login") -> str:
        """GET a page as a browser would, keep the cookies it sets, return its forms' token."""
        answer = self.request("GET", path)
        assert answer.status == 200, answer.text
        for name in answer.cookies:
            self.cookies[name] = answer.cookie_value(name)
        found = TOKEN_FIELD.search(answer.text)
        assert found is not None, "the page has no CSRF token"
        return found.group(1)

    def post(
        self, path: str, form: dict[str, str], headers: dict[str, str | None] | None = None
    ) -> Answer:
        """A POST as the console's own page sends it (its Origin), unless ``headers`` say else
        (None drops a header)."""
        sent = {"Origin": self.origin, **(headers or {})}
        return self.request(
            "POST", path, form=form, headers={k: v for k, v in sent.items() if v is not None}
        )
