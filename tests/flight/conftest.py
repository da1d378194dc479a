"""One broker with its Flight SQL endpoint for tests/flight: the test tables of tests/broker (a
private redis-server, the session's Spark, the same tokens), and clients nobody here wrote: the
ADBC Flight SQL driver (Go, through the ADBC driver manager) and pyarrow.flight's generic client."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.client import HorizonClient
from tests.broker.conftest import ADMIN, BrokerEnv, broker_config
from tests.broker.conftest import broker_env as broker_env  # the same tables, a broker of our own

CALL_HEADER = "adbc.flight.sql.rpc.call_header."
COOKIES = "adbc.flight.sql.rpc.with_cookie_middleware"
AUTHORIZATION = "adbc.flight.sql.authorization_header"


def adbc_connect(
    target: str,
    token: str | None = ADMIN,
    *,
    headers: dict[str, str] | None = None,
    scheme: str = "grpc",
    **db_kwargs: str,
) -> Any:
    """A DB-API connection through the ADBC Flight SQL driver."""
    import adbc_driver_flightsql.dbapi as flight_sql

    options = dict(db_kwargs)
    if token is not None:
        options[AUTHORIZATION] = f"Bearer {token}"
    for name, value in (headers or {}).items():
        options[CALL_HEADER + name] = value
    return flight_sql.connect(f"{scheme}://{target}", db_kwargs=options, autocommit=True)


@pytest.fixture
def adbc(broker_env: BrokerEnv) -> Iterator[Any]:
    with adbc_connect(broker_env.broker.flight_target) as connection:
        yield connection


@pytest.fixture
def native(broker_env: BrokerEnv) -> Iterator[HorizonClient]:
    """The main API's client, to compare answers with."""
    with broker_env.client() as horizon:
        yield horizon


def snapshot_of(table: Any) -> int | None:
    """The snapshot a Flight answer says it read (its schema metadata)."""
    value = (table.schema.metadata or {}).get(b"horizon.snapshot")
    return int(value) if value is not None else None


def flight_client(env: BrokerEnv, token: str | None = ADMIN) -> Any:
    """pyarrow.flight's generic client, sending ``token`` as a bearer token on every call."""
    import pyarrow.flight as fl

    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []

    class BearerFactory(fl.ClientMiddlewareFactory):
        def start_call(self, info: Any) -> Any:
            return BearerMiddleware()

    class BearerMiddleware(fl.ClientMiddleware):
        def sending_headers(self) -> dict[bytes, list[bytes]]:
            return {name: [value] for name, value in headers}

    return fl.connect(f"grpc://{env.broker.flight_target}", middleware=[BearerFactory()])


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (encoded by hand: independent of the broker's .proto)."""
    key, length, size = number << 3 | 2, b"", len(payload)
    while True:
        byte, size = size & 0x7F, size >> 7
        length += bytes([byte | (0x80 if size else 0)])
        if not size:
            return bytes([key]) + length + payload


def flight_sql_command(name: str, *fields: tuple[int, bytes]) -> bytes:
    """A Flight SQL command as a serialized google.protobuf.Any, as every client sends it."""
    body = b"".join(_field(number, value) for number, value in fields)
    type_url = f"type.googleapis.com/arrow.flight.protocol.sql.{name}".encode()
    return _field(1, type_url) + _field(2, body)


def statement_descriptor(sql: str) -> Any:
    """A FlightDescriptor holding a CommandStatementQuery (field 1: the query)."""
    import pyarrow.flight as fl

    return fl.FlightDescriptor.for_command(
        flight_sql_command("CommandStatementQuery", (1, sql.encode()))
    )


_names = itertools.count()


@pytest.fixture
def one_slot(broker_env: BrokerEnv, spark) -> Iterator[BrokerServer]:  # type: ignore[no-untyped-def]
    """A broker that runs one query at a time and queues none (a held slot refuses the next)."""
    config = broker_config(
        broker_env.redis.url,
        limits={"max_concurrent": 1, "queue_size": 0},
        flight={"result_ttl_s": 1.0},
    )
    server = BrokerServer(
        config,  # type: ignore[arg-type]
        spark=spark,
        follower=broker_env.broker.follower,
        functions=broker_env.broker.engine.functions,
        view_namespace=f"flight_slot{next(_names)}_",
    ).start()
    yield server
    server.stop(0)
