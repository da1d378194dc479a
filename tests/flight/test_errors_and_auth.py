"""Errors through Flight SQL: the main API's status codes and messages (Flight carries gRPC codes;
the two pyarrow cannot send travel as the nearest and name the exact status), bearer tokens,
Flight's basic-auth handshake, TLS, and writes refused as unsupported."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import adbc_driver_manager
import grpc
import pyarrow as pa
import pyarrow.flight as fl
import pytest

from horizon_broker._core.errors import HorizonError
from horizon_broker.broker.api.server import BrokerServer
from horizon_broker.client import connect
from tests.broker.conftest import ADMIN, NO_INSPECT, READER, broker_config
from tests.broker.data import descriptor
from tests.broker.spark_jobs import ExtraBroker
from tests.certificates import mutual_tls_certificates, mutual_tls_server
from tests.flight.conftest import adbc_connect, flight_client, statement_descriptor


def native_error(native, sql: str) -> HorizonError:
    with pytest.raises(HorizonError) as caught:
        native.query(sql)
    return caught.value


def adbc_error(connection, sql: str) -> adbc_driver_manager.Error:
    with connection.cursor() as cursor, pytest.raises(adbc_driver_manager.Error) as caught:
        cursor.execute(sql)
        cursor.fetchall()
    return caught.value


def details(error: adbc_driver_manager.Error) -> dict[str, Any]:
    """The error's details (the call's headers and trailers) by name."""
    return {
        key.decode() if isinstance(key, bytes) else key: value
        for key, value in (error.details or [])
    }


def sent_code(error: adbc_driver_manager.Error) -> str:
    """The gRPC code the driver received, as gRPC-Go names it ("(InvalidArgument; Prepare)")."""
    found = re.search(r"\((\w+); [\w() ]+\)$", str(error))
    assert found, str(error)
    return found.group(1)


GO_NAMES = {
    grpc.StatusCode.PERMISSION_DENIED: "PermissionDenied",
    grpc.StatusCode.INVALID_ARGUMENT: "InvalidArgument",
    grpc.StatusCode.NOT_FOUND: "NotFound",
    grpc.StatusCode.UNAUTHENTICATED: "Unauthenticated",
    grpc.StatusCode.UNIMPLEMENTED: "Unimplemented",
    grpc.StatusCode.UNAVAILABLE: "Unavailable",
}


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        ("SELECT * FROM secret", grpc.StatusCode.PERMISSION_DENIED),
        ("DROP TABLE accounts", grpc.StatusCode.INVALID_ARGUMENT),
        ("INSERT INTO accounts VALUES (1, 'x', 1)", grpc.StatusCode.INVALID_ARGUMENT),
        ("SELECT * FROM parquet.`/etc/passwd`", grpc.StatusCode.INVALID_ARGUMENT),
        ("SELECT * FROM nowhere", grpc.StatusCode.PERMISSION_DENIED),  # restricted: as ungranted
        ("SELECT nope FROM accounts", grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
def test_refusals_have_the_main_api_code_and_message(broker_env, sql, code):
    with (
        adbc_connect(broker_env.broker.flight_target, READER) as connection,
        broker_env.client(READER) as native,
    ):
        error = adbc_error(connection, sql)
        expected = native_error(native, sql)
    assert sent_code(error) == GO_NAMES[code]
    assert str(expected) in str(error)
    assert details(error)["x-horizon-status"] == code.name.encode()
    assert "Traceback" not in str(error) and ".py" not in str(error)


def test_a_failed_precondition_is_sent_as_invalid_argument_naming_the_exact_status(
    broker_env, adbc, native
):
    broker_env.server_client.register_table(descriptor("no_lwm_yet"))  # nothing reported yet
    assert broker_env.broker.follower.wait_for(lambda f: "no_lwm_yet" in f.tables(), 10)
    sql = "SELECT * FROM no_lwm_yet"
    error = adbc_error(adbc, sql)
    expected = native_error(native, sql)
    assert expected.code.name == "FAILED_PRECONDITION"
    assert sent_code(error) == "InvalidArgument"
    assert str(expected) in str(error)
    assert details(error)["x-horizon-status"] == b"FAILED_PRECONDITION"


def test_a_call_without_a_token_is_unauthenticated_and_a_bad_one_too(broker_env):
    for token in (None, "wrong"):
        with adbc_connect(broker_env.broker.flight_target, token) as connection:
            error = adbc_error(connection, "SELECT 1 AS one")
            assert sent_code(error) == "Unauthenticated"


def test_a_token_without_a_grant_reads_only_its_tables(broker_env):
    with adbc_connect(broker_env.broker.flight_target, NO_INSPECT) as connection:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM accounts")
            assert cursor.fetchone() == (100,)
        assert sent_code(adbc_error(connection, "SELECT * FROM big")) == "PermissionDenied"


def test_basic_auth_handshake_maps_a_token_name_and_secret_to_its_bearer_token(broker_env):
    client = flight_client(broker_env, token=None)
    header = client.authenticate_basic_token("admin", ADMIN)
    assert header == (b"authorization", f"Bearer {ADMIN}".encode())
    options = fl.FlightCallOptions(headers=[header])
    info = client.get_flight_info(
        statement_descriptor("SELECT count(*) AS n FROM accounts"), options
    )
    assert client.do_get(info.endpoints[0].ticket, options).read_all().to_pylist() == [{"n": 100}]
    with pytest.raises(fl.FlightUnauthenticatedError, match="unknown user or token"):
        client.authenticate_basic_token("admin", "not-the-token")
    with pytest.raises(fl.FlightUnauthenticatedError):
        client.authenticate_basic_token("reader", ADMIN)  # the name must match the token


def test_the_adbc_driver_logs_in_with_username_and_password(broker_env):
    with (
        adbc_connect(
            broker_env.broker.flight_target, None, username="reader", password=READER
        ) as connection,
        connection.cursor() as cursor,
    ):
        cursor.execute("SELECT count(*) FROM accounts")
        assert cursor.fetchone() == (100,)


def test_updates_and_bulk_ingestion_are_refused_as_unsupported(adbc):
    with adbc.cursor() as cursor:
        cursor.adbc_statement.set_sql_query("UPDATE accounts SET balance = 0")
        with pytest.raises(adbc_driver_manager.NotSupportedError, match="read-only") as caught:
            cursor.adbc_statement.execute_update()
        assert sent_code(caught.value) == "Unimplemented"
        with pytest.raises(adbc_driver_manager.NotSupportedError, match="read-only"):
            cursor.adbc_ingest("accounts", pa.table({"id": [1]}), mode="append")


def test_transactions_and_unknown_actions_are_refused_as_unimplemented(broker_env):
    client = flight_client(broker_env)
    for action in ("BeginTransaction", "Explode"):
        with pytest.raises(NotImplementedError):
            list(client.do_action(fl.Action(action, b"")))


def test_a_path_descriptor_or_a_foreign_ticket_is_an_invalid_argument(broker_env):
    client = flight_client(broker_env)
    with pytest.raises(pa.ArrowInvalid, match="takes commands"):
        client.get_flight_info(fl.FlightDescriptor.for_path("accounts"))
    with pytest.raises(pa.ArrowException, match="not a Flight SQL message"):
        client.do_get(fl.Ticket(b"\xff\xfe")).read_all()


def test_tls_with_a_token_serves_flight_sql_with_the_main_api_certificate(
    broker_env, spark, tmp_path
):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    config = broker_config(
        broker_env.redis.url,
        server={"listen": "127.0.0.1:0", "tls_cert": str(cert), "tls_key": str(key)},
    )
    server = BrokerServer(
        config,  # type: ignore[arg-type]
        spark=spark,
        follower=broker_env.broker.follower,
        functions=broker_env.broker.engine.functions,
        view_namespace="flight_tls_",
    ).start()
    try:
        with (
            adbc_connect(
                server.flight_target,
                ADMIN,
                scheme="grpc+tls",
                **{"adbc.flight.sql.client_option.tls_root_certs": cert.read_text()},
            ) as connection,
            connection.cursor() as cursor,
        ):
            cursor.execute("SELECT count(*) AS n FROM accounts")
            assert cursor.fetchone() == (100,)
        with (
            adbc_connect(server.flight_target, ADMIN) as plaintext,  # no TLS: refused
            pytest.raises(adbc_driver_manager.Error),
        ):
            plaintext.cursor().execute("SELECT 1")
        with connect(server.target, token=ADMIN, root_certificates=cert) as horizon:
            assert horizon.query("SELECT 1 AS one").to_pylist() == [{"one": 1}]
    finally:
        server.stop(0)


def test_mutual_tls_requires_a_signed_client_certificate_and_a_token_names_the_caller(
    broker_env, spark, tmp_path
):
    certs = mutual_tls_certificates(tmp_path)
    config = broker_config(
        broker_env.redis.url,
        server=mutual_tls_server(certs),
        tokens=[
            {"name": "admin", "token": ADMIN, "tables": ["*"], "inspect": True},
            {"name": "svc-a", "client_cn": "svc-a", "tables": ["accounts"]},
        ],
    )
    trusted = {"adbc.flight.sql.client_option.tls_root_certs": certs["ca"].read_text()}
    identity = {
        "adbc.flight.sql.client_option.mtls_cert_chain": certs["client"].read_text(),
        "adbc.flight.sql.client_option.mtls_private_key": certs["client_key"].read_text(),
    }
    with ExtraBroker(config, spark, broker_env) as server:
        target = server.flight_target.replace("127.0.0.1", "localhost")
        with (
            adbc_connect(target, ADMIN, scheme="grpc+tls", **trusted, **identity) as connection,
            connection.cursor() as cursor,
        ):
            cursor.execute("SELECT count(*) AS n FROM accounts")
            assert cursor.fetchone() == (100,)
        with adbc_connect(target, None, scheme="grpc+tls", **trusted, **identity) as certified:
            refused = adbc_error(certified, "SELECT count(*) FROM accounts")
        assert sent_code(refused) == "Unauthenticated"
        assert "cannot tell who a certificate names" in str(refused)
        with (
            adbc_connect(target, ADMIN, scheme="grpc+tls", **trusted) as stranger,
            pytest.raises(adbc_driver_manager.Error),  # no certificate: no TLS handshake
        ):
            stranger.cursor().execute("SELECT 1")
