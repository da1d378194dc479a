"""Arrow IPC framing for gRPC: one schema message, then record batches under a size budget.

Each gRPC message carries one *encapsulated* Arrow IPC message (the schema, or one record batch),
so neither side ever holds more than one batch's bytes in a protobuf and every message stays well
under gRPC's 4 MiB default limit. The broker and the client both use this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

MIN_BATCH_ROWS = 1


def encode_schema(schema: pa.Schema) -> bytes:
    return schema.serialize().to_pybytes()


def decode_schema(data: bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(data))


def encode_batches(table: pa.Table, target_bytes: int) -> Iterator[tuple[bytes, int]]:
    """Yield ``(ipc_bytes, rows)`` per record batch of roughly ``target_bytes`` each.

    Rows per batch come from the table's average row width; a single row wider than the target
    still travels alone (the server's result byte limit bounds how wide that can be).
    """
    if table.num_rows == 0:
        return
    row_bytes = max(1, table.nbytes // max(1, table.num_rows))
    rows_per_batch = max(MIN_BATCH_ROWS, target_bytes // row_bytes)
    for batch in table.to_batches(max_chunksize=rows_per_batch):
        if batch.num_rows:
            yield batch.serialize().to_pybytes(), batch.num_rows


def decode_batches(schema: pa.Schema, messages: Iterable[bytes]) -> pa.Table:
    batches = [pa.ipc.read_record_batch(pa.py_buffer(data), schema) for data in messages]
    return pa.Table.from_batches(batches, schema=schema)
