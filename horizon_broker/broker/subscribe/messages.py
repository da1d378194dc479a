"""A subscription's answers and deltas as Subscribe messages (Arrow IPC, cut to size). Pure."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa

from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb

from .coalesce import parts
from .diff import Delta

FIRST = pb.SUBSCRIBE_MESSAGE_KIND_FIRST_RESULT
DELTA = pb.SUBSCRIBE_MESSAGE_KIND_DELTA
RESUMED = pb.SUBSCRIBE_MESSAGE_KIND_RESUMED
PROGRESS = pb.SUBSCRIBE_MESSAGE_KIND_PROGRESS


def ipc_bytes(rows: pa.Table) -> bytes:
    """An Arrow IPC stream of ``rows``: the schema, then one record batch."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows.combine_chunks())
    return sink.getvalue().to_pybytes()


def read_ipc(data: bytes) -> pa.Table:
    """The rows of one message's ``arrow_ipc``."""
    return pa.ipc.open_stream(data).read_all()


def _messages(
    rows: pa.Table, template: pb.SubscribeResponse, token: str, max_rows: int
) -> Iterator[pb.SubscribeResponse]:
    pieces = list(parts(rows, max_rows))
    for number, piece in enumerate(pieces, start=1):
        message = pb.SubscribeResponse()
        message.CopyFrom(template)
        message.arrow_ipc = ipc_bytes(piece)
        message.row_count = piece.num_rows
        message.last_part = number == len(pieces)
        if message.last_part:
            message.resume_token = token
        yield message


def first_result_messages(
    rows: pa.Table, strategy: str, key: Sequence[str], at: int, token: str, max_rows: int
) -> Iterator[pb.SubscribeResponse]:
    """The full result at ``at``, the stream's base."""
    template = pb.SubscribeResponse(
        kind=FIRST, strategy=strategy, to_snapshot=at, key_columns=list(key)
    )
    return _messages(rows, template, token, max_rows)


def delta_messages(
    delta: Delta, strategy: str, start: int, to: int, token: str, max_rows: int
) -> Iterator[pb.SubscribeResponse]:
    """The changes from ``start`` to ``to``."""
    template = pb.SubscribeResponse(
        kind=DELTA,
        strategy=strategy,
        from_snapshot=start,
        to_snapshot=to,
        key_columns=list(delta.key),
    )
    return _messages(delta.rows, template, token, max_rows)


def resumed_message(strategy: str, at: int, token: str) -> pb.SubscribeResponse:
    """The first message of a resumed stream: what computes it and where it goes on from."""
    return pb.SubscribeResponse(
        kind=RESUMED, strategy=strategy, to_snapshot=at, resume_token=token, last_part=True
    )


def progress_message(strategy: str, start: int, to: int, token: str) -> pb.SubscribeResponse:
    """The snapshot moved from ``start`` to ``to`` and the answer did not: no rows, but a token
    from ``to``, so a quiet stream's subscriber knows how far it is and resumes from there."""
    return pb.SubscribeResponse(
        kind=PROGRESS,
        strategy=strategy,
        from_snapshot=start,
        to_snapshot=to,
        resume_token=token,
        last_part=True,
    )
