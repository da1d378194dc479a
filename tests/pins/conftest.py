"""The pin tests use the watermark tests' real Redis and server fixtures."""

from tests.watermark.conftest import make_server, redis_url  # noqa: F401
