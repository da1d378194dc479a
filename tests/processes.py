"""Real external processes for tests (kept as the name tests import)."""

from horizon_broker.watermark.embedded_redis import EmbeddedRedis as RedisProcess
from horizon_broker.watermark.embedded_redis import free_port

__all__ = ["RedisProcess", "free_port"]
