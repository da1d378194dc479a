"""The result cache as one query uses it: its key, the caller's bypass, the lookup, the recorder.

The key and what makes a query uncacheable are :mod:`~horizon_broker.broker.engine.result_cache`'s
rules; here they are applied with the query's row cap and read controls. An answer found is
returned without an admission slot or Spark (grants were checked when the query was prepared).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import pyarrow as pa

from horizon_broker.broker.engine.execution import Execution
from horizon_broker.broker.engine.prepared import Prepared
from horizon_broker.broker.engine.result_cache import (
    HIT,
    CachedAnswer,
    Recorder,
    ResultCache,
    cache_decision,
)

CACHE_ROUTE = "answered from the result cache, no Spark job"


@dataclass(frozen=True, slots=True)
class QueryCache:
    """The broker's result cache (None: off) for a query capped at ``max_rows``;
    ``use_cache`` is false when the caller asked to bypass it."""

    cache: ResultCache | None
    max_rows: int
    use_cache: bool = True

    def decide(self, prepared: Prepared) -> tuple[Hashable | None, str]:
        """``prepared``'s key (None: not cached) and what the metadata says of the cache:
        off, bypassed, miss, or why the query is not cached. Touches nothing."""
        return cache_decision(self.cache, prepared, self.max_rows, use_cache=self.use_cache)

    def look_up(self, prepared: Prepared) -> CachedAnswer | None:
        """The answer kept for ``prepared``, if any (counted as a hit or a miss)."""
        key, _ = self.decide(prepared)
        if self.cache is None or key is None:
            return None
        return self.cache.get(key)

    def state(self, prepared: Prepared) -> str:
        """What running ``prepared`` would do with the cache (explain's answer): hit when
        its answer is kept, else :meth:`decide`'s word."""
        key, state = self.decide(prepared)
        if key is not None and self.cache is not None and self.cache.contains(key):
            return HIT
        return state

    def recorder(self, prepared: Prepared, schema: pa.Schema) -> Recorder | None:
        """What keeps ``prepared``'s answer once it streamed out whole (None: not cached)."""
        key, _ = self.decide(prepared)
        if self.cache is None or key is None:
            return None
        return self.cache.recorder(key, schema)


def cached_execution(prepared: Prepared, answer: CachedAnswer) -> Execution:
    """``answer`` as the started query: everything in the head, nothing held."""
    return Execution(
        prepared=prepared,
        schema=answer.schema,
        head=list(answer.batches),
        rest=None,
        rewrite_s=prepared.rewrite_s,
        cache=HIT,
        route=CACHE_ROUTE,
    )
