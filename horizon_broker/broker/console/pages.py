"""The console's pages: each asks the inspection service or the query box as the signed-in
principal and renders a template; errors are rendered with the HTTP status of their type
(:func:`horizon_broker.broker.api.status.http_status_of`).

Every request passes :class:`horizon_broker.broker.console.guard.ConsoleGuard` first (Host, Origin, CSRF
token); every page carries its CSRF token for its forms. Sign-ins and bearer tokens that fail
count against the client's address (:mod:`horizon_broker.broker.console.throttle`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from horizon_broker._core.errors import HorizonError, InvalidArgument, Unauthenticated
from horizon_broker._core.hlc import hlc_physical_ms
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker.api.inspection import Inspection
from horizon_broker.broker.api.offload import Offload
from horizon_broker.broker.api.status import http_status_of
from horizon_broker.broker.api.timeline_picture import timeline_svg
from horizon_broker.broker.console import queries
from horizon_broker.broker.console.guard import CSRF_COOKIE, ConsoleGuard, CsrfTokens, HostPolicy
from horizon_broker.broker.console.live import LiveTables
from horizon_broker.broker.console.sessions import COOKIE, Sessions
from horizon_broker.broker.console.stream_lags import StreamLags
from horizon_broker.broker.console.throttle import SignInLimit
from horizon_broker.broker.grants import Principal, check_inspect
from horizon_broker.broker.operations_config import ConsoleConfig
from horizon_broker.broker.subscribe import OpenSubscriptions
from horizon_broker.timeline.interval import format_instant, parse_instant

HERE = Path(__file__).parent


class Console:
    """The pages of one broker's console."""

    def __init__(
        self,
        inspection: Inspection,
        engine: Any,
        sessions: Sessions,
        config: ConsoleConfig,
        subscriptions: OpenSubscriptions | None = None,
        offload: Offload | None = None,
        stream_lags: StreamLags | None = None,
    ) -> None:
        self.inspection = inspection
        self.stream_lags = stream_lags
        self.engine = engine
        self.sessions = sessions
        self.config = config
        self.live_tables = LiveTables(engine, subscriptions, offload, config.max_rows)
        self.csrf = CsrfTokens()
        self.sign_ins = SignInLimit(config.login_failures_per_minute)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.globals.update(
            instant=format_instant, hlc_time=_hlc_time, refresh_s=config.refresh_s
        )

    def app(self, hosts: HostPolicy) -> Starlette:
        """The pages behind the guard, answering to ``hosts``."""
        return Starlette(
            routes=[
                Route("/", self.tables),
                Route("/login", self.login, methods=["GET", "POST"]),
                Route("/logout", self.logout, methods=["POST"]),
                Route("/tables/{table}", self.table),
                Route("/tables/{table}/why", self.why),
                Route("/ingestion", self.ingestion),
                Route("/locks", self.locks),
                Route("/queries", self.queries),
                Route("/query", self.query, methods=["GET", "POST"]),
                Route("/live", self.live, methods=["GET", "POST"]),
                Route("/live/events", self.live_events),
                Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
            ],
            exception_handlers={HorizonError: self._error},
            middleware=[Middleware(ConsoleGuard, hosts=hosts, tokens=self.csrf)],
        )

    # -- signing in ----------------------------------------------------------------------------

    def _who(self, request: Request) -> Principal:
        """The request's principal; a bearer token that names no one counts as a failed
        sign-in of the client's address."""
        if "authorization" not in request.headers:
            return self.sessions.principal(request.cookies, request.headers)
        address = _client_address(request)
        self.sign_ins.check(address)
        try:
            return self.sessions.principal(request.cookies, request.headers)
        except Unauthenticated:
            self.sign_ins.failed(address)
            raise

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return self._page(request, "login.html", None, error="")
        address = _client_address(request)
        self.sign_ins.check(address)  # before the token is compared: no guess is answered
        form = await request.form()
        try:
            session, _ = self.sessions.sign_in(str(form.get("token", "")))
        except Unauthenticated as error:
            self.sign_ins.failed(address)
            return self._page(request, "login.html", None, error=str(error), status_code=401)
        self.sign_ins.succeeded(address)
        response = RedirectResponse("/", status_code=303)
        _set_cookie(response, request, COOKIE, session, int(self.config.session_ttl_s))
        return response

    async def logout(self, request: Request) -> Response:
        self.sessions.sign_out(request.cookies.get(COOKIE, ""))
        response = RedirectResponse("/login", status_code=303)
        _set_cookie(response, request, COOKIE, "", 0)
        return response

    # -- pages ---------------------------------------------------------------------------------

    def tables(self, request: Request) -> Response:
        """Every table the caller may read, with its LWM; lag and laggard to inspectors."""
        principal = self._who(request)
        rows = []
        for info in self.inspection.tables(principal).tables:
            marks = None
            if principal.inspect:
                marks = self.inspection.watermarks(
                    principal, pb.GetWatermarksRequest(table=info.name)
                )
            rows.append((info, marks))
        return self._page(request, "tables.html", principal, rows=rows, now_ms=_now_ms())

    def table(self, request: Request) -> Response:
        """A table's timeline picture (zoomable over an interval), watermarks, pins and locks."""
        principal = self._who(request)
        name = request.path_params["table"]
        timeline_request = pb.GetTimelineRequest(
            table=name, include_overshadowed=request.query_params.get("overshadowed", "1") == "1"
        )
        start, end = request.query_params.get("start", ""), request.query_params.get("end", "")
        if start or end:
            timeline_request.interval.CopyFrom(_interval(start, end))
        timeline = self.inspection.timeline(principal, timeline_request)
        marks = self.inspection.watermarks(principal, pb.GetWatermarksRequest(table=name))
        return self._page(
            request,
            "table.html",
            principal,
            table=timeline.table,
            timeline=timeline,
            svg=timeline_svg(timeline),
            marks=marks,
            start=start,
            end=end,
            now_ms=_now_ms(),
        )

    async def why(self, request: Request) -> Response:
        """Why a key's row is (not) in the table at a snapshot (the form asks for the key)."""
        principal = self._who(request)
        name = request.path_params["table"]
        key = request.query_params.get("key", "")
        at = request.query_params.get("at", "")
        answer = None
        if key:
            answer = await run_in_threadpool(
                self.inspection.explain_key,
                principal,
                pb.ExplainKeyRequest(table=name, key=key, at=at),
            )
        return self._page(
            request, "why.html", principal, table=name, key=key, at=at, answer=answer,
            reasons={value: name.removeprefix("KEY_VERSION_REASON_").lower().replace("_", " ")
                     for name, value in pb.KeyVersionReason.items()},
        )  # fmt: skip

    def ingestion(self, request: Request) -> Response:
        """Each Redis-stream table's lag behind its stream's head, per server (inspectors)."""
        principal = self._who(request)
        check_inspect(principal)
        names = [info.name for info in self.inspection.tables(principal).tables]
        lags = self.stream_lags.of(names) if self.stream_lags is not None else []
        return self._page(request, "ingestion.html", principal, lags=lags, now_ms=_now_ms())

    def locks(self, request: Request) -> Response:
        principal = self._who(request)
        held = self.inspection.locks_held(principal, pb.ListLocksRequest())
        pins = []
        for info in self.inspection.tables(principal).tables:
            marks = self.inspection.watermarks(principal, pb.GetWatermarksRequest(table=info.name))
            pins.extend(pin for pin in marks.pins if pin.pin_id not in {p.pin_id for p in pins})
        return self._page(request, "locks.html", principal, locks=held.locks, pins=pins)

    def queries(self, request: Request) -> Response:
        principal = self._who(request)
        listed = self.inspection.queries(principal, pb.ListQueriesRequest(limit=100))
        return self._page(request, "queries.html", principal, queries=listed.queries)

    async def query(self, request: Request) -> Response:
        principal = self._who(request)
        if request.method == "GET":
            return self._page(request, "query.html", principal, sql="", answer=None, plan=None)
        form = await request.form()
        sql = str(form.get("sql", "")).strip()
        if not sql:
            raise InvalidArgument("write a query first")
        answer = plan = None
        if form.get("action") == "explain":
            plan = await run_in_threadpool(queries.explain, self.engine, principal, sql)
        else:
            answer = await run_in_threadpool(
                queries.run_query, self.engine, principal, sql, max_rows=self.config.max_rows
            )
        return self._page(request, "query.html", principal, sql=sql, answer=answer, plan=plan)

    async def live(self, request: Request) -> Response:
        """The live table: a form for the SQL, then its answer kept up to date by the script
        (:mod:`horizon_broker.broker.console.live`)."""
        principal = self._who(request)
        sql = ""
        if request.method == "POST":
            sql = str((await request.form()).get("sql", "")).strip()
            if not sql:
                raise InvalidArgument("write a query first")
        return self._page(request, "live.html", principal, sql=sql)

    def live_events(self, request: Request) -> Response:
        """The live table's server-sent events: one subscription as the signed-in principal."""
        return self.live_tables.events(request, self._who(request), self.csrf)

    # -- rendering -----------------------------------------------------------------------------

    def _page(
        self,
        request: Request,
        template: str,
        principal: Principal | None,
        *,
        status_code: int = 200,
        **context: Any,
    ) -> Response:
        binding = self.csrf.binding(request.cookies) or self.csrf.new_binding()
        context.update(
            principal=principal,
            signed_in=self.sessions.auth.enabled,
            csrf_token=self.csrf.token_for(binding),
        )
        response = self.templates.TemplateResponse(
            request, template, context, status_code=status_code
        )
        if not self.csrf.binding(request.cookies):  # the double-submit cookie, until a session
            _set_cookie(response, request, CSRF_COOKIE, binding, None)
        return response

    async def _error(self, request: Request, error: Exception) -> Response:
        if isinstance(error, Unauthenticated) and "authorization" not in request.headers:
            return RedirectResponse("/login", status_code=303)
        status, code, message = http_status_of(error)
        response = self._page(
            request, "error.html", None, status_code=status, code=code, message=message
        )
        retry_after_s = getattr(error, "retry_after_s", None)
        if retry_after_s is not None:
            response.headers["Retry-After"] = str(retry_after_s)
        return response


def _set_cookie(
    response: Response, request: Request, name: str, value: str, max_age: int | None
) -> None:
    """A console cookie: HttpOnly, SameSite=Strict, and Secure when served over TLS."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def _client_address(request: Request) -> str:
    return request.client.host if request.client else ""


def _interval(start: str, end: str) -> pb.Interval:
    """The zoom interval of a timeline page (either end may be open)."""
    try:
        start_ms = parse_instant(start) if start else 0
        end_ms = parse_instant(end) if end else 2**62
    except ValueError as error:
        raise InvalidArgument(f"cannot read the interval: {error}") from None
    if end_ms <= start_ms:
        raise InvalidArgument("the interval's end must be after its start")
    return pb.Interval(start_ms=start_ms, end_ms=end_ms)


def _hlc_time(value: int | None) -> str:
    """An HLC as the wall-clock instant of its physical part."""
    return "-" if value is None else format_instant(hlc_physical_ms(value))


def _now_ms() -> int:
    return int(time.time() * 1000)
