"""The pin tests use the watermark tests' real Redis and server fixtures."""

import pytest

from tests.watermark.conftest import make_server, redis_url, table_descriptor  # noqa: F401


@pytest.fixture
def server(redis_url, make_server):  # noqa: F811 - the imported fixtures, by name
    """A registered ingestion server with the ``accounts`` and ``orders`` tables."""
    client = make_server(redis_url, "s1")
    client.register()
    client.register_table(table_descriptor())
    client.register_table(table_descriptor("orders"))
    return client
