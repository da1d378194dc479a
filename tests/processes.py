"""Real external processes for tests (kept as the name tests import)."""

from watermark.embedded_redis import EmbeddedRedis as RedisProcess
from watermark.embedded_redis import free_port

__all__ = ["RedisProcess", "free_port"]
