"""Horizon's public Python API.

Ingestion: one :class:`IngestServer` serves many tables in one process and one Spark application;
each batch returns a :class:`BatchResult` whose ``token`` reads its writes. Leaving the ``with``
block (or :meth:`IngestServer.close`) *parks* every partition: their tables never hold reads
back while the server is away, and whoever writes to them next resumes above every snapshot
served meanwhile::

    from horizon_broker import IngestServer, tokens

    with IngestServer("redis://127.0.0.1:6379/0", "ingest-1") as server:
        server.add_table("orders.toml", source="/landing/orders")
        server.add_table("customer.toml", source="/landing/customer", partitions=[0, 1])
        orders = server.run_directory("orders")          # one batch of what is new
        server.run_once()                                # every table, sharing the cores
        everything = server.token()                      # covers every table served

Snapshot tokens (:mod:`horizon_broker.tokens`) merge: ``tokens.merge(a, b)`` reads at or after both.
Queries go through :func:`connect` (:mod:`horizon_broker.client`; it takes one token, or a list, as
``min_snapshot``)::

    from horizon_broker import connect

    with connect("127.0.0.1:50051", token="...") as client:
        table = client.query("SELECT * FROM orders", min_snapshot=everything)

The package is also the ``horizon`` command (:mod:`horizon_broker.cli`) and its rendering
(:mod:`horizon_broker.render`). Names load on first use, so a client never imports Spark.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BatchResult": "horizon_broker.ingest.job",
    "IngestServer": "horizon_broker.ingest.server",
    "ServerConfig": "horizon_broker.ingest.server_config",
    "TableSource": "horizon_broker.ingest.server_config",
    "load_server_config": "horizon_broker.ingest.server_config",
    "TableDefinition": "horizon_broker.ingest.table",
    "HorizonClient": "horizon_broker.client",
    "connect": "horizon_broker.client",
    "tokens": "horizon_broker.tokens",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'horizon' has no attribute {name!r}")
    if name == "tokens":
        return importlib.import_module(module)
    return getattr(importlib.import_module(module), name)
