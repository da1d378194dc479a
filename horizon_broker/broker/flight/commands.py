"""Flight SQL messages on the wire: commands, tickets and action bodies are ``google.protobuf.Any``
values whose type URL names a message of ``arrow.flight.protocol.sql``."""

from __future__ import annotations

import pyarrow.flight as fl
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError, Message

from horizon_broker._core.errors import InvalidArgument, Unimplemented
from horizon_broker.broker._proto.arrow.flight.protocol.sql import flight_sql_pb2 as sql

SQL_PACKAGE = "arrow.flight.protocol.sql"
TYPE_URL_PREFIX = "type.googleapis.com/"

METADATA_COMMANDS: tuple[type[Message], ...] = (
    sql.CommandGetSqlInfo,
    sql.CommandGetXdbcTypeInfo,
    sql.CommandGetCatalogs,
    sql.CommandGetDbSchemas,
    sql.CommandGetTables,
    sql.CommandGetTableTypes,
    sql.CommandGetPrimaryKeys,
    sql.CommandGetExportedKeys,
    sql.CommandGetImportedKeys,
    sql.CommandGetCrossReference,
)
"""Commands answered from the broker's catalog; their ticket is the command itself."""

_MESSAGES: dict[str, type[Message]] = {
    cls.DESCRIPTOR.full_name: cls
    for cls in (
        *METADATA_COMMANDS,
        sql.CommandStatementQuery,
        sql.CommandPreparedStatementQuery,
        sql.TicketStatementQuery,
        sql.CommandStatementUpdate,
        sql.ActionCreatePreparedStatementRequest,
        sql.ActionClosePreparedStatementRequest,
        sql.ActionCancelQueryRequest,
    )
}

READ_ONLY = "Horizon is read-only: it answers queries (SELECT) only"
REFUSED: dict[str, str] = {
    f"{SQL_PACKAGE}.CommandPreparedStatementUpdate": f"{READ_ONLY}; a prepared update was sent",
    f"{SQL_PACKAGE}.CommandStatementIngest": f"{READ_ONLY}; bulk ingestion was sent (write "
    "through Horizon's ingestion servers instead)",
    f"{SQL_PACKAGE}.CommandStatementSubstraitPlan": "Horizon runs SQL, not Substrait plans",
    f"{SQL_PACKAGE}.ActionCreatePreparedSubstraitPlanRequest": "Horizon runs SQL, not Substrait "
    "plans",
}
"""Flight SQL messages Horizon recognises and refuses with UNIMPLEMENTED, and why."""


def pack(message: Message) -> bytes:
    """``message`` as a serialized ``Any`` (how commands, tickets and action results travel)."""
    wrapped = any_pb2.Any(
        type_url=TYPE_URL_PREFIX + message.DESCRIPTOR.full_name,
        value=message.SerializeToString(),
    )
    return wrapped.SerializeToString()


def unpack(data: bytes, what: str) -> Message:
    """The Flight SQL message in ``data`` (a serialized ``Any``); ``what`` names the carrier
    (``"command"``, ``"ticket"``, ``"action body"``) in errors."""
    wrapped = any_pb2.Any()
    try:
        wrapped.ParseFromString(data)
    except DecodeError:
        raise InvalidArgument(
            f"the {what} is not a Flight SQL message (a serialized google.protobuf.Any)"
        ) from None
    name = wrapped.type_url.rpartition("/")[2]
    if not name:
        raise InvalidArgument(
            f"the {what} is not a Flight SQL message: it has no type URL "
            f"(expected {TYPE_URL_PREFIX}{SQL_PACKAGE}.<Command>)"
        )
    if name in REFUSED:
        raise Unimplemented(REFUSED[name])
    cls = _MESSAGES.get(name)
    if cls is None:
        if name.startswith(f"{SQL_PACKAGE}."):
            raise Unimplemented(f"{name} is not supported by Horizon's Flight SQL endpoint")
        raise InvalidArgument(f"the {what} holds {name}, which is not a Flight SQL message")
    message = cls()
    try:
        message.ParseFromString(wrapped.value)
    except DecodeError:
        raise InvalidArgument(f"the {what} is not a valid {name}") from None
    return message


def unpack_as(data: bytes, cls: type[Message], what: str) -> Message:
    """Like :func:`unpack`, but the message must be a ``cls``."""
    message = unpack(data, what)
    if not isinstance(message, cls):
        raise InvalidArgument(
            f"the {what} holds {message.DESCRIPTOR.full_name}, expected {cls.DESCRIPTOR.full_name}"
        )
    return message


def parse_raw(data: bytes, cls: type[Message], what: str) -> Message:
    """A core Flight action body (``CancelFlightInfo``, session options): a bare message."""
    message = cls()
    try:
        message.ParseFromString(data)
    except DecodeError:
        raise InvalidArgument(f"the {what} is not a valid {cls.DESCRIPTOR.full_name}") from None
    return message


def from_descriptor(descriptor: fl.FlightDescriptor) -> Message:
    if descriptor.descriptor_type != fl.DescriptorType.CMD:
        raise InvalidArgument(
            "Horizon's Flight SQL endpoint takes commands (FlightDescriptor.for_command), not paths"
        )
    return unpack(descriptor.command, "command")


def refuse_transaction(command: Message) -> None:
    if command.HasField("transaction_id"):
        raise Unimplemented("Horizon has no transactions: send the query without a transaction id")


def not_a_query(command: Message) -> Exception:
    return InvalidArgument(
        f"{command.DESCRIPTOR.name} is not a command GetFlightInfo or GetSchema runs"
    )
