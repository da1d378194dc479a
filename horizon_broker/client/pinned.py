"""A held snapshot pin, and the views a passthrough plan reads on the caller's own Spark."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from horizon_broker.broker._proto.horizon.v1 import horizon_pb2 as pb

if TYPE_CHECKING:
    from .results import QueryResult
    from .session import HorizonClient


class PinnedSnapshot:
    """A held snapshot pin: ``query``/``execute``/``explain``/``rewrite`` read at it."""

    def __init__(self, client: HorizonClient, pin: pb.SnapshotPin, renew_lease: float | None):
        self.client = client
        self.pin = pin
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.renew_error: Exception | None = None
        """Why the background renewal stopped, if it failed (the pin may have run out)."""
        if renew_lease is not None:
            self._renewer = threading.Thread(
                target=self._keep_alive, args=(renew_lease,), name="horizon-pin", daemon=True
            )
            self._renewer.start()

    @property
    def pin_id(self) -> str:
        return self.pin.pin_id

    @property
    def snapshot(self) -> int:
        return self.pin.snapshot

    def execute(self, sql: str, **options: Any) -> QueryResult:
        return self.client.execute(sql, pin=self, **options)

    def query(self, sql: str, **options: Any) -> pa.Table:
        return self.client.query(sql, pin=self, **options)

    def explain(self, sql: str, **options: Any) -> pb.ExplainQueryResponse:
        return self.client.explain(sql, pin=self, **options)

    def rewrite(self, sql: str, **options: Any) -> pb.RewriteQueryResponse:
        return self.client.rewrite(sql, pin=self, **options)

    def renew(self, lease: float = 300.0) -> None:
        self.pin = self.client.renew_pin(self.pin_id, lease=lease)

    def release(self) -> bool:
        self._stop.set()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join(timeout=5)
        return self.client.release_pin(self.pin_id)

    def _keep_alive(self, lease: float) -> None:
        while not self._stop.wait(lease / 3):
            try:
                self.renew(lease)
            except Exception as error:  # reported through renew_error; the pin may be gone
                self.renew_error = error
                return

    def __enter__(self) -> PinnedSnapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def register_passthrough_views(spark: Any, rewritten: pb.RewriteQueryResponse) -> list[str]:
    """Create the temp views a rewritten query reads, on ``spark``; returns their names.

    Each entry names one view and the files it must read; a table may have two entries."""
    from horizon_broker.broker.sql.feed_files import FILE_COLUMN, FILE_NAME_EXPRESSION, FILES_SUFFIX

    names = []
    for table in rewritten.tables:
        companion = table.view.endswith(FILES_SUFFIX)  # a change feed's: rows name their file
        if table.files:
            frame = spark.read.schema(table.schema_ddl).parquet(*table.files)
            if companion:
                frame = frame.selectExpr("*", FILE_NAME_EXPRESSION)
        else:
            ddl = f"{table.schema_ddl}, `{FILE_COLUMN}` string" if companion else table.schema_ddl
            frame = spark.createDataFrame([], ddl)
        frame.createOrReplaceTempView(table.view)
        names.append(table.view)
    return names
