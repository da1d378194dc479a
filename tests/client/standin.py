"""A stand-in broker for the client's failover rules: a real gRPC server on loopback serving
QueryService and InspectionService, answering each call as told (a row with a snapshot, or a
status) and counting the calls it received. No Spark and no state store: what is under test is
which failures move the client to the next broker and which calls it sends again."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from concurrent import futures
from typing import Any

import grpc
import pyarrow as pa

from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb
from horizon_broker.broker._proto.horizon.v1 import horizon_pb2_grpc as rpc
from horizon_broker.broker.api import arrow_ipc
from horizon_broker.watermark import tokens


class StandIn(rpc.QueryServiceServicer, rpc.InspectionServiceServicer):  # type: ignore[misc]
    """Answers with ``snapshot`` of table ``t``, or fails with ``status`` when one is set;
    ``delay_s`` holds each answer that long first."""

    def __init__(self, snapshot: int = 100) -> None:
        self.snapshot = snapshot
        self.status: grpc.StatusCode | None = None
        self.delay_s = 0.0
        self.cut_mid_stream = False
        """Send the header and one batch, then fail UNAVAILABLE (a broker killed mid-stream)."""
        self.calls: Counter[str] = Counter()
        self.min_snapshots: list[str] = []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        rpc.add_QueryServiceServicer_to_server(self, self._server)
        rpc.add_InspectionServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _answer(self, method: str, context: grpc.ServicerContext) -> None:
        self.calls[method] += 1
        time.sleep(self.delay_s)
        if self.status is not None:
            context.abort(self.status, f"stand-in says {self.status.name}")

    def ExecuteQuery(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.min_snapshots.append(request.read.min_snapshot)
        self._answer("ExecuteQuery", context)
        table = pa.table({"snapshot": [self.snapshot]})
        metadata = pb.QueryMetadata(
            snapshot=self.snapshot, snapshot_token=tokens.encode({"t": self.snapshot})
        )
        yield pb.ExecuteQueryResponse(
            header=pb.QueryHeader(
                arrow_schema=arrow_ipc.encode_schema(table.schema), metadata=metadata
            )
        )
        for data, rows in arrow_ipc.encode_batches(table, 1 << 20):
            yield pb.ExecuteQueryResponse(batch=pb.ArrowBatch(data=data, row_count=rows))
        if self.cut_mid_stream:
            context.abort(grpc.StatusCode.UNAVAILABLE, "stand-in went away mid-stream")
        yield pb.ExecuteQueryResponse(trailer=pb.QueryTrailer(row_count=1))

    def PinSnapshot(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._answer("PinSnapshot", context)
        return pb.PinSnapshotResponse(pin=pb.SnapshotPin(pin_id="p1", snapshot=self.snapshot))

    def ReleaseSnapshot(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._answer("ReleaseSnapshot", context)
        return pb.ReleaseSnapshotResponse(released=True)

    def ListTables(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._answer("ListTables", context)
        return pb.ListTablesResponse(tables=[pb.TableInfo(name="t")])

    def stop(self) -> None:
        self._server.stop(0)


class Silent:
    """A listening socket that never speaks: connects complete in the kernel's backlog, but no
    HTTP/2 ever comes back, so a channel to it stays CONNECTING (a host that hangs)."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        self.target = f"127.0.0.1:{self._socket.getsockname()[1]}"
        self._accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._hold, daemon=True)
        self._thread.start()

    def _hold(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            self._accepted.append(connection)  # held open, never answered

    def stop(self) -> None:
        self._socket.close()
        for connection in self._accepted:
            connection.close()


def refused_target() -> str:
    """An address nothing listens on (connects are refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"
