"""The lock tests use the watermark tests' real Redis helpers."""

from tests.watermark.conftest import make_server, redis_url

__all__ = ["make_server", "redis_url"]
