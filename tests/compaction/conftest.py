"""Compaction tests reuse the ingestion tests' real Redis, follower and reference model."""

from tests.ingest.conftest import follower, server

__all__ = ["follower", "server"]
