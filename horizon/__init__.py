"""Horizon's public Python API.

Ingestion: one :class:`IngestServer` serves many tables in one process and one Spark application;
each batch returns a :class:`BatchResult` whose ``token`` reads its writes. Leaving the ``with``
block (or :meth:`IngestServer.close`) *parks* every partition: their tables never hold reads
back while the server is away, and whoever writes to them next resumes above every snapshot
served meanwhile::

    from horizon import IngestServer, tokens

    with IngestServer("redis://127.0.0.1:6379/0", "ingest-1") as server:
        server.add_table("orders.toml", source="/landing/orders")
        server.add_table("customer.toml", source="/landing/customer", partitions=[0, 1])
        orders = server.run_directory("orders")          # one batch of what is new
        server.run_once()                                # every table, sharing the cores
        everything = server.token()                      # covers every table served

Snapshot tokens (:mod:`horizon.tokens`) merge: ``tokens.merge(a, b)`` reads at or after both.
The query client is :func:`broker.client.connect` (it takes one token, or a list, as
``min_snapshot``).
"""

from __future__ import annotations

from horizon import tokens
from ingest.job import BatchResult
from ingest.server import IngestServer
from ingest.server_config import ServerConfig, TableSource, load_server_config
from ingest.table import TableDefinition

__all__ = [
    "BatchResult",
    "IngestServer",
    "ServerConfig",
    "TableDefinition",
    "TableSource",
    "load_server_config",
    "tokens",
]
