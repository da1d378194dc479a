"""The kinds of ``python -m bench.abuse`` that issue 45 added: what one caller could take from
another (the broker's secrets, another identity's query, its Flight SQL room) and composite growth.

* Literal round trips: ``${...}`` in a string literal comes back as written; a fake secret the
  served broker holds in its environment appears in no answer, log line or metric.
* A hijacked query id: another identity sending the same id and cancelling leaves the first's
  query running to its end.
* Composite growth: sizes that multiply through nesting are refused before Spark runs.
* Flight SQL floods: prepared statements and results waiting for DoGet stop at the caller's quota
  while another identity's Flight query is answered.
"""

from __future__ import annotations

import os
import re
import secrets
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

OTHER_TOKEN = "abuse-other-token"
SECRET_VARIABLE = "HORIZON_ABUSE_FAKE_SECRET"
FLIGHT_QUOTAS = "max_statements_per_identity = 20\nmax_waiting_results_per_identity = 4\n"
# A few seconds of hashing on 2 cores, whatever the size of ``big``.
HIJACK_SQL = "SELECT count(DISTINCT sha2(repeat(owner, {n}), 256)) AS n FROM big WHERE id < 200000"

Record = Callable[[str, Callable[[], Any], tuple[str, ...]], None]

LITERALS: list[tuple[str, str, str]] = [
    ("literal ${env:HOME}", "SELECT '${env:HOME}' AS t", "${env:HOME}"),
    ("literal ${env:<the fake secret's variable>}",
     f"SELECT '${{env:{SECRET_VARIABLE}}}' AS t", f"${{env:{SECRET_VARIABLE}}}"),
    ("literal ${system:java.home}", "SELECT '${system:java.home}' AS t", "${system:java.home}"),
    ("literal ${spark.app.name}", "SELECT '${spark.app.name}' AS t", "${spark.app.name}"),
]  # fmt: skip

COMPOSITE: list[tuple[str, str, tuple[str, ...]]] = [
    ("transform(sequence(1, 90000), x -> repeat('q', 90000))",
     "SELECT size(transform(sequence(1, 90000), x -> repeat('q', 90000))) AS n",
     ("RESOURCE_EXHAUSTED",)),
    ("aggregate doubling a string 40 times",
     "SELECT length(aggregate(sequence(1, 40), 'ab', (acc, x) -> concat(acc, acc))) AS n",
     ("RESOURCE_EXHAUSTED",)),
    ("format_string('%2000000000d', 1)", "SELECT format_string('%2000000000d', 1) AS s",
     ("RESOURCE_EXHAUSTED",)),
    ("GROUP BY CUBE of 18 expressions",
     "SELECT count(*) AS n FROM accounts GROUP BY CUBE("
     + ", ".join(f"balance + {i}" for i in range(18)) + ")",
     ("RESOURCE_EXHAUSTED",)),
    ("size(flatten(array_repeat(array_repeat('z', 60000), 60000)))",
     "SELECT size(flatten(array_repeat(array_repeat('z', 60000), 60000))) AS n",
     ("RESOURCE_EXHAUSTED",)),
    ("element_at(array(1, 2), 5) on a table",
     "SELECT element_at(array(1, 2), 5) AS e FROM accounts", ("INVALID_ARGUMENT",)),
]  # fmt: skip


@dataclass
class Exposure:
    """Everything a caller was shown (answers, error messages), searched for the fake secret."""

    secret: str = field(default_factory=lambda: "hz-fake-secret-" + secrets.token_hex(12))
    shown: list[str] = field(default_factory=list)

    def plant(self) -> None:
        """The served broker inherits this process's environment."""
        os.environ[SECRET_VARIABLE] = self.secret

    def found_in(self, broker_log: Path, metrics_url: str) -> list[str]:
        """Where the secret appears: answers, the broker's log, a metrics scrape."""
        places = [f"answer: {text[:120]}" for text in self.shown if self.secret in text]
        log = broker_log.read_text(errors="replace")
        places += [f"log: {line[:200]}" for line in log.splitlines() if self.secret in line]
        if metrics_url and self.secret in scrape(metrics_url):
            places.append("metrics scrape")
        return places


def scrape(metrics_url: str) -> str:
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        return response.read().decode(errors="replace")


def engine_restarts(metrics_url: str) -> int | None:
    """``horizon_spark_session_restarts`` from a scrape (None: not exposed)."""
    found = re.search(r"^horizon_spark_session_restarts(?:_total)?\s+([0-9.e+]+)$",
                      scrape(metrics_url), re.MULTILINE)  # fmt: skip
    return int(float(found.group(1))) if found else None


def listeners(broker_log: Path, timeout: float = 30.0) -> tuple[str, str]:
    """The Flight SQL target and the metrics URL the served broker printed at start."""
    deadline = time.monotonic() + timeout
    while True:
        text = broker_log.read_text(errors="replace")
        flight = re.search(r"Arrow Flight SQL on grpc://(\S+)", text)
        metrics = re.search(r"metrics on (\S+)", text)
        if (flight and metrics) or time.monotonic() > deadline:
            return (flight.group(1) if flight else "", metrics.group(1) if metrics else "")
        time.sleep(0.2)


def tokens_section(token: str) -> str:
    return (
        f'[[tokens]]\nname = "abuse"\ntoken = "{token}"\ntables = ["*"]\ninspect = true\n\n'
        f'[[tokens]]\nname = "other"\ntoken = "{OTHER_TOKEN}"\ntables = ["*"]\ninspect = true\n'
    )


def limit_flight(config: Path) -> None:
    """Small Flight SQL quotas in the served broker's ``[flight]`` section, so floods reach them."""
    config.write_text(config.read_text().replace("[flight]\n", "[flight]\n" + FLIGHT_QUOTAS, 1))


def _first_value(table: Any, exposure: Exposure) -> Any:
    values = [value for column in table.to_pydict().values() for value in column]
    exposure.shown.append(repr(values))
    return values[0] if len(values) == 1 else values


def identity_run(
    client: Any, target: str, flight_target: str, token: str, exposure: Exposure, record: Record
) -> None:
    """The issue 45 kinds against the broker at ``target``; ``client`` is identity A's."""
    literals = [*LITERALS, ("literal 'x\\${nope}' then another literal",
                            "SELECT 'x\\${nope}' AS a, 'after' AS b", ["x${nope}", "after"])]  # fmt: skip
    for kind, sql, expected in literals:

        def round_trip(sql: str = sql, expected: Any = expected) -> None:
            answered = _first_value(client.query(sql, cache=False), exposure)
            if answered != expected:
                raise RuntimeError(f"{sql} answered {answered!r}, not {expected!r}")

        record(kind, round_trip, ("OK",))
    for kind, sql, expected_codes in COMPOSITE:
        record(kind, lambda sql=sql: client.query(sql, cache=False), expected_codes)
    record("a hijacked query id (B reuses A's running id and cancels)",
           lambda: hijacked_query_id(client, target), ("OK",))  # fmt: skip
    record(
        "Flight: CreatePreparedStatement past the per-identity quota",
        lambda: prepared_statement_flood(flight_target, token),
        ("RESOURCE_EXHAUSTED",),
    )
    record("Flight: unredeemed GetFlightInfo past the per-identity quota",
           lambda: unredeemed_results(flight_target, token), ("RESOURCE_EXHAUSTED",))  # fmt: skip


def hijacked_query_id(client: Any, target: str) -> None:
    """A runs a slow query labelled ``x``; B sends ``x`` and cancels; A's ends normally, and A's
    own duplicate ``x`` is ALREADY_EXISTS. Raises naming what broke."""
    from horizon_broker.client import connect

    label = "abuse-" + secrets.token_hex(4)
    a_call = client.start_query(
        HIJACK_SQL.format(n=30_000), query_id=label, cache=False, timeout=60
    )
    if not _eventually(lambda: _state(client, label, "abuse") != "ended", 20):
        raise RuntimeError(f"A's query never ran: {_state(client, label, 'abuse')}")
    with connect(target, OTHER_TOKEN, monotonic=False) as other:
        b_call = other.start_query(HIJACK_SQL.format(n=1), query_id=label, cache=False)
        time.sleep(1.0)
        b_call.cancel()
        b_code = _code(_error_of(b_call.result))
    a_after = _state(client, label, "abuse")
    duplicate = _code(_error_of(lambda: client.query("SELECT 1 AS one", query_id=label)))
    a_code = _code(_error_of(a_call.result))
    print(f"    B's call: {b_code}; A's query after B's cancel: {a_after}; "
          f"A's own duplicate id: {duplicate}; A's query ended: {a_code}")  # fmt: skip
    if a_after == "ended" or duplicate != "ALREADY_EXISTS" or a_code != "OK":
        raise RuntimeError(f"A after B's cancel {a_after}, duplicate {duplicate}, A {a_code}")


def _code(error: BaseException | None) -> str:
    from horizon_broker._core.errors import HorizonError

    if error is None:
        return "OK"
    if isinstance(error, HorizonError):
        return str(error.code)
    code = getattr(error, "code", None)  # a raw gRPC error (the slow reader reads the stream)
    if callable(code):
        return str(code().name)
    return type(error).__name__


def _state(client: Any, label: str, identity: str) -> str:
    for info in client.queries(running_only=True):
        if info.query_id == label and info.identity == identity:
            return str(info.state)
    return "ended"


def _error_of(call: Callable[[], Any]) -> BaseException | None:
    try:
        call()
    except Exception as error:  # the code is what is reported
        return error
    return None


def _eventually(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _adbc(flight_target: str, token: str) -> Any:
    import adbc_driver_flightsql.dbapi as flight_sql

    options = {"adbc.flight.sql.authorization_header": f"Bearer {token}"}
    return flight_sql.connect(f"grpc://{flight_target}", db_kwargs=options, autocommit=True)


def _others_flight_query_answered(flight_target: str) -> None:
    with _adbc(flight_target, OTHER_TOKEN) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT count(*) AS n FROM accounts")
        if cursor.fetchone() != (1000,):
            raise RuntimeError("another identity's Flight query answered wrongly")


class QuotaRefused(Exception):
    """A Flight refusal, carrying the Horizon status it was sent with."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status

    def code(self) -> Any:  # read by bench.abuse._code like a gRPC error's
        return SimpleNamespace(name=self.status)


def prepared_statement_flood(flight_target: str, token: str) -> None:
    """Up to 200 prepared statements held open by one identity; the quota must refuse, and
    another identity's Flight query is answered meanwhile."""
    import adbc_driver_manager

    refusal: QuotaRefused | None = None
    with _adbc(flight_target, token) as connection:
        cursors = []
        try:
            for number in range(200):
                cursor = connection.cursor()
                cursors.append(cursor)
                try:
                    cursor.adbc_prepare(f"SELECT {number} AS n")
                except adbc_driver_manager.Error as error:
                    trailers = {_text(k): _text(v) for k, v in (error.details or [])}
                    status = trailers.get("x-horizon-status", type(error).__name__)
                    refusal = QuotaRefused(status, f"statement {number + 1}: {error}"[:300])
                    break
            print(f"    {len(cursors)} prepares, the last: {refusal}")
            _others_flight_query_answered(flight_target)
        finally:
            for cursor in cursors:
                cursor.close()
    if refusal is not None:
        raise refusal


def unredeemed_results(flight_target: str, token: str) -> None:
    """GetFlightInfo for slow-ish results never fetched by one identity, until refused; another
    identity's Flight query must still be answered (a waiting result holds no query slot)."""
    import pyarrow.flight as fl

    from horizon_broker.broker._proto.arrow.flight.protocol.sql import flight_sql_pb2
    from horizon_broker.broker.flight.commands import pack

    options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())])
    client = fl.connect(f"grpc://{flight_target}")
    refusal: QuotaRefused | None = None
    try:
        for number in range(50):
            command = flight_sql_pb2.CommandStatementQuery(
                query=f"SELECT id + {number} AS n FROM accounts"
            )
            descriptor = fl.FlightDescriptor.for_command(pack(command))
            try:
                client.get_flight_info(descriptor, options)
            except fl.FlightError as error:
                detail = bytes(getattr(error, "extra_info", b"") or b"")
                status = "RESOURCE_EXHAUSTED" if b"RESOURCE_EXHAUSTED" in detail else "UNAVAILABLE"
                refusal = QuotaRefused(status, f"result {number + 1}: {error}"[:300])
                break
        print(f"    unredeemed results: the last {refusal}")
        _others_flight_query_answered(flight_target)
    finally:
        client.close()
    if refusal is not None:
        raise refusal


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
