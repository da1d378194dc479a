"""The pure parts of the Flight SQL endpoint: parameter binding, filter patterns, the SqlInfo
dense union, the catalog answers' schemas, handshake credentials, read controls from headers and
session options, and the Flight SQL messages on the wire."""

from __future__ import annotations

import base64
import datetime as dt
import decimal

import pyarrow as pa
import pytest
from google.protobuf import any_pb2

from horizon_broker._core.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unauthenticated,
    Unimplemented,
)
from horizon_broker.broker._proto.arrow.flight.protocol import flight_actions_pb2 as fa
from horizon_broker.broker._proto.arrow.flight.protocol.sql import flight_sql_pb2 as sql
from horizon_broker.broker.flight import catalog, commands, parameters, sessions, sql_info
from horizon_broker.broker.flight.auth import handshake_token
from horizon_broker.broker.flight.errors import flight_error, rich_status
from horizon_broker.broker.grants import TokenGrant
from horizon_broker.watermark import tokens

# -- parameter binding --------------------------------------------------------------------------


def test_placeholders_bind_in_text_order_and_question_marks_in_strings_stay():
    bound = parameters.bind(
        "SELECT '?' AS q FROM t WHERE a = ? AND b IN (?, ?) LIMIT ?",
        [pa.scalar("x"), pa.scalar(1.5), pa.scalar(None, pa.int64()), pa.scalar(3)],
    )
    assert bound == (
        "SELECT '?' AS q FROM t WHERE a = 'x' AND b IN (CAST(1.5 AS DOUBLE), NULL) LIMIT 3"
    )


def test_a_string_value_is_escaped_so_it_can_never_become_sql():
    bound = parameters.bind("SELECT ? AS s", [pa.scalar("x'); DROP TABLE t; -- \\'")])
    assert bound == "SELECT 'x\\'); DROP TABLE t; -- \\\\\\'' AS s"


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        (pa.scalar(True), "TRUE"),
        (pa.scalar(-7, pa.int8()), "-7"),
        (pa.scalar(2**63 - 1), str(2**63 - 1)),
        (pa.scalar(float("nan")), "CAST('NaN' AS DOUBLE)"),
        (pa.scalar(float("-inf"), pa.float32()), "CAST('-Infinity' AS FLOAT)"),
        (pa.scalar(decimal.Decimal("12.50")), "CAST('12.50' AS DECIMAL(4, 2))"),
        (pa.scalar(b"\x00\xff"), "X'00FF'"),
        (pa.scalar(dt.date(2026, 1, 2)), "DATE '2026-01-02'"),
        (
            pa.scalar(dt.datetime(2026, 1, 2, 3, 4, 5, 6), pa.timestamp("us", tz="Europe/Paris")),
            "CAST('2026-01-02 03:04:05.000006+00:00' AS TIMESTAMP)",
        ),
        (
            pa.scalar(dt.datetime(2026, 1, 2, 3, 4, 5)),
            "CAST('2026-01-02 03:04:05' AS TIMESTAMP_NTZ)",
        ),
    ],
)
def test_each_supported_arrow_type_binds_as_its_spark_literal(value, literal):
    assert parameters.literal(value) == literal


def test_statements_differing_only_in_filter_values_have_one_result_shape():
    one = parameters.result_shape("SELECT id, 'x' AS k FROM t WHERE id = 5 AND s = 'a' LIMIT 3")
    two = parameters.result_shape("SELECT id, 'x' AS k FROM t WHERE id = 9 AND s = 'b' LIMIT 7")
    assert one == two
    # a literal the result is made of is part of the shape
    assert parameters.result_shape("SELECT 1 AS k FROM t") != parameters.result_shape(
        "SELECT 'a' AS k FROM t"
    )


def test_values_without_an_exact_literal_are_refused_naming_the_parameter():
    with pytest.raises(InvalidArgument, match="parameter 2 has type list<item: int64>"):
        parameters.bind("SELECT ?, ?", [pa.scalar(1), pa.scalar([1, 2])])


def test_named_markers_and_a_wrong_number_of_values_are_refused():
    with pytest.raises(InvalidArgument, match="named parameter markers"):
        parameters.placeholder_spans("SELECT * FROM t WHERE id = :id")
    with pytest.raises(InvalidArgument, match=r"2 parameter marker\(s\) \(\?\) but 1 value"):
        parameters.bind("SELECT ?, ?", [pa.scalar(1)])
    with pytest.raises(InvalidArgument, match="exactly one row"):
        parameters.parameter_row(pa.table({"a": [1, 2]}))


# -- catalog answers ------------------------------------------------------------------------


def test_filter_patterns_follow_flight_sql_like_rules_case_insensitively():
    assert catalog.like("acc%")("Accounts")
    assert catalog.like("a_c")("abc") and not catalog.like("a_c")("abbc")
    assert catalog.like("a\\_c")("a_c") and not catalog.like("a\\_c")("abc")
    assert catalog.like(None)("anything")
    assert not catalog.like("acc")("accounts")


ENTRY = catalog.TableEntry("accounts", pa.schema([("id", pa.int64())]), ("id",), ("bigint",))


def test_tables_are_listed_without_catalog_in_the_horizon_schema_and_filtered():
    other = catalog.TableEntry("orders", pa.schema([]), ("id",))
    listed = catalog.tables(
        [other, ENTRY],
        catalog=None,
        schema_pattern="hor%",
        table_pattern=None,
        table_types=["TABLE"],
        include_schema=True,
    )
    assert listed.schema == catalog.TABLES_WITH_SCHEMA_SCHEMA
    assert listed.column("table_name").to_pylist() == ["accounts", "orders"]
    assert listed.column("catalog_name").to_pylist() == [None, None]
    assert (
        pa.ipc.read_schema(pa.py_buffer(listed.column("table_schema")[0].as_py())) == ENTRY.schema
    )
    for catalog_name, schema_pattern, types in (
        ("x", None, []),
        (None, "other", []),
        (None, None, ["VIEW"]),
    ):
        none = catalog.tables(
            [ENTRY],
            catalog=catalog_name,
            schema_pattern=schema_pattern,
            table_pattern=None,
            table_types=types,
            include_schema=False,
        )
        assert none.num_rows == 0 and none.schema == catalog.TABLES_SCHEMA


def test_catalog_answers_have_the_flight_sql_reference_schemas():
    assert catalog.catalogs().schema.field("catalog_name").nullable is False
    schemas = catalog.db_schemas(None, None)
    assert schemas.to_pylist() == [{"catalog_name": None, "db_schema_name": "horizon"}]
    assert catalog.db_schemas("spark", None).num_rows == 0
    keys = catalog.primary_keys(ENTRY, None, "horizon")
    assert keys.schema.names == [
        "catalog_name", "db_schema_name", "table_name", "column_name", "key_sequence", "key_name"
    ]  # fmt: skip
    assert keys.column("column_name").to_pylist() == ["id"]
    assert catalog.primary_keys(None, None, None).num_rows == 0
    assert catalog.foreign_keys().num_rows == 0
    types = catalog.xdbc_types(None)
    assert types.column("data_type").to_pylist() == sorted(types.column("data_type").to_pylist())
    assert catalog.xdbc_types(12).column("type_name").to_pylist() == ["STRING"]


# -- SqlInfo ------------------------------------------------------------------------------------


def test_sql_info_is_a_dense_union_each_value_in_the_member_of_its_kind():
    info = sql_info.server_info(statement_ttl_s=60, max_sql_length=1000)
    table = sql_info.sql_info_table(
        info,
        [sql_info.SERVER_NAME, sql_info.SERVER_READ_ONLY, sql_info.SQL_IDENTIFIER_QUOTE_CHAR,
         sql_info.SQL_SUPPORTED_GROUP_BY, sql_info.SQL_MAX_STATEMENT_LENGTH, 99_999],
    )  # fmt: skip
    table.validate(full=True)
    assert table.schema == sql_info.SCHEMA
    value = table.column("value").chunk(0)
    assert value.type_codes.to_pylist() == [0, 1, 0, 3, 2]  # string, bool, string, bitmask, bigint
    assert table.to_pylist() == [
        {"info_name": 0, "value": "Horizon"},
        {"info_name": 3, "value": True},
        {"info_name": 504, "value": "`"},
        {"info_name": 522, "value": 3},
        {"info_name": 557, "value": 1000},
    ]
    assert sql_info.sql_info_table(info).num_rows == len(info)


# -- auth, sessions, read controls ----------------------------------------------------------

GRANTS = (TokenGrant("admin", "s3cret"), TokenGrant("reader", "other"))


def _basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


def test_handshake_maps_basic_name_and_token_onto_the_bearer_token():
    assert handshake_token(GRANTS, _basic("admin:s3cret")) == "s3cret"
    assert handshake_token(GRANTS, "Bearer other") == "other"
    for header in (None, _basic("reader:s3cret"), _basic("admin:nope"), "Basic !!", "Digest x"):
        with pytest.raises(Unauthenticated):
            handshake_token(GRANTS, header)


def test_call_headers_override_session_options_and_are_checked_like_the_main_api():
    token = tokens.encode({"accounts": 1400})
    headers = {"x-horizon-max-staleness": "5", "x-horizon-bypass-cache": "true"}
    options = sessions.read_options(
        {sessions.MIN_SNAPSHOT: token, sessions.MAX_STALENESS: 60.0}, headers.get
    )
    assert options.min_snapshot == {"accounts": 1400}
    assert options.max_staleness_s == 5.0 and options.use_cache is False
    with pytest.raises(InvalidArgument, match="not a Horizon snapshot token"):
        sessions.read_options({}, {"x-horizon-min-snapshot": "garbage"}.get)
    with pytest.raises(InvalidArgument, match="max_staleness"):
        sessions.read_options({}, {"x-horizon-max-staleness": "soon"}.get)


def test_session_options_are_set_erased_or_refused_by_name_and_value():
    options: dict = {}
    request = fa.SetSessionOptionsRequest()
    request.session_options["pin_id"].string_value = "a|b"
    request.session_options["bypass_cache"].bool_value = True
    request.session_options["max_staleness"].double_value = 3.0
    request.session_options["colour"].string_value = "blue"
    result = sessions.apply_options(options, request)
    assert options == {"bypass_cache": True, "max_staleness": 3.0}
    assert dict(result.errors) == {
        "pin_id": fa.SetSessionOptionsResult.Error(value=fa.SetSessionOptionsResult.INVALID_VALUE),
        "colour": fa.SetSessionOptionsResult.Error(value=fa.SetSessionOptionsResult.INVALID_NAME),
    }
    erase = fa.SetSessionOptionsRequest()
    erase.session_options["bypass_cache"].CopyFrom(fa.SessionOptionValue())
    sessions.apply_options(options, erase)
    assert options == {"max_staleness": 3.0}


def test_a_session_is_found_only_by_the_caller_that_made_it_and_expires_when_idle():
    now = [0.0]
    store = sessions.SessionStore(10.0, clock=lambda: now[0])
    made = store.create("admin")
    assert store.find(made.id, "admin") is made
    assert store.find(None, "admin") is None
    with pytest.raises(NotFound):
        store.find(made.id, "reader")
    now[0] = 11.0
    assert store.expire() == 1
    with pytest.raises(NotFound, match="expired"):
        store.find(made.id, "admin")
    assert sessions.session_id(["a=b; arrow_flight_session_id=xyz ; c=d"]) == "xyz"


# -- wire and errors ------------------------------------------------------------------------


def test_commands_round_trip_through_any_and_bad_ones_say_what_is_wrong():
    query = sql.CommandStatementQuery(query="SELECT 1")
    assert commands.unpack(commands.pack(query), "command") == query
    with pytest.raises(InvalidArgument, match="not a Flight SQL message"):
        commands.unpack(b"\xff\xff", "command")
    with pytest.raises(Unimplemented, match="read-only"):
        ingest = "type.googleapis.com/arrow.flight.protocol.sql.CommandStatementIngest"
        commands.unpack(any_pb2.Any(type_url=ingest).SerializeToString(), "command")
    with pytest.raises(InvalidArgument, match="expected"):
        commands.unpack_as(commands.pack(query), sql.TicketStatementQuery, "ticket")


@pytest.mark.parametrize(
    ("error", "sent", "status"),
    [
        (FailedPrecondition("snapshot 5 is below the retention horizon"), "ArrowInvalid", "FAILED_PRECONDITION"),
        (ResourceExhausted("the queue is full"), "FlightUnavailableError", "RESOURCE_EXHAUSTED"),
        (NotFound("table x is not registered"), "ArrowKeyError", "NOT_FOUND"),
    ],
)  # fmt: skip
def test_codes_flight_cannot_send_travel_as_the_nearest_one_and_keep_their_status(
    error, sent, status
):
    class Context:
        def __init__(self) -> None:
            self.trailers: list = []

        def add_trailer(self, key, value):
            self.trailers.append((key, value))

    context = Context()
    translated = flight_error(error, context)
    assert any(sent == cls.__name__ for cls in type(translated).__mro__)
    assert str(error) in str(translated)
    assert ("x-horizon-status", status) in context.trailers
    from google.rpc import error_details_pb2, status_pb2

    detail = status_pb2.Status.FromString(rich_status(*_code(status), str(error)))
    info = error_details_pb2.ErrorInfo()
    detail.details[0].Unpack(info)
    assert detail.message == str(error) and info.reason == status


def _code(name: str) -> tuple:
    import grpc

    return (getattr(grpc.StatusCode, name),)


# -- what handles name ----------------------------------------------------------------------


class _Started:
    """Stands in for a started query: records whether it was closed."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_result_ticket_is_single_use_owned_and_expires_closing_the_query():
    from horizon_broker._core.errors import PermissionDenied
    from horizon_broker.broker.flight.results import ResultStore
    from horizon_broker.broker.spark.executor import QueryScope

    now = [0.0]
    store = ResultStore(60.0, clock=lambda: now[0])
    started = _Started()
    pending = store.add(started, QueryScope("q1"), "admin", pa.schema([]))  # type: ignore[arg-type]
    with pytest.raises(PermissionDenied):
        store.take(pending.handle, "reader")
    assert store.take(pending.handle, "admin") is pending
    with pytest.raises(NotFound, match="already read"):
        store.take(pending.handle, "admin")
    store.finish(pending.handle)
    unread = _Started()
    store.add(unread, QueryScope("q2"), "admin", pa.schema([]))  # type: ignore[arg-type]
    now[0] = 61.0
    assert store.expire() == 1 and unread.closed and len(store) == 0


def test_a_prepared_statement_binds_checked_values_and_refuses_running_unbound():
    from horizon_broker.broker.flight.statements import StatementStore

    store = StatementStore(60.0)
    statement = store.create("admin", "SELECT * FROM t WHERE id = ?", 1, None)
    with pytest.raises(InvalidArgument, match="no values were bound"):
        statement.bound_sql()
    with pytest.raises(InvalidArgument, match="has no SQL literal"):
        store.bind(statement.handle, "admin", [pa.scalar({"a": 1})])
    store.bind(statement.handle, "admin", [pa.scalar(7)])
    assert statement.bound_sql() == "SELECT * FROM t WHERE id = 7"
    store.close(statement.handle, "admin")
    with pytest.raises(NotFound, match="prepare it again"):
        store.get(statement.handle, "admin")


def test_large_batches_are_cut_into_slices_near_the_target_size_without_copying():
    from horizon_broker.broker.flight.server import batch_slices

    batch = pa.record_batch({"x": pa.array(range(100_000), pa.int64())})  # 800 kB
    slices = list(batch_slices(batch, 100_000))
    assert sum(s.num_rows for s in slices) == 100_000
    assert all(s.nbytes <= 100_000 for s in slices)
    assert pa.Table.from_batches(slices).column("x").to_pylist() == list(range(100_000))
    assert list(batch_slices(batch.slice(0, 10), 100_000)) == [batch.slice(0, 10)]
