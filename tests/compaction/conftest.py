"""Compaction tests reuse the ingestion tests' real Redis, follower and reference model."""

from tests.ingest.conftest import follower, server

__all__ = ["follower", "server"]

from tests.watermark.conftest import make_server, redis_url

__all__ += ["make_server", "redis_url"]
